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

/* Load path into *out. Returns 0, or -1 with a one-line reason in err (the bytes of the file
 * it quotes are escaped as \xNN where not printable ASCII, and bounded in length). */
int fc_npy_load(const char *path, fc_npy *out, char *err, size_t errlen);

/* Write data as a version 1.0 .npy file to a new temporary file in dir, named .<file>.XXXXXX
 * and created with mkstemp (O_CREAT|O_EXCL: never through an existing path or link), with the
 * permissions fopen gives (0666 less the umask). Returns 0 and the temporary's path in *tmp
 * (malloc'ed: the caller renames it into place, or removes it, and frees it), or -1 with a
 * one-line reason in err, *tmp NULL and no temporary left behind. */
int fc_npy_save_temp(const char *dir, const char *file, char **tmp, const char *dtype, int rank,
                     const long *shape, const void *data, char *err, size_t errlen);

/* Write data as a version 1.0 .npy file at path: to a temporary in the same folder
 * (fc_npy_save_temp), then renamed over path. Returns 0, or -1 with a one-line reason in err. */
int fc_npy_save(const char *path, const char *dtype, int rank, const long *shape, const void *data,
                char *err, size_t errlen);

void fc_npy_free(fc_npy *a);

/* Bytes per element of a dtype name, 0 if unknown. */
size_t fc_npy_itemsize(const char *dtype);

/* Whether a loaded input has the dtype and shape the model wants: 0, or -1 with
 * "input 'NAME' (PATH) has dtype .../shape ..., expected ..." in err. */
int fc_npy_check(const fc_npy *a, const char *name, const char *path, const char *dtype, int rank,
                 const long *shape, char *err, size_t errlen);

/* dir/file, malloc'ed (NULL when out of memory). */
char *fc_npy_path(const char *dir, const char *file);

/* One line on stderr: prefix, then msg with every byte that is not printable ASCII written as
 * \xNN (msg quotes arguments and file names: no control characters reach the terminal). */
void fc_npy_error_line(const char *prefix, const char *msg);

#endif /* FC_NPY_H */
