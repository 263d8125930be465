/* The exact search of codegen.memory, in C99 for speed (see `search` in memory.py).
 *
 * Decides whether buffers fit under a capacity by a depth-first search over canonical
 * placements: buffers are placed one at a time in nondecreasing (offset, rank) order, each at
 * its lowest free offset (the top of the highest placed buffer it overlaps in time). Every
 * feasible plan can be pushed down into such a form, so the search is exact; the cuts are:
 *   - sections: each section is a maximal set of buffers live at once; its floor is the lowest
 *     offset a still unplaced member can take, and floor + (sum of unplaced member sizes) must
 *     stay within the capacity (a per-time-slice lower bound);
 *   - dominance: no buffer is placed at or above the lowest top that some other unplaced
 *     buffer could reach right now (that one could be moved down into the gap);
 *   - decomposition: when no unplaced buffer spans the boundary between two sections any more,
 *     the two sides are solved independently, one after the other.
 * The search stops at a node budget or a CPU-time deadline, so it can return "unknown".
 *
 * Inputs are plain arrays prepared by memory.py (sizes in alignment units, section ranges,
 * overlap and section-membership lists in CSR form, a rank per buffer for tie-breaking).
 * Everything is deterministic: qsort keys are unique and time only stops the search.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MS_FOUND 1
#define MS_NOT_FOUND 0
#define MS_NODE_LIMIT (-1)
#define MS_TIME_LIMIT (-2)
#define MS_NO_MEMORY (-3)

enum { K_OFF, K_MINOFF, K_FLOOR, K_TOTAL, K_CUT, K_RANK };
#define MAX_HEUR 4

typedef struct { int64_t old; int32_t idx; int32_t kind; } Undo;
typedef struct { int64_t off; int32_t rank; int32_t buf; } Cand;
typedef struct { int64_t key[MAX_HEUR]; int32_t buf; } Keyed;

typedef struct {
    int32_t n, nsec;
    const int64_t *size;
    const int32_t *slo, *shi, *ov_start, *ov_list, *sec_start, *sec_list;
    int32_t *rank;
    const int64_t *keys;
    const int32_t *heur;
    int32_t nheur, dynamic;
    Keyed *kbuf;
    int64_t cap;
    int64_t *off, *minoff, *floor_, *total, *sol;
    int32_t *cuts, *affected;
    uint32_t *stamp;
    uint32_t gen;
    Undo *trail;
    int64_t trail_len, trail_cap;
    Cand *cands;
    int64_t cand_top, cand_cap;
    int32_t *parts;
    int64_t part_top, part_cap;
    int64_t nodes, node_limit;
    clock_t deadline;
    int use_deadline, oom;
} Solver;

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
        case K_FLOOR: s->floor_[u->idx] = u->old; break;
        case K_TOTAL: s->total[u->idx] = u->old; break;
        case K_CUT: s->cuts[u->idx] = (int32_t)u->old; break;
        default: s->rank[u->idx] = (int32_t)u->old; break;
        }
    }
}

/* Places buffer b at offset o and updates lowest offsets, section floors, totals and cuts.
 * Returns how many unplaced buffers had to move up (0: b is "hatless", it hinders nobody). */
static int32_t place(Solver *s, int32_t b, int64_t o) {
    const int64_t top = o + s->size[b];
    int32_t i, x, naff = 0, raised = 0;
    if (++s->gen == 0) {  /* wrapped: clear the stamps so old marks cannot match */
        memset(s->stamp, 0, (size_t)s->nsec * sizeof *s->stamp);
        s->gen = 1;
    }
    push_undo(s, K_OFF, b, -1);
    s->off[b] = o;
    s->sol[b] = o;
    for (i = s->ov_start[b]; i < s->ov_start[b + 1]; i++) {
        const int32_t c = s->ov_list[i];
        if (s->off[c] >= 0 || s->minoff[c] >= top) continue;
        push_undo(s, K_MINOFF, c, s->minoff[c]);
        s->minoff[c] = top;
        raised++;
        for (x = s->slo[c]; x < s->shi[c]; x++) {
            if (s->stamp[x] != s->gen) {
                s->stamp[x] = s->gen;
                s->affected[naff++] = x;
            }
        }
    }
    for (x = s->slo[b]; x < s->shi[b]; x++) {
        if (s->floor_[x] < top) {
            push_undo(s, K_FLOOR, x, s->floor_[x]);
            s->floor_[x] = top;
        }
        push_undo(s, K_TOTAL, x, s->total[x]);
        s->total[x] -= s->size[b];
    }
    /* A section's floor is at least the lowest offset any of its unplaced members can take. */
    for (i = 0; i < naff; i++) {
        int64_t lowest = INT64_MAX;
        int32_t j;
        x = s->affected[i];
        for (j = s->sec_start[x]; j < s->sec_start[x + 1]; j++) {
            const int32_t c = s->sec_list[j];
            if (s->off[c] < 0 && s->minoff[c] < lowest) lowest = s->minoff[c];
        }
        if (lowest != INT64_MAX && s->floor_[x] < lowest) {
            push_undo(s, K_FLOOR, x, s->floor_[x]);
            s->floor_[x] = lowest;
        }
    }
    for (x = s->slo[b]; x + 1 < s->shi[b]; x++) {
        push_undo(s, K_CUT, x, s->cuts[x]);
        s->cuts[x]--;
    }
    return raised;
}

