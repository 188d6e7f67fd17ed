/* Unit tests for xmalloc_huge: small sizes as xmalloc, large ones aligned to a huge page and
 * usable to their last byte, and both freed by free(). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "util/xmalloc.h"

#include <stdlib.h>
#include <string.h>

static void test_huge(void **state)
{
    static const size_t sizes[] = {1, 4096, ((size_t) 2 << 20) - 1, (size_t) 2 << 20,
                                   ((size_t) 9 << 20) + 12345};
    size_t i;

    (void) state;
    for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned char *p = xmalloc_huge(sizes[i]);

        assert_non_null(p);
        if (sizes[i] >= ((size_t) 2 << 20))
            assert_int_equal((uintptr_t) p % ((size_t) 2 << 20), 0);
        memset(p, 0xa5, sizes[i]);
        assert_int_equal(p[sizes[i] - 1], 0xa5);
        free(p);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_huge),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
