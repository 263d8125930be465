/* .npz reader (mmap, no copy) and writer (temporary + rename) for the standalone binaries (see npz.h).
 *
 * The zip subset: one disk, no encryption, members stored (method 0). Reading takes the sizes and
 * offsets from the central directory (32-bit fields, or the zip64 extra field where they are
 * 0xFFFFFFFF, as np.savez writes them) and the end records (the zip64 ones where present); the
 * local header gives only where the data starts. Writing makes no zip64 records at all. */
#define _POSIX_C_SOURCE 200809L
#include "npz.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SIG_LOCAL 0x04034b50UL
#define SIG_CENTRAL 0x02014b50UL
#define SIG_END 0x06054b50UL
#define SIG_END64 0x06064b50UL
#define SIG_LOCATOR64 0x07064b50UL
#define LOCAL_LEN 30    /* fixed part of a local header */
#define CENTRAL_LEN 46  /* fixed part of a central directory entry */
#define END_LEN 22      /* end of central directory record, without its comment */
#define END64_LEN 56    /* zip64 end of central directory record, without its extensible data */
#define LOCATOR64_LEN 20
#define ZIP32_LIMIT 0xFFFFFFFFUL /* sizes and offsets from here on need zip64 */
#define ZIP32_MEMBERS 0xFFFFU
#define DOS_DATE_1980 0x21      /* 1980-01-01, the earliest DOS date; time 00:00 */
#define FLAG_ENCRYPTED 0x1U
#define FLAG_UTF8 0x800U
#define EXTRA_ZIP64 0x0001U
#define EXTRA_ALIGN 0xD935U /* Android zipalign's padding field: 2-byte alignment, then zeros */
#define DATA_ALIGN 64

