/* A program of a libadmit user, built by tests/package/test_install.py against the installed
 * copy alone (`pkg-config --cflags --libs admit`), shared and static, and by test_deb.py
 * against the Debian package's. It uses the gate and the load message codec and table, and
 * defines names the library uses inside (xcalloc, jscan_init): had the library exported
 * them, the static link would fail on a second definition, and the shared library's calls
 * would land here and be counted. Prints "ok" and exits 0, or names what failed. */
#include <admit/gate.h>
#include <admit/load.h>

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failed;
static unsigned ours; /* calls of the functions below, which the library must never make */

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "consumer: %s:%d: %s\n", __FILE__, __LINE__, #cond);                   \
            failed = 1;                                                                            \
        }                                                                                          \
    } while (0)

/* Same names as the library's internals, other meanings. */
void *xcalloc(size_t count, size_t size);
int jscan_init(void);

void *xcalloc(size_t count, size_t size)
{
    ours++;
    return calloc(count, size);
}

int jscan_init(void)
{
    ours++;
    return 0;
}

static unsigned dispatched;

static void on_dispatch(struct gate_ticket *t, void *arg)
{
    (void) t;
    (void) arg;
    dispatched++;
}

static void use_gate(void)
{
    struct gate_ticket t[5];
    struct gate_stats st;
    struct gate *g = gate_new(2, 2, on_dispatch, NULL);

    for (int i = 0; i < 5; i++)
        gate_ticket_init(&t[i]);
    CHECK(gate_enter(g, &t[0]) == GATE_ADMITTED);
    CHECK(gate_enter(g, &t[1]) == GATE_ADMITTED);
    CHECK(gate_enter(g, &t[2]) == GATE_QUEUED);
    CHECK(gate_enter(g, &t[3]) == GATE_QUEUED);
    CHECK(gate_enter(g, &t[4]) == GATE_REJECTED); /* N + Q = 4 */
    gate_get_stats(g, &st);
    CHECK(st.slots_used == 2 && st.queued == 2 && st.limit == 2 && st.queue_limit == 2);
    gate_leave(g, &t[0]);
    CHECK(dispatched == 1 && gate_ticket_state(&t[2]) == GATE_SLOT);
    for (int i = 1; i < 4; i++)
        gate_leave(g, &t[i]);
    gate_get_stats(g, &st);
    CHECK(st.slots_used == 0 && st.queued == 0);
    gate_free(g);
}

static void use_load(void)
{
    struct admit_load m, back;
    struct admit_loadtab *tab;
    struct admit_loadtab_entry e;
    char buf[ADMIT_LOAD_MSG_MAX], err[128];
    int len;

    admit_load_init(&m);
    strcpy(m.worker_id, "gpu-7:8080");
    m.seq = 42;
    m.ts_ms = 1700000000000;
    m.kv_used_blocks = 412;
    m.kv_total_blocks = 16384;
    m.heartbeat_ms = 1000;
    admit_load_models_clear(&m.models);
    CHECK(admit_load_models_add(&m.models, "llama", 5) == 0);
    len = admit_load_encode(&m, buf, sizeof buf);
    CHECK(len > 0 && strncmp(buf, ADMIT_LOAD_TOPIC " {", sizeof ADMIT_LOAD_TOPIC + 1) == 0);
    CHECK(admit_load_decode(buf, (size_t) len, &back, err, sizeof err) == 0);
    CHECK(strcmp(back.worker_id, "gpu-7:8080") == 0 && back.seq == 42);
    CHECK(back.kv_used_blocks == 412 && back.kv_total_blocks == 16384);
    CHECK(back.kv_block_size == ADMIT_LOAD_UNKNOWN && back.state == ADMIT_LOAD_SERVING);
    CHECK(admit_load_models_has(&back.models, "llama"));
    CHECK(admit_load_decode("kv_metrics {", 12, &back, err, sizeof err) == -1 && err[0] != '\0');

    tab = admit_loadtab_new(3);
    CHECK(admit_loadtab_update(tab, &m, 5000) == 1);
    CHECK(admit_loadtab_size(tab) == 1);
    CHECK(admit_loadtab_get(tab, "gpu-7:8080", 0, 5500, &e) == 0 && !e.stale);
    CHECK(admit_loadtab_get(tab, "gpu-7:8080", 0, 9000, &e) == 0 && e.stale);
    admit_loadtab_free(tab);
}

int main(void)
{
    use_gate();
    use_load();
    CHECK(ours == 0);
    if (failed)
        return 1;
    printf("ok\n");
    return 0;
}
