/* Unit tests for the router's model table (src/router/model_table.c) and selection among the
 * workers it says may take a model (sel_pick_in, sel_gate_in): lists known and unknown,
 * changes, drops, growth past 64 workers, the table's name limit, and the filter in the pass
 * (candidates, turns, all-busy against no-worker, pins). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "router/model_table.h"
#include "router/select.h"

#include <stdio.h>
#include <string.h>

static struct admit_load_models list_of(const char *const *names)
{
    struct admit_load_models l;

    admit_load_models_clear(&l);
    for (; *names; names++)
        assert_int_equal(admit_load_models_add(&l, *names, strlen(*names)), 0);
    return l;
}

static struct admit_load_models unknown(void)
{
    struct admit_load_models l;

    admit_load_models_unknown(&l);
    return l;
}

static int bit(const uint64_t *e, int k)
{
    return (int) ((e[k / 64] >> (k % 64)) & 1);
}

static unsigned learned_n, unlearned_n;
static char learned_last[128], unlearned_last[128];

static void learned(void *arg, const char *name)
{
    (void) arg;
    learned_n++;
    snprintf(learned_last, sizeof learned_last, "%s", name);
}

static void unlearned(void *arg, const char *name)
{
    (void) arg;
    unlearned_n++;
    snprintf(unlearned_last, sizeof unlearned_last, "%s", name);
}

static void test_unknown_takes_any(void **state)
{
    struct model_table *m = mtab_new();
    const uint64_t *e = (const uint64_t *) 1;

    (void) state;
    /* No workers at all: no filter (selection answers that none is available). */
    assert_int_equal(mtab_eligible(m, "a", &e), MTAB_ANY);
    assert_null(e);
    mtab_reserve(m, 3);
    /* Never heard from: unknown, so every model goes anywhere. */
    assert_int_equal(mtab_eligible(m, "a", &e), MTAB_ANY);
    assert_null(e);
    assert_int_equal(mtab_eligible(m, "", &e), MTAB_ANY);
    assert_int_equal(mtab_eligible(m, NULL, &e), MTAB_ANY);
    assert_int_equal(mtab_list(m, 1)->n, ADMIT_LOAD_UNKNOWN);
    assert_int_equal(mtab_list(m, 99)->n, ADMIT_LOAD_UNKNOWN);
    mtab_free(m);
    mtab_free(NULL);
}

