/* The standalone binaries' command line and .npy I/O: see driver.h. */
#define _POSIX_C_SOURCE 200809L
#include "driver.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fc_drv_in_arg(const char *spec, const fc_drv_tensor *inputs, int n, const char **paths, char *msg,
                  size_t len) {
    const char *eq = strchr(spec, '=');
    int j, found = 0;
    if (!eq) {
        snprintf(msg, len, "--in expects NAME=FILE.npy, got '%s'", spec);
        return 2;
    }
    for (j = 0; j < n; ++j) {
        if (strlen(inputs[j].name) == (size_t)(eq - spec) && strncmp(inputs[j].name, spec, (size_t)(eq - spec)) == 0) {
            paths[j] = eq + 1;
            found = 1;
        }
    }
    if (!found) {
        size_t at;
        snprintf(msg, len, "unknown input '%.*s'; the model's inputs:", (int)(eq - spec), spec);
        for (j = 0; j < n && (at = strlen(msg)) + 2 < len; ++j)
            snprintf(msg + at, len - at, "%s %s", j ? "," : "", inputs[j].name);
        return 2;
    }
    return 0;
}

int fc_drv_scalar_arg(const char *option, const char *value, fc_drv_tensor *inputs, int n, int *code, char *msg,
                      size_t len) {
    int j;
    size_t k, m = strlen(option);
    if (strncmp(option, "--", 2) != 0 || m < 3) return 0;
    for (j = 0; j < n; ++j) {
        const char *name = inputs[j].name;
        if (strlen(name) != m - 2) continue;
        for (k = 2; k < m && (option[k] == name[k - 2] || (option[k] == '-' && name[k - 2] == '_')); ++k) {
        }
        if (k < m) continue;
        if (inputs[j].rank != 0) {
            snprintf(msg, len, "%.200s gives input '%.200s' one value, but it is not a scalar: use --in %.200s=FILE.npy",
                     option, name, name);
            *code = 2;
            return 1;
        }
        inputs[j].text = value;
        *code = 0;
        return 1;
    }
    return 0;
}

/* a scalar input's --NAME VALUE into a, of the input's dtype: 0, or 2 / 3 with msg */
static int parse_scalar(const fc_drv_tensor *t, fc_npy *a, char *msg, size_t len) {
    char *end;
    const char *d = t->dtype;
    size_t size = strcmp(d, "bool") == 0 ? 1 : (size_t)atoi(d + strcspn(d, "0123456789")) / 8;
    double f = 0;
    long long i = 0;
    unsigned long long u = 0;
    int bad;
    errno = 0;
    if (d[0] == 'f') {
        f = strtod(t->text, &end);
    } else if (d[0] == 'u') {
        u = strtoull(t->text, &end, 10);
        bad = t->text[0] == '-';
        if (bad) end = (char *)t->text;
    } else if (d[0] == 'b') {
        i = strcmp(t->text, "true") == 0 ? 1 : strcmp(t->text, "false") == 0 ? 0 : strtoll(t->text, &end, 10);
        if (strcmp(t->text, "true") == 0 || strcmp(t->text, "false") == 0) end = (char *)t->text + strlen(t->text);
    } else {
        i = strtoll(t->text, &end, 10);
    }
    bad = end == t->text || *end || errno == ERANGE;
    if (!bad && d[0] == 'i' && size < 8) bad = i < -(1LL << (size * 8 - 1)) || i >= (1LL << (size * 8 - 1));
    if (!bad && d[0] == 'u' && size < 8) bad = u >= (1ULL << (size * 8));
    if (!bad && d[0] == 'b') bad = i != 0 && i != 1;
    if (bad) {
        snprintf(msg, len, "input '%.200s' (%.16s): '%.60s' is not a %.16s value", t->name, t->dtype, t->text, t->dtype);
        return 2;
    }
    memset(a, 0, sizeof *a);
    if (posix_memalign(&a->data, 64, 64) != 0) {
        snprintf(msg, len, "out of memory");
        return 3;
    }
    memset(a->data, 0, 64);
    snprintf(a->dtype, sizeof a->dtype, "%s", d);
    a->size = 1;
    a->nbytes = size;
    if (strcmp(d, "float64") == 0) {
        memcpy(a->data, &f, 8);
    } else if (strcmp(d, "float32") == 0) {
        float v = (float)f;
        memcpy(a->data, &v, 4);
    } else if (strcmp(d, "float16") == 0) {
        snprintf(msg, len, "input '%.200s' is float16: give it as --in %.200s=FILE.npy", t->name, t->name);
        return 2;
    } else if (d[0] == 'u') {
        memcpy(a->data, &u, size); /* little-endian: the low bytes */
    } else {
        memcpy(a->data, &i, size);
    }
    return 0;
}

