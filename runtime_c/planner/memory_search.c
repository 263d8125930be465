/* The exact search of codegen.memory, in C99 for speed (see `search` in memory/planner.py).
 * memory/exact_search.py holds a Python mirror, `_core_python`, that makes the same decisions:
 * keep the two in step.
 *
 * Decides whether buffers fit under a capacity by a depth-first search over canonical
 * placements: buffers are placed one at a time in nondecreasing (offset, rank) order, each at
 * its lowest free offset (the top of the highest placed buffer it overlaps in time). Every
 * feasible plan can be pushed down into such a form, so the search is exact. Cuts:
 *   - sections: each section is a maximal set of buffers live at once. Whatever is still to be
 *     placed goes at or above the last offset, so the next offset is at most capacity minus the
 *     largest unplaced total of a section; and the unplaced members of a section stack above
 *     the lowest of their lowest offsets, so at least one member must have a lowest offset of
 *     at most capacity minus the section's unplaced total ("low" members, counted per section);
 *   - dominance: no buffer is placed at or above the lowest top that some other unplaced
 *     buffer could reach right now (that one could be moved down into the gap);
 *   - hatless: if the buffer just tried pushed no other buffer up and its subtree failed, the
 *     later candidates fail too (it could sit where it is in any completion);
 *   - decomposition: when no unplaced buffer spans the boundary between two sections any more,
 *     the two sides are solved one after the other, each with ranks recomputed from the
 *     heuristic keys (the largest unplaced section total changes as the search goes).
 * It also skips, before placing it, a buffer that would leave a section with one to four low
 * members without any (a cheap test of what place() would find). The search stops at a node
 * limit or a wall-clock deadline, so it can answer "unknown". Recursion depth is about three
 * frames per buffer (exact_search.py keeps the instances it sends here below 10000 buffers).
 *
 * Inputs are plain arrays prepared by exact_search.py: sizes in alignment units, section ranges,
 * overlap and section-membership lists in CSR form, and the heuristic (key rows, largest first;
 * key -1 is the dynamic section total). Deterministic: every sort key is unique.
 */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MS_FOUND 1
#define MS_NOT_FOUND 0
#define MS_NODE_LIMIT (-1)
#define MS_TIME_LIMIT (-2)
#define MS_NO_MEMORY (-3)
#define MAX_KEYS 4

enum { K_OFF, K_MINOFF, K_TOTAL, K_CUT, K_LOW, K_RANK };

typedef struct { int64_t old; int32_t idx; int32_t kind; } Undo;
typedef struct { int64_t off; int32_t rank; int32_t buf; } Cand;
typedef struct { int64_t key[MAX_KEYS]; int32_t buf; } Keyed;
#define CRIT_LOW 4  /* sections with at most this many low members are checked before placing */
typedef struct { int64_t limit; int32_t x, n, low[CRIT_LOW]; } Crit;

typedef struct {
    int32_t n, nsec, nheur;
    const int64_t *size, *keys;
    const int32_t *slo, *shi, *ov_start, *ov_list, *sec_start, *heur, *sec_list;
    int64_t cap;
    int64_t *off, *minoff, *total, *sol;
    int32_t *cuts, *low, *rank;
    Keyed *keyed;
    Undo *trail;
    int64_t trail_len, trail_cap;
    Cand *cands;
    int64_t cand_top, cand_cap;
    Crit *crits;
    int64_t crit_top, crit_cap;
    int32_t *parts;
    int64_t part_top, part_cap;
    int64_t nodes, node_limit;
    double deadline;
    int use_deadline, oom;
} Solver;

/* Seconds on a clock that runs with the wall (CPU time where POSIX clocks are missing). */
static double now_s(void) {
#if defined(CLOCK_MONOTONIC)
    struct timespec t;
    if (clock_gettime(CLOCK_MONOTONIC, &t) == 0) return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
#endif
    return (double)clock() / CLOCKS_PER_SEC;
}

/* Grows *buf (elements of `elem` bytes) so that it holds at least `need`; 0 on failure. */
static int grow(void **buf, int64_t *cap, int64_t need, size_t elem) {
    int64_t c = *cap;
    void *p;
    if (need <= c) return 1;
    while (c < need) c = c * 2 + 16;
    p = realloc(*buf, (size_t)c * elem);
    if (!p) return 0;
    *buf = p;
    *cap = c;
    return 1;
}

