/* Unit tests for the classifier interface (src/router/classify.c, admit/classify.h): the
 * request's facts, the thresholds of its class, of another class and the router-wide ones as
 * read at the start, changing class, what a classifier's answer does, the room rule against
 * the core's, room anywhere against the selection view, and plugins loaded for real: the
 * example classifier (examples/classifier/) and the broken ones the loader must refuse. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "router/classify.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifndef DEMOTE_LARGE_SO
#error "DEMOTE_LARGE_SO: the path of the example plugin, from tests/meson.build"
#endif
#ifndef CLASSIFY_PLUGIN_DIR
#error "CLASSIFY_PLUGIN_DIR: where tests/meson.build builds the broken plugins"
#endif

/* The classes every test classifies into: an interactive class busy above 2048 prefill
 * tokens, a batch class busy above twice the step budget (16384 tokens on the ranks below),
 * one judged on decode blocks alone, and one with almost no room. */
#define THRESHOLDS(decode, prefill, frac)                                                          \
    {                                                                                              \
        .active_decode_blocks_threshold = (decode), .active_prefill_tokens_threshold = (prefill),  \
        .active_prefill_tokens_threshold_frac = (frac)                                             \
    }
static const struct classify_class classes[] = {
    {"interactive", THRESHOLDS(NAN, 2048, NAN)},
    {"batch", THRESHOLDS(NAN, -1, 2.0)},
    {"decode", THRESHOLDS(0.5, -1, NAN)},
    {"tight", THRESHOLDS(NAN, 10, NAN)},
};
#define NCLASSES (sizeof classes / sizeof classes[0])

/* An idle, serving rank: 10000 KV blocks of 16 tokens, a step budget of 8192 tokens. */
static struct admit_load idle(int w, int64_t rank)
{
    struct admit_load m;

    admit_load_init(&m);
    snprintf(m.worker_id, sizeof m.worker_id, "w%d", w);
    m.dp_rank = rank;
    m.heartbeat_ms = 1000;
    m.kv_total_blocks = 10000;
    m.kv_block_size = 16;
    m.kv_used_blocks = 0;
    m.active_decode_blocks = 0;
    m.active_prefill_tokens = 0;
    m.max_num_batched_tokens = 8192;
    return m;
}

static void message(struct sel *s, int w, int64_t rank, int64_t now)
{
    struct admit_load m = idle(w, rank);

    sel_message(s, w, &m, now);
}

/* n workers of one rank, heard from at time 0, each with booked tokens booked on it. */
static struct sel *workers(int n, int64_t booked, struct sel_booking *b)
{
    struct sel *s = sel_new(3, 16);

    for (int w = 0; w < n; w++) {
        assert_int_equal(sel_add_worker(s), w);
        message(s, w, 0, 0);
        if (booked > 0)
            sel_book(s, &b[w], w, 0, booked);
    }
    return s;
}

/* The request's headers: a table, looked up as the router's lookup does (case-insensitive). */
struct hdr {
    const char *name, *value;
};
static const struct hdr headers[] = {{"X-Tenant", "acme"}, {"Content-Type", "a/b"}, {NULL, NULL}};

static const char *header(const void *arg, const char *name)
{
    for (const struct hdr *h = arg; h->name != NULL; h++)
        if (strcasecmp(h->name, name) == 0)
            return h->value;
    return NULL;
}

/* Starts classifying a request of tokens prompt tokens for model "m1" in class builtin. */
static void start(struct admit_classify *c, struct sel *s, int builtin, int64_t tokens,
                  const struct busy_thresholds *reject)
{
    struct classify_view v = {classes, NCLASSES, s};
    struct classify_request r = {"m1", tokens, header, headers};

    classify_init(c, &v, &r, builtin, reject, 0);
}

/* Starts c again with the same request, at now_ms. */
static void restart_at(struct admit_classify *c, int builtin, int64_t now_ms)
{
    struct classify_view v = c->view;
    struct classify_request r = c->req;

    classify_init(c, &v, &r, builtin, NULL, now_ms);
}

