/* Unit tests for spsub, the subscriber that speaks SP itself: against nng's real PUB
 * (lib/pubsub/publish.c, Debian's libnng) over tcp and ipc, against a publisher process that
 * is killed and started again, and against hostile peers played by raw sockets in the test's
 * own loop (a script of timed steps per connection: bytes to send, a close, a reset).
 *
 * Everything runs in one thread on one event loop, spsub's connections, the peers' and the
 * timers alike; ports and paths are picked at run time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "admit/load.h"
#include "wire/spframe.h"
#include "pubsub/publish.h"
#include "pubsub/spsub.h"
#include "pubsub/subscribe.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* Fast timing for every subscription of these tests: a wait of 5 to 40 ms between attempts. */
static const struct spsub_timing fast = {10, 40, 0};

/* ---- what a subscription received ----------------------------------------------------- */

#define RX_MAX 400

struct rx {
    int n;
    size_t len[RX_MAX];
    char msg[RX_MAX][ADMIT_LOAD_MSG_MAX];
    struct spsub *free_me; /* freed by the callback at the first message */
    int lost;              /* sessions the lost callback was told of */
    int unreachable;       /* times the unreachable callback was told */
    char why[160];         /* what it was told last */
};

static void on_lost(void *arg, const char *why)
{
    struct rx *rx = arg;

    rx->lost++;
    snprintf(rx->why, sizeof rx->why, "%s", why);
}

static void on_unreachable(void *arg, const char *why)
{
    struct rx *rx = arg;

    rx->unreachable++;
    snprintf(rx->why, sizeof rx->why, "%s", why);
}

static void on_msg(void *arg, const void *body, size_t len)
{
    struct rx *rx = arg;

    assert_true(len <= ADMIT_LOAD_MSG_MAX);
    if (rx->n < RX_MAX) {
        memcpy(rx->msg[rx->n], body, len);
        rx->len[rx->n] = len;
    }
    rx->n++;
    if (rx->free_me != NULL) {
        spsub_free(rx->free_me);
        rx->free_me = NULL;
    }
}

static int64_t seq_of(const struct rx *rx, int i)
{
    struct admit_load m;
    char err[256];

    if (admit_load_decode(rx->msg[i], rx->len[i], &m, err, sizeof err) != 0)
        fail_msg("message %d does not decode: %s", i, err);
    return m.seq;
}

/* ---- the loop -------------------------------------------------------------------------- */

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void tick(evutil_socket_t fd, short what, void *arg)
{
    (void) fd;
    (void) what;
    (void) arg;
}

/* What run_until waits for. */
struct until {
    const struct rx *rx;
    int messages;           /* rx->n >= messages */
    const struct spsub *sp; /* and, with sp, its counters: */
    uint64_t *field;        /* points into st: *field >= at_least */
    uint64_t at_least;
    struct spsub_stats st;
};

static int reached(struct until *u)
{
    if (u->sp != NULL)
        spsub_get_stats(u->sp, &u->st);
    if (u->rx != NULL && u->rx->n < u->messages)
        return 0;
    return u->field == NULL || *u->field >= u->at_least;
}

/* Runs the loop until u is reached or ms have passed; returns whether it was reached. */
static int run_until(struct event_base *base, struct until *u, int ms)
{
    struct event *t = event_new(base, -1, EV_PERSIST, tick, NULL);
    struct timeval tv = {0, 2000};
    int64_t end = now_ms() + ms;
    int ok;

    event_add(t, &tv);
    while (!(ok = reached(u)) && now_ms() < end)
        event_base_loop(base, EVLOOP_ONCE);
    event_free(t);
    return ok;
}

static void run_for(struct event_base *base, int ms)
{
    struct until never = {0};
    uint64_t zero = 0;

    never.field = &zero;
    never.at_least = 1;
    run_until(base, &never, ms);
}

/* Waits until sp's counter (a member of struct spsub_stats) is at least v. */
#define WAIT_STAT(base_, sp_, member, v, ms)                                                       \
    do {                                                                                           \
        struct until u_ = {0};                                                                     \
        u_.sp = (sp_);                                                                             \
        u_.field = &u_.st.member;                                                                  \
        u_.at_least = (v);                                                                         \
        if (!run_until((base_), &u_, (ms)))                                                        \
            fail_msg("%s stayed at %llu, below %llu", #member, (unsigned long long) u_.st.member,  \
                     (unsigned long long) (v));                                                    \
    } while (0)

static void wait_messages(struct event_base *base, const struct rx *rx, int n, int ms)
{
    struct until u = {0};

    u.rx = rx;
    u.messages = n;
    if (!run_until(base, &u, ms))
        fail_msg("%d messages of %d arrived", rx->n, n);
}

static struct spsub *subscribe(struct event_base *base, const char *url, struct rx *rx)
{
    char err[256];
    struct spsub *sp = spsub_new(base, url, on_msg, rx, err, sizeof err);

