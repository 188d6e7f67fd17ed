/* malloc_count: an LD_PRELOAD shim that counts a process's calls to the allocator, so that the
 * pass-through benchmark (tests/bench/run.py, scenario "costs") can say how many allocations a
 * proxied request costs in steady state, for admitd, HAProxy and nginx alike, none of them
 * rebuilt:
 *
 *   MALLOC_COUNT_FILE=/tmp/counts LD_PRELOAD=build-bench/tests/bench/malloc_count.so haproxy ...
 *
 * The counters live in MALLOC_COUNT_FILE itself, mapped shared, and the reader reads the file
 * whenever it likes (the layout is struct counts below, little-endian). There is no signal to
 * ask for them and no thread to write them out: a signal of ours would collide with the
 * proxies' own (nginx's master takes SIGUSR2 as "upgrade the binary"), and a thread would not
 * survive nginx's fork into its worker, where a shared mapping does. So nginx's master and
 * worker add into one set of counters; the master allocates nothing per request.
 *
 * Every call is passed on to the next definition (glibc's, found with dlsym(RTLD_NEXT)); the
 * shim changes nothing of how memory is allocated, only counts. The memalign family is counted
 * too (nginx takes its per-request pools from posix_memalign), and reallocarray as a realloc
 * (glibc's calls its own realloc internally, past any interposer). Not counted: valloc and
 * pvalloc, which none of the three calls. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* What the file holds: "MALLOCNT" and then one uint64 per kind of call, in this order. */
struct counts {
    char magic[8];
    _Atomic uint64_t malloc;
    _Atomic uint64_t calloc;
    _Atomic uint64_t realloc;
    _Atomic uint64_t memalign; /* posix_memalign, aligned_alloc, memalign */
    _Atomic uint64_t free;     /* of a pointer; free(NULL) does nothing and is not counted */
};

/* Until the constructor has mapped the file (the loader and other libraries' constructors
 * allocate before it runs), calls are counted here; the bench reads differences only. */
static struct counts boot;
static _Atomic(struct counts *) counts = &boot;

static void *(*next_malloc)(size_t);
static void *(*next_calloc)(size_t, size_t);
static void *(*next_realloc)(void *, size_t);
static void (*next_free)(void *);
static int (*next_posix_memalign)(void **, size_t, size_t);
static void *(*next_aligned_alloc)(size_t, size_t);
static void *(*next_memalign)(size_t, size_t);

/* dlsym may allocate (glibc's keeps its error state in calloc'ed memory), and that allocation
 * comes back here before there is a next malloc to pass it to: it is served from this arena,
 * bump-allocated and never given back. Each block is preceded by its size, for realloc. */
#define ARENA_SIZE  16384
#define ARENA_ALIGN 16
static alignas(ARENA_ALIGN) unsigned char arena[ARENA_SIZE];
static size_t arena_used;
static int resolving;

static void say(const char *msg)
{
    ssize_t n = write(2, msg, strlen(msg));
    (void) n;
}