int fc_drv_count_arg(const char *option, const char *text, long limit, long *value, char *msg, size_t len) {
    char *end;
    long v;
    errno = 0;
    v = strtol(text, &end, 10);
    if (end == text || *end || v < 1) {
        snprintf(msg, len, "%s expects a positive count", option);
        return 2;
    }
    if (errno == ERANGE || v > limit) {
        snprintf(msg, len, "%s expects a count of at most %ld", option, limit);
        return 2;
    }
    *value = v;
    return 0;
}

int fc_drv_inputs_named(const fc_drv_tensor *inputs, int n, const char **paths, char *msg, size_t len) {
    int j;
    int i;
    for (j = 0; j < n; ++j) {
        int filled = 0;
        for (i = 0; i < n; ++i) filled |= inputs[i].bound && inputs[i].length == j + 1;
        if (paths[j] && inputs[j].text) {
            snprintf(msg, len, "input '%.200s' is given twice (--in and its own option)", inputs[j].name);
            return 2;
        }
        if (!paths[j] && !filled && !inputs[j].text) {
            snprintf(msg, len, "missing --in %s=FILE.npy", inputs[j].name);
            return 2;
        }
        if ((paths[j] || inputs[j].text) && filled) {
            snprintf(msg, len, "input '%.200s' is the length of another input, which the program sets: leave out its --in",
                     inputs[j].name);
            return 2;
        }
    }
    return 0;
}

/* An input of run-time length: its file's shape is the compiled one but along the axis, which is
 * at most the compiled length; the data padded with zeros (the axes before it are 1, so the real
 * values come first). *actual: the file's length. 0, or 2 / 3 with msg. */
static int pad_bounded(const fc_drv_tensor *t, const char *path, fc_npy *a, long *actual, char *msg, size_t len) {
    int axis = t->bound - 1, k;
    long want[8];
    void *data;
    size_t nbytes;
    for (k = 0; k < 8; ++k) want[k] = k < t->rank ? t->shape[k] : 0;
    if (a->rank == t->rank && axis < a->rank) {
        want[axis] = a->shape[axis];
        if (a->shape[axis] > t->shape[axis]) {
            snprintf(msg, len, "input '%.200s' (%.400s) is %ld long on axis %d, more than the compiled maximum %ld", t->name,
                     path, a->shape[axis], axis, t->shape[axis]);
            return 2;
        }
    }
    if (fc_npy_check(a, t->name, path, t->dtype, t->rank, want, msg, len) != 0) return 2;
    *actual = a->shape[axis];
    if (a->shape[axis] == t->shape[axis]) return 0;
    nbytes = strcmp(t->dtype, "bool") == 0 ? 1 : (size_t)atoi(t->dtype + strcspn(t->dtype, "0123456789")) / 8;
    for (k = 0; k < t->rank; ++k) nbytes *= (size_t)t->shape[k];
    if (posix_memalign(&data, 64, nbytes ? nbytes : 64) != 0) {
        snprintf(msg, len, "out of memory");
        return 3;
    }
    memset(data, 0, nbytes ? nbytes : 64);
    if (a->nbytes) memcpy(data, a->data, a->nbytes);
    free(a->data);
    a->data = data;
    a->shape[axis] = t->shape[axis];
    a->size = 1;
    for (k = 0; k < t->rank; ++k) a->size *= t->shape[k];
    a->nbytes = nbytes;
    return 0;
}