/* Thresholds that are not what any accessor returns: to see that a refusal writes nothing. */
static struct admit_thresholds sentinel(void)
{
    struct admit_thresholds t = {-7, -7.0, -7.0};

    return t;
}

static void assert_thresholds(const struct admit_thresholds *a, int64_t prefill, double frac,
                              double decode)
{
    assert_int_equal(a->prefill_tokens, prefill);
    if (isnan(frac))
        assert_true(isnan(a->prefill_frac));
    else
        assert_true(a->prefill_frac == frac);
    if (isnan(decode))
        assert_true(isnan(a->decode_frac));
    else
        assert_true(a->decode_frac == decode);
}

/* The queue thresholds of the class called name (NULL: the request's own) are these. */
static void assert_queue(const struct admit_classify *c, const char *name, int64_t prefill,
                         double frac, double decode)
{
    struct admit_thresholds t = sentinel();

    if (name != NULL)
        assert_int_equal(admit_queue_thresholds_for(c, name, &t), 0);
    else
        assert_int_equal(admit_queue_thresholds(c, &t), 0);
    assert_thresholds(&t, prefill, frac, decode);
}

/* The model, the prompt and the headers are the request's; none of each is "", 0, NULL. */
static void test_request_facts(void **state)
{
    struct sel *s = workers(0, 0, NULL);
    struct classify_view v = {classes, NCLASSES, s};
    struct classify_request bare = {NULL, 0, NULL, NULL};
    struct admit_classify c;

    (void) state;
    start(&c, s, 0, 123, NULL);
    assert_string_equal(admit_classify_model(&c), "m1");
    assert_int_equal(admit_classify_prompt_tokens(&c), 123);
    assert_string_equal(admit_classify_header(&c, "x-tenant"), "acme");
    assert_string_equal(admit_classify_header(&c, "X-TENANT"), "acme");
    assert_null(admit_classify_header(&c, "X-Missing"));
    assert_null(admit_classify_header(&c, NULL));
    classify_init(&c, &v, &bare, 0, NULL, 0);
    assert_string_equal(admit_classify_model(&c), "");
    assert_int_equal(admit_classify_prompt_tokens(&c), 0);
    assert_null(admit_classify_header(&c, "X-Tenant"));
    sel_free(s);
}

/* The class list is the router's, in its order. */
static void test_class_list(void **state)
{
    struct sel *s = workers(0, 0, NULL);
    struct admit_classify c;

    (void) state;
    start(&c, s, 1, 0, NULL);
    assert_int_equal(admit_classify_classes(&c), NCLASSES);
    for (size_t i = 0; i < NCLASSES; i++)
        assert_string_equal(admit_classify_class_at(&c, i), classes[i].name);
    assert_null(admit_classify_class_at(&c, NCLASSES));
    assert_string_equal(admit_classify_class(&c), "batch");
    sel_free(s);
}

/* Its own class's thresholds, another class's by name, and -1 (nothing written) for a class
 * that does not exist. */
static void test_queue_thresholds(void **state)
{
    struct sel *s = workers(0, 0, NULL);
    struct admit_classify c;
    struct admit_thresholds t;

    (void) state;
    start(&c, s, 0, 100, NULL);
    assert_string_equal(admit_classify_class(&c), "interactive");
    assert_queue(&c, NULL, 2048, NAN, NAN);
    assert_queue(&c, "batch", -1, 2.0, NAN);
    assert_queue(&c, "decode", -1, NAN, 0.5);
    assert_queue(&c, "interactive", 2048, NAN, NAN);
    t = sentinel();
    assert_int_equal(admit_queue_thresholds_for(&c, "nope", &t), -1);
    assert_int_equal(admit_queue_thresholds_for(&c, "Batch", &t), -1); /* names are exact */
    assert_int_equal(admit_queue_thresholds_for(&c, "", &t), -1);
    assert_int_equal(admit_queue_thresholds_for(&c, NULL, &t), -1);
    assert_thresholds(&t, -7, -7.0, -7.0);
    sel_free(s);
}