    if (sp == NULL)
        fail_msg("spsub_new: %s", err);
    spsub_set_timing(sp, &fast);
    spsub_set_lost(sp, on_lost);
    spsub_set_unreachable(sp, on_unreachable);
    return sp;
}

static char tmp[64];

static const char *tmpdir(void)
{
    if (tmp[0] == '\0') {
        snprintf(tmp, sizeof tmp, "/tmp/test_spsub.XXXXXX");
        assert_non_null(mkdtemp(tmp));
    }
    return tmp;
}

/* ipc://TMPDIR/name, valid until the next call. */
static const char *ipc_url(const char *name)
{
    static char url[160];

    snprintf(url, sizeof url, "ipc://%s/%s", tmpdir(), name);
    return url;
}

/* Removes the folder of the tests' ipc paths, and what is in it. */
static void tmpdir_remove(void)
{
    DIR *d = tmp[0] != '\0' ? opendir(tmp) : NULL;
    struct dirent *e;
    char path[400];

    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", tmp, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(tmp);
}

/* ---- URLs ------------------------------------------------------------------------------- */

static void test_urls(void **state)
{
    static const char *yes[] = {"tcp://127.0.0.1:5557", "tcp://[::1]:1", "tcp://10.1.2.3:65535",
                                "ipc:///tmp/admitd.sock", "ipc://relative/path"};
    static const char *no[] = {"tcp://localhost:5557",
                               "tcp://127.0.0.1:0",
                               "tcp://127.0.0.1",
                               "tcp://:5557",
                               "tcp://*:5557",
                               "tcp://1.2.3.4:65536",
                               "tcp://::1:5557",
                               "tcp4://127.0.0.1:1",
                               "tls+tcp://1.2.3.4:1",
                               "ws://127.0.0.1:1/x",
                               "ipc://",
                               "inproc://x",
                               "tcp://127.0.0.1:80/x",
                               ""};
    char longpath[200], err[256];
    struct event_base *base = event_base_new();

    (void) state;
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
        assert_int_equal(spsub_supported(yes[i], NULL, 0), 1);
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) {
        err[0] = '\0';
        if (spsub_supported(no[i], err, sizeof err) != 0)
            fail_msg("%s taken", no[i]);
        assert_true(err[0] != '\0');
    }
    snprintf(longpath, sizeof longpath, "ipc:///%0150d", 0);
    assert_int_equal(spsub_supported(longpath, NULL, 0), 0);
    assert_null(spsub_new(base, "tcp://localhost:5557", on_msg, NULL, err, sizeof err));
    assert_non_null(strstr(err, "cannot subscribe to tcp://localhost:5557"));
    spsub_free(NULL);
    event_base_free(base);
}

/* ---- against nng's PUB in this process -------------------------------------------------- */

static int64_t fill_value;

static void fill(void *arg, struct admit_load *msgs, unsigned *n)
{
    (void) arg;
    admit_load_init(&msgs[0]);
    msgs[0].engine_requests = fill_value;
    *n = 1;
}

static void nng_rx(void *arg, const void *msg, size_t len)
{
    on_msg(arg, msg, len);
}

/* Every message nng's PUB sends reaches spsub whole and in order, byte for byte what nng's
 * own SUB receives of the same publisher. */
static void against_nng(const char *url)
{
    struct event_base *base = event_base_new();
    static struct rx mine, theirs;
    char bound[300], err[256];
    struct publisher *p = pub_new(base, url, PUB_NNG, "test-worker", 3600000, fill, NULL, bound,
                                  sizeof bound, err, sizeof err);
    static const struct sub_opts nng_opts = {SUB_NNG, 0}; /* nng's own SUB, to compare */
    struct spsub *sp;
    struct subscriber *sub;
    struct spsub_stats st;
    int total = 300;

    if (p == NULL)
        fail_msg("pub_new %s: %s", url, err);
    memset(&mine, 0, sizeof mine);
    memset(&theirs, 0, sizeof theirs);
    sp = subscribe(base, bound, &mine);
    sub = sub_new(base, bound, &nng_opts, nng_rx, &theirs, err, sizeof err);
    assert_non_null(sub);
    /* PUB sends only to pipes it has attached: probe until both subscribers hear one. */
    for (int i = 0; i < 250 && (mine.n == 0 || theirs.n == 0); i++) {
        pub_now(p);
        run_for(base, 20);
    }
    assert_true(mine.n > 0 && theirs.n > 0);
    mine.n = theirs.n = 0;
    /* In batches within PUB's per-pipe queue (16), so that nng drops nothing. */
    for (int i = 1; i <= total; i++) {
        fill_value = i;
        pub_now(p);
        if (i % 8 == 0 || i == total) {
            struct until u = {0};
            u.rx = &theirs;
            u.messages = i;
            wait_messages(base, &mine, i, 5000);
            assert_true(run_until(base, &u, 5000));
        }
    }
    run_for(base, 50);
    assert_int_equal(mine.n, total);
    assert_int_equal(theirs.n, total);
    for (int i = 0; i < total; i++) {
        struct admit_load m;

        assert_int_equal(mine.len[i], theirs.len[i]);
        assert_memory_equal(mine.msg[i], theirs.msg[i], mine.len[i]);
        assert_int_equal(admit_load_decode(mine.msg[i], mine.len[i], &m, err, sizeof err), 0);
        assert_int_equal(m.engine_requests, i + 1);
        if (i > 0)
            assert_int_equal(seq_of(&mine, i), seq_of(&mine, i - 1) + 1);
    }
    spsub_get_stats(sp, &st);
    assert_int_equal(st.sessions, 1);
    assert_int_equal(st.connected, 1);
    assert_int_equal(st.oversized + st.bad_headers + st.timeouts + st.filtered, 0);
    assert_true(st.messages >= (uint64_t) total);
    spsub_free(sp);
    sub_free(sub); /* its socket is left to the exit (nngclose.h) */
    pub_free(p);
    event_base_free(base);
}

