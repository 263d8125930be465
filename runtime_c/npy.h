/* Reading and writing .npy files (format versions 1.0, 2.0 and 3.0; little-endian, C order).
 * For the standalone binaries only: it allocates and does I/O, the model code does neither. */
#ifndef FC_NPY_H
#define FC_NPY_H

#include <stddef.h>

#define FC_NPY_MAX_RANK 8

typedef struct {
    char dtype[16]; /* float16/32/64, int8/16/32/64, uint8/16/32/64 or bool */
    int rank;
    long shape[FC_NPY_MAX_RANK];
    long size;      /* elements */
    size_t nbytes;
    void *data;     /* malloc'ed, 64-byte aligned; free with fc_npy_free */
} fc_npy;

/* Load path into *out. Returns 0, or -1 with a one-line reason in err. */
int fc_npy_load(const char *path, fc_npy *out, char *err, size_t errlen);

/* Write data as a version 1.0 .npy file. Returns 0, or -1 with a one-line reason in err. */
int fc_npy_save(const char *path, const char *dtype, int rank, const long *shape, const void *data,
                char *err, size_t errlen);

void fc_npy_free(fc_npy *a);

/* Bytes per element of a dtype name, 0 if unknown. */
size_t fc_npy_itemsize(const char *dtype);

#endif /* FC_NPY_H */