static void test_known_lists(void **state)
{
    static const char *const a[] = {"A", NULL}, *const b[] = {"B", "shared", NULL},
                             *const c[] = {"A", "shared", NULL};
    struct model_table *m = mtab_new();
    struct admit_load_models la = list_of(a), lb = list_of(b), lc = list_of(c);
    const uint64_t *e;

    (void) state;
    learned_n = unlearned_n = 0;
    mtab_set_hooks(m, learned, unlearned, NULL);
    mtab_reserve(m, 3);
    assert_int_equal(mtab_set(m, 0, &la), 1);
    assert_int_equal(learned_n, 1);
    assert_string_equal(learned_last, "A");
    assert_int_equal(mtab_set(m, 0, &la), 0); /* the same list again */
    assert_int_equal(mtab_set(m, 1, &lb), 1);
    assert_int_equal(learned_n, 3);
    /* Worker 2 is unknown: it takes A, B and anything else besides. */
    assert_int_equal(mtab_eligible(m, "A", &e), MTAB_SOME);
    assert_true(bit(e, 0) && !bit(e, 1) && bit(e, 2));
    assert_int_equal(mtab_eligible(m, "B", &e), MTAB_SOME);
    assert_true(!bit(e, 0) && bit(e, 1) && bit(e, 2));
    assert_int_equal(mtab_eligible(m, "nobody", &e), MTAB_SOME);
    assert_true(!bit(e, 0) && !bit(e, 1) && bit(e, 2));
    /* Worker 2 speaks: every list is known. */
    assert_int_equal(mtab_set(m, 2, &lc), 1);
    assert_int_equal(learned_n, 3); /* no new name */
    assert_int_equal(mtab_eligible(m, "A", &e), MTAB_SOME);
    assert_true(bit(e, 0) && !bit(e, 1) && bit(e, 2));
    assert_int_equal(mtab_eligible(m, "shared", &e), MTAB_SOME);
    assert_true(!bit(e, 0) && bit(e, 1) && bit(e, 2));
    assert_int_equal(mtab_eligible(m, "nobody", &e), MTAB_NONE);
    assert_non_null(e);
    assert_true(!bit(e, 0) && !bit(e, 1) && !bit(e, 2));
    /* A model every worker takes needs no filter. */
    assert_int_equal(mtab_set(m, 0, &lc), 1);
    assert_int_equal(unlearned_n, 0);
    assert_int_equal(mtab_set(m, 1, &lc), 1);
    assert_int_equal(learned_n, 3);
    assert_int_equal(unlearned_n, 1); /* B: no list holds it any more */
    assert_string_equal(unlearned_last, "B");
    assert_int_equal(mtab_eligible(m, "shared", &e), MTAB_ANY);
    assert_null(e);
    /* B is served by nobody now, and nobody takes any: it does not exist. */
    assert_int_equal(mtab_eligible(m, "B", &e), MTAB_NONE);
    /* An empty list is known: it takes no named model. */
    {
        struct admit_load_models none;
        admit_load_models_clear(&none);
        assert_int_equal(mtab_set(m, 1, &none), 1);
        assert_int_equal(mtab_eligible(m, "shared", &e), MTAB_SOME);
        assert_true(bit(e, 0) && !bit(e, 1) && bit(e, 2));
        assert_int_equal(mtab_eligible(m, "", &e), MTAB_ANY);
    }
    /* A worker that goes back to unknown (an older admitd, a list too long) takes any. */
    {
        struct admit_load_models u = unknown();
        assert_int_equal(mtab_set(m, 1, &u), 1);
        assert_int_equal(mtab_eligible(m, "B", &e), MTAB_SOME);
        assert_true(!bit(e, 0) && bit(e, 1) && !bit(e, 2));
        assert_int_equal(mtab_eligible(m, "shared", &e), MTAB_ANY);
        assert_int_equal(mtab_list(m, 1)->n, ADMIT_LOAD_UNKNOWN);
    }
    mtab_free(m);
}

static void test_drop_and_return(void **state)
{
    static const char *const a[] = {"A", NULL}, *const b[] = {"B", NULL};
    struct model_table *m = mtab_new();
    struct admit_load_models la = list_of(a), lb = list_of(b), u = unknown();
    const uint64_t *e;

    (void) state;
    learned_n = unlearned_n = 0;
    mtab_set_hooks(m, learned, unlearned, NULL);
    mtab_reserve(m, 2);
    mtab_set(m, 0, &la);
    mtab_set(m, 1, &lb);
    assert_int_equal(learned_n, 2);
    mtab_drop(m, 1);
    assert_int_equal(unlearned_n, 1); /* B went with its only worker */
    assert_string_equal(unlearned_last, "B");
    mtab_drop(m, 1); /* twice is once */
    mtab_drop(m, 7); /* never known */
    assert_int_equal(unlearned_n, 1);
    assert_int_equal(mtab_eligible(m, "B", &e), MTAB_NONE);
    assert_int_equal(mtab_eligible(m, "A", &e), MTAB_ANY); /* the only worker left */
    /* A dropped unknown worker takes nothing either. */
    mtab_set(m, 0, &u);
    mtab_drop(m, 0);
    assert_int_equal(mtab_eligible(m, "A", &e), MTAB_ANY); /* none left: selection 503 */
    assert_int_equal(unlearned_n, 2); /* A went with worker 0's list, unknown since */
    assert_string_equal(unlearned_last, "A");
    /* Back with a list. */
    assert_int_equal(mtab_set(m, 1, &lb), 1);
    assert_int_equal(learned_n, 3);
    assert_string_equal(learned_last, "B");
    assert_int_equal(mtab_eligible(m, "B", &e), MTAB_ANY);
    assert_int_equal(mtab_eligible(m, "A", &e), MTAB_NONE);
    mtab_free(m);
}

