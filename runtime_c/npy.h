/* Reading and writing .npy files (format versions 1.0, 2.0 and 3.0; little-endian, C order).
 * For the standalone binaries only: it allocates and does I/O (through files.h), the model code does
 * neither. */
#ifndef FC_NPY_H
#define FC_NPY_H

#include <stddef.h>
#include <stdio.h>

#include "files.h"

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

/* Write data as a version 1.0 .npy file to a new temporary beside path (files.h: fc_file_temp, never
 * through an existing path or link, the permissions open gives). Returns 0 and the temporary's name
 * in *tmp (malloc'ed: put it in place with fc_file_put or fc_files_commit), or -1 with a one-line
 * reason in err, *tmp NULL and no temporary left behind. */
int fc_npy_save_temp(const char *path, char **tmp, const char *dtype, int rank, const long *shape,
                     const void *data, char *err, size_t errlen);

/* Write data as a version 1.0 .npy file at path: to a temporary beside it (fc_npy_save_temp), then
 * renamed over path. Returns 0, or -1 with a one-line reason in err and path as it was. */
int fc_npy_save(const char *path, const char *dtype, int rank, const long *shape, const void *data,
                char *err, size_t errlen);

void fc_npy_free(fc_npy *a);

/* Bytes per element of a dtype name, 0 if unknown. */
size_t fc_npy_itemsize(const char *dtype);

/* Whether a loaded input has the dtype and shape the model wants: 0, or -1 with
 * "input 'NAME' (PATH) has dtype .../shape ..., expected ..." in err. */
int fc_npy_check(const fc_npy *a, const char *name, const char *path, const char *dtype, int rank,
                 const long *shape, char *err, size_t errlen);

/* "float32[100, 16]": dtype and shape as messages show them, into buf (truncated to len); first:
 * the text of axis 0 instead of its size ("N": "float32[N, 16]"), or NULL. */
void fc_npy_describe(char *buf, size_t len, const char *dtype, int rank, const long *shape, const char *first);

/* dir/file, malloc'ed (NULL when out of memory). */
char *fc_npy_path(const char *dir, const char *file);

/* One line on stderr: prefix, then msg with every byte that is not printable ASCII written as
 * \xNN (msg quotes arguments and file names: no control characters reach the terminal). */
void fc_npy_error_line(const char *prefix, const char *msg);

/* Helpers shared with npz.c. */

/* Parse a whole .npy file held in memory (buf, n bytes): dtype, rank, shape, size and nbytes into
 * *out (out->data stays NULL) and where the data starts in *offset. The data must fill the rest of
 * buf exactly. Returns 0, or -1 with "WHAT: reason" in err (what names the file, or the member). */
int fc_npy_parse(const void *buf, size_t n, fc_npy *out, size_t *offset, const char *what, char *err,
                 size_t errlen);

/* The version 1.0 preamble of an array (magic, version, length, header dict, spaces and a newline
 * up to a multiple of 64 bytes) into buf (FC_NPY_HEADER_MAX bytes), and the data's size in *nbytes.
 * Returns the preamble's length, or 0 when dtype, rank or shape is not valid. */
#define FC_NPY_HEADER_MAX 512
size_t fc_npy_header(char *buf, const char *dtype, int rank, const long *shape, size_t *nbytes);

/* src[0..n) as terminal-safe text into dst (FC_NPY_QUOTE_LEN chars): printable ASCII as is, any
 * other byte, the quote and the backslash as \xNN; at most FC_NPY_QUOTE_MAX bytes of it, then "...".
 * Returns dst. */
#define FC_NPY_QUOTE_MAX 32
#define FC_NPY_QUOTE_LEN (4 * FC_NPY_QUOTE_MAX + 4)
const char *fc_npy_quote(char *dst, const char *src, size_t n);

#endif /* FC_NPY_H */