static void test_nng_pub_tcp(void **state)
{
    (void) state;
    against_nng("tcp://127.0.0.1:0");
}

static void test_nng_pub_ipc(void **state)
{
    (void) state;
    against_nng(ipc_url("nng-pub.sock"));
}

/* ---- a publisher process, killed and started again -------------------------------------- */

/* Starts pubproc on url; its pid, and the URL it bound in bound. */
static pid_t start_pubproc(const char *url, char *bound, size_t boundlen)
{
    char *argv[] = {(char *) SPSUB_PUBPROC, (char *) url, (char *) "20", NULL};
    posix_spawn_file_actions_t fa;
    struct pollfd pfd;
    char line[256];
    size_t got = 0;
    int out[2];
    pid_t pid;

    assert_int_equal(pipe(out), 0);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    assert_int_equal(posix_spawn(&pid, SPSUB_PUBPROC, &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    pfd.fd = out[0];
    pfd.events = POLLIN;
    while (got < sizeof line - 1 && memchr(line, '\n', got) == NULL) {
        ssize_t n;

        assert_int_equal(poll(&pfd, 1, 5000), 1);
        n = read(out[0], line + got, sizeof line - 1 - got);
        assert_true(n > 0);
        got += (size_t) n;
    }
    close(out[0]);
    line[got] = '\0';
    line[strcspn(line, "\n")] = '\0';
    assert_true(strncmp(line, "ready ", 6) == 0);
    snprintf(bound, boundlen, "%s", line + 6);
    return pid;
}

static void kill_pubproc(pid_t pid)
{
    int status;

    kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, &status, 0), pid);
}

/* The publisher dies (SIGKILL, as a crash) and comes back on the same URL: the subscription
 * reconnects by itself and hears the new publisher from its first messages on (seq restarts). */
static void restart(const char *url)
{
    struct event_base *base = event_base_new();
    static struct rx rx;
    char bound[300], again[300];
    pid_t pid = start_pubproc(url, bound, sizeof bound);
    struct spsub *sp;
    struct spsub_stats st;
    int before;

    memset(&rx, 0, sizeof rx);
    sp = subscribe(base, bound, &rx);
    /* 20 messages: the new publisher's first heard seq is far below the old one's last */
    wait_messages(base, &rx, 20, 5000);
    kill_pubproc(pid);
    WAIT_STAT(base, sp, reconnects, 1, 5000);
    spsub_get_stats(sp, &st);
    assert_int_equal(st.connected, 0);
    before = rx.n;
    pid = start_pubproc(bound, again, sizeof again);
    assert_string_equal(again, bound);
    wait_messages(base, &rx, before + 5, 5000);
    kill_pubproc(pid);
    spsub_get_stats(sp, &st);
    assert_int_equal(st.sessions, 2);
    assert_true(st.reconnects >= 1);
    assert_int_equal(rx.unreachable, 0); /* up at the start: a restart is a loss, not this */
    assert_int_equal(st.oversized + st.bad_headers, 0);
    /* In order within each publisher's life; the second starts again from its beginning. */
    for (int i = 1; i < rx.n && i < RX_MAX; i++)
        if (i != before)
            assert_int_equal(seq_of(&rx, i), seq_of(&rx, i - 1) + 1);
    assert_true(seq_of(&rx, before) < seq_of(&rx, before - 1));
    spsub_free(sp);
    event_base_free(base);
}

static void test_restart_tcp(void **state)
{
    (void) state;
    restart("tcp://127.0.0.1:0");
}

static void test_restart_ipc(void **state)
{
    (void) state;
    restart(ipc_url("pubproc.sock"));
}

/* ---- hostile peers ----------------------------------------------------------------------- */

enum act { SEND, HANGUP, RESET };

struct step {
    int delay_ms;
    enum act act;
    size_t off, len; /* SEND: bytes of the script's store */
};

/* What a peer does on a connection: the steps in order, each after its delay. */
struct script {
    struct step step[160];
    size_t n;
    unsigned char store[8192];
    size_t used;
};