/* Every section in [lo, hi) must still fit: max(floor, o) + unplaced sizes <= capacity. */
static int sections_fit(const Solver *s, int32_t lo, int32_t hi, int64_t o) {
    int32_t x;
    for (x = lo; x < hi; x++) {
        const int64_t f = s->floor_[x] > o ? s->floor_[x] : o;
        if (f + s->total[x] > s->cap) return 0;
    }
    return 1;
}

static int cand_cmp(const void *pa, const void *pb) {
    const Cand *a = (const Cand *)pa, *b = (const Cand *)pb;
    if (a->off != b->off) return a->off < b->off ? -1 : 1;
    return (a->rank > b->rank) - (a->rank < b->rank);
}

static int search(Solver *s, int64_t pbase, int32_t k, int32_t lo, int32_t hi, int64_t last_off,
                  int32_t last_rank);

static int keyed_cmp(const void *pa, const void *pb) {
    const Keyed *a = (const Keyed *)pa, *b = (const Keyed *)pb;
    int h;
    for (h = 0; h < MAX_HEUR; h++) {
        if (a->key[h] != b->key[h]) return a->key[h] > b->key[h] ? -1 : 1;
    }
    return (a->buf > b->buf) - (a->buf < b->buf);
}

/* Ranks the buffers parts[base..base+cnt) by the heuristic keys, largest first; key -1 is the
 * largest current section total (unplaced bytes) over the buffer's sections. */
static void rerank(Solver *s, int64_t base, int32_t cnt) {
    int32_t i, h, x;
    for (i = 0; i < cnt; i++) {
        const int32_t b = s->parts[base + i];
        Keyed *kb = &s->kbuf[i];
        kb->buf = b;
        for (h = 0; h < MAX_HEUR; h++) {
            int64_t v = 0;
            if (h < s->nheur && s->heur[h] < 0) {
                for (x = s->slo[b]; x < s->shi[b]; x++) if (s->total[x] > v) v = s->total[x];
            } else if (h < s->nheur) {
                v = s->keys[(int64_t)s->heur[h] * s->n + b];
            }
            kb->key[h] = v;
        }
    }
    qsort(s->kbuf, (size_t)cnt, sizeof(Keyed), keyed_cmp);
    for (i = 0; i < cnt; i++) {
        const int32_t b = s->kbuf[i].buf;
        push_undo(s, K_RANK, b, s->rank[b]);
        s->rank[b] = i;
    }
}

/* Solves the unplaced buffers of parts[pbase..pbase+k) that touch sections [lo, hi). */
static int solve_range(Solver *s, int64_t pbase, int32_t k, int32_t lo, int32_t hi, int64_t last_off,
                       int32_t last_rank) {
    const int64_t base = s->part_top;
    int32_t i, cnt = 0;
    int r;
    if (!grow((void **)&s->parts, &s->part_cap, base + k, sizeof(int32_t))) return MS_NO_MEMORY;
    for (i = 0; i < k; i++) {
        const int32_t b = s->parts[pbase + i];
        if (s->off[b] < 0 && s->slo[b] < hi && s->shi[b] > lo) s->parts[base + cnt++] = b;
    }
    if (cnt == 0) return MS_FOUND;
    s->part_top = base + cnt;
    if (s->dynamic || last_rank < 0) {
        const int64_t mark = s->trail_len;
        rerank(s, base, cnt);
        r = search(s, base, cnt, lo, hi, last_off, -1);
        undo_to(s, mark);
    } else {
        r = search(s, base, cnt, lo, hi, last_off, last_rank);
    }
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
        r = solve_range(s, pbase, k, start, x + 1, c.off, c.rank);
        if (r != MS_FOUND) return r;
        start = x + 1;
    }
    return solve_range(s, pbase, k, start, hi, c.off, c.rank);
}