/* The router-wide thresholds are those at the start, whatever happens to the router's copy
 * afterwards; none given is all unset. */
static void test_reject_thresholds(void **state)
{
    struct sel *s = workers(0, 0, NULL);
    struct busy_thresholds r = {.active_decode_blocks_threshold = 0.9,
                                .active_prefill_tokens_threshold = 5000,
                                .active_prefill_tokens_threshold_frac = NAN};
    struct admit_classify c;
    struct admit_thresholds t;

    (void) state;
    start(&c, s, 0, 100, &r);
    r.active_decode_blocks_threshold = 0.1; /* /busy_threshold, mid-classification */
    r.active_prefill_tokens_threshold = 1;
    r.active_prefill_tokens_threshold_frac = 3.0;
    assert_int_equal(admit_reject_thresholds(&c, &t), 0);
    assert_thresholds(&t, 5000, NAN, 0.9);
    start(&c, s, 0, 100, NULL);
    assert_int_equal(admit_reject_thresholds(&c, &t), 0);
    assert_thresholds(&t, -1, NAN, NAN);
    sel_free(s);
}

/* Setting a class makes it the request's, thresholds included; an unknown name changes
 * nothing. */
static void test_set_class(void **state)
{
    struct sel *s = workers(0, 0, NULL);
    struct admit_classify c;

    (void) state;
    start(&c, s, 0, 100, NULL);
    assert_int_equal(admit_classify_set_class(&c, "batch"), 0);
    assert_string_equal(admit_classify_class(&c), "batch");
    assert_queue(&c, NULL, -1, 2.0, NAN);
    assert_int_equal(admit_classify_set_class(&c, "nope"), -1);
    assert_int_equal(admit_classify_set_class(&c, "BATCH"), -1);
    assert_int_equal(admit_classify_set_class(&c, NULL), -1);
    assert_string_equal(admit_classify_class(&c), "batch");
    assert_queue(&c, NULL, -1, 2.0, NAN);
    assert_int_equal(admit_classify_set_class(&c, "decode"), 0);
    assert_queue(&c, NULL, -1, NAN, 0.5);
    sel_free(s);
}

/* Classifiers for test_run: each sets the class arg names, and answers as its name says. */
static int set_keep(struct admit_classify *c, void *arg)
{
    return admit_classify_set_class(c, arg);
}

static int set_decline(struct admit_classify *c, void *arg)
{
    admit_classify_set_class(c, arg);
    return -1;
}

static int set_odd(struct admit_classify *c, void *arg)
{
    admit_classify_set_class(c, arg);
    return 7;
}

static int keep(struct admit_classify *c, void *arg)
{
    return 0;
}

/* 0 keeps the class set (or the built-in one if none was); anything else, or no classifier,
 * is the built-in choice; a request in no class stays in none unless the classifier sets
 * one. */
static void test_run(void **state)
{
    struct sel *s = workers(0, 0, NULL);
    struct admit_classify c;
    struct admit_thresholds t = sentinel();

    (void) state;
    start(&c, s, 0, 100, NULL);
    assert_int_equal(classify_run(&c, set_keep, "batch"), 1);
    assert_string_equal(admit_classify_class(&c), "batch");
    start(&c, s, 0, 100, NULL);
    assert_int_equal(classify_run(&c, set_decline, "batch"), 0);
    assert_string_equal(admit_classify_class(&c), "interactive");
    start(&c, s, 2, 100, NULL);
    assert_int_equal(classify_run(&c, set_odd, "batch"), 2);
    start(&c, s, 2, 100, NULL);
    assert_int_equal(classify_run(&c, keep, NULL), 2);
    start(&c, s, 3, 100, NULL);
    assert_int_equal(classify_run(&c, NULL, NULL), 3);
    /* No class: none, unless the classifier names one. */
    start(&c, s, -1, 100, NULL);
    assert_string_equal(admit_classify_class(&c), "");
    assert_int_equal(admit_queue_thresholds(&c, &t), -1);
    assert_thresholds(&t, -7, -7.0, -7.0);
    assert_int_equal(classify_run(&c, keep, NULL), -1);
    start(&c, s, (int) NCLASSES, 100, NULL); /* out of range is none too */
    assert_string_equal(admit_classify_class(&c), "");
    assert_int_equal(classify_run(&c, set_keep, "tight"), 3);
    sel_free(s);
}