static void *arena_alloc(size_t n)
{
    size_t need = ARENA_ALIGN + (n + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    if (n > ARENA_SIZE || need > ARENA_SIZE - arena_used) {
        say("malloc_count: bootstrap arena exhausted\n");
        abort();
    }
    unsigned char *p = arena + arena_used;
    arena_used += need;
    memcpy(p, &n, sizeof n);
    return p + ARENA_ALIGN;
}

static int in_arena(const void *p)
{
    uintptr_t a = (uintptr_t) p, lo = (uintptr_t) arena;
    return a >= lo && a < lo + ARENA_SIZE;
}

/* The POSIX way to store dlsym's object pointer in a function pointer without a cast that ISO C
 * (and -Wpedantic) rejects. */
static void find_next(void *fnptr, const char *name)
{
    void *sym = dlsym(RTLD_NEXT, name);
    if (!sym) {
        say("malloc_count: no next definition of ");
        say(name);
        say("\n");
        abort();
    }
    memcpy(fnptr, &sym, sizeof sym);
}

/* Called on the first allocation, which happens while the process is still single-threaded
 * (the loader's or a constructor's), so no lock. */
static void resolve(void)
{
    resolving = 1;
    find_next(&next_malloc, "malloc");
    find_next(&next_calloc, "calloc");
    find_next(&next_realloc, "realloc");
    find_next(&next_posix_memalign, "posix_memalign");
    find_next(&next_aligned_alloc, "aligned_alloc");
    find_next(&next_memalign, "memalign");
    find_next(&next_free, "free"); /* last: the others test next_free to know it is all done */
    resolving = 0;
}

/* 1 when the call must be served from the arena (during resolve), 0 when the next allocator
 * is ready. */
static int bootstrapping(void)
{
    if (next_free) {
        return 0;
    }
    if (resolving) {
        return 1;
    }
    resolve();
    return 0;
}

static void count(size_t offset)
{
    struct counts *c = atomic_load_explicit(&counts, memory_order_relaxed);
    atomic_fetch_add_explicit((_Atomic uint64_t *) ((char *) c + offset), 1, memory_order_relaxed);
}

void *malloc(size_t n)
{
    if (bootstrapping()) {
        return arena_alloc(n);
    }
    count(offsetof(struct counts, malloc));
    return next_malloc(n);
}

void *calloc(size_t k, size_t n)
{
    if (bootstrapping()) {
        if (n && k > SIZE_MAX / n) {
            return NULL;
        }
        return arena_alloc(k * n); /* static memory: already zero */
    }
    count(offsetof(struct counts, calloc));
    return next_calloc(k, n);
}

void *realloc(void *p, size_t n)
{
    if (bootstrapping()) {
        void *q = arena_alloc(n);
        if (p) {
            size_t old;
            memcpy(&old, (unsigned char *) p - ARENA_ALIGN, sizeof old);
            memcpy(q, p, old < n ? old : n);
        }
        return q;
    }
    count(offsetof(struct counts, realloc));
    if (in_arena(p)) { /* a bootstrap block grows into real memory; the arena keeps the old */
        size_t old;
        memcpy(&old, (unsigned char *) p - ARENA_ALIGN, sizeof old);
        void *q = next_malloc(n);
        if (q) {
            memcpy(q, p, old < n ? old : n);
        }
        return q;
    }
    return next_realloc(p, n);
}

void free(void *p)
{
    /* A block that is not the arena's came from the next allocator, so resolve() has run;
     * unless the loader frees memory of its own while resolve() runs, and leaking that is safe. */
    if (!p || in_arena(p) || bootstrapping()) {
        return;
    }
    count(offsetof(struct counts, free));
    next_free(p);
}

void *reallocarray(void *p, size_t k, size_t n)
{
    if (n && k > SIZE_MAX / n) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(p, k * n);
}

/* dlsym asks for no aligned memory: during resolve() these refuse rather than misalign. */
int posix_memalign(void **out, size_t align, size_t n)
{
    if (bootstrapping()) {
        return ENOMEM;
    }
    count(offsetof(struct counts, memalign));
    return next_posix_memalign(out, align, n);
}

/* aligned_alloc and memalign differ only in the next definition they call (read through a
 * pointer because bootstrapping() may be what sets it). */
static void *aligned(void *(**next)(size_t, size_t), size_t align, size_t n)
{
    if (bootstrapping()) {
        errno = ENOMEM;
        return NULL;
    }
    count(offsetof(struct counts, memalign));
    return (*next)(align, n);
}

void *aligned_alloc(size_t align, size_t n)
{
    return aligned(&next_aligned_alloc, align, n);
}

void *memalign(size_t align, size_t n)
{
    return aligned(&next_memalign, align, n);
}

/* Maps MALLOC_COUNT_FILE (created if absent, never truncated: two processes started with the
 * same file add into it) and counts there from now on. Without the variable the shim counts
 * into its static block, which no one reads. */
__attribute__((constructor)) static void map_counts(void)
{
    if (bootstrapping()) {
        return;
    }
    const char *path = getenv("MALLOC_COUNT_FILE");
    if (!path || !*path) {
        return;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || ftruncate(fd, sizeof(struct counts)) != 0) {
        say("malloc_count: cannot open MALLOC_COUNT_FILE\n");
        if (fd >= 0) {
            close(fd);
        }
        return;
    }
    struct counts *c = mmap(NULL, sizeof(struct counts), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (c == MAP_FAILED) {
        say("malloc_count: cannot map MALLOC_COUNT_FILE\n");
        return;
    }
    memcpy(c->magic, "MALLOCNT", sizeof c->magic);
    atomic_store_explicit(&counts, c, memory_order_relaxed);
}
