/* nngclose: nng_close (or nng_dialer_close) on a helper thread, waited for with a deadline. */
#include "pubsub/nngclose.h"
#include "util/log.h"
#include "util/xmalloc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* Shared by the caller and the closing thread; whoever lets go last frees it, so the caller
 * may give up waiting without leaving the thread a dangling pointer. */
struct closing {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    enum { CLOSE_SOCKET, CLOSE_DIALER, FINI } what;
    nng_socket sock;
    nng_dialer dialer;
    int done;
    int refs;
};

static void release(struct closing *c)
{
    int last;

    pthread_mutex_lock(&c->mu);
    last = --c->refs == 0;
    pthread_mutex_unlock(&c->mu);
    if (last) {
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
        free(c);
    }
}

static void run(const struct closing *c)
{
    switch (c->what) {
    case CLOSE_SOCKET:
        nng_close(c->sock);
        break;
    case CLOSE_DIALER:
        nng_dialer_close(c->dialer); /* NNG_ENOENT: closed already, as good */
        break;
    case FINI:
        nng_fini();
        break;
    }
}

static void *close_thread(void *arg)
{
    struct closing *c = arg;

    run(c);
    pthread_mutex_lock(&c->mu);
    c->done = 1;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    release(c);
    return NULL;
}

/* Runs the close (or fini) described by c on a helper thread; 0 when it finished in time. */
static int run_bounded(struct closing *c, int timeout_ms)
{
    pthread_condattr_t attr;
    struct timespec deadline;
    pthread_t tid;
    int done, rc = 0;

    pthread_mutex_init(&c->mu, NULL);
    /* A monotonic deadline: a clock step must neither cut the wait short nor stretch it. */
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &attr);
    pthread_condattr_destroy(&attr);
    c->refs = 2;
    if (pthread_create(&tid, NULL, close_thread, c) != 0) {
        /* No thread to spare: run it inline and accept the (rare) risk. */
        c->refs = 1;
        run(c);
        release(c);
        return 0;
    }
    pthread_detach(tid);
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long) (timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&c->mu);
    while (!c->done && rc == 0)
        rc = pthread_cond_timedwait(&c->cv, &c->mu, &deadline);
    done = c->done;
    pthread_mutex_unlock(&c->mu);
    release(c);
    return done ? 0 : -1;
}

int nngc_close(nng_socket s, int timeout_ms)
{
    struct closing *c = xcalloc(1, sizeof *c);

    c->what = CLOSE_SOCKET;
    c->sock = s;
    return run_bounded(c, timeout_ms);
}

int nngc_dialer_close(nng_dialer d, int timeout_ms)
{
    struct closing *c = xcalloc(1, sizeof *c);

    c->what = CLOSE_DIALER;
    c->dialer = d;
    return run_bounded(c, timeout_ms);
}

int nngc_fini(int timeout_ms)
{
    struct closing *c = xcalloc(1, sizeof *c);

    c->what = FINI;
    return run_bounded(c, timeout_ms);
}