/* Bitsets grow past one word, and keep what they held. */
static void test_many_workers(void **state)
{
    static const char *const a[] = {"A", NULL}, *const b[] = {"B", NULL};
    struct model_table *m = mtab_new();
    struct admit_load_models la = list_of(a), lb = list_of(b);
    const uint64_t *e;

    (void) state;
    mtab_reserve(m, 10);
    for (int k = 0; k < 10; k++)
        mtab_set(m, k, k % 2 ? &lb : &la);
    mtab_set(m, 199, &lb); /* 11 .. 198 come in unknown */
    assert_int_equal(mtab_eligible(m, "A", &e), MTAB_SOME);
    for (int k = 0; k < 200; k++)
        assert_int_equal(bit(e, k), k < 10 ? k % 2 == 0 : k != 199);
    for (int k = 10; k < 199; k++)
        mtab_set(m, k, &la);
    assert_int_equal(mtab_eligible(m, "B", &e), MTAB_SOME);
    for (int k = 0; k < 200; k++)
        assert_int_equal(bit(e, k), (k < 10 && k % 2) || k == 199);
    assert_int_equal(mtab_eligible(m, "C", &e), MTAB_NONE);
    mtab_free(m);
}

/* Names nobody lists are forgotten when the table is full; a list that cannot fit makes its
 * worker unknown (it takes any model), never a worker that serves less than it does. */
static void test_name_limit(void **state)
{
    struct model_table *m = mtab_new();
    struct admit_load_models l;
    const uint64_t *e;
    char name[32];
    int w = 0;

    (void) state;
    learned_n = unlearned_n = 0;
    mtab_set_hooks(m, learned, unlearned, NULL);
    mtab_reserve(m, 2);
    /* Worker 1 lists fixed names; worker 0 churns through many more. */
    {
        static const char *const fixed[] = {"keep", NULL};
        l = list_of(fixed);
        mtab_set(m, 1, &l);
    }
    for (int i = 0; i < MTAB_NAMES_MAX * 2; i += 8) {
        admit_load_models_clear(&l);
        for (int k = 0; k < 8; k++) {
            snprintf(name, sizeof name, "m%d", i + k);
            assert_int_equal(admit_load_models_add(&l, name, strlen(name)), 0);
        }
        mtab_set(m, w, &l);
        assert_true(mtab_names(m) <= MTAB_NAMES_MAX);
    }
    snprintf(name, sizeof name, "m%d", MTAB_NAMES_MAX * 2 - 1);
    assert_int_equal(mtab_eligible(m, name, &e), MTAB_SOME);
    assert_true(bit(e, 0) && !bit(e, 1));
    assert_int_equal(mtab_eligible(m, "keep", &e), MTAB_SOME);
    assert_true(!bit(e, 0) && bit(e, 1));
    assert_int_equal(mtab_eligible(m, "m0", &e), MTAB_NONE);
    /* Each name was told once as it came and once as it went, those forgotten to make room
     * too: what is told served and not unserved is what the lists hold now. */
    assert_int_equal(learned_n, MTAB_NAMES_MAX * 2 + 1);
    assert_int_equal(unlearned_n, MTAB_NAMES_MAX * 2 - 8);
    mtab_free(m);
}

/* ---- selection among the eligible --------------------------------------------------- */

static struct sel *view(int n)
{
    struct sel *s = sel_new(3, 16);

    for (int w = 0; w < n; w++) {
        struct admit_load m;

        assert_int_equal(sel_add_worker(s), w);
        admit_load_init(&m);
        snprintf(m.worker_id, sizeof m.worker_id, "w%d", w);
        m.kv_total_blocks = 100;
        m.kv_block_size = 16;
        m.kv_used_blocks = m.active_decode_blocks = m.active_prefill_tokens = 0;
        m.max_num_batched_tokens = 100;
        sel_message(s, w, &m, 0);
    }
    return s;
}

static void test_pick_among(void **state)
{
    struct sel *s = view(4);
    uint64_t e[1] = {(1u << 1) | (1u << 3)};
    int seen[4] = {0}, w;
    unsigned r;

    (void) state;
    for (int i = 0; i < 40; i++) {
        assert_int_equal(sel_pick_in(s, 10, 10, NULL, -1, -1, e, &w, &r), SEL_OK);
        seen[w]++;
    }
    /* Only the eligible, and in turn. */
    assert_int_equal(seen[0] + seen[2], 0);
    assert_int_equal(seen[1], 20);
    assert_int_equal(seen[3], 20);
    /* Excluding one leaves the other. */
    assert_int_equal(sel_pick_in(s, 10, 10, NULL, 3, -1, e, &w, &r), SEL_OK);
    assert_int_equal(w, 1);
    /* NULL is every worker, as sel_pick. */
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < 40; i++) {
        assert_int_equal(sel_pick_in(s, 10, 10, NULL, -1, -1, NULL, &w, &r), SEL_OK);
        seen[w]++;
    }
    for (int k = 0; k < 4; k++)
        assert_int_equal(seen[k], 10);
    sel_free(s);
}