/* A listening peer; first plays on its first connection, later on every other one. */
struct peer {
    struct event_base *base;
    int lfd, fd, ipc;
    struct event *accept_ev, *read_ev, *step_ev;
    const struct script *first, *later, *now;
    size_t next;
    int accepts;
    unsigned char got[16]; /* the first bytes the subscriber sent on its first connection */
    size_t ngot;
    char url[160];
};

static void add(struct script *s, int delay_ms, enum act act, const void *bytes, size_t len,
                size_t piece)
{
    if (act != SEND || len == 0) {
        s->step[s->n++] = (struct step){delay_ms, act, 0, 0};
        return;
    }
    assert_true(s->used + len <= sizeof s->store);
    memcpy(s->store + s->used, bytes, len);
    for (size_t o = 0; o < len; o += piece) {
        assert_true(s->n < sizeof s->step / sizeof *s->step);
        s->step[s->n++] =
            (struct step){delay_ms, SEND, s->used + o, len - o < piece ? len - o : piece};
    }
    s->used += len;
}

static void add_hello(struct script *s, uint16_t proto, int delay_ms, size_t piece)
{
    unsigned char h[SPFRAME_HELLO_LEN];

    spframe_hello(proto, h);
    add(s, delay_ms, SEND, h, sizeof h, piece);
}

/* One message framed for tcp or ipc, announcing len bytes (of which the body's are sent). */
static void add_msg(struct script *s, int ipc, uint64_t announce, const char *body, size_t len,
                    int delay_ms, size_t piece)
{
    unsigned char f[SPFRAME_PREFIX_MAX + ADMIT_LOAD_MSG_MAX + 16];
    size_t n = 0;

    if (ipc)
        f[n++] = 0x01;
    for (int i = 7; i >= 0; i--)
        f[n++] = (unsigned char) (announce >> (8 * i));
    assert_true(n + len <= sizeof f);
    memcpy(f + n, body, len);
    add(s, delay_ms, SEND, f, n + len, piece);
}

static void peer_close(struct peer *p, int rst)
{
    if (p->fd < 0)
        return;
    if (rst) {
        struct linger l = {1, 0};
        setsockopt(p->fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    }
    event_free(p->read_ev);
    event_del(p->step_ev);
    close(p->fd);
    p->fd = -1;
}

static void schedule(struct peer *p)
{
    struct timeval tv;

    if (p->next >= p->now->n)
        return; /* the script is done: the connection is held open */
    tv.tv_sec = p->now->step[p->next].delay_ms / 1000;
    tv.tv_usec = (p->now->step[p->next].delay_ms % 1000) * 1000;
    evtimer_add(p->step_ev, &tv);
}

static void on_step(evutil_socket_t fd, short what, void *arg)
{
    struct peer *p = arg;
    const struct step *st = &p->now->step[p->next++];
    ssize_t n;

    (void) fd;
    (void) what;
    if (st->act != SEND) {
        peer_close(p, st->act == RESET);
        return;
    }
    /* Loopback takes these few bytes at once. A send that fails means the subscriber has
     * hung up (it refused what came before): the peer hangs up too. */
    n = send(p->fd, p->now->store + st->off, st->len, MSG_NOSIGNAL);
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
        peer_close(p, 0);
        return;
    }
    assert_int_equal(n, (ssize_t) st->len);
    schedule(p);
}

/* Reads what the subscriber sends (its header), so that a close is a FIN, not a reset. */
static void on_peer_read(evutil_socket_t fd, short what, void *arg)
{
    struct peer *p = arg;
    unsigned char b[256];
    ssize_t n = recv(fd, b, sizeof b, 0);

    (void) what;
    if (n <= 0) {
        if (n < 0 && errno == EAGAIN)
            return;
        peer_close(p, 0);
        return;
    }
    if (p->accepts == 1)
        for (ssize_t i = 0; i < n && p->ngot < sizeof p->got; i++)
            p->got[p->ngot++] = b[i];
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
    struct peer *p = arg;
    int fd = accept(lfd, NULL, NULL);

    (void) what;
    if (fd < 0)
        return;
    peer_close(p, 0); /* the subscriber dropped the last one: it came back */
    evutil_make_socket_nonblocking(fd);
    p->fd = fd;
    p->accepts++;
    p->now = p->accepts == 1 || p->later == NULL ? p->first : p->later;
    p->next = 0;
    p->read_ev = event_new(p->base, fd, EV_READ | EV_PERSIST, on_peer_read, p);
    event_add(p->read_ev, NULL);
    schedule(p);
}

