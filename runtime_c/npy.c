/* .npy reader and writer for the standalone binaries (see npy.h). */
#define _POSIX_C_SOURCE 200809L
#include "npy.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct {
    const char *name;
    const char *descr; /* byte order, kind, size */
    size_t size;
} TYPES[] = {
    {"float32", "<f4", 4}, {"float16", "<f2", 2}, {"float64", "<f8", 8}, {"int8", "|i1", 1},
    {"uint8", "|u1", 1},   {"int32", "<i4", 4},   {"int64", "<i8", 8},   {"bool", "|b1", 1},
    {"int16", "<i2", 2},   {"uint16", "<u2", 2},  {"uint32", "<u4", 4},  {"uint64", "<u8", 8},
};
#define NTYPES (sizeof TYPES / sizeof TYPES[0])

/* untrusted bytes for a message (see npy.h) */
#define QUOTE_MAX FC_NPY_QUOTE_MAX
#define QUOTE_LEN FC_NPY_QUOTE_LEN
const char *fc_npy_quote(char *dst, const char *src, size_t n) {
    size_t i, k = 0;
    for (i = 0; i < n && i < QUOTE_MAX; ++i) {
        unsigned char c = (unsigned char)src[i];
        if (c >= 32 && c < 127 && c != '\\' && c != '\'') {
            dst[k++] = (char)c;
        } else {
            snprintf(dst + k, QUOTE_LEN - k, "\\x%02x", c);
            k += 4;
        }
    }
    if (i < n) {
        memcpy(dst + k, "...", 3);
        k += 3;
    }
    dst[k] = 0;
    return dst;
}

size_t fc_npy_itemsize(const char *dtype) {
    size_t i;
    for (i = 0; i < NTYPES; ++i)
        if (strcmp(TYPES[i].name, dtype) == 0) return TYPES[i].size;
    return 0;
}

/* The value text after 'key': in a header dict, or NULL. */
static const char *find_key(const char *header, const char *key) {
    char pattern[32];
    const char *p;
    snprintf(pattern, sizeof pattern, "'%s'", key);
    p = strstr(header, pattern);
    if (!p) return NULL;
    p += strlen(pattern);
    while (*p == ' ') p++;
    if (*p != ':') return NULL;
    p++;
    while (*p == ' ') p++;
    return p;
}

static int parse_header(const char *h, fc_npy *out, char *err, size_t errlen, const char *path) {
    const char *d = find_key(h, "descr"), *f = find_key(h, "fortran_order"), *s = find_key(h, "shape");
    const char *quote_end;
    char descr[16], q[QUOTE_LEN];
    size_t i, n, itemsize;
    if (!d || !f || !s) return fc_file_fail(err, errlen, "%s: malformed .npy header", path);
    if (*d != '\'') return fc_file_fail(err, errlen, "%s: malformed dtype in .npy header", path);
    d++;
    quote_end = strchr(d, '\'');
    if (!quote_end) return fc_file_fail(err, errlen, "%s: malformed dtype in .npy header", path);
    n = (size_t)(quote_end - d);
    if (n == 0) return fc_file_fail(err, errlen, "%s: empty dtype in .npy header", path);
    if (n >= sizeof descr)
        return fc_file_fail(err, errlen, "%s: unsupported dtype '%s' (little-endian numeric or bool only)", path,
                    fc_npy_quote(q, d, n));
    memcpy(descr, d, n);
    descr[n] = 0;
    if (descr[0] == '=') descr[0] = '<'; /* native order is little-endian on our targets */
    out->dtype[0] = 0;
    for (i = 0; i < NTYPES; ++i) {
        const char *want = TYPES[i].descr;
        if (strcmp(descr, want) == 0 || (want[0] == '|' && strcmp(descr + 1, want + 1) == 0 &&
                                         (descr[0] == '<' || descr[0] == '>'))) {
            strcpy(out->dtype, TYPES[i].name);
            break;
        }
    }
    if (!out->dtype[0])
        return fc_file_fail(err, errlen, "%s: unsupported dtype '%s' (little-endian numeric or bool only)", path,
                    fc_npy_quote(q, descr, n));
    if (strncmp(f, "False", 5) != 0) return fc_file_fail(err, errlen, "%s: Fortran-order arrays are not supported", path);
    if (*s != '(') return fc_file_fail(err, errlen, "%s: malformed shape in .npy header", path);
    s++;
    out->rank = 0;
    out->size = 1;
    for (;;) {
        char *end;
        long v;
        while (*s == ' ' || *s == ',') s++;
        if (*s == ')') break;
        errno = 0;
        v = strtol(s, &end, 10);
        if (end == s || errno || v < 0) return fc_file_fail(err, errlen, "%s: malformed shape in .npy header", path);
        if (out->rank == FC_NPY_MAX_RANK) return fc_file_fail(err, errlen, "%s: rank above %d", path, FC_NPY_MAX_RANK);
        if (v && out->size > LONG_MAX / v) return fc_file_fail(err, errlen, "%s: shape too large", path);
        out->shape[out->rank++] = v;
        out->size *= v;
        s = end;
    }
    itemsize = fc_npy_itemsize(out->dtype);
    if ((uintmax_t)out->size > (uintmax_t)(SIZE_MAX / itemsize))
        return fc_file_fail(err, errlen, "%s: shape too large (%ld elements of %lu bytes)", path, out->size,
                    (unsigned long)itemsize);
    out->nbytes = (size_t)out->size * itemsize;
    return 0;
}

