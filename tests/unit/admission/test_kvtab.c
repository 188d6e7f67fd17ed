/* Unit tests for kvtab: lookups of keyed, unkeyable and absent hashes; the least recently
 * stored evicted first (a put again refreshes); deletion keeping every other entry findable
 * (held against a plain array through thousands of random operations, with hashes that
 * collide in the index); the bound lowered; clear; iteration oldest first. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "admission/kvtab.h"

#include <stdlib.h>

static void test_basics(void **state)
{
    struct kvtab *t = kvtab_new(3);
    struct kvtab_ent ev;
    uint64_t key = 0;

    (void) state;
    assert_int_equal(kvtab_get(t, 1, &key), KVTAB_ABSENT);
    assert_int_equal(kvtab_put(t, 1, 1, 100, &ev), 0);
    assert_int_equal(kvtab_put(t, 2, 0, 0, &ev), 0);
    assert_int_equal(kvtab_put(t, 3, 1, 300, &ev), 0);
    assert_int_equal(kvtab_get(t, 1, &key), KVTAB_KEYED);
    assert_true(key == 100);
    assert_int_equal(kvtab_get(t, 2, &key), KVTAB_UNKEYABLE);
    assert_int_equal(kvtab_count(t), 3);
    /* 1 stored again: now 2 is the least recently stored, and goes */
    assert_int_equal(kvtab_put(t, 1, 1, 101, &ev), 0);
    assert_int_equal(kvtab_put(t, 4, 1, 400, &ev), 1);
    assert_true(ev.hash == 2 && !ev.keyed);
    assert_int_equal(kvtab_put(t, 5, 1, 500, &ev), 1);
    assert_true(ev.hash == 3 && ev.keyed && ev.key == 300);
    assert_int_equal(kvtab_get(t, 1, &key), KVTAB_KEYED);
    assert_true(key == 101);
    assert_int_equal(kvtab_del(t, 1, &key), KVTAB_KEYED);
    assert_true(key == 101);
    assert_int_equal(kvtab_del(t, 1, &key), KVTAB_ABSENT);
    assert_int_equal(kvtab_count(t), 2);
    /* iteration: oldest first (4, then 5) */
    {
        size_t c = kvtab_next(t, 0, &ev);

        assert_true(c != 0 && ev.hash == 4 && ev.key == 400);
        c = kvtab_next(t, c, &ev);
        assert_true(c != 0 && ev.hash == 5);
        assert_int_equal(kvtab_next(t, c, &ev), 0);
    }
    /* the bound lowered: the oldest go, one per call */
    assert_int_equal(kvtab_set_bound(t, 1, &ev), 1);
    assert_true(ev.hash == 4);
    assert_int_equal(kvtab_set_bound(t, 1, &ev), 0);
    assert_int_equal(kvtab_bound(t), 1);
    kvtab_clear(t);
    assert_int_equal(kvtab_count(t), 0);
    assert_int_equal(kvtab_get(t, 5, &key), KVTAB_ABSENT);
    assert_int_equal(kvtab_next(t, 0, &ev), 0);
    assert_int_equal(kvtab_put(t, 6, 1, 600, &ev), 0);
    assert_int_equal(kvtab_get(t, 6, &key), KVTAB_KEYED);
    kvtab_free(t);
    kvtab_free(NULL);
}

#define N     5000
#define BOUND 700

/* Random puts, deletes and lookups, over hashes that share their index's home slots (the
 * high bits the index uses are few), against a plain array with the same LRU rule. */
static void test_against_model(void **state)
{
    static uint64_t mh[BOUND + 1], mk[BOUND + 1];
    static int mkeyed[BOUND + 1];
    size_t mn = 0;
    struct kvtab *t = kvtab_new(BOUND);
    uint32_t rng = 12345;

    (void) state;
    for (int step = 0; step < 60000; step++) {
        uint64_t h, key = 0;
        size_t i;
        int op;

        rng = rng * 1103515245u + 12345u;
        op = (int) (rng >> 16) % 3;
        rng = rng * 1103515245u + 12345u;
        h = (uint64_t) ((rng >> 8) % N) << 40 | ((rng >> 8) % 7); /* clustered */
        for (i = 0; i < mn && mh[i] != h; i++)
            ;
        if (op == 0) { /* put: to the model's end (most recent) */
            struct kvtab_ent ev;
            int keyed = (int) (rng & 1), out = kvtab_put(t, h, keyed, h ^ 77, &ev);

            if (i < mn) {
                for (; i + 1 < mn; i++) {
                    mh[i] = mh[i + 1], mk[i] = mk[i + 1], mkeyed[i] = mkeyed[i + 1];
                }
                mn--;
                assert_int_equal(out, 0);
            } else if (mn == BOUND) {
                assert_int_equal(out, 1);
                assert_true(ev.hash == mh[0] && ev.keyed == mkeyed[0]);
                for (i = 0; i + 1 < mn; i++)
                    mh[i] = mh[i + 1], mk[i] = mk[i + 1], mkeyed[i] = mkeyed[i + 1];
                mn--;
            } else {
                assert_int_equal(out, 0);
            }
            mh[mn] = h, mk[mn] = h ^ 77, mkeyed[mn] = keyed;
            mn++;
        } else if (op == 1) { /* delete */
            enum kvtab_found f = kvtab_del(t, h, &key);

            if (i == mn) {
                assert_int_equal(f, KVTAB_ABSENT);
            } else {
                assert_int_equal(f, mkeyed[i] ? KVTAB_KEYED : KVTAB_UNKEYABLE);
                for (; i + 1 < mn; i++)
                    mh[i] = mh[i + 1], mk[i] = mk[i + 1], mkeyed[i] = mkeyed[i + 1];
                mn--;
            }
        } else {
            enum kvtab_found f = kvtab_get(t, h, &key);

            assert_int_equal(f, i == mn ? KVTAB_ABSENT : mkeyed[i] ? KVTAB_KEYED : KVTAB_UNKEYABLE);
            if (f == KVTAB_KEYED)
                assert_true(key == mk[i]);
        }
        assert_int_equal(kvtab_count(t), mn);
    }
    /* every entry findable, in the model's order */
    {
        struct kvtab_ent e;
        size_t c = 0, j = 0;

        while ((c = kvtab_next(t, c, &e)) != 0) {
            uint64_t key;

            assert_true(j < mn && e.hash == mh[j]);
            assert_int_equal(kvtab_get(t, e.hash, &key), mkeyed[j] ? KVTAB_KEYED : KVTAB_UNKEYABLE);
            j++;
        }
        assert_int_equal(j, mn);
    }
    kvtab_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basics),
        cmocka_unit_test(test_against_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