/* shape with axis 0 times scale (rank 0: unchanged) */
static void scaled(const fc_drv_tensor *t, long scale, long *shape) {
    int k;
    for (k = 0; k < 8; ++k)
        shape[k] = k < t->rank ? t->shape[k] : 0;
    if (t->rank > 0) shape[0] *= scale;
}

int fc_drv_load_inputs(const fc_drv_tensor *inputs, int n, const char **paths, long scale, fc_npy *in,
                       char *msg, size_t len) {
    int j;
    for (j = 0; j < n; ++j) {
        const fc_drv_tensor *t = &inputs[j];
        long want[8];
        if (t->mine && t->text) {
            int code = parse_scalar(t, &in[j], msg, len);
            if (code != 0) return code;
            continue;
        }
        if (!t->mine || !paths[j]) continue;
        if (fc_npy_load(paths[j], &in[j], msg, len) != 0) return 2;
        if (t->bound && scale == 1) {
            long actual = 0;
            int code = pad_bounded(t, paths[j], &in[j], &actual, msg, len);
            if (code != 0) return code;
            if (t->length) { /* the length input, an int64 scalar the model reads */
                fc_npy *l = &in[t->length - 1];
                memset(l, 0, sizeof *l);
                if (posix_memalign(&l->data, 64, 64) != 0) {
                    snprintf(msg, len, "out of memory");
                    return 3;
                }
                memcpy(l->data, &(int64_t){actual}, sizeof(int64_t));
                snprintf(l->dtype, sizeof l->dtype, "int64");
                l->size = 1;
                l->nbytes = sizeof(int64_t);
            }
            continue;
        }
        scaled(t, scale, want);
        if (fc_npy_check(&in[j], t->name, paths[j], t->dtype, t->rank, want, msg, len) != 0) return 2;
    }
    return 0;
}

int fc_drv_make_out_dir(const char *out_dir, size_t *made, char *msg, size_t len) {
    char path[4096];
    size_t k, n = strlen(out_dir);
    if (made) *made = n + 1; /* nothing created yet */
    if (n == 0 || n >= sizeof path) {
        snprintf(msg, len, "--out-dir: a path of 1 to %d bytes, not %lu", (int)sizeof path - 1, (unsigned long)n);
        return 4;
    }
    memcpy(path, out_dir, n + 1);
    for (k = 1; k <= n; ++k) { /* each parent, then the folder itself (as mkdir -p) */
        if (path[k] != '/' && path[k] != 0) continue;
        path[k] = 0;
        if (mkdir(path, 0777) == 0) {
            if (made && *made > n) *made = k;
        } else if (errno != EEXIST) {
            snprintf(msg, len, "cannot create --out-dir %s (%s: %s)", out_dir, path, strerror(errno));
            fc_drv_unmake_out_dir(out_dir, made ? *made : n + 1);
            return 4;
        }
        path[k] = k < n ? '/' : 0;
    }
    return 0;
}

void fc_drv_unmake_out_dir(const char *out_dir, size_t made) {
    char path[4096];
    size_t k, n = strlen(out_dir);
    if (made > n || n >= sizeof path) return;
    memcpy(path, out_dir, n + 1);
    for (k = n; k >= made; --k) { /* the folder, then each parent made, deepest first */
        if (path[k] != '/' && path[k] != 0) continue;
        path[k] = 0;
        (void)rmdir(path); /* (only while empty) */
        if (k == 0) break;
    }
}