int fc_npy_load(const char *path, fc_npy *out, char *err, size_t errlen) {
    size_t file_size;
    FILE *fp = fc_file_fopen_read(path, &file_size, err, errlen);
    unsigned char pre[12];
    size_t header_len, prefix;
    char *header;
    memset(out, 0, sizeof *out);
    if (!fp) return -1;
    if (fread(pre, 1, 10, fp) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        fclose(fp);
        return fc_file_fail(err, errlen, "%s: not a .npy file", path);
    }
    if (pre[6] == 1) {
        header_len = (size_t)pre[8] | ((size_t)pre[9] << 8);
        prefix = 10;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 10, 1, 2, fp) != 2) {
            fclose(fp);
            return fc_file_fail(err, errlen, "%s: truncated .npy header", path);
        }
        header_len = (size_t)pre[8] | ((size_t)pre[9] << 8) | ((size_t)pre[10] << 16) | ((size_t)pre[11] << 24);
        prefix = 12;
    } else {
        fclose(fp);
        return fc_file_fail(err, errlen, "%s: unsupported .npy version %d.%d", path, pre[6], pre[7]);
    }
    if (header_len > (1u << 20)) {
        fclose(fp);
        return fc_file_fail(err, errlen, "%s: .npy header too large", path);
    }
    header = (char *)malloc(header_len + 1);
    if (!header || fread(header, 1, header_len, fp) != header_len) {
        free(header);
        fclose(fp);
        return fc_file_fail(err, errlen, "%s: truncated .npy header", path);
    }
    header[header_len] = 0;
    if (parse_header(header, out, err, errlen, path) != 0) {
        free(header);
        fclose(fp);
        return -1;
    }
    free(header);
    if (out->nbytes > SIZE_MAX - prefix - header_len || file_size != prefix + header_len + out->nbytes) {
        fclose(fp);
        return fc_file_fail(err, errlen, "%s: file has %lu bytes, expected %lu for a %s array of %ld elements", path,
                    (unsigned long)file_size,
                    out->nbytes > SIZE_MAX - prefix - header_len ? (unsigned long)SIZE_MAX
                                                                 : (unsigned long)(prefix + header_len + out->nbytes),
                    out->dtype, out->size);
    }
    if (posix_memalign(&out->data, 64, out->nbytes ? out->nbytes : 64) != 0) {
        out->data = NULL;
        fclose(fp);
        return fc_file_fail(err, errlen, "%s: out of memory for %lu bytes", path, (unsigned long)out->nbytes);
    }
    if (fread(out->data, 1, out->nbytes, fp) != out->nbytes) {
        fc_npy_free(out);
        fclose(fp);
        return fc_file_fail(err, errlen, "%s: truncated data", path);
    }
    fclose(fp);
    return 0;
}