static void peer_start(struct peer *p, struct event_base *base, int ipc, const struct script *first,
                       const struct script *later)
{
    memset(p, 0, sizeof *p);
    p->base = base;
    p->fd = -1;
    p->ipc = ipc;
    p->first = first;
    p->later = later;
    if (ipc) {
        struct sockaddr_un su = {0};
        static int n;

        su.sun_family = AF_UNIX;
        snprintf(su.sun_path, sizeof su.sun_path, "%s/peer%d.sock", tmpdir(), n++);
        p->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
        assert_int_equal(bind(p->lfd, (struct sockaddr *) &su, sizeof su), 0);
        snprintf(p->url, sizeof p->url, "ipc://%s", su.sun_path);
    } else {
        struct sockaddr_in sa = {0};
        socklen_t len = sizeof sa;

        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        p->lfd = socket(AF_INET, SOCK_STREAM, 0);
        assert_int_equal(bind(p->lfd, (struct sockaddr *) &sa, sizeof sa), 0);
        assert_int_equal(getsockname(p->lfd, (struct sockaddr *) &sa, &len), 0);
        snprintf(p->url, sizeof p->url, "tcp://127.0.0.1:%d", ntohs(sa.sin_port));
    }
    assert_int_equal(listen(p->lfd, 16), 0);
    evutil_make_socket_nonblocking(p->lfd);
    p->accept_ev = event_new(base, p->lfd, EV_READ | EV_PERSIST, on_accept, p);
    p->step_ev = evtimer_new(base, on_step, p);
    event_add(p->accept_ev, NULL);
}

static void peer_stop(struct peer *p)
{
    peer_close(p, 0);
    event_free(p->accept_ev);
    event_free(p->step_ev);
    close(p->lfd);
}

/* A run against one peer: the subscription, its messages and its counters at the end. */
struct bout {
    struct event_base *base;
    struct peer peer;
    struct rx rx;
    struct spsub *sp;
    struct spsub_stats st;
};

static struct bout *bout_start(int ipc, const struct script *first, const struct script *later)
{
    struct bout *b = calloc(1, sizeof *b);

    assert_non_null(b);
    b->base = event_base_new();
    peer_start(&b->peer, b->base, ipc, first, later);
    b->sp = subscribe(b->base, b->peer.url, &b->rx);
    return b;
}

static void bout_end(struct bout *b)
{
    spsub_free(b->sp);
    peer_stop(&b->peer);
    event_base_free(b->base);
    free(b);
}

static const char body1[] = "kv_metrics {\"one\":1}";
static const char body2[] = "kv_metrics {\"two\":2}";

/* The good publisher of later connections: its header and one message. */
static void good(struct script *s, int ipc)
{
    add_hello(s, SPFRAME_PROTO_PUB0, 0, 8);
    add_msg(s, ipc, sizeof body2 - 1, body2, sizeof body2 - 1, 0, 64);
}

static void assert_got(const struct rx *rx, int i, const char *body)
{
    assert_true(rx->n > i);
    assert_int_equal(rx->len[i], strlen(body));
    assert_memory_equal(rx->msg[i], body, strlen(body));
}

/* The header and a message, a byte at a time with pauses: taken whole, once. And the
 * subscriber's own header is SUB0's, byte for byte. */
static void split(int ipc)
{
    static struct script s;
    struct bout *b;

    memset(&s, 0, sizeof s);
    add_hello(&s, SPFRAME_PROTO_PUB0, 15, 1);
    add_msg(&s, ipc, sizeof body1 - 1, body1, sizeof body1 - 1, 3, 1);
    b = bout_start(ipc, &s, NULL);
    wait_messages(b->base, &b->rx, 1, 5000);
    run_for(b->base, 30);
    assert_int_equal(b->rx.n, 1);
    assert_got(&b->rx, 0, body1);
    assert_int_equal(b->peer.ngot, 8);
    assert_memory_equal(b->peer.got, "\0SP\0\0\x21\0\0", 8);
    spsub_get_stats(b->sp, &b->st);
    assert_int_equal(b->st.sessions, 1);
    assert_int_equal(b->st.connected, 1);
    assert_int_equal(b->st.messages, 1);
    assert_int_equal(b->st.bytes, sizeof body1 - 1);
    assert_int_equal(b->st.reconnects + b->st.bad_headers + b->st.oversized, 0);
    bout_end(b);
}

static void test_split_tcp(void **state)
{
    (void) state;
    split(0);
}

static void test_split_ipc(void **state)
{
    (void) state;
    split(1);
}

/* A first message, then the next one's first bytes, the rest only later: both, in order. */
static void test_rest_later(void **state)
{
    static struct script s;
    unsigned char f[64];
    struct bout *b;
    size_t n = 0;

    (void) state;
    memset(&s, 0, sizeof s);
    add_hello(&s, SPFRAME_PROTO_PUB0, 0, 8);
    /* one send: message 1 whole and 3 bytes of message 2's length */
    for (int i = 7; i >= 0; i--)
        f[n++] = (unsigned char) ((sizeof body1 - 1) >> (8 * i));
    memcpy(f + n, body1, sizeof body1 - 1);
    n += sizeof body1 - 1;
    memset(f + n, 0, 3);
    add(&s, 0, SEND, f, n + 3, sizeof f);
    n = 0;
    for (int i = 4; i >= 0; i--)
        f[n++] = (unsigned char) ((sizeof body2 - 1) >> (8 * i));
    memcpy(f + n, body2, sizeof body2 - 1);
    add(&s, 60, SEND, f, n + sizeof body2 - 1, sizeof f);
    b = bout_start(0, &s, NULL);
    wait_messages(b->base, &b->rx, 2, 5000);
    assert_got(&b->rx, 0, body1);
    assert_got(&b->rx, 1, body2);
    bout_end(b);
}

