/* .npz archives (the zip files np.savez writes) for the standalone training binaries: read by
 * memory-mapping the file (no copy of the data), written atomically (temporary + rename).
 * For the standalone binaries only, like npy.h: it allocates and does I/O, the model code does neither.
 *
 * Usage:
 *     fc_npz z;
 *     const fc_npz_member *x;
 *     if (fc_npz_open("train.npz", &z, err, sizeof err) != 0) { fc_npy_error_line("error: ", err); ... }
 *     x = fc_npz_find(&z, "x");            // x->array.dtype, .rank, .shape, .data (read-only)
 *     ...
 *     fc_npz_close(&z);
 * Compile with npz.c and npy.c.
 *
 * Errors: every function that can fail returns -1 with one line in err naming the file (and the
 * member where there is one); bytes from the file (member names, header text) are quoted escaped as
 * \xNN and bounded. A damaged or hostile file (truncated, overlapping members, huge counts, sizes
 * that overflow, a member shorter than its .npy header says) is such an error, never a crash. The
 * CRC-32 of member data is not checked on open (that would read every byte): a flipped data byte
 * goes unnoticed. A file truncated by someone else while mapped raises SIGBUS on access (mmap). */
#ifndef FC_NPZ_H
#define FC_NPZ_H

#include <stddef.h>

#include "npy.h"

typedef struct {
    char name[256]; /* member name without the ".npy" suffix; any bytes but NUL */
    fc_npy array;   /* array.data points INTO the mapping: read-only, never fc_npy_free it. Aligned to
                     * 64 bytes in archives fc_npz_save wrote and in .npy files; np.savez does not
                     * align it, so read elements with memcpy (or copy them out) */
} fc_npz_member;

typedef struct {
    void *map;        /* the whole file, mmap'ed PROT_READ, MAP_PRIVATE */
    size_t map_bytes;
    int count;
    fc_npz_member *members; /* malloc'ed, in central directory order */
} fc_npz;

/* Open an .npz archive written by np.savez (members stored, not compressed; zip64 extra fields and
 * the zip64 end records read where present) by memory-mapping it. Reads the end of central
 * directory record, the central directory, each member's local header, then its .npy header, checking
 * every offset and size against the file. Errors, besides damage: a compressed member ("PATH: member
 * 'x' is compressed (np.savez_compressed); write the dataset with np.savez"), an encrypted one, a
 * member whose name does not end in .npy or is longer than 255 bytes without it, two members of one
 * name. Returns 0, or -1 with *z zeroed. */
int fc_npz_open(const char *path, fc_npz *z, char *err, size_t errlen);

/* Map a single .npy file the same way, as an archive of one member called name (NULL: the file's
 * name without folder and ".npy"). Returns 0, or -1 with *z zeroed. */
int fc_npz_open_npy(const char *path, const char *name, fc_npz *z, char *err, size_t errlen);

/* The member called name, or NULL. */
const fc_npz_member *fc_npz_find(const fc_npz *z, const char *name);

/* munmap and free; safe on a zeroed or already closed fc_npz. */
void fc_npz_close(fc_npz *z);

typedef struct {
    const char *name;  /* member name without .npy: any bytes but NUL, at most 250 of them */
    const char *dtype; /* an fc_npy dtype name: "float32", "int64", "uint8", "bool", ... */
    int rank;
    const long *shape;
    const void *data;  /* C order, itemsize * prod(shape) bytes */
} fc_npz_entry;

/* Write an .npz archive at path that np.load reads: each entry a stored (uncompressed) member
 * "<name>.npy" holding a version 1.0 .npy with its data 64-byte aligned in the file, CRC-32s in the
 * local headers and the central directory, names flagged UTF-8 where they are valid UTF-8, a fixed
 * 1980-01-01 timestamp (the same entries give the same bytes). Written to a temporary in the same
 * folder (.<file>.XXXXXX, mkstemp), flushed and fsync'ed, then renamed over path. Archives that would
 * need zip64 (a size or offset of 4 GiB - 1 or more, 65535 members or more) are refused with a
 * "too large" message. Returns 0, or -1 with a one-line reason in err, nothing left behind and any
 * old file at path untouched. */
int fc_npz_save(const char *path, const fc_npz_entry *entries, int count, char *err, size_t errlen);

/* CRC-32 as zip and zlib compute it (polynomial 0xEDB88320) of buf[0..n), continuing from crc (start
 * with 0): fc_crc32(fc_crc32(0, a, na), b, nb) == crc of a then b. */
unsigned long fc_crc32(unsigned long crc, const void *buf, size_t n);

#endif /* FC_NPZ_H */