/* admit_has_room is admission/busy.h's has_room() over a grid of loads, capacities and
 * thresholds, unknowns and boundaries included; NULL thresholds are all unset. */
static void test_has_room_grid(void **state)
{
    static const int64_t prefill[] = {-1, 0, 1, 99, 100, 101, 200, 5000};
    static const int64_t decode[] = {-1, 0, 49, 50, 51, 100};
    static const int64_t budget[] = {-1, 0, 100};
    static const int64_t total[] = {-1, 0, 100};
    static const int64_t abs_t[] = {-1, 0, 100};
    static const double frac_t[] = {NAN, 0.0, 0.5, 1.0, 2.0};
    static const double dec_t[] = {NAN, 0.0, 0.5, 1.0};
    size_t room = 0, full = 0;

    (void) state;
    for (size_t a = 0; a < sizeof prefill / sizeof *prefill; a++)
        for (size_t b = 0; b < sizeof decode / sizeof *decode; b++)
            for (size_t d = 0; d < sizeof budget / sizeof *budget; d++)
                for (size_t e = 0; e < sizeof total / sizeof *total; e++)
                    for (size_t f = 0; f < sizeof abs_t / sizeof *abs_t; f++)
                        for (size_t g = 0; g < sizeof frac_t / sizeof *frac_t; g++)
                            for (size_t h = 0; h < sizeof dec_t / sizeof *dec_t; h++) {
                                struct admit_rank_load l = {prefill[a], decode[b], 1, 1};
                                struct admit_rank_capacity cap = {budget[d], total[e], 16};
                                struct admit_thresholds t = {abs_t[f], frac_t[g], dec_t[h]};
                                struct busy_load bl = {prefill[a], decode[b], 1, 1};
                                struct busy_capacity bc = {budget[d], total[e], 16};
                                struct busy_thresholds bt = {dec_t[h], abs_t[f], frac_t[g]};
                                int want = has_room(&bl, &bc, &bt);

                                assert_int_equal(admit_has_room(&l, &cap, &t), want);
                                if (want)
                                    room++;
                                else
                                    full++;
                            }
    assert_true(room > 0 && full > 0); /* the grid judges both ways */
    for (size_t a = 0; a < sizeof prefill / sizeof *prefill; a++) {
        struct admit_rank_load l = {prefill[a], 1000000, 1, 1};
        struct admit_rank_capacity cap = {1, 1, 1};

        assert_true(admit_has_room(&l, &cap, NULL));
    }
}