static void test_pick_among_busy_or_none(void **state)
{
    struct sel *s = view(3);
    struct busy_thresholds t;
    uint64_t only2[1] = {1u << 2}, none[1] = {0};
    int w;
    unsigned r;

    (void) state;
    /* No worker eligible: none available, though all are alive. */
    assert_int_equal(sel_pick_in(s, 10, 10, NULL, -1, -1, none, &w, &r), SEL_NO_WORKER);
    assert_int_equal(sel_gate_in(s, 10, 10, NULL, -1, none), SEL_NO_WORKER);
    /* The eligible one without room: all busy, whatever the others have. */
    busy_thresholds_unset(&t);
    t.active_prefill_tokens_threshold = 50;
    assert_int_equal(sel_pick_in(s, 10, 10, &t, -1, -1, only2, &w, &r), SEL_OK);
    assert_int_equal(w, 2);
    {
        struct sel_booking b = {0};
        sel_book(s, &b, 2, 0, 60);
        assert_int_equal(sel_pick_in(s, 10, 10, &t, -1, -1, only2, &w, &r), SEL_ALL_BUSY);
        assert_int_equal(sel_gate_in(s, 10, 10, &t, -1, only2), SEL_ALL_BUSY);
        assert_int_equal(sel_pick_in(s, 10, 10, &t, -1, -1, NULL, &w, &r), SEL_OK);
        assert_true(w != 2);
        sel_release(s, &b);
    }
    /* The eligible one silent past its heartbeats (the others are heard again): none. */
    {
        for (int k = 0; k < 2; k++) {
            struct admit_load m;
            admit_load_init(&m);
            snprintf(m.worker_id, sizeof m.worker_id, "w%d", k);
            sel_message(s, k, &m, 10000);
        }
        assert_int_equal(sel_pick_in(s, 10001, 10, NULL, -1, -1, only2, &w, &r), SEL_NO_WORKER);
        assert_int_equal(sel_pick_in(s, 10001, 10, NULL, -1, -1, NULL, &w, &r), SEL_OK);
    }
    /* A pin with a bitset that leaves it out: none (the router passes NULL for pins). */
    assert_int_equal(sel_pick_in(s, 10, 10, NULL, -1, 1, only2, &w, &r), SEL_NO_WORKER);
    sel_free(s);
}

/* The table's bitset drives the pass: 70 workers, so that it spans two words. */
static void test_table_drives_pass(void **state)
{
    static const char *const a[] = {"A", NULL}, *const b[] = {"B", NULL};
    struct sel *s = view(70);
    struct model_table *m = mtab_new();
    struct admit_load_models la = list_of(a), lb = list_of(b);
    const uint64_t *e;
    int w;
    unsigned r;

    (void) state;
    mtab_reserve(m, sel_workers(s));
    for (int k = 0; k < 70; k++)
        mtab_set(m, k, k == 66 ? &lb : &la);
    assert_int_equal(mtab_eligible(m, "B", &e), MTAB_SOME);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(sel_pick_in(s, 10, 10, NULL, -1, -1, e, &w, &r), SEL_OK);
        assert_int_equal(w, 66);
    }
    assert_int_equal(mtab_eligible(m, "A", &e), MTAB_SOME);
    for (int i = 0; i < 200; i++) {
        assert_int_equal(sel_pick_in(s, 10, 10, NULL, -1, -1, e, &w, &r), SEL_OK);
        assert_true(w != 66);
    }
    mtab_free(m);
    sel_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unknown_takes_any),
        cmocka_unit_test(test_known_lists),
        cmocka_unit_test(test_drop_and_return),
        cmocka_unit_test(test_many_workers),
        cmocka_unit_test(test_name_limit),
        cmocka_unit_test(test_pick_among),
        cmocka_unit_test(test_pick_among_busy_or_none),
        cmocka_unit_test(test_table_drives_pass),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
