/* Files of the standalone binaries: every open, temporary, rename and rollback of inputs,
 * outputs, datasets and checkpoints goes through these few functions (npy.c, npz.c,
 * checkpoint.c, main.c, train.c), so that what they promise is checked in one place:
 *
 * - reads open regular files only: a FIFO, socket, device or folder is refused at once, never
 *   waited on (opened non-blocking, checked with fstat, then switched back to blocking). A link
 *   to a regular file reads as that file, as `cat` would.
 * - writes never go through an existing path or link: a new temporary beside the target
 *   (mkstemp: O_CREAT|O_EXCL) with the permissions a plain open would give (0666 less the umask),
 *   renamed over the target when complete. A link at the target is replaced, its target untouched.
 * - a set of files is put in place all or none: a file that was there is kept aside (a hard link,
 *   or where links are not supported a rename) until every file is in place; when one fails,
 *   every path gets back its previous file, and a path that had none is removed. Prior content is
 *   never deleted before the new content is in place.
 * - temporaries are listed while they exist, so fc_file_cleanup_on_signals() can remove them
 *   when SIGINT, SIGTERM or SIGHUP ends the program in the middle of a write.
 *
 * Errors: -1 with one line in err naming the path and the reason (strerror). For the standalone
 * binaries only (C99 + POSIX): the model code does no I/O. */
#ifndef FC_FILES_H
#define FC_FILES_H

#include <stddef.h>
#include <stdio.h>

/* Write the printf-style message into err (one line, errlen bytes at most) and return -1. */
int fc_file_fail(char *err, size_t errlen, const char *fmt, ...);

/* Open path for reading: a regular file only. Returns a blocking descriptor (close it) and its size
 * in *size, or -1 with "PATH: reason" in err. */
int fc_file_open_read(const char *path, size_t *size, char *err, size_t errlen);

/* The same as a stdio stream ("rb"), or NULL with the reason in err. */
FILE *fc_file_fopen_read(const char *path, size_t *size, char *err, size_t errlen);

/* A new temporary file beside path, named .<file>.<host>.<pid>.XXXXXX (fc_file_sweep reads the
 * owner from it), opened for writing ("wb"). Returns 0 with
 * its name in *tmp (malloc'ed: give it to fc_file_put / fc_files_commit, or fc_file_drop it) and its
 * stream in *fp, or -1 with both NULL, the reason in err and nothing left behind. */
int fc_file_temp(const char *path, char **tmp, FILE **fp, char *err, size_t errlen);

/* Remove the temporaries of path that a process of this host left when it was killed (SIGKILL,
 * a crash: what no handler could remove): .<file>.<host>.<pid>.XXXXXX whose process is gone. A
 * temporary of a live process, or of another host (a shared folder), is left alone. Returns how
 * many were removed. */
int fc_file_sweep(const char *path);

/* Close fp (NULL: already closed), remove the temporary tmp and free it; for failures. */
void fc_file_drop(char *tmp, FILE *fp);

/* Flush and close a temporary's stream, with fsync first when sync is set. Returns 0, or -1 with
 * "PATH: write failed (reason)" in err (path: the target, for the message); the stream is closed
 * either way. */
int fc_file_close(FILE *fp, int sync, const char *path, char *err, size_t errlen);

/* Rename the finished temporary tmp (freed) over path. Returns 0, or -1 with the reason in err and
 * the temporary removed; path keeps what it held. */
int fc_file_put(char *tmp, const char *path, char *err, size_t errlen);

/* A set of files to put in place all or none. */
typedef struct {
    char *tmp;       /* the finished temporary (malloc'ed), or NULL: nothing to put */
    const char *path;
    char *kept;      /* the previous file, kept aside while the set is committed (malloc'ed) */
    int had;         /* path held a file before (kept is where it is now) */
    int done;        /* tmp is at path */
} fc_file_set;

/* Put every entry's temporary in place. Returns 0; or -1 with the first failure in err, every path
 * back as it was and the temporaries removed. After 0, call fc_files_finish (keep the new files)
 * or fc_files_rollback (put the previous files back: another rank failed). */
int fc_files_commit(fc_file_set *set, int n, char *err, size_t errlen);
void fc_files_rollback(fc_file_set *set, int n);
/* Drop the kept previous files and any temporary left; free every name. Safe after a failure. */
void fc_files_finish(fc_file_set *set, int n);

/* Whether the two paths name one existing file (device and inode; links followed). */
int fc_file_same(const char *a, const char *b);

/* Whether a file can be written at path later: it is not a folder or other non-regular file, and
 * its folder exists and takes a new file (a temporary is created there and removed). Returns 0, or
 * -1 with the reason in err. */
int fc_file_check_writable(const char *path, char *err, size_t errlen);

/* On SIGINT, SIGTERM and SIGHUP (where not ignored): remove the temporaries that exist, then end
 * as the signal would have. For the inference driver; the training driver handles these signals
 * itself and stops at the end of a step. */
void fc_file_cleanup_on_signals(void);

#endif /* FC_FILES_H */