/* The workers, their ranks, their booked load and capacity as the view holds them. */
static void test_ranks(void **state)
{
    struct sel *s = sel_new(3, 16);
    struct sel_booking b = {0};
    struct admit_classify c;
    struct admit_rank_load l;
    struct admit_rank_capacity cap;

    (void) state;
    sel_add_worker(s);
    sel_add_worker(s); /* never heard from */
    message(s, 0, 0, 0);
    message(s, 0, 1, 0);
    sel_book(s, &b, 0, 1, 100);
    start(&c, s, 0, 50, NULL);
    assert_int_equal(admit_classify_workers(&c), 2);
    assert_true(admit_classify_worker_alive(&c, 0));
    assert_false(admit_classify_worker_alive(&c, 1));
    assert_false(admit_classify_worker_alive(&c, 2));
    assert_int_equal(admit_classify_ranks(&c, 0), 2);
    assert_int_equal(admit_classify_ranks(&c, 1), 1);
    assert_int_equal(admit_classify_ranks(&c, 2), 0);
    assert_int_equal(admit_classify_rank(&c, 0, 1, &l, &cap), 0);
    assert_int_equal(l.prefill_tokens, 100);
    assert_int_equal(l.decode_blocks, 7); /* ceil(100 / 16) */
    assert_int_equal(l.requests, 1);
    assert_int_equal(l.observed, 1);
    assert_int_equal(cap.max_num_batched_tokens, 8192);
    assert_int_equal(cap.kv_total_blocks, 10000);
    assert_int_equal(cap.kv_block_size, 16);
    assert_int_equal(admit_classify_rank(&c, 0, 0, &l, NULL), 0);
    assert_int_equal(l.prefill_tokens, 0);
    assert_int_equal(l.requests, 0);
    assert_int_equal(admit_classify_rank(&c, 1, 0, &l, &cap), 0);
    assert_int_equal(l.prefill_tokens, 0);
    assert_int_equal(l.observed, 0);
    assert_true(cap.max_num_batched_tokens <= 0 && cap.kv_total_blocks <= 0 &&
                cap.kv_block_size <= 0);
    assert_int_equal(admit_classify_rank(&c, 0, 2, &l, &cap), -1);
    assert_int_equal(admit_classify_rank(&c, 1, 1, &l, &cap), -1);
    assert_int_equal(admit_classify_rank(&c, 2, 0, &l, &cap), -1);
    assert_int_equal(admit_classify_rank(&c, 0, 1, NULL, NULL), 0);
    /* Later, when worker 0 has gone silent past its missed heartbeats. */
    restart_at(&c, 0, 10000);
    assert_false(admit_classify_worker_alive(&c, 0));
    sel_free(s);
}

/* Room anywhere is the booked load plus this prompt, judged as selection judges it: on live
 * workers not busy by what they publish, an idle rank taking any request. */
static void test_room_anywhere(void **state)
{
    struct sel_booking b[3] = {{0}};
    struct sel *s = workers(2, 1000, b);
    struct admit_classify c;
    struct admit_thresholds inter = {2048, NAN, NAN}, batch = {-1, 2.0, NAN};
    struct admit_thresholds dec = {-1, NAN, 0.0}; /* busy with any block held */
    struct admit_load m;

    (void) state;
    start(&c, s, 0, 1048, NULL); /* 1000 + 1048 = 2048: at the threshold, room */
    assert_true(admit_classify_room_anywhere(&c, &inter));
    start(&c, s, 0, 1049, NULL);
    assert_false(admit_classify_room_anywhere(&c, &inter));
    start(&c, s, 0, 5000, NULL);
    assert_false(admit_classify_room_anywhere(&c, &inter));
    assert_true(admit_classify_room_anywhere(&c, &batch)); /* 6000 <= 16384 */
    assert_true(admit_classify_room_anywhere(&c, NULL));
    assert_false(admit_classify_room_anywhere(&c, &dec));
    start(&c, s, 0, 15384, NULL);
    assert_true(admit_classify_room_anywhere(&c, &batch));
    start(&c, s, 0, 15385, NULL);
    assert_false(admit_classify_room_anywhere(&c, &batch));
    /* A third worker with nothing booked takes any one request, whatever its size. */
    sel_add_worker(s);
    message(s, 2, 0, 0);
    start(&c, s, 0, 100000, NULL);
    assert_true(admit_classify_room_anywhere(&c, &inter));
    assert_true(admit_classify_room_anywhere(&c, &dec));
    /* ... unless it is busy by what it publishes under those thresholds. */
    m = idle(2, 0);
    m.active_prefill_tokens = 3000;
    sel_message(s, 2, &m, 0);
    assert_false(admit_classify_room_anywhere(&c, &inter));
    assert_true(admit_classify_room_anywhere(&c, &dec)); /* it publishes no blocks */
    /* Nobody alive: no room anywhere, even with no thresholds. */
    restart_at(&c, 0, 10000);
    assert_false(admit_classify_room_anywhere(&c, NULL));
    sel_free(s);
}