int fc_npy_parse(const void *buf, size_t n, fc_npy *out, size_t *offset, const char *what, char *err,
                 size_t errlen) {
    const unsigned char *p = (const unsigned char *)buf;
    size_t header_len, prefix;
    char *header;
    int rc;
    memset(out, 0, sizeof *out);
    *offset = 0;
    if (n < 10 || memcmp(p, "\x93NUMPY", 6) != 0) return fc_file_fail(err, errlen, "%s: not a .npy file", what);
    if (p[6] == 1) {
        header_len = (size_t)p[8] | ((size_t)p[9] << 8);
        prefix = 10;
    } else if (p[6] == 2 || p[6] == 3) {
        if (n < 12) return fc_file_fail(err, errlen, "%s: truncated .npy header", what);
        header_len = (size_t)p[8] | ((size_t)p[9] << 8) | ((size_t)p[10] << 16) | ((size_t)p[11] << 24);
        prefix = 12;
    } else {
        return fc_file_fail(err, errlen, "%s: unsupported .npy version %d.%d", what, p[6], p[7]);
    }
    if (header_len > (1u << 20)) return fc_file_fail(err, errlen, "%s: .npy header too large", what);
    if (header_len > n - prefix) return fc_file_fail(err, errlen, "%s: truncated .npy header", what);
    header = (char *)malloc(header_len + 1);
    if (!header) return fc_file_fail(err, errlen, "%s: out of memory", what);
    memcpy(header, p + prefix, header_len);
    header[header_len] = 0;
    rc = parse_header(header, out, err, errlen, what);
    free(header);
    if (rc != 0) return -1;
    if (out->nbytes != n - prefix - header_len)
        return fc_file_fail(err, errlen, "%s: holds %lu bytes, expected %lu for a %s array of %ld elements", what,
                    (unsigned long)n,
                    out->nbytes > SIZE_MAX - prefix - header_len ? (unsigned long)SIZE_MAX
                                                                 : (unsigned long)(prefix + header_len + out->nbytes),
                    out->dtype, out->size);
    *offset = prefix + header_len;
    return 0;
}

size_t fc_npy_header(char *buf, const char *dtype, int rank, const long *shape, size_t *nbytes) {
    size_t n, i, total, itemsize, elements = 1;
    const char *descr = NULL;
    char *header = buf + 10;
    for (i = 0; i < NTYPES; ++i)
        if (strcmp(TYPES[i].name, dtype) == 0) descr = TYPES[i].descr;
    if (!descr || rank < 0 || rank > FC_NPY_MAX_RANK) return 0;
    for (i = 0; i < (size_t)rank; ++i) {
        if (shape[i] < 0 || (shape[i] && elements > SIZE_MAX / (size_t)shape[i])) return 0;
        elements *= (size_t)shape[i];
    }
    itemsize = fc_npy_itemsize(dtype);
    if (elements > SIZE_MAX / itemsize) return 0;
    *nbytes = elements * itemsize;
    /* the dict: at most 51 + 8 * 22 + 4 chars, padded to 64 with the 10-byte prefix: < 320 */
    n = (size_t)snprintf(header, FC_NPY_HEADER_MAX - 10, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                         descr);
    for (i = 0; i < (size_t)rank; ++i)
        n += (size_t)snprintf(header + n, FC_NPY_HEADER_MAX - 10 - n, "%ld%s", shape[i],
                              rank == 1 ? "," : (i + 1 < (size_t)rank ? ", " : ""));
    n += (size_t)snprintf(header + n, FC_NPY_HEADER_MAX - 10 - n, "), }");
    total = ((10 + n + 1 + 63) / 64) * 64; /* magic + length + header + newline, padded to 64 */
    while (10 + n + 1 < total) header[n++] = ' ';
    header[n++] = '\n';
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (char)(n & 0xff);
    buf[9] = (char)(n >> 8);
    return 10 + n;
}