static void push_undo(Solver *s, int32_t kind, int32_t idx, int64_t old) {
    if (s->trail_len == s->trail_cap &&
        !grow((void **)&s->trail, &s->trail_cap, s->trail_len + 1, sizeof(Undo))) {
        s->oom = 1;
        return;
    }
    s->trail[s->trail_len].old = old;
    s->trail[s->trail_len].idx = idx;
    s->trail[s->trail_len].kind = kind;
    s->trail_len++;
}

static void undo_to(Solver *s, int64_t mark) {
    while (s->trail_len > mark) {
        const Undo *u = &s->trail[--s->trail_len];
        switch (u->kind) {
        case K_OFF: s->off[u->idx] = u->old; break;
        case K_MINOFF: s->minoff[u->idx] = u->old; break;
        case K_TOTAL: s->total[u->idx] = u->old; break;
        case K_CUT: s->cuts[u->idx] = (int32_t)u->old; break;
        case K_LOW: s->low[u->idx] = (int32_t)u->old; break;
        default: s->rank[u->idx] = (int32_t)u->old; break;
        }
    }
}

/* Number of unplaced members of section x whose lowest offset is at most cap - total[x]. */
static int32_t count_low(const Solver *s, int32_t x) {
    const int64_t limit = s->cap - s->total[x];
    int32_t j, count = 0;
    for (j = s->sec_start[x]; j < s->sec_start[x + 1]; j++) {
        const int32_t c = s->sec_list[j];
        if (s->off[c] < 0 && s->minoff[c] <= limit) count++;
    }
    return count;
}

/* A buffer moved up from `was` to `top`: in sections [from, to) it may stop being low. */
static void unlow(Solver *s, int64_t was, int64_t top, int32_t from, int32_t to, int *dead) {
    int32_t x;
    for (x = from; x < to; x++) {
        const int64_t limit = s->cap - s->total[x];
        if (was <= limit && top > limit) {
            push_undo(s, K_LOW, x, s->low[x]);
            if (--s->low[x] == 0) *dead = 1;
        }
    }
}

/* Places buffer b at offset o. Sets *dead when some section is left without a low member.
 * Returns how many unplaced buffers had to move up (0: b is "hatless", it hinders nobody).
 * Low counts change in two ways: in b's sections the limit cap - total rises by b's size (b was
 * low there, since o <= cap - total), and in the other sections of a buffer pushed above the
 * limit that buffer stops being low. Only unplaced neighbours of b are visited. */
static int32_t place(Solver *s, int32_t b, int64_t o, int *dead) {
    const int64_t top = o + s->size[b];
    const int32_t blo = s->slo[b], bhi = s->shi[b];
    int64_t below = INT64_MAX, above = INT64_MIN;  /* range of the old limits in b's sections */
    int32_t i, x, raised = 0;
    push_undo(s, K_OFF, b, -1);
    s->off[b] = o;
    s->sol[b] = o;
    for (x = blo; x < bhi; x++) {
        const int64_t limit = s->cap - s->total[x];
        if (limit < below) below = limit;
        if (limit > above) above = limit;
        push_undo(s, K_TOTAL, x, s->total[x]);
        push_undo(s, K_LOW, x, s->low[x]);
        s->total[x] -= s->size[b];
        s->low[x]--;
    }
    for (i = s->ov_start[b]; i < s->ov_start[b + 1]; i++) {
        const int32_t c = s->ov_list[i];
        const int64_t was = s->minoff[c];
        const int32_t a = s->slo[c] > blo ? s->slo[c] : blo, e = s->shi[c] < bhi ? s->shi[c] : bhi;
        if (s->off[c] >= 0) continue;
        /* In b's sections c ends up low iff was <= the new limit (top is below it, as o is
         * below the old one): it turns low where old limit < was <= old limit + size. */
        if (was > below && was <= above + s->size[b]) {
            for (x = a; x < e; x++) {
                const int64_t limit = s->cap - s->total[x];
                s->low[x] += was > limit - s->size[b] && was <= limit;
            }
        }
        if (was >= top) continue;
        push_undo(s, K_MINOFF, c, was);
        s->minoff[c] = top;
        raised++;
        unlow(s, was, top, s->slo[c], a, dead);
        unlow(s, was, top, e, s->shi[c], dead);
        if (*dead) return raised;  /* the caller undoes it all: no need to finish */
    }
    for (x = blo; x < bhi; x++) {
        if (s->low[x] == 0 && s->total[x] > 0) *dead = 1;
    }
    for (x = blo; x + 1 < bhi; x++) {
        push_undo(s, K_CUT, x, s->cuts[x]);
        s->cuts[x]--;
    }
    return raised;
}