/* Asking for room chooses nothing: equal workers are still taken in turn. */
static void test_room_keeps_turn(void **state)
{
    struct sel *s = workers(3, 0, NULL);
    struct busy_thresholds none;
    struct admit_classify c;
    int w, last = -1;
    unsigned r;

    (void) state;
    busy_thresholds_unset(&none);
    start(&c, s, 0, 10, NULL);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(sel_pick(s, 0, 10, &none, -1, -1, &w, &r), SEL_OK);
        if (last >= 0)
            assert_int_equal(w, (last + 1) % 3);
        last = w;
        assert_true(admit_classify_room_anywhere(&c, NULL));
        assert_true(sel_room(s, 0, 10, &none));
    }
    sel_free(s);
}

/* Every function of admit/classify.h is exported for plugins to call, as admit-router links
 * (classify.dynlist), and the router's internals are not. */
static void test_exports(void **state)
{
    static const char *const api[] = {
        "admit_classify_model",    "admit_classify_prompt_tokens",
        "admit_classify_header",   "admit_classify_class",
        "admit_classify_classes",  "admit_classify_class_at",
        "admit_queue_thresholds",  "admit_queue_thresholds_for",
        "admit_reject_thresholds", "admit_classify_set_class",
        "admit_classify_workers",  "admit_classify_worker_alive",
        "admit_classify_ranks",    "admit_classify_rank",
        "admit_has_room",          "admit_classify_room_anywhere",
    };
    static const char *const internal[] = {"has_room", "sel_pick", "classify_run",
                                           "classify_plugin_open"};

    (void) state;
    for (size_t i = 0; i < sizeof api / sizeof *api; i++)
        assert_non_null(dlsym(RTLD_DEFAULT, api[i]));
    for (size_t i = 0; i < sizeof internal / sizeof *internal; i++)
        assert_null(dlsym(RTLD_DEFAULT, internal[i]));
}

/* The example plugin, loaded as admit-router loads it, and run on a view where the
 * interactive class has no room for a long prompt. */