int fc_npy_save_temp(const char *path, char **tmp, const char *dtype, int rank, const long *shape,
                     const void *data, char *err, size_t errlen) {
    char header[FC_NPY_HEADER_MAX];
    size_t n, nbytes;
    FILE *fp;
    *tmp = NULL;
    n = fc_npy_header(header, dtype, rank, shape, &nbytes);
    if (!n) return fc_file_fail(err, errlen, "%s: bad array description", path);
    if (fc_file_temp(path, tmp, &fp, err, errlen) != 0) return -1;
    errno = 0;
    if (fwrite(header, 1, n, fp) != n || (nbytes && fwrite(data, 1, nbytes, fp) != nbytes)) {
        int saved = errno;
        fc_file_drop(*tmp, fp);
        *tmp = NULL;
        return fc_file_fail(err, errlen, "%s: write failed (%s)", path, saved ? strerror(saved) : "stream error");
    }
    if (fc_file_close(fp, 0, path, err, errlen) != 0) {
        fc_file_drop(*tmp, NULL);
        *tmp = NULL;
        return -1;
    }
    return 0;
}

int fc_npy_save(const char *path, const char *dtype, int rank, const long *shape, const void *data, char *err,
                size_t errlen) {
    char *tmp;
    if (fc_npy_save_temp(path, &tmp, dtype, rank, shape, data, err, errlen) != 0) return -1;
    return fc_file_put(tmp, path, err, errlen);
}

void fc_npy_free(fc_npy *a) {
    free(a->data);
    a->data = NULL;
}

static void describe_shape(char *buf, size_t len, int rank, const long *shape) {
    size_t n = (size_t)snprintf(buf, len, "(");
    int i;
    for (i = 0; i < rank && n < len; ++i)
        n += (size_t)snprintf(buf + n, len - n, "%ld%s", shape[i], rank == 1 ? "," : (i + 1 < rank ? ", " : ""));
    if (n < len) snprintf(buf + n, len - n, ")");
}

void fc_npy_describe(char *buf, size_t len, const char *dtype, int rank, const long *shape, const char *first) {
    size_t n = (size_t)snprintf(buf, len, "%s[", dtype);
    int i;
    if (first && rank > 0 && n < len) n += (size_t)snprintf(buf + n, len - n, "%s", first);
    for (i = first ? 1 : 0; i < rank && n < len; ++i)
        n += (size_t)snprintf(buf + n, len - n, i ? ", %ld" : "%ld", shape[i]);
    if (n < len) snprintf(buf + n, len - n, "]");
}

int fc_npy_check(const fc_npy *a, const char *name, const char *path, const char *dtype, int rank,
                 const long *shape, char *err, size_t errlen) {
    char got[128], want[128];
    if (strcmp(a->dtype, dtype) != 0) {
        snprintf(err, errlen, "input '%s' (%s) has dtype %s, expected %s", name, path, a->dtype, dtype);
        return -1;
    }
    if (a->rank != rank || memcmp(a->shape, shape, sizeof(long) * (size_t)rank) != 0) {
        describe_shape(got, sizeof got, a->rank, a->shape);
        describe_shape(want, sizeof want, rank, shape);
        snprintf(err, errlen, "input '%s' (%s) has shape %.100s, expected %.100s", name, path, got, want);
        return -1;
    }
    return 0;
}

char *fc_npy_path(const char *dir, const char *file) {
    size_t n = strlen(dir) + strlen(file) + 2;
    char *path = (char *)malloc(n);
    if (path) snprintf(path, n, "%s/%s", dir, file);
    return path;
}

void fc_npy_error_line(const char *prefix, const char *msg) {
    const unsigned char *p;
    fputs(prefix, stderr);
    for (p = (const unsigned char *)msg; *p; ++p) {
        if (*p >= 32 && *p < 127)
            fputc(*p, stderr);
        else
            fprintf(stderr, "\\x%02x", *p);
    }
    fputc('\n', stderr);
}
