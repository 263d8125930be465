/* A small thread pool for models built with --threads N (POSIX threads).
 *
 * The pool lives in memory the caller provides (no malloc); its workers sleep between runs.
 * fc_pool_run splits one step into `parts` independent pieces: the calling thread works on
 * them too, and the call returns when all are done. With a NULL pool, or one thread, the
 * parts run in order on the calling thread.
 */
#ifndef FC_POOL_H
#define FC_POOL_H

#include <pthread.h>

#define FC_POOL_MAX_THREADS 64

typedef void (*fc_task_fn)(void *ctx, int part, int parts);

typedef struct fc_pool {
    int threads; /* workers + the calling thread */
    int started; /* workers actually running */
    pthread_t workers[FC_POOL_MAX_THREADS];
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    fc_task_fn fn;
    void *ctx;
    int parts, next, stop;
    unsigned long remaining, generation; /* also polled while spinning (threadpool.c) */
} fc_pool;

/* Start threads - 1 workers. Returns 0, or -1 if threads is out of range or a thread could
 * not start (the pool then runs with the workers that did). */
int fc_pool_start(fc_pool *p, int threads);

/* Stop and join the workers. */
void fc_pool_stop(fc_pool *p);

/* Run fn(ctx, part, parts) for every part, spread over the pool's threads. */
void fc_pool_run(fc_pool *p, fc_task_fn fn, void *ctx, int parts);

#endif /* FC_POOL_H */
