/* testenv: fixtures of the option tests (see testenv.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testenv.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static const char *const *fake_env;

void testenv_set(const char *const *pairs)
{
    fake_env = pairs;
}

const char *testenv_get(const char *name)
{
    for (const char *const *p = fake_env; p && *p; p += 2)
        if (strcmp(p[0], name) == 0)
            return p[1];
    return NULL;
}

int testenv_args(char **argv, int max, char *prog, va_list ap)
{
    int argc = 0;

    argv[argc++] = prog;
    for (char *a; (a = va_arg(ap, char *)) != NULL;) {
        assert_true(argc < max - 1);
        argv[argc++] = a;
    }
    argv[argc] = NULL;
    return argc;
}

void testenv_write(char *path, const char *text)
{
    int fd;

    if (path[0] == '\0') {
        strcpy(path, "/tmp/admit-testenv-XXXXXX");
        fd = mkstemp(path);
    } else {
        fd = open(path, O_WRONLY | O_TRUNC);
    }
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t) strlen(text));
    close(fd);
}

const char *testenv_join(const struct opt_list *l, char *buf, size_t len)
{
    size_t used = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < l->n; i++) {
        int n = snprintf(buf + used, len - used, "%s%s", i > 0 ? "," : "", l->items[i]);

        assert_true(n >= 0 && (size_t) n < len - used);
        used += (size_t) n;
    }
    return buf;
}

/* The address space now, from /proc/self/status (VmSize, kB). */
static size_t vm_size(void)
{
    char line[128];
    size_t kb = 0;
    FILE *f = fopen("/proc/self/status", "r");

    assert_non_null(f);
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmSize: %zu kB", &kb) == 1)
            break;
    fclose(f);
    assert_true(kb > 0);
    return kb * 1024;
}

void testenv_memory_cap(size_t bytes)
{
    struct rlimit rl;

    if (TESTENV_ASAN)
        return;
    assert_int_equal(getrlimit(RLIMIT_AS, &rl), 0);
    rl.rlim_cur = vm_size() + bytes;
    assert_int_equal(setrlimit(RLIMIT_AS, &rl), 0);
}

void testenv_memory_uncap(void)
{
    struct rlimit rl;

    if (TESTENV_ASAN)
        return;
    assert_int_equal(getrlimit(RLIMIT_AS, &rl), 0);
    rl.rlim_cur = rl.rlim_max;
    assert_int_equal(setrlimit(RLIMIT_AS, &rl), 0);
}