/* zip's CRC-32 table (reflected polynomial 0xEDB88320), constant: nothing to initialise or race on */
static const uint32_t CRC_TABLE[256] = {
    0x00000000UL, 0x77073096UL, 0xee0e612cUL, 0x990951baUL, 0x076dc419UL, 0x706af48fUL,
    0xe963a535UL, 0x9e6495a3UL, 0x0edb8832UL, 0x79dcb8a4UL, 0xe0d5e91eUL, 0x97d2d988UL,
    0x09b64c2bUL, 0x7eb17cbdUL, 0xe7b82d07UL, 0x90bf1d91UL, 0x1db71064UL, 0x6ab020f2UL,
    0xf3b97148UL, 0x84be41deUL, 0x1adad47dUL, 0x6ddde4ebUL, 0xf4d4b551UL, 0x83d385c7UL,
    0x136c9856UL, 0x646ba8c0UL, 0xfd62f97aUL, 0x8a65c9ecUL, 0x14015c4fUL, 0x63066cd9UL,
    0xfa0f3d63UL, 0x8d080df5UL, 0x3b6e20c8UL, 0x4c69105eUL, 0xd56041e4UL, 0xa2677172UL,
    0x3c03e4d1UL, 0x4b04d447UL, 0xd20d85fdUL, 0xa50ab56bUL, 0x35b5a8faUL, 0x42b2986cUL,
    0xdbbbc9d6UL, 0xacbcf940UL, 0x32d86ce3UL, 0x45df5c75UL, 0xdcd60dcfUL, 0xabd13d59UL,
    0x26d930acUL, 0x51de003aUL, 0xc8d75180UL, 0xbfd06116UL, 0x21b4f4b5UL, 0x56b3c423UL,
    0xcfba9599UL, 0xb8bda50fUL, 0x2802b89eUL, 0x5f058808UL, 0xc60cd9b2UL, 0xb10be924UL,
    0x2f6f7c87UL, 0x58684c11UL, 0xc1611dabUL, 0xb6662d3dUL, 0x76dc4190UL, 0x01db7106UL,
    0x98d220bcUL, 0xefd5102aUL, 0x71b18589UL, 0x06b6b51fUL, 0x9fbfe4a5UL, 0xe8b8d433UL,
    0x7807c9a2UL, 0x0f00f934UL, 0x9609a88eUL, 0xe10e9818UL, 0x7f6a0dbbUL, 0x086d3d2dUL,
    0x91646c97UL, 0xe6635c01UL, 0x6b6b51f4UL, 0x1c6c6162UL, 0x856530d8UL, 0xf262004eUL,
    0x6c0695edUL, 0x1b01a57bUL, 0x8208f4c1UL, 0xf50fc457UL, 0x65b0d9c6UL, 0x12b7e950UL,
    0x8bbeb8eaUL, 0xfcb9887cUL, 0x62dd1ddfUL, 0x15da2d49UL, 0x8cd37cf3UL, 0xfbd44c65UL,
    0x4db26158UL, 0x3ab551ceUL, 0xa3bc0074UL, 0xd4bb30e2UL, 0x4adfa541UL, 0x3dd895d7UL,
    0xa4d1c46dUL, 0xd3d6f4fbUL, 0x4369e96aUL, 0x346ed9fcUL, 0xad678846UL, 0xda60b8d0UL,
    0x44042d73UL, 0x33031de5UL, 0xaa0a4c5fUL, 0xdd0d7cc9UL, 0x5005713cUL, 0x270241aaUL,
    0xbe0b1010UL, 0xc90c2086UL, 0x5768b525UL, 0x206f85b3UL, 0xb966d409UL, 0xce61e49fUL,
    0x5edef90eUL, 0x29d9c998UL, 0xb0d09822UL, 0xc7d7a8b4UL, 0x59b33d17UL, 0x2eb40d81UL,
    0xb7bd5c3bUL, 0xc0ba6cadUL, 0xedb88320UL, 0x9abfb3b6UL, 0x03b6e20cUL, 0x74b1d29aUL,
    0xead54739UL, 0x9dd277afUL, 0x04db2615UL, 0x73dc1683UL, 0xe3630b12UL, 0x94643b84UL,
    0x0d6d6a3eUL, 0x7a6a5aa8UL, 0xe40ecf0bUL, 0x9309ff9dUL, 0x0a00ae27UL, 0x7d079eb1UL,
    0xf00f9344UL, 0x8708a3d2UL, 0x1e01f268UL, 0x6906c2feUL, 0xf762575dUL, 0x806567cbUL,
    0x196c3671UL, 0x6e6b06e7UL, 0xfed41b76UL, 0x89d32be0UL, 0x10da7a5aUL, 0x67dd4accUL,
    0xf9b9df6fUL, 0x8ebeeff9UL, 0x17b7be43UL, 0x60b08ed5UL, 0xd6d6a3e8UL, 0xa1d1937eUL,
    0x38d8c2c4UL, 0x4fdff252UL, 0xd1bb67f1UL, 0xa6bc5767UL, 0x3fb506ddUL, 0x48b2364bUL,
    0xd80d2bdaUL, 0xaf0a1b4cUL, 0x36034af6UL, 0x41047a60UL, 0xdf60efc3UL, 0xa867df55UL,
    0x316e8eefUL, 0x4669be79UL, 0xcb61b38cUL, 0xbc66831aUL, 0x256fd2a0UL, 0x5268e236UL,
    0xcc0c7795UL, 0xbb0b4703UL, 0x220216b9UL, 0x5505262fUL, 0xc5ba3bbeUL, 0xb2bd0b28UL,
    0x2bb45a92UL, 0x5cb36a04UL, 0xc2d7ffa7UL, 0xb5d0cf31UL, 0x2cd99e8bUL, 0x5bdeae1dUL,
    0x9b64c2b0UL, 0xec63f226UL, 0x756aa39cUL, 0x026d930aUL, 0x9c0906a9UL, 0xeb0e363fUL,
    0x72076785UL, 0x05005713UL, 0x95bf4a82UL, 0xe2b87a14UL, 0x7bb12baeUL, 0x0cb61b38UL,
    0x92d28e9bUL, 0xe5d5be0dUL, 0x7cdcefb7UL, 0x0bdbdf21UL, 0x86d3d2d4UL, 0xf1d4e242UL,
    0x68ddb3f8UL, 0x1fda836eUL, 0x81be16cdUL, 0xf6b9265bUL, 0x6fb077e1UL, 0x18b74777UL,
    0x88085ae6UL, 0xff0f6a70UL, 0x66063bcaUL, 0x11010b5cUL, 0x8f659effUL, 0xf862ae69UL,
    0x616bffd3UL, 0x166ccf45UL, 0xa00ae278UL, 0xd70dd2eeUL, 0x4e048354UL, 0x3903b3c2UL,
    0xa7672661UL, 0xd06016f7UL, 0x4969474dUL, 0x3e6e77dbUL, 0xaed16a4aUL, 0xd9d65adcUL,
    0x40df0b66UL, 0x37d83bf0UL, 0xa9bcae53UL, 0xdebb9ec5UL, 0x47b2cf7fUL, 0x30b5ffe9UL,
    0xbdbdf21cUL, 0xcabac28aUL, 0x53b39330UL, 0x24b4a3a6UL, 0xbad03605UL, 0xcdd70693UL,
    0x54de5729UL, 0x23d967bfUL, 0xb3667a2eUL, 0xc4614ab8UL, 0x5d681b02UL, 0x2a6f2b94UL,
    0xb40bbe37UL, 0xc30c8ea1UL, 0x5a05df1bUL, 0x2d02ef8dUL,
};

