/* Unit tests for the load publisher's coalescing: a change after a quiet millisecond goes
 * out at once (the leading edge), changes within the millisecond go out once at its end
 * (the trailing edge), unchanged load only with a heartbeat or pub_now. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "pubsub/publish.h"

#include <event2/event.h>
#include <string.h>
#include <time.h>

static int64_t engine_requests; /* what the fill callback reports */

static void fill(void *arg, struct admit_load *msgs, unsigned *n)
{
    (void) arg;
    admit_load_init(&msgs[0]);
    msgs[0].engine_requests = engine_requests;
    *n = 1;
}

static int64_t mono_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static struct publisher *start(struct event_base *base)
{
    char bound[300], err[256];
    /* A heartbeat far away, so that every message in these tests is a change's. */
    struct publisher *p = pub_new(base, "tcp://127.0.0.1:0", PUB_AUTO, "test-worker", 3600000, fill,
                                  NULL, bound, sizeof bound, err, sizeof err);

    if (p == NULL)
        fail_msg("pub_new: %s", err);
    assert_true(strncmp(bound, "tcp://127.0.0.1:", 16) == 0 && strcmp(bound + 16, "0") != 0);
    return p;
}

/* Runs the loop until the publisher has sent want messages, for at most 5 s. */
static void loop_until_sent(struct event_base *base, struct publisher *p, uint64_t want)
{
    int64_t end = mono_us() + 5000000;

    while (pub_sent(p) < want && mono_us() < end)
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    assert_int_equal(pub_sent(p), want);
}

static void test_leading_edge_goes_out_at_once(void **state)
{
    struct event_base *base = event_base_new();
    struct publisher *p = start(base);

    (void) state;
    engine_requests = 1;
    pub_changed(p); /* nothing sent for a long time: out now, inside the call */
    assert_int_equal(pub_sent(p), 1);
    assert_int_equal(pub_seq(p), 1);
    pub_free(p);
    event_base_free(base);
}

/* Changes within the millisecond after a message are held and go out once, at its end. A
 * pair of calls counts only when the second came within 500 us of the first (a busy machine
 * may preempt between them); at least one of five pairs must. */
static void test_changes_within_a_millisecond_coalesce(void **state)
{
    struct event_base *base = event_base_new();
    struct publisher *p = start(base);
    int judged = 0;

    (void) state;
    for (int i = 0; i < 5; i++) {
        uint64_t before = pub_sent(p);
        int64_t t0;

        /* A quiet millisecond first, so the next change is a leading edge. */
        t0 = mono_us();
        while (mono_us() - t0 < 3000)
            event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        engine_requests = 10 + 2 * i;
        t0 = mono_us();
        pub_changed(p);
        engine_requests = 11 + 2 * i;
        pub_changed(p);
        if (mono_us() - t0 < 500) {
            judged++;
            assert_int_equal(pub_sent(p), before + 1); /* the second one waits */
        }
        loop_until_sent(base, p, before + 2); /* ... and goes out at the window's end */
    }
    assert_true(judged > 0);
    pub_free(p);
    event_base_free(base);
}

static void test_unchanged_load_is_not_sent_again(void **state)
{
    struct event_base *base = event_base_new();
    struct publisher *p = start(base);
    int64_t t0;

    (void) state;
    engine_requests = 7;
    pub_changed(p);
    assert_int_equal(pub_sent(p), 1);
    t0 = mono_us();
    while (mono_us() - t0 < 5000)
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    pub_changed(p); /* the same load: nothing new to say */
    t0 = mono_us();
    while (mono_us() - t0 < 5000)
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    assert_int_equal(pub_sent(p), 1);
    pub_now(p); /* every rank, changed or not (a state change, e.g. draining) */
    assert_int_equal(pub_sent(p), 2);
    assert_int_equal(pub_seq(p), 2);
    pub_free(p);
    event_base_free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_leading_edge_goes_out_at_once),
        cmocka_unit_test(test_changes_within_a_millisecond_coalesce),
        cmocka_unit_test(test_unchanged_load_is_not_sent_again),
    };

    /* The publishers' sockets are left to the exit, as programs leave theirs (nngclose.h). */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
