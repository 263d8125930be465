/* Thread pool: see pool.h. */
#define _POSIX_C_SOURCE 200809L
#include "pool.h"

#include <string.h>

/* Take and run parts until none are left; called with the lock held, returns with it held. */
static void drain(fc_pool *p) {
    while (p->next < p->parts) {
        int part = p->next++;
        fc_task_fn fn = p->fn;
        void *ctx = p->ctx;
        int parts = p->parts;
        pthread_mutex_unlock(&p->mu);
        fn(ctx, part, parts);
        pthread_mutex_lock(&p->mu);
        if (--p->remaining == 0) pthread_cond_broadcast(&p->done);
    }
}

static void *worker(void *arg) {
    fc_pool *p = (fc_pool *)arg;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->generation == seen) pthread_cond_wait(&p->wake, &p->mu);
        if (p->stop) break;
        seen = p->generation;
        drain(p);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int fc_pool_start(fc_pool *p, int threads) {
    int i;
    memset(p, 0, sizeof *p);
    p->threads = 1;
    if (threads < 1 || threads > FC_POOL_MAX_THREADS) return -1;
    if (pthread_mutex_init(&p->mu, NULL) || pthread_cond_init(&p->wake, NULL) || pthread_cond_init(&p->done, NULL))
        return -1;
    for (i = 0; i < threads - 1; ++i) {
        if (pthread_create(&p->workers[i], NULL, worker, p) != 0) break;
        p->started++;
    }
    p->threads = p->started + 1;
    return p->started == threads - 1 ? 0 : -1;
}

void fc_pool_stop(fc_pool *p) {
    int i;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (i = 0; i < p->started; ++i) pthread_join(p->workers[i], NULL);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
    p->started = 0;
    p->threads = 1;
}

void fc_pool_run(fc_pool *p, fc_task_fn fn, void *ctx, int parts) {
    int i;
    if (!p || p->threads <= 1 || parts <= 1) {
        for (i = 0; i < parts; ++i) fn(ctx, i, parts);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->parts = parts;
    p->next = 0;
    p->remaining = parts;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    drain(p);
    while (p->remaining > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