static int search(Solver *s, int64_t pbase, int32_t k, int32_t lo, int32_t hi, int64_t last_off,
                  int32_t last_rank) {
    int64_t min_top = INT64_MAX, max_off = s->cap, cbase;
    int32_t i, j, x, left = 0, nc = 0;
    int r = MS_NOT_FOUND;
    if (s->oom) return MS_NO_MEMORY;
    if (++s->nodes > s->node_limit) return MS_NODE_LIMIT;
    if (s->use_deadline && (s->nodes & 1023) == 0 && clock() > s->deadline) return MS_TIME_LIMIT;
    for (i = 0; i < k; i++) {
        const int32_t b = s->parts[pbase + i];
        if (s->off[b] >= 0) continue;
        left++;
        if (s->minoff[b] + s->size[b] < min_top) min_top = s->minoff[b] + s->size[b];
    }
    if (left == 0) return MS_FOUND;
    /* Everything still to place goes at or above the next offset, so a section with `total`
     * bytes to place caps that offset at cap - total: later candidates fail sections_fit. */
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
    for (j = 0; j < nc; j++) {
        const Cand c = s->cands[cbase + j];  /* copy: the pool may move while we recurse */
        const int64_t mark = s->trail_len;
        const int32_t raised = place(s, c.buf, c.off);
        if (!s->oom && sections_fit(s, lo, hi, c.off)) r = descend(s, pbase, k, lo, hi, c);
        undo_to(s, mark);
        if (s->oom) r = MS_NO_MEMORY;
        /* A hatless buffer could sit at c.off in any completion, so a plan that places a later
         * candidate first is not canonical: if c failed, they all fail. */
        if (r != MS_NOT_FOUND || raised == 0) break;
    }
    s->cand_top = cbase;
    return r;
}

/* Entry point. Returns MS_FOUND (offsets in out_offsets), MS_NOT_FOUND (proven infeasible),
 * MS_NODE_LIMIT, MS_TIME_LIMIT or MS_NO_MEMORY; *out_nodes gets the number of nodes visited.
 * time_limit_s <= 0 means no deadline. Buffers have size > 0 and 0 <= slo < shi <= nsec. */
int flowc_mem_search(int32_t n, int32_t nsec, const int64_t *size, const int32_t *slo,
                     const int32_t *shi, const int64_t *keys, const int32_t *heur, int32_t nheur,
                     int32_t dynamic, const int32_t *ov_start,
                     const int32_t *ov_list, const int32_t *sec_start, const int32_t *sec_list,
                     int64_t capacity, int64_t node_limit, double time_limit_s,
                     int64_t *out_offsets, int64_t *out_nodes) {
    Solver s;
    int32_t i, x, start = 0;
    int r = MS_FOUND;
    memset(&s, 0, sizeof s);
    s.n = n;
    s.nsec = nsec;
    s.size = size;
    s.slo = slo;
    s.shi = shi;
    s.keys = keys;
    s.heur = heur;
    s.nheur = nheur < MAX_HEUR ? nheur : MAX_HEUR;
    s.dynamic = dynamic;
    s.rank = calloc((size_t)n + 1, sizeof(int32_t));
    s.kbuf = malloc(sizeof(Keyed) * (size_t)(n + 1));
    s.ov_start = ov_start;
    s.ov_list = ov_list;
    s.sec_start = sec_start;
    s.sec_list = sec_list;
    s.cap = capacity;
    s.node_limit = node_limit;
    s.use_deadline = time_limit_s > 0;
    if (s.use_deadline) s.deadline = clock() + (clock_t)(time_limit_s * CLOCKS_PER_SEC);
    s.off = malloc(sizeof(int64_t) * (size_t)(n + 1));
    s.minoff = calloc((size_t)n + 1, sizeof(int64_t));
    s.sol = calloc((size_t)n + 1, sizeof(int64_t));
    s.floor_ = calloc((size_t)nsec + 1, sizeof(int64_t));
    s.total = calloc((size_t)nsec + 1, sizeof(int64_t));
    s.cuts = calloc((size_t)nsec + 1, sizeof(int32_t));
    s.affected = malloc(sizeof(int32_t) * (size_t)(nsec + 1));
    s.stamp = calloc((size_t)nsec + 1, sizeof(uint32_t));
    if (!s.rank || !s.kbuf || !s.off || !s.minoff || !s.sol || !s.floor_ || !s.total || !s.cuts || !s.affected || !s.stamp ||
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
    /* Time ranges that no buffer joins are independent from the start. */
    for (x = 0; x + 1 < nsec && r == MS_FOUND; x++) {
        if (s.cuts[x] != 0) continue;
        r = solve_range(&s, 0, n, start, x + 1, 0, -1);
        start = x + 1;
    }
    if (r == MS_FOUND && nsec > 0) r = solve_range(&s, 0, n, start, nsec, 0, -1);
    if (r == MS_FOUND) memcpy(out_offsets, s.sol, sizeof(int64_t) * (size_t)n);
done:
    *out_nodes = s.nodes;
    free(s.off);
    free(s.minoff);
    free(s.sol);
    free(s.floor_);
    free(s.total);
    free(s.cuts);
    free(s.affected);
    free(s.stamp);
    free(s.trail);
    free(s.cands);
    free(s.parts);
    free(s.rank);
    free(s.kbuf);
    return r;
}