static int cand_cmp(const void *pa, const void *pb) {
    const Cand *a = (const Cand *)pa, *b = (const Cand *)pb;
    if (a->off != b->off) return a->off < b->off ? -1 : 1;
    return (a->rank > b->rank) - (a->rank < b->rank);
}

static int keyed_cmp(const void *pa, const void *pb) {
    const Keyed *a = (const Keyed *)pa, *b = (const Keyed *)pb;
    int h;
    for (h = 0; h < MAX_KEYS; h++) {
        if (a->key[h] != b->key[h]) return a->key[h] > b->key[h] ? -1 : 1;
    }
    return (a->buf > b->buf) - (a->buf < b->buf);
}

/* Ranks parts[base..base+cnt) by the heuristic keys, largest first, then by index. */
static void rerank(Solver *s, int64_t base, int32_t cnt) {
    int32_t i, h, x;
    for (i = 0; i < cnt; i++) {
        const int32_t b = s->parts[base + i];
        s->keyed[i].buf = b;
        for (h = 0; h < MAX_KEYS; h++) {
            int64_t v = 0;
            if (h < s->nheur && s->heur[h] < 0) {
                for (x = s->slo[b]; x < s->shi[b]; x++) {
                    if (s->total[x] > v) v = s->total[x];
                }
            } else if (h < s->nheur) {
                v = s->keys[(int64_t)s->heur[h] * s->n + b];
            }
            s->keyed[i].key[h] = v;
        }
    }
    qsort(s->keyed, (size_t)cnt, sizeof(Keyed), keyed_cmp);
    for (i = 0; i < cnt; i++) {
        const int32_t b = s->keyed[i].buf;
        push_undo(s, K_RANK, b, s->rank[b]);
        s->rank[b] = i;
    }
}

static int search(Solver *s, int64_t pbase, int32_t k, int32_t lo, int32_t hi, int64_t last_off,
                  int32_t last_rank);

/* Lists the sections of [lo, hi) that have at most CRIT_LOW low members, with those members. */
static int32_t critical_sections(Solver *s, int64_t base, int32_t lo, int32_t hi) {
    int32_t x, j, n = 0;
    for (x = lo; x < hi; x++) {
        Crit *e;
        if (s->low[x] > CRIT_LOW) continue;
        e = &s->crits[base + n++];
        e->limit = s->cap - s->total[x];
        e->x = x;
        e->n = 0;
        for (j = s->sec_start[x]; j < s->sec_start[x + 1] && e->n < s->low[x]; j++) {
            const int32_t c = s->sec_list[j];
            if (s->off[c] < 0 && s->minoff[c] <= e->limit) e->low[e->n++] = c;
        }
    }
    return n;
}

/* True when placing b with its top at `top` would raise every low member of some section
 * outside b's lifetime above that section's limit: place() would report it dead. Such a b
 * always pushes a buffer up, so skipping it keeps the hatless rule exact. */
static int doomed(const Solver *s, int64_t base, int32_t ncrit, int32_t b, int64_t top) {
    const int32_t blo = s->slo[b], bhi = s->shi[b];
    int32_t i, j;
    for (i = 0; i < ncrit; i++) {
        const Crit *e = &s->crits[base + i];
        if (e->limit >= top || (e->x >= blo && e->x < bhi)) continue;
        for (j = 0; j < e->n; j++) {
            const int32_t c = e->low[j];
            if (s->slo[c] >= bhi || blo >= s->shi[c]) break;  /* c does not meet b: stays low */
        }
        if (j == e->n) return 1;
    }
    return 0;
}

/* Solves the unplaced buffers of parts[pbase..pbase+k) that touch sections [lo, hi), ranked
 * afresh; all of them go at or above last_off. */