/* A message of exactly the maximum is taken; one byte more is refused, the connection
 * dropped and counted, and the subscriber comes back to a publisher that behaves. */
static void test_oversized(void **state)
{
    static struct script s, later;
    static char big[ADMIT_LOAD_MSG_MAX + 1];
    struct bout *b;

    (void) state;
    memset(big, 'x', sizeof big);
    memcpy(big, "kv_metrics ", 11);
    memset(&s, 0, sizeof s);
    memset(&later, 0, sizeof later);
    add_hello(&s, SPFRAME_PROTO_PUB0, 0, 8);
    add_msg(&s, 0, ADMIT_LOAD_MSG_MAX, big, ADMIT_LOAD_MSG_MAX, 0, 4096);
    add_msg(&s, 0, ADMIT_LOAD_MSG_MAX + 1, big, ADMIT_LOAD_MSG_MAX + 1, 10, 4096);
    good(&later, 0);
    b = bout_start(0, &s, &later);
    wait_messages(b->base, &b->rx, 2, 5000);
    assert_int_equal(b->rx.len[0], ADMIT_LOAD_MSG_MAX);
    assert_got(&b->rx, 1, body2);
    spsub_get_stats(b->sp, &b->st);
    assert_int_equal(b->st.oversized, 1);
    assert_int_equal(b->st.sessions, 2);
    assert_int_equal(b->st.reconnects, 1);
    assert_int_equal(b->peer.accepts, 2);
    assert_int_equal(b->rx.lost, 1);        /* a session up, dropped for what it sent */
    assert_int_equal(b->rx.unreachable, 0); /* ... reachable, then: never said unreachable */
    bout_end(b);
}

/* A length that no buffer could hold (2^64 - 1) is refused as soon as it is read. */
static void test_absurd_length(void **state)
{
    static struct script s;
    struct bout *b;

    (void) state;
    memset(&s, 0, sizeof s);
    add_hello(&s, SPFRAME_PROTO_PUB0, 0, 8);
    add_msg(&s, 1, UINT64_MAX, "", 0, 0, 64);
    b = bout_start(1, &s, NULL);
    WAIT_STAT(b->base, b->sp, oversized, 2, 5000); /* refused again on the reconnect */
    assert_true(b->peer.accepts >= 2);
    assert_int_equal(b->rx.n, 0);
    bout_end(b);
}

/* Headers that are not a PUB0 publisher's: counted, dropped, tried again. */
static void bad_header(int ipc, const void *hello, size_t len)
{
    static struct script s, later;
    struct bout *b;

    memset(&s, 0, sizeof s);
    memset(&later, 0, sizeof later);
    add(&s, 0, SEND, hello, len, len);
    add_msg(&s, ipc, sizeof body1 - 1, body1, sizeof body1 - 1, 0, 64);
    good(&later, ipc);
    b = bout_start(ipc, &s, &later);
    wait_messages(b->base, &b->rx, 1, 5000);
    assert_got(&b->rx, 0, body2); /* never body1: nothing after a bad header is read */
    spsub_get_stats(b->sp, &b->st);
    assert_int_equal(b->st.bad_headers, 1);
    assert_int_equal(b->st.sessions, 1);
    assert_int_equal(b->st.reconnects, 1);
    assert_int_equal(b->rx.lost, 0); /* never a session: nothing was lost */
    bout_end(b);
}

static void test_wrong_protocol(void **state)
{
    (void) state;
    bad_header(0, "\0SP\0\0\x21\0\0", 8); /* a SUB0, not a PUB0 */
    bad_header(1, "\0SP\0\0\x10\0\0", 8); /* PAIR0 */
}

static void test_not_sp(void **state)
{
    (void) state;
    bad_header(0, "HTTP/1.1 400 Bad Request\r\n\r\n", 28);
    bad_header(0, "\0SP\x01\0\x20\0\0", 8); /* SP version 1 */
    bad_header(1, "\0SP\0\0\x20\0\x01", 8); /* reserved bytes not zero */
}

/* ipc: a message type other than 0x01 ends the stream. */
static void test_ipc_bad_type(void **state)
{
    static struct script s, later;
    static const unsigned char frame[] = {0x02, 0, 0, 0, 0, 0, 0, 0, 4, 'k', 'v', '_', 'm'};
    struct bout *b;

    (void) state;
    memset(&s, 0, sizeof s);
    memset(&later, 0, sizeof later);
    add_hello(&s, SPFRAME_PROTO_PUB0, 0, 8);
    add(&s, 0, SEND, frame, sizeof frame, sizeof frame);
    good(&later, 1);
    b = bout_start(1, &s, &later);
    wait_messages(b->base, &b->rx, 1, 5000);
    assert_got(&b->rx, 0, body2);
    spsub_get_stats(b->sp, &b->st);
    assert_int_equal(b->st.bad_headers, 1);
    assert_int_equal(b->st.sessions, 2);
    bout_end(b);
}

