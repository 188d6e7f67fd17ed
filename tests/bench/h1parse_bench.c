/* h1parse_bench: what the HTTP/1.1 parser costs per message, beside llhttp on the same bytes.
 *
 * Three inputs: the ~400-byte head of an OpenAI SDK chat-completions POST, a minimal GET,
 * and a chunked body of 32 SSE-sized chunks (an engine's streamed answer). Ours is h1_parse
 * over the whole head (classification included) and h1c_feed over the body; llhttp is
 * llhttp_execute with callbacks that keep each span, as a caller of it must to get what
 * h1_parse hands back. llhttp's body cost is its time on head and body less its time on
 * the head alone. Rounds alternate ours, llhttp, ours... on one pinned core, so that drift
 * falls on both alike; the table gives medians in ns per message. Timings are printed, never
 * asserted; it is built by default and is not a test.
 *
 *   meson setup build-rel --buildtype=release && ninja -C build-rel tests/bench/h1parse_bench
 *   build-rel/tests/bench/h1parse_bench [--cpu N] [--rounds N] [--ms N]
 *
 * llhttp is there when node-llhttp was installed at setup (scripts/install-deps.sh); without
 * it the bench prints ours alone. */
#include "util/clock.h"
#include "wire/h1chunk.h"
#include "wire/h1parse.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef HAVE_LLHTTP
#include <llhttp.h>
#endif

#define SLOTS 64

static const char openai_head[] = "POST /v1/chat/completions HTTP/1.1\r\n"
                                  "Host: 127.0.0.1:8000\r\n"
                                  "Accept-Encoding: gzip, deflate\r\n"
                                  "Connection: keep-alive\r\n"
                                  "Accept: application/json\r\n"
                                  "Content-Type: application/json\r\n"
                                  "User-Agent: OpenAI/Python 1.54.4\r\n"
                                  "X-Stainless-Lang: python\r\n"
                                  "X-Stainless-Package-Version: 1.54.4\r\n"
                                  "X-Stainless-OS: Linux\r\n"
                                  "X-Stainless-Arch: x64\r\n"
                                  "X-Stainless-Runtime: CPython\r\n"
                                  "X-Stainless-Runtime-Version: 3.11.2\r\n"
                                  "Authorization: Bearer sk-admitd-bench\r\n"
                                  "Content-Length: 161\r\n"
                                  "\r\n";
static const char get_head[] = "GET / HTTP/1.1\r\nHost: a\r\n\r\n";
static const char chunked_head[] = "HTTP/1.1 200 OK\r\n"
                                   "Content-Type: text/event-stream\r\n"
                                   "Transfer-Encoding: chunked\r\n\r\n";
static char body[8192];
static size_t body_len;

/* 32 chunks of one SSE event each, then the last chunk. */
static void make_body(void)
{
    for (int i = 0; i < 32; i++) {
        char ev[160];
        int n = snprintf(ev, sizeof ev,
                         "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":"
                         "\"tok%02d\"}}]}\n\n",
                         i);
        body_len +=
            (size_t) snprintf(body + body_len, sizeof body - body_len, "%x\r\n%s\r\n", n, ev);
    }
    body_len += (size_t) snprintf(body + body_len, sizeof body - body_len, "0\r\n\r\n");
}

static volatile size_t sink;

static void ours_head(const char *in, size_t n)
{
    static struct h1_header hdr[SLOTS];
    struct h1_parser p;

    h1_req_init(&p, hdr, SLOTS, 65536);
    if (h1_parse(&p, in, n) != H1_DONE)
        abort();
    sink += p.nhdr;
}

static void ours_resp_head(const char *in, size_t n)
{
    static struct h1_header hdr[SLOTS];
    struct h1_parser p;

    h1_resp_init(&p, hdr, SLOTS, 65536, H1_M_POST);
    if (h1_parse(&p, in, n) != H1_DONE)
        abort();
    sink += p.nhdr;
}

static void ours_body(const char *in, size_t n)
{
    struct h1_chunked c;
    struct h1_str d;
    size_t used;
    int rc;

    h1c_init(&c, UINT64_MAX);
    while ((rc = h1c_feed(&c, in, n, &used, &d)) == H1_DATA) {
        sink += d.len;
        in += used;
        n -= used;
    }
    if (rc != H1_DONE)
        abort();
}

