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

static int fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen) vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
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
    char descr[16];
    size_t i, n = 0;
    if (!d || !f || !s) return fail(err, errlen, "%s: malformed .npy header", path);
    if (*d != '\'') return fail(err, errlen, "%s: malformed dtype in .npy header", path);
    d++;
    while (d[n] && d[n] != '\'' && n + 1 < sizeof descr) {
        descr[n] = d[n];
        n++;
    }
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
    if (!out->dtype[0]) return fail(err, errlen, "%s: unsupported dtype '%s' (little-endian numeric or bool only)",
                                    path, descr);
    if (strncmp(f, "False", 5) != 0) return fail(err, errlen, "%s: Fortran-order arrays are not supported", path);
    if (*s != '(') return fail(err, errlen, "%s: malformed shape in .npy header", path);
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
        if (end == s || errno || v < 0) return fail(err, errlen, "%s: malformed shape in .npy header", path);
        if (out->rank == FC_NPY_MAX_RANK) return fail(err, errlen, "%s: rank above %d", path, FC_NPY_MAX_RANK);
        if (v && out->size > LONG_MAX / v) return fail(err, errlen, "%s: shape too large", path);
        out->shape[out->rank++] = v;
        out->size *= v;
        s = end;
    }
    out->nbytes = (size_t)out->size * fc_npy_itemsize(out->dtype);
    return 0;
}

int fc_npy_load(const char *path, fc_npy *out, char *err, size_t errlen) {
    FILE *fp = fopen(path, "rb");
    unsigned char pre[12];
    size_t header_len, prefix;
    char *header;
    long file_size;
    memset(out, 0, sizeof *out);
    if (!fp) return fail(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
    if (fread(pre, 1, 10, fp) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        fclose(fp);
        return fail(err, errlen, "%s: not a .npy file", path);
    }
    if (pre[6] == 1) {
        header_len = (size_t)pre[8] | ((size_t)pre[9] << 8);
        prefix = 10;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 10, 1, 2, fp) != 2) {
            fclose(fp);
            return fail(err, errlen, "%s: truncated .npy header", path);
        }
        header_len = (size_t)pre[8] | ((size_t)pre[9] << 8) | ((size_t)pre[10] << 16) | ((size_t)pre[11] << 24);
        prefix = 12;
    } else {
        fclose(fp);
        return fail(err, errlen, "%s: unsupported .npy version %d.%d", path, pre[6], pre[7]);
    }
    if (header_len > (1u << 20)) {
        fclose(fp);
        return fail(err, errlen, "%s: .npy header too large", path);
    }
    header = (char *)malloc(header_len + 1);
    if (!header || fread(header, 1, header_len, fp) != header_len) {
        free(header);
        fclose(fp);
        return fail(err, errlen, "%s: truncated .npy header", path);
    }
    header[header_len] = 0;
    if (parse_header(header, out, err, errlen, path) != 0) {
        free(header);
        fclose(fp);
        return -1;
    }
    free(header);
    if (fseek(fp, 0, SEEK_END) != 0 || (file_size = ftell(fp)) < 0) {
        fclose(fp);
        return fail(err, errlen, "%s: cannot read", path);
    }
    if ((size_t)file_size != prefix + header_len + out->nbytes) {
        fclose(fp);
        return fail(err, errlen, "%s: file has %ld bytes, expected %lu for a %s array of %ld elements", path,
                    file_size, (unsigned long)(prefix + header_len + out->nbytes), out->dtype, out->size);
    }
    if (posix_memalign(&out->data, 64, out->nbytes ? out->nbytes : 64) != 0) {
        fclose(fp);
        return fail(err, errlen, "%s: out of memory for %lu bytes", path, (unsigned long)out->nbytes);
    }
    if (fseek(fp, (long)(prefix + header_len), SEEK_SET) != 0 ||
        fread(out->data, 1, out->nbytes, fp) != out->nbytes) {
        fc_npy_free(out);
        fclose(fp);
        return fail(err, errlen, "%s: truncated data", path);
    }
    fclose(fp);
    return 0;
}

int fc_npy_save(const char *path, const char *dtype, int rank, const long *shape, const void *data, char *err,
                size_t errlen) {
    char header[512];
    size_t n, i, total, nbytes;
    long size = 1;
    const char *descr = NULL;
    FILE *fp;
    for (i = 0; i < NTYPES; ++i)
        if (strcmp(TYPES[i].name, dtype) == 0) descr = TYPES[i].descr;
    if (!descr || rank < 0 || rank > FC_NPY_MAX_RANK) return fail(err, errlen, "%s: bad array description", path);
    n = (size_t)snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (i = 0; i < (size_t)rank; ++i) {
        n += (size_t)snprintf(header + n, sizeof header - n, "%ld%s", shape[i], rank == 1 ? "," : (i + 1 < (size_t)rank ? ", " : ""));
        size *= shape[i];
    }
    n += (size_t)snprintf(header + n, sizeof header - n, "), }");
    total = ((10 + n + 1 + 63) / 64) * 64; /* magic + length + header + newline, padded to 64 */
    while (10 + n + 1 < total) header[n++] = ' ';
    header[n++] = '\n';
    nbytes = (size_t)size * fc_npy_itemsize(dtype);
    fp = fopen(path, "wb");
    if (!fp) return fail(err, errlen, "%s: cannot write (%s)", path, strerror(errno));
    if (fwrite("\x93NUMPY\x01\x00", 1, 8, fp) != 8 || fputc((int)(n & 0xff), fp) == EOF ||
        fputc((int)(n >> 8), fp) == EOF || fwrite(header, 1, n, fp) != n ||
        (nbytes && fwrite(data, 1, nbytes, fp) != nbytes)) {
        fclose(fp);
        return fail(err, errlen, "%s: write failed (%s)", path, strerror(errno));
    }
    if (fclose(fp) != 0) return fail(err, errlen, "%s: write failed (%s)", path, strerror(errno));
    return 0;
}

void fc_npy_free(fc_npy *a) {
    free(a->data);
    a->data = NULL;
}