static int solve_range(Solver *s, int64_t pbase, int32_t k, int32_t lo, int32_t hi, int64_t last_off) {
    const int64_t base = s->part_top, mark = s->trail_len;
    int32_t i, cnt = 0;
    int r;
    if (!grow((void **)&s->parts, &s->part_cap, base + k, sizeof(int32_t))) return MS_NO_MEMORY;
    for (i = 0; i < k; i++) {
        const int32_t b = s->parts[pbase + i];
        if (s->off[b] < 0 && s->slo[b] < hi && s->shi[b] > lo) s->parts[base + cnt++] = b;
    }
    if (cnt == 0) return MS_FOUND;
    s->part_top = base + cnt;
    rerank(s, base, cnt);
    r = s->oom ? MS_NO_MEMORY : search(s, base, cnt, lo, hi, last_off, -1);
    undo_to(s, mark);
    s->part_top = base;
    return r;
}

/* After placing c.buf: split [lo, hi) at boundaries no unplaced buffer spans, or go deeper. */
static int descend(Solver *s, int64_t pbase, int32_t k, int32_t lo, int32_t hi, Cand c) {
    const int32_t b = c.buf;
    int32_t x, start = lo;
    int split = 0, r;
    for (x = s->slo[b]; x + 1 < s->shi[b]; x++) {
        if (s->cuts[x] == 0) {
            split = 1;
            break;
        }
    }
    if (!split) return search(s, pbase, k, lo, hi, c.off, c.rank);
    for (x = s->slo[b]; x + 1 < s->shi[b]; x++) {
        if (s->cuts[x] != 0) continue;
        r = solve_range(s, pbase, k, start, x + 1, c.off);
        if (r != MS_FOUND) return r;
        start = x + 1;
    }
    return solve_range(s, pbase, k, start, hi, c.off);
}

static int search(Solver *s, int64_t pbase, int32_t k, int32_t lo, int32_t hi, int64_t last_off,
                  int32_t last_rank) {
    int64_t min_top = INT64_MAX, max_off = INT64_MAX, cbase, crbase;
    int32_t i, j, x, left = 0, nc = 0, ncrit;
    int r = MS_NOT_FOUND;
    if (s->oom) return MS_NO_MEMORY;
    if (++s->nodes > s->node_limit) return MS_NODE_LIMIT;
    if (s->use_deadline && (s->nodes & 1023) == 0 && now_s() > s->deadline) return MS_TIME_LIMIT;
    for (i = 0; i < k; i++) {
        const int32_t b = s->parts[pbase + i];
        if (s->off[b] >= 0) continue;
        left++;
        if (s->minoff[b] + s->size[b] < min_top) min_top = s->minoff[b] + s->size[b];
    }
    if (left == 0) return MS_FOUND;
    for (x = lo; x < hi; x++) {
        if (s->cap - s->total[x] < max_off) max_off = s->cap - s->total[x];
    }
    cbase = s->cand_top;
    if (!grow((void **)&s->cands, &s->cand_cap, cbase + left, sizeof(Cand))) return MS_NO_MEMORY;
    for (i = 0; i < k; i++) {
        const int32_t b = s->parts[pbase + i];
        const int64_t m = s->minoff[b];
        if (s->off[b] >= 0 || m >= min_top || m > max_off) continue;
        if (m < last_off || (m == last_off && s->rank[b] < last_rank)) continue;
        s->cands[cbase + nc].off = m;
        s->cands[cbase + nc].rank = s->rank[b];
        s->cands[cbase + nc].buf = b;
        nc++;
    }
    s->cand_top = cbase + nc;
    qsort(s->cands + cbase, (size_t)nc, sizeof(Cand), cand_cmp);
    crbase = s->crit_top;
    if (!grow((void **)&s->crits, &s->crit_cap, crbase + (hi - lo), sizeof(Crit))) return MS_NO_MEMORY;
    ncrit = nc > 0 ? critical_sections(s, crbase, lo, hi) : 0;
    s->crit_top = crbase + ncrit;
    for (j = 0; j < nc; j++) {
        const Cand c = s->cands[cbase + j];  /* a copy: the pool may move while we recurse */
        const int64_t mark = s->trail_len;
        int dead = 0;
        int32_t raised;
        if (doomed(s, crbase, ncrit, c.buf, c.off + s->size[c.buf])) continue;
        raised = place(s, c.buf, c.off, &dead);
        if (!dead && !s->oom) r = descend(s, pbase, k, lo, hi, c);
        undo_to(s, mark);
        if (s->oom) r = MS_NO_MEMORY;
        if (r != MS_NOT_FOUND || raised == 0) break;
    }
    s->cand_top = cbase;
    s->crit_top = crbase;
    return r;
}