/* The publisher goes away in the middle of a message, by a FIN or by a reset: the part is
 * dropped, nothing half is passed on, and the subscriber reconnects. */
static void cut(int ipc, enum act how)
{
    static struct script s, later;
    struct bout *b;

    memset(&s, 0, sizeof s);
    memset(&later, 0, sizeof later);
    add_hello(&s, SPFRAME_PROTO_PUB0, 0, 8);
    add_msg(&s, ipc, sizeof body1 - 1, body1, sizeof body1 - 1, 0, 64);
    add_msg(&s, ipc, 100, body1, 10, 10, 64); /* announces 100, sends 10 */
    add(&s, 20, how, NULL, 0, 0);
    good(&later, ipc);
    b = bout_start(ipc, &s, &later);
    wait_messages(b->base, &b->rx, 2, 5000);
    run_for(b->base, 20);
    assert_int_equal(b->rx.n, 2);
    assert_got(&b->rx, 0, body1);
    assert_got(&b->rx, 1, body2);
    spsub_get_stats(b->sp, &b->st);
    assert_int_equal(b->st.sessions, 2);
    assert_int_equal(b->st.reconnects, 1);
    assert_int_equal(b->st.messages, 2);
    assert_int_equal(b->st.bad_headers + b->st.oversized + b->st.timeouts, 0);
    /* The session that was up ended once, and its owner was told at once, and why. */
    assert_int_equal(b->rx.lost, 1);
    assert_non_null(strstr(b->rx.why, ipc || how == HANGUP ? "closed the connection" : "reset"));
    bout_end(b);
}

static void test_hangup_mid_message(void **state)
{
    (void) state;
    cut(0, HANGUP);
    cut(1, HANGUP);
}

/* (On a unix socket SO_LINGER 0 makes no reset: the ipc case is a close there.) */
static void test_reset_mid_message(void **state)
{
    (void) state;
    cut(0, RESET);
    cut(1, RESET);
}

/* A peer that accepts and says nothing is given up at the handshake deadline. */
static void test_silent_peer(void **state)
{
    static struct script s;
    static const struct spsub_timing t = {0, 0, 100};
    struct bout *b;

    (void) state;
    memset(&s, 0, sizeof s);
    add_hello(&s, SPFRAME_PROTO_PUB0, 0, 3); /* 3 + 3 bytes, then silence */
    s.n = 2;
    b = bout_start(0, &s, NULL);
    spsub_set_timing(b->sp, &t);
    WAIT_STAT(b->base, b->sp, timeouts, 2, 5000);
    spsub_get_stats(b->sp, &b->st);
    assert_int_equal(b->st.sessions, 0);
    assert_true(b->peer.accepts >= 2);
    assert_int_equal(b->rx.lost, 0);
    bout_end(b);
}

/* Nobody listens: refused again and again, with the backoff between attempts. */
static void test_refused(void **state)
{
    struct event_base *base = event_base_new();
    struct sockaddr_in sa = {0};
    socklen_t len = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    char url[64];
    static struct rx rx;
    struct spsub *sp;
    struct spsub_stats st;

    (void) state;
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *) &sa, sizeof sa), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *) &sa, &len), 0);
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", ntohs(sa.sin_port));
    sp = subscribe(base, url, &rx); /* bound, not listening: refused */
    run_for(base, 400);
    spsub_get_stats(sp, &st);
    /* waits of 5-10, 10-20, 20-40, then 20-40 ms: at least 8 in 400 ms, at most 80 */
    assert_true(st.reconnects >= 8 && st.reconnects <= 80);
    assert_int_equal(st.sessions + st.connected + st.timeouts, 0);
    assert_int_equal(rx.lost, 0); /* a connect that fails loses no session */
    /* ... but says, once, that the publisher is unreachable from the start */
    assert_int_equal(rx.unreachable, 1);
    assert_non_null(strstr(rx.why, "refused"));
    spsub_free(sp);
    close(fd);
    event_base_free(base);
}

/* Another topic is dropped as SUB's subscription would; an empty message too, and the
 * kv_events topic's when no callback asked for them. */
static void test_other_topic(void **state)
{
    static struct script s;
    static const char other[] = "kv_metricsX {}", events[] = "kv_events \1\1";
    struct bout *b;

    (void) state;
    memset(&s, 0, sizeof s);
    add_hello(&s, SPFRAME_PROTO_PUB0, 0, 8);
    add_msg(&s, 0, sizeof other - 1, other, sizeof other - 1, 0, 64);
    add_msg(&s, 0, 0, "", 0, 0, 64);
    add_msg(&s, 0, sizeof events - 1, events, sizeof events - 1, 0, 64);
    add_msg(&s, 0, sizeof body1 - 1, body1, sizeof body1 - 1, 0, 64);
    b = bout_start(0, &s, NULL);
    wait_messages(b->base, &b->rx, 1, 5000);
    spsub_get_stats(b->sp, &b->st);
    assert_int_equal(b->st.filtered, 3);
    assert_int_equal(b->st.messages, 1);
    assert_int_equal(b->st.events, 0);
    assert_got(&b->rx, 0, body1);
    bout_end(b);
}