unsigned long fc_crc32(unsigned long crc, const void *buf, size_t n) {
    const unsigned char *p = (const unsigned char *)buf;
    uint32_t c = ~(uint32_t)crc;
    while (n--) c = CRC_TABLE[(c ^ *p++) & 0xff] ^ (c >> 8);
    return (unsigned long)(uint32_t)~c;
}

/* little-endian fields, byte by byte: the mapping has no alignment to rely on */
static unsigned rd16(const unsigned char *p) { return (unsigned)p[0] | (unsigned)p[1] << 8; }
static uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const unsigned char *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static unsigned char *wr16(unsigned char *p, unsigned v) {
    p[0] = (unsigned char)(v & 0xff);
    p[1] = (unsigned char)(v >> 8 & 0xff);
    return p + 2;
}
static unsigned char *wr32(unsigned char *p, uint32_t v) { return wr16(wr16(p, (unsigned)(v & 0xffff)), (unsigned)(v >> 16)); }

/* "PATH: member 'NAME'" for messages, NAME quoted (bytes from the file) */
static const char *member_what(char *buf, size_t len, const char *path, const unsigned char *name, size_t n) {
    char q[FC_NPY_QUOTE_LEN];
    snprintf(buf, len, "%s: member '%s'", path, fc_npy_quote(q, (const char *)name, n));
    return buf;
}
#define WHAT_LEN (FC_NPY_QUOTE_LEN + 4200)

static int map_file(const char *path, fc_npz *z, char *err, size_t errlen) {
    size_t size;
    void *map;
    int fd = fc_file_open_read(path, &size, err, errlen), saved;
    if (fd < 0) return -1;
    if (size == 0) {
        close(fd);
        return fc_file_fail(err, errlen, "%s: empty file", path);
    }
    map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    saved = errno;
    close(fd); /* the mapping keeps the file */
    if (map == MAP_FAILED) return fc_file_fail(err, errlen, "%s: cannot map (%s)", path, strerror(saved));
    z->map = map;
    z->map_bytes = size;
    return 0;
}

typedef struct {
    uint64_t start, end;
} span;