#ifdef HAVE_LLHTTP
/* The spans a caller keeps, as h1_parse's slots do. */
static struct {
    const char *p[2 * SLOTS];
    size_t n[2 * SLOTS], k;
} spans;

static int keep(llhttp_t *p, const char *at, size_t n)
{
    (void) p;
    if (spans.k < 2 * SLOTS) {
        spans.p[spans.k] = at;
        spans.n[spans.k++] = n;
    }
    return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t n)
{
    (void) p;
    (void) at;
    sink += n;
    return 0;
}

static llhttp_settings_t settings;

static void ll_run(const char *in, size_t n, llhttp_type_t type)
{
    llhttp_t p;

    spans.k = 0;
    llhttp_init(&p, type, &settings);
    if (llhttp_execute(&p, in, n) != HPE_OK)
        abort();
    sink += spans.k;
}

static void ll_head(const char *in, size_t n)
{
    ll_run(in, n, HTTP_REQUEST);
}

static void ll_resp(const char *in, size_t n)
{
    ll_run(in, n, HTTP_RESPONSE);
}
#endif

/* ns per call of fn(in, n): the median of rounds rounds of ms each. */
static double time_it(void (*fn)(const char *, size_t), const char *in, size_t n, int rounds,
                      int ms, double *out)
{
    for (int r = 0; r < rounds; r++) {
        double t0 = clock_mono_s(), t;
        long iters = 0;
        do {
            for (int i = 0; i < 256; i++)
                fn(in, n);
            iters += 256;
            t = clock_mono_s();
        } while (t - t0 < ms * 1e-3);
        out[r] = (t - t0) * 1e9 / (double) iters;
    }
    for (int i = 1; i < rounds; i++)
        for (int j = i; j > 0 && out[j] < out[j - 1]; j--) {
            double x = out[j];
            out[j] = out[j - 1];
            out[j - 1] = x;
        }
    return out[rounds / 2];
}

int main(int argc, char **argv)
{
    int cpu = 0, rounds = 7, ms = 20;
    static char resp[16384];
    size_t head_len = sizeof chunked_head - 1;
    double t[64];

    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--cpu") == 0)
            cpu = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--rounds") == 0)
            rounds = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--ms") == 0)
            ms = atoi(argv[i + 1]);
    }
    if (rounds < 1 || rounds > 64)
        rounds = 7;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        perror("h1parse_bench: sched_setaffinity (timings unpinned)");
    make_body();
    memcpy(resp, chunked_head, head_len);
    memcpy(resp + head_len, body, body_len);
#ifdef HAVE_LLHTTP
    llhttp_settings_init(&settings);
    settings.on_url = keep;
    settings.on_header_field = keep;
    settings.on_header_value = keep;
    settings.on_body = on_body;
#endif
    printf("%-34s %8s %12s %12s\n", "input", "bytes", "h1parse ns", "llhttp ns");
    struct {
        const char *name;
        const char *in;
        size_t n;
        void (*ours)(const char *, size_t);
    } rows[] = {
        {"OpenAI chat POST head", openai_head, sizeof openai_head - 1, ours_head},
        {"minimal GET head", get_head, sizeof get_head - 1, ours_head},
        {"chunked SSE body, 32 chunks", body, body_len, ours_body},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        double mine = time_it(rows[r].ours, rows[r].in, rows[r].n, rounds, ms, t);
        double theirs = -1;
#ifdef HAVE_LLHTTP
        if (rows[r].ours == ours_body)
            theirs = time_it(ll_resp, resp, head_len + body_len, rounds, ms, t) -
                     time_it(ll_resp, resp, head_len, rounds, ms, t);
        else
            theirs = time_it(ll_head, rows[r].in, rows[r].n, rounds, ms, t);
#endif
        if (theirs < 0)
            printf("%-34s %8zu %12.1f %12s\n", rows[r].name, rows[r].n, mine, "-");
        else
            printf("%-34s %8zu %12.1f %12.1f\n", rows[r].name, rows[r].n, mine, theirs);
    }
    printf("%-34s %8zu %12.1f\n", "SSE response head (ours)", head_len,
           time_it(ours_resp_head, resp, head_len, rounds, ms, t));
    return sink == 0;
}
