/* Checkpoints of a compiled model's state (see checkpoint.h). */
#define _POSIX_C_SOURCE 200809L
#include "checkpoint.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"
#include "npz.h"

#define HEADER "__flowc__"
#define FORMAT 1
#define MAX_VARS 65000

/* A name from a model file inside a message: printable ASCII as is, other bytes as \xNN, bounded. */
static void quoted(char *dst, size_t len, const char *src) {
    size_t n = 0;
    for (; *src && n + 5 < len && n < 120; ++src) {
        unsigned char c = (unsigned char)*src;
        if (c >= 32 && c < 127 && c != '\\' && c != '\'')
            dst[n++] = (char)c;
        else
            n += (size_t)snprintf(dst + n, len - n, "\\x%02x", c);
    }
    dst[n] = 0;
}

/* The integer after "key": in a JSON text (no nesting: the header is flat), or -1. */
static long json_long(const unsigned char *text, long n, const char *key) {
    char want[32];
    long i, klen = (long)snprintf(want, sizeof want, "\"%s\"", key);
    for (i = 0; i + klen <= n; ++i) {
        if (memcmp(text + i, want, (size_t)klen) != 0) continue;
        i += klen;
        while (i < n && (text[i] == ' ' || text[i] == ':')) ++i;
        if (i < n && text[i] >= '0' && text[i] <= '9') {
            long v = 0;
            while (i < n && text[i] >= '0' && text[i] <= '9' && v <= (LONG_MAX - 9) / 10) v = v * 10 + (text[i++] - '0');
            return v;
        }
        return -1;
    }
    return -1;
}

int fc_ck_load(const char *path, const fc_ck_var *vars, int count, void *state, int exact, long *step,
               const char *model, char *err, size_t errlen) {
    fc_npz z;
    const fc_npz_member *h;
    char a[300], b[300], q[600];
    int i, j;
    memset(&z, 0, sizeof z);
    *step = -1;
    if (fc_npz_open(path, &z, err, errlen) != 0) return -1;
    h = fc_npz_find(&z, HEADER);
    if (!h || strcmp(h->array.dtype, "uint8") != 0 || h->array.rank != 1) {
        snprintf(err, errlen, "%s is not a flowc checkpoint (no '" HEADER "' entry)", path);
        fc_npz_close(&z);
        return -1;
    }
    if (json_long((const unsigned char *)h->array.data, h->array.size, "format") != FORMAT) {
        snprintf(err, errlen, "checkpoint %s: its format is not %d (the one this binary reads)", path, FORMAT);
        fc_npz_close(&z);
        return -1;
    }
    *step = json_long((const unsigned char *)h->array.data, h->array.size, "step");
    for (i = 0; i < count; ++i) { /* check everything before changing anything */
        const fc_npz_member *m = fc_npz_find(&z, vars[i].name);
        int same = m && strcmp(m->array.dtype, vars[i].dtype) == 0 && m->array.rank == vars[i].rank;
        for (j = 0; same && j < vars[i].rank; ++j) same = m->array.shape[j] == vars[i].shape[j];
        quoted(q, sizeof q, vars[i].name);
        if (!m) {
            snprintf(err, errlen, "checkpoint %s has no variable '%s' of model '%s'", path, q, model);
            fc_npz_close(&z);
            return -1;
        }
        if (!same) {
            fc_npy_describe(a, sizeof a, m->array.dtype, m->array.rank, m->array.shape, NULL);
            fc_npy_describe(b, sizeof b, vars[i].dtype, vars[i].rank, vars[i].shape, NULL);
            snprintf(err, errlen, "checkpoint %s: variable '%s' is %s; model '%s' has %s", path, q, a, model, b);
            fc_npz_close(&z);
            return -1;
        }
    }
    for (i = 0; exact && i < z.count; ++i) {
        int known = strcmp(z.members[i].name, HEADER) == 0;
        for (j = 0; !known && j < count; ++j) known = strcmp(z.members[i].name, vars[j].name) == 0;
        if (!known) {
            quoted(q, sizeof q, z.members[i].name);
            snprintf(err, errlen, "checkpoint %s has variable '%s', which model '%s' does not", path, q, model);
            fc_npz_close(&z);
            return -1;
        }
    }
    for (i = 0; i < count; ++i) {
        const fc_npz_member *m = fc_npz_find(&z, vars[i].name);
        memcpy((unsigned char *)state + vars[i].offset, m->array.data, m->array.nbytes);
    }
    fc_npz_close(&z);
    return 0;
}

int fc_ck_save(const char *path, const fc_ck_var *vars, int count, const void *state, const char *model,
               const char *hash, long step, char *err, size_t errlen) {
    char header[512], num[32];
    long hlen;
    fc_npz_entry *e;
    int i, status;
    if (count < 0 || count > MAX_VARS) {
        snprintf(err, errlen, "cannot write checkpoint %s: %d variables", path, count);
        return -1;
    }
    if (step >= 0)
        snprintf(num, sizeof num, "%ld", step);
    else
        snprintf(num, sizeof num, "null");
    /* model and hash are C identifiers and hex digits (the generated driver's own): no escaping */
    snprintf(header, sizeof header, "{\"format\": %d, \"hash\": \"%s\", \"model\": \"%s\", \"step\": %s}", FORMAT,
             hash, model, num);
    hlen = (long)strlen(header);
    e = (fc_npz_entry *)calloc((size_t)count + 1, sizeof *e);
    if (!e) {
        snprintf(err, errlen, "cannot write checkpoint %s: out of memory", path);
        return -1;
    }
    e[0].name = HEADER;
    e[0].dtype = "uint8";
    e[0].rank = 1;
    e[0].shape = &hlen;
    e[0].data = header;
    for (i = 0; i < count; ++i) {
        e[i + 1].name = vars[i].name;
        e[i + 1].dtype = vars[i].dtype;
        e[i + 1].rank = vars[i].rank;
        e[i + 1].shape = vars[i].shape;
        e[i + 1].data = (const unsigned char *)state + vars[i].offset;
    }
    status = fc_npz_save(path, e, count + 1, err, errlen);
    free(e);
    return status;
}