static int by_start(const void *a, const void *b) {
    const span *x = (const span *)a, *y = (const span *)b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int by_name(const void *a, const void *b) {
    return strcmp((*(const fc_npz_member *const *)a)->name, (*(const fc_npz_member *const *)b)->name);
}

/* Two members of one name: -1 with the message, 0 if none (or no memory to look: names are checked
 * where they can be). */
static int check_names(const fc_npz *z, const char *path, char *err, size_t errlen) {
    const fc_npz_member **sorted;
    char q[FC_NPY_QUOTE_LEN];
    int i, rc = 0;
    if (z->count < 2) return 0;
    sorted = (const fc_npz_member **)malloc((size_t)z->count * sizeof *sorted);
    if (!sorted) return fc_file_fail(err, errlen, "%s: out of memory", path);
    for (i = 0; i < z->count; ++i) sorted[i] = &z->members[i];
    qsort(sorted, (size_t)z->count, sizeof *sorted, by_name);
    for (i = 1; i < z->count && rc == 0; ++i)
        if (strcmp(sorted[i - 1]->name, sorted[i]->name) == 0)
            rc = fc_file_fail(err, errlen, "%s: two members named '%s'", path,
                      fc_npy_quote(q, sorted[i]->name, strlen(sorted[i]->name)));
    free(sorted);
    return rc;
}

/* The central directory entry at c (avail bytes left in the directory) of the archive f with its
 * directory at cd_off: its member into *m, the bytes it spans (local header to end of data) into *s,
 * the entry's length into *len. */
static int read_member(const char *path, unsigned char *f, uint64_t cd_off, const unsigned char *c, uint64_t avail,
                       fc_npz_member *m, span *s, uint64_t *len, char *err, size_t errlen) {
    const unsigned char *name, *extra;
    unsigned flags, method, nlen, elen, clen, disk, k;
    uint64_t csize, usize, local, data, lnlen, lelen;
    char what[WHAT_LEN];
    size_t offset;
    if (avail < CENTRAL_LEN || rd32(c) != SIG_CENTRAL) return 1;
    flags = rd16(c + 8);
    method = rd16(c + 10);
    csize = rd32(c + 20);
    usize = rd32(c + 24);
    nlen = rd16(c + 28);
    elen = rd16(c + 30);
    clen = rd16(c + 32);
    disk = rd16(c + 34);
    local = rd32(c + 42);
    *len = (uint64_t)CENTRAL_LEN + nlen + elen + clen;
    if (*len > avail) return 1;
    name = c + CENTRAL_LEN;
    extra = name + nlen;
    if (nlen >= 4 && memcmp(name + nlen - 4, ".npy", 4) == 0)
        member_what(what, sizeof what, path, name, nlen - 4);
    else
        member_what(what, sizeof what, path, name, nlen);
    /* zip64 extra field: the 64-bit values of the fields that hold all ones, in this order */
    for (k = 0; k + 4 <= elen;) {
        unsigned id = rd16(extra + k), n = rd16(extra + k + 2);
        const unsigned char *v = extra + k + 4, *v_end = v + n;
        if (n > elen - k - 4) return fc_file_fail(err, errlen, "%s: damaged zip extra field", what);
        if (id == EXTRA_ZIP64) {
            uint64_t *wide[3];
            int w, nwide = 0;
            if (usize == ZIP32_LIMIT) wide[nwide++] = &usize;
            if (csize == ZIP32_LIMIT) wide[nwide++] = &csize;
            if (local == ZIP32_LIMIT) wide[nwide++] = &local;
            for (w = 0; w < nwide; ++w, v += 8) {
                if (v_end - v < 8) return fc_file_fail(err, errlen, "%s: damaged zip64 extra field", what);
                *wide[w] = rd64(v);
            }
            if (disk == ZIP32_MEMBERS) {
                if (v_end - v < 4) return fc_file_fail(err, errlen, "%s: damaged zip64 extra field", what);
                disk = rd32(v) ? 1 : 0;
            }
        }
        k += 4 + n;
    }
    if (flags & FLAG_ENCRYPTED) return fc_file_fail(err, errlen, "%s is encrypted", what);
    if (method != 0)
        return fc_file_fail(err, errlen, "%s is compressed (np.savez_compressed); write the dataset with np.savez", what);
    if (disk != 0) return fc_file_fail(err, errlen, "%s: multi-disk zip archives are not supported", path);
    if (nlen < 4 || memcmp(name + nlen - 4, ".npy", 4) != 0)
        return fc_file_fail(err, errlen, "%s is not an array (its name does not end in .npy)", what);
    if (memchr(name, 0, nlen)) return fc_file_fail(err, errlen, "%s: a NUL byte in the name", what);
    if (nlen - 4 >= sizeof m->name) return fc_file_fail(err, errlen, "%s: name longer than 255 bytes", what);
    if (csize != usize) return fc_file_fail(err, errlen, "%s: damaged (stored, but with two sizes)", what);
    /* the local header: same name, stored; the data follows its name and extra field */
    if (local > cd_off || cd_off - local < LOCAL_LEN || rd32(f + local) != SIG_LOCAL)
        return fc_file_fail(err, errlen, "%s: damaged zip archive (no local header at %llu)", what, (unsigned long long)local);
    if (rd16(f + local + 8) != 0)
        return fc_file_fail(err, errlen, "%s is compressed (np.savez_compressed); write the dataset with np.savez", what);
    lnlen = rd16(f + local + 26);
    lelen = rd16(f + local + 28);
    data = local + LOCAL_LEN + lnlen + lelen;
    if (data > cd_off || csize > cd_off - data)
        return fc_file_fail(err, errlen,
                    "%s: damaged or truncated zip archive (data of %llu bytes at %llu, central directory at %llu)",
                    what, (unsigned long long)csize, (unsigned long long)data, (unsigned long long)cd_off);
    if (lnlen != nlen || memcmp(f + local + LOCAL_LEN, name, nlen) != 0)
        return fc_file_fail(err, errlen, "%s: damaged zip archive (local header of another name)", what);
    s->start = local;
    s->end = data + csize;
    memcpy(m->name, name, nlen - 4);
    m->name[nlen - 4] = 0;
    if (fc_npy_parse(f + data, (size_t)csize, &m->array, &offset, what, err, errlen) != 0) return -1;
    m->array.data = f + data + offset;
    return 0;
}

/* The members of the mapped archive z->map into z->members. */
static int read_archive(const char *path, fc_npz *z, char *err, size_t errlen) {
    unsigned char *f = (unsigned char *)z->map;
    const uint64_t size = z->map_bytes;
    uint64_t pos, end = 0, limit, count, cd_off, cd_size, at, len, i;
    span *spans;
    int found = 0, rc;
    if (size >= 6 && memcmp(f, "\x93NUMPY", 6) == 0)
        return fc_file_fail(err, errlen, "%s: a .npy file, not an .npz archive", path);
    if (size < END_LEN) return fc_file_fail(err, errlen, "%s: not an .npz archive (too short for a zip file)", path);
    /* the end record: the last 22 bytes, or 22 bytes and a comment of up to 65535 that ends the file */
    for (pos = size - END_LEN;; --pos) {
        if (rd32(f + pos) == SIG_END && pos + END_LEN + rd16(f + pos + 20) == size) {
            found = 1;
            end = pos;
            break;
        }
        if (pos == 0 || size - END_LEN - pos >= 0xFFFF) break;
    }
    if (!found) return fc_file_fail(err, errlen, "%s: not an .npz archive (no zip end of central directory record)", path);
    if (rd16(f + end + 4) != 0 || rd16(f + end + 6) != 0 || rd16(f + end + 8) != rd16(f + end + 10))
        return fc_file_fail(err, errlen, "%s: multi-disk zip archives are not supported", path);
    count = rd16(f + end + 10);
    cd_size = rd32(f + end + 12);
    cd_off = rd32(f + end + 16);
    limit = end; /* the central directory ends at or before this */
    if (end >= LOCATOR64_LEN && rd32(f + end - LOCATOR64_LEN) == SIG_LOCATOR64) {
        const uint64_t loc = end - LOCATOR64_LEN, end64 = rd64(f + loc + 8);
        if (rd32(f + loc + 4) != 0 || rd32(f + loc + 16) > 1)
            return fc_file_fail(err, errlen, "%s: multi-disk zip archives are not supported", path);
        if (end64 > loc || loc - end64 < END64_LEN || rd32(f + end64) != SIG_END64)
            return fc_file_fail(err, errlen, "%s: damaged zip archive (zip64 end of central directory record)", path);
        if (rd32(f + end64 + 16) != 0 || rd32(f + end64 + 20) != 0 || rd64(f + end64 + 24) != rd64(f + end64 + 32))
            return fc_file_fail(err, errlen, "%s: multi-disk zip archives are not supported", path);
        count = rd64(f + end64 + 32);
        cd_size = rd64(f + end64 + 40);
        cd_off = rd64(f + end64 + 48);
        limit = end64;
    }
    if (cd_off > limit || cd_size > limit - cd_off)
        return fc_file_fail(err, errlen,
                    "%s: damaged or truncated zip archive (central directory of %llu bytes at %llu, file of %llu)",
                    path, (unsigned long long)cd_size, (unsigned long long)cd_off, (unsigned long long)size);
    if (count > cd_size / CENTRAL_LEN || count > (uint64_t)INT_MAX)
        return fc_file_fail(err, errlen, "%s: damaged zip archive (%llu members in a central directory of %llu bytes)", path,
                    (unsigned long long)count, (unsigned long long)cd_size);
    z->members = (fc_npz_member *)calloc(count ? (size_t)count : 1, sizeof *z->members);
    spans = (span *)malloc((count ? (size_t)count : 1) * sizeof *spans);
    if (!z->members || !spans) {
        free(spans);
        return fc_file_fail(err, errlen, "%s: out of memory for %llu members", path, (unsigned long long)count);
    }
    for (at = cd_off, i = 0; i < count; ++i, at += len) {
        rc = read_member(path, f, cd_off, f + at, cd_off + cd_size - at, &z->members[i], &spans[i], &len, err,
                         errlen);
        if (rc > 0)
            fc_file_fail(err, errlen, "%s: damaged or truncated zip archive (central directory entry %llu of %llu)", path,
                 (unsigned long long)i + 1, (unsigned long long)count);
        if (rc != 0) {
            free(spans);
            return -1;
        }
        z->count = (int)i + 1;
    }
    /* members may not share bytes (a hostile archive could make one array alias another) */
    qsort(spans, (size_t)count, sizeof *spans, by_start);
    for (i = 1; i < count; ++i)
        if (spans[i].start < spans[i - 1].end) break;
    at = i < count ? spans[i].start : 0;
    free(spans);
    if (i < count)
        return fc_file_fail(err, errlen, "%s: damaged zip archive (members overlap at %llu)", path, (unsigned long long)at);
    return check_names(z, path, err, errlen);
}

int fc_npz_open(const char *path, fc_npz *z, char *err, size_t errlen) {
    memset(z, 0, sizeof *z);
    if (map_file(path, z, err, errlen) != 0) return -1;
    if (read_archive(path, z, err, errlen) != 0) {
        fc_npz_close(z);
        return -1;
    }
    return 0;
}

int fc_npz_open_npy(const char *path, const char *name, fc_npz *z, char *err, size_t errlen) {
    const char *base = strrchr(path, '/');
    size_t n, offset;
    char q[FC_NPY_QUOTE_LEN];
    memset(z, 0, sizeof *z);
    if (!name) { /* the file's name without its folder and .npy */
        name = base ? base + 1 : path;
        n = strlen(name);
        if (n >= 4 && strcmp(name + n - 4, ".npy") == 0) n -= 4;
    } else {
        n = strlen(name);
    }
    if (n >= sizeof z->members->name)
        return fc_file_fail(err, errlen, "%s: member name '%s' longer than 255 bytes", path, fc_npy_quote(q, name, n));
    if (map_file(path, z, err, errlen) != 0) return -1;
    z->members = (fc_npz_member *)calloc(1, sizeof *z->members);
    if (!z->members) {
        fc_npz_close(z);
        return fc_file_fail(err, errlen, "%s: out of memory", path);
    }
    if (fc_npy_parse(z->map, z->map_bytes, &z->members->array, &offset, path, err, errlen) != 0) {
        fc_npz_close(z);
        return -1;
    }
    memcpy(z->members->name, name, n);
    z->members->name[n] = 0;
    z->members->array.data = (unsigned char *)z->map + offset;
    z->count = 1;
    return 0;
}

const fc_npz_member *fc_npz_find(const fc_npz *z, const char *name) {
    int i;
    for (i = 0; i < z->count; ++i)
        if (strcmp(z->members[i].name, name) == 0) return &z->members[i];
    return NULL;
}

void fc_npz_close(fc_npz *z) {
    if (z->map) munmap(z->map, z->map_bytes);
    free(z->members);
    memset(z, 0, sizeof *z);
}

/* Writing. */

/* FLAG_UTF8 where name has bytes above ASCII and is valid UTF-8 (as strict as Python's decoder: no
 * overlong forms, surrogates or code points above U+10FFFF), else 0: readers take the bytes as
 * code page 437 then. */
static unsigned utf8_flag(const unsigned char *s, size_t n) {
    size_t i = 0, k, more;
    int wide = 0;
    while (i < n) {
        unsigned c = s[i], lo = 0x80, hi = 0xBF;
        if (c < 0x80) {
            i++;
            continue;
        }
        wide = 1;
        if (c >= 0xC2 && c <= 0xDF) {
            more = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            more = 2;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            more = 3;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else {
            return 0;
        }
        if (n - i - 1 < more) return 0;
        for (k = 1; k <= more; ++k) {
            unsigned b = s[i + k];
            if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return 0;
        }
        i += 1 + more;
    }
    return wide ? FLAG_UTF8 : 0;
}

typedef struct {
    uint32_t offset, crc, size; /* local header offset; CRC-32 and size of the .npy */
    unsigned nlen, pad, flags;  /* name length without .npy; local extra field length; zip flags */
} planned;

/* The fields a member's local header and its central directory record share, from "version
 * needed" to the name's length. */
static unsigned char *common_fields(unsigned char *p, const planned *m) {
    p = wr16(p, 20); /* version needed: 2.0 */
    p = wr16(p, m->flags);
    p = wr16(p, 0); /* stored */
    p = wr16(p, 0); /* time */
    p = wr16(p, DOS_DATE_1980);
    p = wr32(p, m->crc);
    p = wr32(p, m->size);
    p = wr32(p, m->size);
    return wr16(p, m->nlen + 4);
}

static int by_entry_name(const void *a, const void *b) {
    return strcmp((*(const fc_npz_entry *const *)a)->name, (*(const fc_npz_entry *const *)b)->name);
}

/* Two entries of one name: -1 with the message, else 0. */
static int check_entry_names(const char *path, const fc_npz_entry *entries, int count, char *err, size_t errlen) {
    const fc_npz_entry **sorted;
    char q[FC_NPY_QUOTE_LEN];
    int i, rc = 0;
    if (count < 2) return 0;
    sorted = (const fc_npz_entry **)malloc((size_t)count * sizeof *sorted);
    if (!sorted) return fc_file_fail(err, errlen, "%s: out of memory", path);
    for (i = 0; i < count; ++i) sorted[i] = &entries[i];
    qsort(sorted, (size_t)count, sizeof *sorted, by_entry_name);
    for (i = 1; i < count && rc == 0; ++i)
        if (strcmp(sorted[i - 1]->name, sorted[i]->name) == 0)
            rc = fc_file_fail(err, errlen, "%s: two entries named '%s'", path,
                      fc_npy_quote(q, sorted[i]->name, strlen(sorted[i]->name)));
    free(sorted);
    return rc;
}

/* Offsets, sizes and CRCs of every member into plan; -1 with the message if an entry is not valid or
 * the archive would need zip64. *cd_off and *cd_size: where the central directory goes. */
static int plan_archive(const char *path, const fc_npz_entry *entries, int count, planned *plan, uint32_t *cd_off,
                        uint32_t *cd_size, char *err, size_t errlen) {
    char header[FC_NPY_HEADER_MAX], q[FC_NPY_QUOTE_LEN];
    uint64_t off = 0, cd = 0;
    int i;
    for (i = 0; i < count; ++i) {
        const fc_npz_entry *e = &entries[i];
        size_t nlen, hlen, nbytes = 0;
        uint64_t head;
        if (!e->name || !e->dtype) return fc_file_fail(err, errlen, "%s: entry %d has no name or no dtype", path, i);
        nlen = strlen(e->name);
        if (nlen > 250)
            return fc_file_fail(err, errlen, "%s: entry '%s': name longer than 250 bytes", path,
                        fc_npy_quote(q, e->name, nlen));
        hlen = (e->rank > 0 && !e->shape) ? 0 : fc_npy_header(header, e->dtype, e->rank, e->shape, &nbytes);
        if (!hlen)
            return fc_file_fail(err, errlen, "%s: entry '%s': bad array description (dtype '%.16s', rank %d)", path,
                        fc_npy_quote(q, e->name, nlen), e->dtype, e->rank);
        if (nbytes && !e->data) return fc_file_fail(err, errlen, "%s: entry '%s' has no data", path, fc_npy_quote(q, e->name, nlen));
        /* pad the local header so the array data (after a 64-byte multiple of .npy header) is aligned */
        head = off + LOCAL_LEN + nlen + 4;
        plan[i].pad = (unsigned)((DATA_ALIGN - head % DATA_ALIGN) % DATA_ALIGN);
        if (plan[i].pad && plan[i].pad < 6) plan[i].pad += DATA_ALIGN; /* room for the field's 6 bytes */
        if (nbytes >= ZIP32_LIMIT || head + plan[i].pad + hlen + nbytes >= ZIP32_LIMIT)
            return fc_file_fail(err, errlen, "%s: too large for an .npz archive without zip64 (entry '%s' ends past 4 GiB)",
                        path, fc_npy_quote(q, e->name, nlen));
        plan[i].offset = (uint32_t)off;
        plan[i].size = (uint32_t)(hlen + nbytes);
        plan[i].nlen = (unsigned)nlen;
        plan[i].flags = utf8_flag((const unsigned char *)e->name, nlen);
        plan[i].crc = (uint32_t)fc_crc32(fc_crc32(0, header, hlen), e->data, nbytes);
        off = head + plan[i].pad + hlen + nbytes;
        cd += CENTRAL_LEN + nlen + 4;
    }
    if (off + cd >= ZIP32_LIMIT)
        return fc_file_fail(err, errlen, "%s: too large for an .npz archive without zip64 (central directory past 4 GiB)",
                    path);
    *cd_off = (uint32_t)off;
    *cd_size = (uint32_t)cd;
    return check_entry_names(path, entries, count, err, errlen);
}

/* The archive planned into fp: 0, or -1 with errno set (or 0 where the stream has no reason). */
static int write_archive(FILE *fp, const fc_npz_entry *entries, int count, const planned *plan, uint32_t cd_off,
                         uint32_t cd_size) {
    static const unsigned char zeros[DATA_ALIGN + 6];
    unsigned char buf[CENTRAL_LEN], *p;
    char header[FC_NPY_HEADER_MAX];
    size_t hlen, nbytes;
    int i, ok = 1;
    for (i = 0; i < count && ok; ++i) {
        const fc_npz_entry *e = &entries[i];
        const planned *m = &plan[i];
        p = common_fields(wr32(buf, SIG_LOCAL), m);
        p = wr16(p, m->pad);
        ok = fwrite(buf, 1, LOCAL_LEN, fp) == LOCAL_LEN && fwrite(e->name, 1, m->nlen, fp) == m->nlen &&
             fwrite(".npy", 1, 4, fp) == 4;
        if (ok && m->pad) {
            p = wr16(buf, EXTRA_ALIGN);
            p = wr16(p, m->pad - 4);
            p = wr16(p, DATA_ALIGN);
            ok = fwrite(buf, 1, 6, fp) == 6 && fwrite(zeros, 1, m->pad - 6, fp) == m->pad - 6;
        }
        hlen = fc_npy_header(header, e->dtype, e->rank, e->shape, &nbytes);
        ok = ok && fwrite(header, 1, hlen, fp) == hlen && (!nbytes || fwrite(e->data, 1, nbytes, fp) == nbytes);
    }
    for (i = 0; i < count && ok; ++i) {
        const planned *m = &plan[i];
        p = common_fields(wr16(wr32(buf, SIG_CENTRAL), 3 << 8 | 20), m); /* made by: Unix, zip 2.0 */
        p = wr16(p, 0); /* no extra field */
        p = wr16(p, 0); /* no comment */
        p = wr16(p, 0); /* disk */
        p = wr16(p, 0); /* internal attributes */
        p = wr32(p, 0100644UL << 16); /* a regular file, rw-r--r-- */
        p = wr32(p, m->offset);
        ok = fwrite(buf, 1, CENTRAL_LEN, fp) == CENTRAL_LEN && fwrite(entries[i].name, 1, m->nlen, fp) == m->nlen &&
             fwrite(".npy", 1, 4, fp) == 4;
    }
    p = wr32(buf, SIG_END);
    p = wr16(p, 0);
    p = wr16(p, 0);
    p = wr16(p, (unsigned)count);
    p = wr16(p, (unsigned)count);
    p = wr32(p, cd_size);
    p = wr32(p, cd_off);
    p = wr16(p, 0);
    ok = ok && fwrite(buf, 1, END_LEN, fp) == END_LEN;
    return ok ? 0 : -1;
}

int fc_npz_save(const char *path, const fc_npz_entry *entries, int count, char *err, size_t errlen) {
    planned *plan;
    uint32_t cd_off = 0, cd_size = 0;
    char *tmp;
    FILE *fp;
    int saved;
    if (count < 0 || (count > 0 && !entries)) return fc_file_fail(err, errlen, "%s: bad entry list", path);
    if ((unsigned)count >= ZIP32_MEMBERS)
        return fc_file_fail(err, errlen, "%s: too large for an .npz archive without zip64 (%d entries, at most %u)", path,
                    count, ZIP32_MEMBERS - 1);
    plan = (planned *)calloc(count ? (size_t)count : 1, sizeof *plan);
    if (!plan) return fc_file_fail(err, errlen, "%s: out of memory", path);
    if (plan_archive(path, entries, count, plan, &cd_off, &cd_size, err, errlen) != 0) {
        free(plan);
        return -1;
    }
    if (fc_file_temp(path, &tmp, &fp, err, errlen) != 0) {
        free(plan);
        return -1;
    }
    errno = 0;
    if (write_archive(fp, entries, count, plan, cd_off, cd_size) != 0) {
        saved = errno;
        fc_file_drop(tmp, fp);
        free(plan);
        return fc_file_fail(err, errlen, "%s: write failed (%s)", path, saved ? strerror(saved) : "stream error");
    }
    free(plan);
    if (fc_file_close(fp, 1, path, err, errlen) != 0) {
        fc_file_drop(tmp, NULL);
        return -1;
    }
    return fc_file_put(tmp, path, err, errlen);
}