static admit_classifier_fn demote_large(void)
{
    admit_classifier_fn fn = NULL;
    char err[512];

    if (classify_plugin_open(DEMOTE_LARGE_SO, &fn, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_non_null(fn);
    return fn;
}

/* The class a request of tokens in class builtin ends in, under reject thresholds reject. */
static const char *demoted(admit_classifier_fn fn, struct sel *s, int builtin, int64_t tokens,
                           const struct busy_thresholds *reject)
{
    struct admit_classify c;
    int k;

    start(&c, s, builtin, tokens, reject);
    k = classify_run(&c, fn, NULL);
    assert_int_equal(k >= 0 ? strcmp(classes[k].name, admit_classify_class(&c)) : 0, 0);
    return k >= 0 ? classes[k].name : "";
}

static void test_plugin_demotes_large(void **state)
{
    admit_classifier_fn fn = demote_large();
    struct sel_booking b[3] = {{0}};
    struct sel *s = workers(2, 1000, b); /* 1000 tokens booked on each */
    struct busy_thresholds reject;

    (void) state;
    unsetenv("ADMIT_DEMOTE_CLASS");
    unsetenv("ADMIT_DEMOTE_MIN_TOKENS");
    busy_thresholds_unset(&reject);
    /* 5000 tokens: no room in interactive (6000 > 2048), room in batch (<= 16384). */
    assert_string_equal(demoted(fn, s, 0, 5000, &reject), "batch");
    assert_string_equal(demoted(fn, s, 0, 5000, NULL), "batch");
    /* Short prompts stay, room or not (the second has none: 1000 + 1100 > 2048). */
    assert_string_equal(demoted(fn, s, 0, 100, &reject), "interactive");
    assert_string_equal(demoted(fn, s, 0, 1100, &reject), "interactive");
    /* Already in batch, or in another class with room for it. */
    assert_string_equal(demoted(fn, s, 1, 5000, &reject), "batch");
    assert_string_equal(demoted(fn, s, 2, 5000, &reject), "decode");
    /* Even the router-wide thresholds leave no room (6000 > 3000): it waits where it is. */
    reject.active_prefill_tokens_threshold = 3000;
    assert_string_equal(demoted(fn, s, 0, 5000, &reject), "interactive");
    reject.active_prefill_tokens_threshold = 6000;
    assert_string_equal(demoted(fn, s, 0, 5000, &reject), "batch");
    busy_thresholds_unset(&reject);
    /* The target has no room either, or does not exist. */
    setenv("ADMIT_DEMOTE_CLASS", "tight", 1);
    assert_string_equal(demoted(fn, s, 0, 5000, &reject), "interactive");
    setenv("ADMIT_DEMOTE_CLASS", "nope", 1);
    assert_string_equal(demoted(fn, s, 0, 5000, &reject), "interactive");
    setenv("ADMIT_DEMOTE_CLASS", "decode", 1);
    assert_string_equal(demoted(fn, s, 0, 5000, &reject), "decode");
    unsetenv("ADMIT_DEMOTE_CLASS");
    /* "Large" is a setting. */
    setenv("ADMIT_DEMOTE_MIN_TOKENS", "10000", 1);
    assert_string_equal(demoted(fn, s, 0, 5000, &reject), "interactive");
    setenv("ADMIT_DEMOTE_MIN_TOKENS", "1100", 1);
    assert_string_equal(demoted(fn, s, 0, 1100, &reject), "batch");
    unsetenv("ADMIT_DEMOTE_MIN_TOKENS");
    /* No class: none. */
    assert_string_equal(demoted(fn, s, -1, 5000, &reject), "");
    /* Once interactive has room somewhere (an idle worker), a long prompt stays in it. */
    sel_add_worker(s);
    message(s, 2, 0, 0);
    assert_string_equal(demoted(fn, s, 0, 5000, &reject), "interactive");
    sel_free(s);
}

/* Loading is idempotent: the same plugin twice is the same classifier. */
static void test_plugin_twice(void **state)
{
    (void) state;
    assert_true(demote_large() == demote_large());
}

/* The loader's refusals: what it says, and that it hands out nothing. */
static void refused(const char *path, const char *want1, const char *want2)
{
    admit_classifier_fn fn = keep;
    char err[512] = "";

    assert_int_equal(classify_plugin_open(path, &fn, err, sizeof err), -1);
    assert_true(fn == keep);
    if (strstr(err, want1) == NULL || strstr(err, want2) == NULL)
        fail_msg("%s: want \"%s\" and \"%s\" in: %s", path, want1, want2, err);
}

static void test_plugin_errors(void **state)
{
    (void) state;
    refused(CLASSIFY_PLUGIN_DIR "/no_such_plugin.so", "no_such_plugin.so",
            "No such file or directory");
    refused(CLASSIFY_PLUGIN_DIR "/plugin_no_classifier.so", "not a classifier plugin",
            "exports no admit_classifier (");
    refused(CLASSIFY_PLUGIN_DIR "/plugin_no_abi.so", "not a classifier plugin",
            "exports no admit_classifier_abi");
    refused(CLASSIFY_PLUGIN_DIR "/plugin_other_abi.so", "built for classifier ABI 2",
            "this router has 1");
    refused(CLASSIFY_PLUGIN_DIR "/plugin_internal.so", "undefined symbol", "busy_thresholds_unset");
    refused(ADMIT_SOURCE_ROOT "/examples/classifier/README.md", "cannot load classifier plugin",
            "README.md");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_facts),    cmocka_unit_test(test_class_list),
        cmocka_unit_test(test_queue_thresholds), cmocka_unit_test(test_reject_thresholds),
        cmocka_unit_test(test_set_class),        cmocka_unit_test(test_run),
        cmocka_unit_test(test_has_room_grid),    cmocka_unit_test(test_ranks),
        cmocka_unit_test(test_room_anywhere),    cmocka_unit_test(test_room_keeps_turn),
        cmocka_unit_test(test_exports),          cmocka_unit_test(test_plugin_demotes_large),
        cmocka_unit_test(test_plugin_twice),     cmocka_unit_test(test_plugin_errors),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