static struct rx events_rx;

static void on_events(void *arg, const void *body, size_t len)
{
    (void) arg; /* the message callback's: the bout's rx */
    on_msg(&events_rx, body, len);
}

/* With an events callback, the kv_events topic's messages reach it, in order, and the load
 * topic's the message callback; a topic that only starts alike is filtered still. */
static void test_events_topic(void **state)
{
    static struct script s;
    static const char ev1[] = "kv_events \1\1one", ev2[] = "kv_events \1\2two",
                      near[] = "kv_eventsX", cut[] = "kv_event";
    struct bout *b;

    (void) state;
    memset(&s, 0, sizeof s);
    memset(&events_rx, 0, sizeof events_rx);
    add_hello(&s, SPFRAME_PROTO_PUB0, 0, 8);
    add_msg(&s, 0, sizeof ev1 - 1, ev1, sizeof ev1 - 1, 0, 64);
    add_msg(&s, 0, sizeof near - 1, near, sizeof near - 1, 0, 64);
    add_msg(&s, 0, sizeof cut - 1, cut, sizeof cut - 1, 0, 64);
    add_msg(&s, 0, sizeof body1 - 1, body1, sizeof body1 - 1, 0, 64);
    add_msg(&s, 0, sizeof ev2 - 1, ev2, sizeof ev2 - 1, 0, 64);
    add_msg(&s, 0, sizeof body2 - 1, body2, sizeof body2 - 1, 0, 64);
    b = bout_start(0, &s, NULL);
    spsub_set_events(b->sp, on_events);
    wait_messages(b->base, &b->rx, 2, 5000);
    spsub_get_stats(b->sp, &b->st);
    assert_int_equal(b->st.messages, 2);
    assert_int_equal(b->st.events, 2);
    assert_int_equal(b->st.filtered, 2);
    assert_got(&b->rx, 0, body1);
    assert_got(&b->rx, 1, body2);
    assert_int_equal(events_rx.n, 2);
    assert_got(&events_rx, 0, ev1);
    assert_got(&events_rx, 1, ev2);
    bout_end(b);
}

/* The callback frees its own subscription: the messages after it are never read. */
static void test_free_in_callback(void **state)
{
    static struct script s;
    struct bout *b;

    (void) state;
    memset(&s, 0, sizeof s);
    add_hello(&s, SPFRAME_PROTO_PUB0, 0, 8);
    add_msg(&s, 0, sizeof body1 - 1, body1, sizeof body1 - 1, 0, 64);
    add_msg(&s, 0, sizeof body2 - 1, body2, sizeof body2 - 1, 0, 64);
    b = bout_start(0, &s, NULL);
    b->rx.free_me = b->sp;
    wait_messages(b->base, &b->rx, 1, 5000);
    run_for(b->base, 30);
    assert_int_equal(b->rx.n, 1);
    b->sp = NULL; /* freed by the callback */
    bout_end(b);
}

/* Freed in the middle of a handshake: closed at once, nothing left behind (ASan). */
static void test_free_during_handshake(void **state)
{
    static struct script s;
    struct bout *b;
    struct spsub_stats st;

    (void) state;
    memset(&s, 0, sizeof s);
    add_hello(&s, SPFRAME_PROTO_PUB0, 0, 4);
    s.n = 1;
    b = bout_start(0, &s, NULL);
    for (int64_t end = now_ms() + 5000; b->peer.ngot < 8 && now_ms() < end;)
        run_for(b->base, 5);
    assert_int_equal(b->peer.ngot, 8);
    spsub_get_stats(b->sp, &st);
    assert_int_equal(st.connected, 0);
    bout_end(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_urls),
        cmocka_unit_test(test_nng_pub_tcp),
        cmocka_unit_test(test_nng_pub_ipc),
        cmocka_unit_test(test_restart_tcp),
        cmocka_unit_test(test_restart_ipc),
        cmocka_unit_test(test_split_tcp),
        cmocka_unit_test(test_split_ipc),
        cmocka_unit_test(test_rest_later),
        cmocka_unit_test(test_oversized),
        cmocka_unit_test(test_absurd_length),
        cmocka_unit_test(test_wrong_protocol),
        cmocka_unit_test(test_not_sp),
        cmocka_unit_test(test_ipc_bad_type),
        cmocka_unit_test(test_hangup_mid_message),
        cmocka_unit_test(test_reset_mid_message),
        cmocka_unit_test(test_silent_peer),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_other_topic),
        cmocka_unit_test(test_events_topic),
        cmocka_unit_test(test_free_in_callback),
        cmocka_unit_test(test_free_during_handshake),
    };
    int rc;

    signal(SIGPIPE, SIG_IGN);
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    tmpdir_remove();
    /* The publishers' and nng SUB's sockets are left to the exit, as programs leave theirs. */
    return rc;
}
