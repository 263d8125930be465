/* Thread pool: see threadpool.h. */
#define _POSIX_C_SOURCE 200809L
#include "threadpool.h"

#include <signal.h>
#include <string.h>

/* Waking a sleeping thread costs tens of microseconds, longer than many steps take, so with
 * GNU C a waiting thread first spins a while (FC_POOL_SPIN polls) on the counter it waits for.
 * The counters are written with atomic builtins (under the lock) so the polls are race-free. */
#if defined(__GNUC__) || defined(__clang__)
#ifndef FC_POOL_SPIN
#define FC_POOL_SPIN 20000
#endif
#define FC_LOAD(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#define FC_STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELEASE)
#if defined(__x86_64__) || defined(__i386__)
#define FC_PAUSE() __asm__ __volatile__("pause")
#elif defined(__aarch64__)
#define FC_PAUSE() __asm__ __volatile__("yield")
#else
#define FC_PAUSE() ((void)0)
#endif
#else
#define FC_POOL_SPIN 0
#define FC_LOAD(x) (x)
#define FC_STORE(x, v) ((x) = (v))
#define FC_PAUSE() ((void)0)
#endif

/* With the lock held: spin unlocked until *word != value (or stop), then relock. */
static void spin_while(fc_pool *p, const unsigned long *word, unsigned long value) {
    long i;
    if (FC_POOL_SPIN <= 0) return;
    pthread_mutex_unlock(&p->mu);
    for (i = 0; i < FC_POOL_SPIN && FC_LOAD(*word) == value && !FC_LOAD(p->stop); ++i) FC_PAUSE();
    pthread_mutex_lock(&p->mu);
}

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
        FC_STORE(p->remaining, p->remaining - 1);
        if (p->remaining == 0) pthread_cond_broadcast(&p->done);
    }
}

/* With the lock held: spin unlocked until no part is left running, then relock. */
static void spin_until_done(fc_pool *p) {
    long i;
    if (FC_POOL_SPIN <= 0) return;
    pthread_mutex_unlock(&p->mu);
    for (i = 0; i < FC_POOL_SPIN && FC_LOAD(p->remaining) != 0; ++i) FC_PAUSE();
    pthread_mutex_lock(&p->mu);
}

static void *worker(void *arg) {
    fc_pool *p = (fc_pool *)arg;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        if (!p->stop && p->generation == seen) spin_while(p, &p->generation, seen);
        while (!p->stop && p->generation == seen) pthread_cond_wait(&p->wake, &p->mu);
        if (p->stop) break;
        seen = p->generation;
        drain(p);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int fc_pool_start(fc_pool *p, int threads) {
    sigset_t all, before;
    int i;
    memset(p, 0, sizeof *p);
    p->threads = 1;
    if (threads < 1 || threads > FC_POOL_MAX_THREADS) return -1;
    if (pthread_mutex_init(&p->mu, NULL) || pthread_cond_init(&p->wake, NULL) || pthread_cond_init(&p->done, NULL))
        return -1;
    /* workers start with every signal blocked: a signal is handled by the thread that runs the
     * driver (runtime/files.c holds them there while outputs are put in place) */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &before);
    for (i = 0; i < threads - 1; ++i) {
        if (pthread_create(&p->workers[i], NULL, worker, p) != 0) break;
        p->started++;
    }
    pthread_sigmask(SIG_SETMASK, &before, NULL);
    p->threads = p->started + 1;
    return p->started == threads - 1 ? 0 : -1;
}

void fc_pool_stop(fc_pool *p) {
    int i;
    pthread_mutex_lock(&p->mu);
    FC_STORE(p->stop, 1);
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
    FC_STORE(p->remaining, (unsigned long)parts);
    FC_STORE(p->generation, p->generation + 1);
    pthread_cond_broadcast(&p->wake);
    drain(p);
    if (p->remaining > 0) spin_until_done(p);
    while (p->remaining > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
