/* The standalone binaries' command line and .npy I/O, the same for every model: a generated
 * main.c (templates/build/main.c.j2, templates/mpi/main.c.j2) describes its model's interface in
 * a table of fc_drv_tensor and calls these. Messages are one line, for the caller's die(). */
#ifndef FLOWC_DRIVER_H
#define FLOWC_DRIVER_H

#include <stddef.h>

#include "files.h"
#include "npy.h"

/* One input or output of the model, as the driver sees it. */
typedef struct {
    const char *name;  /* the tensor's name in the model (untrusted text: escaped when printed) */
    const char *dtype; /* float32, int64, ... */
    int rank;
    const long *shape; /* rank entries */
    const char *file;  /* an output's file in --out-dir ("y.npy"); NULL for an input */
    int mine;          /* 1: this process reads (input) or writes (output) it; 0: another MPI rank */
    int bound;         /* an input of run-time length: 1 + the axis whose length is at most shape[axis] */
    int length;        /* 1 + the index of the input that gets that length (int64 scalar; 0: none) */
    const char *text;  /* a scalar input given on the command line (--NAME VALUE), else NULL */
} fc_drv_tensor;

/* --NAME VALUE (NAME with '-' for '_', as in --max-new 64): the scalar input it names gets
 * VALUE (inputs[j].text). 1 when option is such a flag (then 0 or 2 in *code, 2 with msg: a
 * non-scalar input), 0 when it names no input. */
int fc_drv_scalar_arg(const char *option, const char *value, fc_drv_tensor *inputs, int n, int *code, char *msg,
                      size_t len);

/* --in NAME=FILE.npy: paths[j] = FILE for the input named NAME. 0, or 2 with the reason in msg. */
int fc_drv_in_arg(const char *spec, const fc_drv_tensor *inputs, int n, const char **paths, char *msg,
                  size_t len);

/* The count after an option such as --bench: 1 to limit. 0 (*value set), or 2 with msg. */
int fc_drv_count_arg(const char *option, const char *text, long limit, long *value, char *msg, size_t len);

/* Every input has its --in (but the length of an input of run-time length, which the driver
 * fills): 0, or 2 naming the first one missing. */
int fc_drv_inputs_named(const fc_drv_tensor *inputs, int n, const char **paths, char *msg, size_t len);

/* Load this process's inputs (mine) from paths into in[] and check each against its dtype and
 * shape, axis 0 times scale (--microbatches; 1 otherwise). An input of run-time length (bound)
 * may be shorter along its axis, down to 0: it is padded with zeros to the compiled length, and
 * its length input (if any) gets the file's length. 0, or 2 with msg (3: out of memory). */
int fc_drv_load_inputs(const fc_drv_tensor *inputs, int n, const char **paths, long scale, fc_npy *in,
                       char *msg, size_t len);

/* Create out_dir and its missing parents (as mkdir -p): 0, or 4 with the reason in msg;
 * *made (when made is not NULL): the length of out_dir's prefix whose first folder it created
 * (strlen + 1: none), for fc_drv_unmake_out_dir. */
int fc_drv_make_out_dir(const char *out_dir, size_t *made, char *msg, size_t len);
/* Remove the folders fc_drv_make_out_dir made (those still empty), deepest first. */
void fc_drv_unmake_out_dir(const char *out_dir, size_t made);

/* Write this process's outputs (mine), data[j] each, axis 0 times scale, to fresh temporaries
 * beside out_dir/<file> (out_dir made if missing), refusing a path that is one of the input files;
 * put[j] and paths[j] (malloc'ed: free them) name them for fc_files_commit. 0, or 3 (out of memory)
 * / 4 (files) with msg; the temporaries written so far stay in put[] for fc_files_finish. */
int fc_drv_write_temps(const char *out_dir, const fc_drv_tensor *outputs, int n, void *const *data, long scale,
                       const fc_drv_tensor *inputs, int n_in, const char **in_paths, fc_file_set *put,
                       char **paths, char *msg, size_t len);

/* A dataset array of class labels (samples x row_size values of dtype, C order): every value in
 * [0, depth), as the model's index check would find it (a float truncated toward zero, as its cast
 * does). 0, or 2 with msg naming the array, its file and the first sample outside. Integer and
 * float32/float64 arrays; another dtype is left to the model's own check. */
int fc_drv_check_labels(const void *data, const char *dtype, long samples, long row_size, long depth,
                        const char *name, const char *file, char *msg, size_t len);

#endif /* FLOWC_DRIVER_H */