int fc_drv_write_temps(const char *out_dir, const fc_drv_tensor *outputs, int n, void *const *data, long scale,
                       const fc_drv_tensor *inputs, int n_in, const char **in_paths, fc_file_set *put,
                       char **paths, char *msg, size_t len) {
    int i, j;
    if ((j = fc_drv_make_out_dir(out_dir, NULL, msg, len)) != 0) return j;
    for (j = 0; j < n; ++j) {
        const fc_drv_tensor *t = &outputs[j];
        long shape[8];
        if (!t->mine) continue;
        put[j].path = paths[j] = fc_npy_path(out_dir, t->file);
        if (!paths[j]) {
            snprintf(msg, len, "out of memory");
            return 3;
        }
        for (i = 0; i < n_in; ++i) {
            if (in_paths[i] && fc_file_same(in_paths[i], paths[j])) {
                snprintf(msg, len, "output '%s' would be written over input '%s' (%.400s); choose another --out-dir",
                         t->name, inputs[i].name, in_paths[i]);
                return 4;
            }
        }
        scaled(t, scale, shape);
        if (fc_npy_save_temp(paths[j], &put[j].tmp, t->dtype, t->rank, shape, data[j], msg, len) != 0) return 4;
    }
    return 0;
}

/* value k of an integer array as a signed (*s) or unsigned (*u) 64-bit number; 0: not an integer dtype */
static int label_at(const unsigned char *p, const char *dtype, long k, int64_t *s, uint64_t *u, double *f) {
#define FC_LABEL(name, type, out)                        \
    if (strcmp(dtype, name) == 0) {                      \
        type v;                                          \
        memcpy(&v, p + (size_t)k * sizeof v, sizeof v); \
        *out = v;                                        \
        return 1;                                        \
    }
    FC_LABEL("int8", int8_t, s)
    FC_LABEL("int16", int16_t, s)
    FC_LABEL("int32", int32_t, s)
    FC_LABEL("int64", int64_t, s)
    FC_LABEL("uint8", uint8_t, u)
    FC_LABEL("uint16", uint16_t, u)
    FC_LABEL("uint32", uint32_t, u)
    FC_LABEL("uint64", uint64_t, u)
    FC_LABEL("float32", float, f)
    FC_LABEL("float64", double, f)
#undef FC_LABEL
    return 0;
}

int fc_drv_check_labels(const void *data, const char *dtype, long samples, long row_size, long depth,
                        const char *name, const char *file, char *msg, size_t len) {
    const unsigned char *p = (const unsigned char *)data;
    long s, e;
    for (s = 0; s < samples; ++s) {
        for (e = 0; e < row_size; ++e) {
            int64_t si = 0;
            uint64_t ui = 0;
            double f = 0.0;
            int bad, is_f = dtype[0] == 'f', is_u = dtype[0] == 'u';
            if (!label_at(p, dtype, s * row_size + e, &si, &ui, &f)) return 0;
            /* a float: the cast truncates toward zero, so (-1, depth) is in range; NaN is not */
            bad = is_f ? !(f > -1.0 && f < (double)depth) : is_u ? ui >= (uint64_t)depth : (si < 0 || si >= depth);
            if (!bad) continue;
            if (is_f)
                snprintf(msg, len, "dataset array '%s' (%s): sample %ld has class label %g, outside the model's %ld "
                         "classes [0, %ld)", name, file, s, f, depth, depth);
            else if (is_u)
                snprintf(msg, len, "dataset array '%s' (%s): sample %ld has class label %llu, outside the model's "
                         "%ld classes [0, %ld)", name, file, s, (unsigned long long)ui, depth, depth);
            else
                snprintf(msg, len, "dataset array '%s' (%s): sample %ld has class label %lld, outside the model's "
                         "%ld classes [0, %ld)", name, file, s, (long long)si, depth, depth);
            return 2;
        }
    }
    return 0;
}