/* Entry point. Returns MS_FOUND (offsets in out_offsets), MS_NOT_FOUND (proven infeasible),
 * MS_NODE_LIMIT, MS_TIME_LIMIT or MS_NO_MEMORY; *out_nodes gets the number of nodes visited.
 * Buffers have size > 0 and 0 <= slo < shi <= nsec. Row h of the keys is keys[h * n .. h * n + n);
 * heur lists up to MAX_KEYS row indices (-1: the dynamic section total). time_limit_s <= 0: none. */
int flowc_mem_search(int32_t n, int32_t nsec, const int64_t *size, const int32_t *slo,
                     const int32_t *shi, const int32_t *ov_start, const int32_t *ov_list,
                     const int32_t *sec_start, const int32_t *sec_list, const int64_t *keys,
                     const int32_t *heur, int32_t nheur, int64_t capacity, int64_t node_limit,
                     double time_limit_s, int64_t *out_offsets, int64_t *out_nodes) {
    Solver s;
    int32_t i, x, start = 0;
    int r = MS_FOUND;
    memset(&s, 0, sizeof s);
    s.n = n;
    s.nsec = nsec;
    s.nheur = nheur < MAX_KEYS ? nheur : MAX_KEYS;
    s.size = size;
    s.keys = keys;
    s.slo = slo;
    s.shi = shi;
    s.ov_start = ov_start;
    s.ov_list = ov_list;
    s.sec_start = sec_start;
    s.sec_list = sec_list;
    s.heur = heur;
    s.cap = capacity;
    s.node_limit = node_limit;
    s.use_deadline = time_limit_s > 0;
    if (s.use_deadline) s.deadline = now_s() + time_limit_s;
    s.off = malloc(sizeof(int64_t) * (size_t)(n + 1));
    s.minoff = calloc((size_t)n + 1, sizeof(int64_t));
    s.sol = calloc((size_t)n + 1, sizeof(int64_t));
    s.total = calloc((size_t)nsec + 1, sizeof(int64_t));
    s.cuts = calloc((size_t)nsec + 1, sizeof(int32_t));
    s.low = calloc((size_t)nsec + 1, sizeof(int32_t));
    s.rank = calloc((size_t)n + 1, sizeof(int32_t));
    s.keyed = malloc(sizeof(Keyed) * (size_t)(n + 1));
    if (!s.off || !s.minoff || !s.sol || !s.total || !s.cuts || !s.low || !s.rank || !s.keyed ||
        !grow((void **)&s.parts, &s.part_cap, n, sizeof(int32_t))) {
        r = MS_NO_MEMORY;
        goto done;
    }
    for (i = 0; i < n; i++) {
        s.off[i] = -1;
        s.parts[i] = i;
        for (x = slo[i]; x < shi[i]; x++) s.total[x] += size[i];
        for (x = slo[i]; x + 1 < shi[i]; x++) s.cuts[x]++;
    }
    s.part_top = n;
    for (x = 0; x < nsec; x++) {
        s.low[x] = count_low(&s, x);
        if (s.low[x] == 0) r = MS_NOT_FOUND;  /* a section holds more than the capacity */
    }
    /* Time ranges that no buffer joins are independent from the start. */
    for (x = 0; x + 1 < nsec && r == MS_FOUND; x++) {
        if (s.cuts[x] != 0) continue;
        r = solve_range(&s, 0, n, start, x + 1, 0);
        start = x + 1;
    }
    if (r == MS_FOUND && nsec > 0) r = solve_range(&s, 0, n, start, nsec, 0);
    if (r == MS_FOUND) memcpy(out_offsets, s.sol, sizeof(int64_t) * (size_t)n);
done:
    *out_nodes = s.nodes;
    free(s.off);
    free(s.minoff);
    free(s.sol);
    free(s.total);
    free(s.cuts);
    free(s.low);
    free(s.rank);
    free(s.keyed);
    free(s.trail);
    free(s.cands);
    free(s.crits);
    free(s.parts);
    return r;
}
