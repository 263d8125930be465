/* Checkpoints of a compiled model's state: the .npz file graphdef/checkpoint.py describes (one
 * .npy member per variable, keyed by its name, and a member "__flowc__": a JSON text as uint8 with
 * the format, the model's name, the step and the hash of the variables' names, dtypes and shapes).
 * For the standalone binaries only (it allocates and does I/O): the training driver writes and
 * resumes from them, the inference driver reads its variables from one (--checkpoint).
 *
 *     static const long w_shape[2] = {64, 32};
 *     static const fc_ck_var vars[1] = {{"w", "float32", 2, w_shape, 0}};
 *     fc_ck_save("ck.npz", vars, 1, state, "net", "0123abcd", 100, err, sizeof err);
 *     fc_ck_load("ck.npz", vars, 1, state, 1, &step, "net", err, sizeof err);
 *
 * Errors: -1 and one line in err that names the file and the first variable that differs (a
 * missing one, another dtype or shape, with `exact` an extra one), nothing written to the state
 * unless every variable fits. Requires C99 and POSIX (npz.c, npy.c). */
#ifndef FC_CHECKPOINT_H
#define FC_CHECKPOINT_H

#include <stddef.h>

typedef struct {
    const char *name;  /* the variable's name (from the model file: printed escaped) */
    const char *dtype; /* npy.h's names: "float32", "int64", ... */
    int rank;
    const long *shape;
    long offset;       /* its bytes in the state buffer */
} fc_ck_var;

/* Read path into state: every variable of vars must be in it with its dtype and shape; exact:
 * also refuse a member that is none of vars (a checkpoint of another model), else ignore it (an
 * inference model reads its weights from a training checkpoint, optimizer slots and all).
 * *step: the header's step, or -1 when it has none. */
int fc_ck_load(const char *path, const fc_ck_var *vars, int count, void *state, int exact, long *step,
               const char *model, char *err, size_t errlen);

/* Write the variables of state and the header (model, hash, step; step < 0: null) to path,
 * atomically (a temporary beside it, then renamed over it). */
int fc_ck_save(const char *path, const fc_ck_var *vars, int count, const void *state, const char *model,
               const char *hash, long step, char *err, size_t errlen);

#endif /* FC_CHECKPOINT_H */
