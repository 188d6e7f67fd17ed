/* engine_metrics: maps vLLM and SGLang gauges onto per-rank load.
 *
 * The promparse callback only records what each sample says, per rank and per field, in an
 * accumulator; the rules that need the whole scrape (vLLM's old KV gauge as a fallback,
 * settings without a rank label, SGLang's page size) are applied once at the end, so the
 * result does not depend on the order in which the engine lists its families. */
#include "admission/engine_metrics.h"

#include "wire/promparse.h"

#include <math.h>
#include <string.h>

/* The accumulator's extra slot, after the ranks: settings published without a rank label. */
#define ENGINE_METRICS_ALL   ENGINE_MAX_RANKS
#define ENGINE_METRICS_SLOTS (ENGINE_MAX_RANKS + 1)

/* What a recognised metric feeds. */
enum engine_metrics_field {
    EM_RUNNING,      /* requests running */
    EM_WAITING,      /* requests queued */
    EM_BLOCK_SIZE,   /* vLLM cache_config_info label */
    EM_GPU_BLOCKS,   /* vLLM cache_config_info label */
    EM_TOTAL_TOKENS, /* SGLang KV pool size in tokens */
    EM_PAGE_SIZE,    /* SGLang tokens per page */
    EM_BATCHED,      /* max tokens per batch */
    EM_NFIELDS,
    EM_KV = EM_NFIELDS, /* KV usage fraction: kept as a double, apart from the others */
    EM_KV_OLD,          /* vLLM's older name for it, used only where EM_KV is missing */
    EM_CACHE_INFO,      /* vLLM cache_config_info: feeds EM_BLOCK_SIZE and EM_GPU_BLOCKS */
};

struct engine_metrics_name {
    const char *name; /* without the engine's prefix and any _total suffix */
    enum engine_metrics_field field;
    int all_ranks; /* without a rank label the value applies to every rank, not rank 0 */
};

static const struct engine_metrics_name engine_metrics_vllm[] = {
    {"kv_cache_usage_perc", EM_KV, 0},       {"gpu_cache_usage_perc", EM_KV_OLD, 0},
    {"num_requests_running", EM_RUNNING, 0}, {"num_requests_waiting", EM_WAITING, 0},
    {"cache_config_info", EM_CACHE_INFO, 1}, {"max_num_batched_tokens", EM_BATCHED, 1},
};

static const struct engine_metrics_name engine_metrics_sglang[] = {
    {"token_usage", EM_KV, 0},         {"num_running_reqs", EM_RUNNING, 0},
    {"num_queue_reqs", EM_WAITING, 0}, {"max_total_num_tokens", EM_TOTAL_TOKENS, 0},
    {"page_size", EM_PAGE_SIZE, 1},    {"max_prefill_tokens", EM_BATCHED, 1},
};

/* admitd's mock engine speaks vLLM, plus this one setting of its own. */
static const struct engine_metrics_name engine_metrics_mock[] = {
    {"admit_mock_max_num_batched_tokens", EM_BATCHED, 1},
};

/* What the samples said so far; ENGINE_UNKNOWN and NaN mean nothing usable was seen. */
struct engine_metrics_acc {
    struct engine_snapshot *out;
    int64_t num[EM_NFIELDS][ENGINE_METRICS_SLOTS];
    double kv[2][ENGINE_MAX_RANKS]; /* [0] current name, [1] vLLM's older one */
    int found, vllm, sglang;
};

/* Reads a plain non-negative decimal (digits only, no sign or blanks) that fits an int64. */
static int engine_metrics_uint(const char *s, int64_t *out)
{
    int64_t v = 0;

    if (*s == '\0')
        return -1;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9' || v > (INT64_MAX - (*s - '0')) / 10)
            return -1;
        v = v * 10 + (*s - '0');
    }
    *out = v;
    return 0;
}

/* Converts a gauge value to a count: NaN, infinities, negatives and values beyond int64 are
 * refused; a fraction is truncated. */
static int engine_metrics_count(double v, int64_t *out)
{
    if (!(v >= 0 && v < 0x1p63))
        return -1;
    *out = (int64_t) v;
    return 0;
}

static const char *engine_metrics_label(const struct promparse_sample *s, const char *name)
{
    for (size_t i = 0; i < s->nlabels; i++) {
        if (strcmp(s->labels[i].name, name) == 0)
            return s->labels[i].value;
    }
    return NULL;
}

static int engine_metrics_has_suffix(const char *s, size_t len, const char *suffix)
{
    size_t n = strlen(suffix);

    return len >= n && memcmp(s + len - n, suffix, n) == 0;
}

/* Finds a sample's metric in table; len is the name's length once any _total is dropped. */
static const struct engine_metrics_name *
engine_metrics_find(const struct engine_metrics_name *table, size_t n, const char *name, size_t len)
{
    for (size_t i = 0; i < n; i++) {
        if (strlen(table[i].name) == len && memcmp(table[i].name, name, len) == 0)
            return &table[i];
    }
    return NULL;
}

/* Identifies the metric, its engine and the label naming its rank; NULL if not ours. */
static const struct engine_metrics_name *
engine_metrics_lookup(const char *name, int *is_vllm, int *is_sglang, const char **rank_label)
{
    const struct engine_metrics_name *table = engine_metrics_mock;
    size_t n = sizeof engine_metrics_mock / sizeof engine_metrics_mock[0];
    size_t len = strlen(name);

    /* prometheus_client adds _created beside a counter's _total: a time, not a value. */
    if (engine_metrics_has_suffix(name, len, "_created"))
        return NULL;
    *is_vllm = *is_sglang = 0;
    *rank_label = "engine";
    if (strncmp(name, "vllm:", 5) == 0) {
        *is_vllm = 1;
        table = engine_metrics_vllm;
        n = sizeof engine_metrics_vllm / sizeof engine_metrics_vllm[0];
        name += 5;
    } else if (strncmp(name, "sglang:", 7) == 0 || strncmp(name, "sglang_", 7) == 0) {
        *is_sglang = 1;
        *rank_label = "dp_rank";
        table = engine_metrics_sglang;
        n = sizeof engine_metrics_sglang / sizeof engine_metrics_sglang[0];
        name += 7;
    }
    /* The suffix is looked for after the prefix, which it must not overlap ("sglang_total"). */
    len = strlen(name);
    if (engine_metrics_has_suffix(name, len, "_total"))
        len -= strlen("_total");
    return engine_metrics_find(table, n, name, len);
}

/* Records vLLM's cache geometry, which it publishes as labels of a constant gauge. */
static void engine_metrics_cache_info(struct engine_metrics_acc *acc,
                                      const struct promparse_sample *s, unsigned slot)
{
    const char *v;
    int64_t n;

    v = engine_metrics_label(s, "block_size");
    if (v != NULL && engine_metrics_uint(v, &n) == 0 && n > 0)
        acc->num[EM_BLOCK_SIZE][slot] = n;
    v = engine_metrics_label(s, "num_gpu_blocks");
    if (v != NULL && engine_metrics_uint(v, &n) == 0)
        acc->num[EM_GPU_BLOCKS][slot] = n;
}

static int engine_metrics_sample(const struct promparse_sample *s, void *arg)
{
    struct engine_metrics_acc *acc = arg;
    const struct engine_metrics_name *m;
    const char *rank_label, *rank_text;
    int is_vllm, is_sglang;
    int64_t rank = 0, n;
    unsigned slot;
    double v = s->value;

    m = engine_metrics_lookup(s->name, &is_vllm, &is_sglang, &rank_label);
    if (m == NULL)
        return 0;
    rank_text = engine_metrics_label(s, rank_label);
    if (rank_text != NULL &&
        (engine_metrics_uint(rank_text, &rank) != 0 || rank >= ENGINE_MAX_RANKS))
        return 0;
    slot = rank_text == NULL && m->all_ranks ? ENGINE_METRICS_ALL : (unsigned) rank;
    if (slot != ENGINE_METRICS_ALL)
        acc->out->ranks[slot].present = 1;
    acc->found = 1;
    acc->vllm |= is_vllm;
    acc->sglang |= is_sglang;
    if (m->field == EM_KV || m->field == EM_KV_OLD) {
        /* KV names are never all_ranks, so slot is a rank here. Only NaN is unusable; anything
         * else is squeezed into a fraction. */
        if (!isnan(v))
            acc->kv[m->field - EM_KV][slot] = v < 0 ? 0 : v > 1 ? 1 : v;
    } else if (m->field == EM_CACHE_INFO) {
        engine_metrics_cache_info(acc, s, slot);
    } else if (engine_metrics_count(v, &n) == 0 && (m->field != EM_PAGE_SIZE || n > 0)) {
        acc->num[m->field][slot] = n;
    }
    return 0;
}

/* A rank's own value of a setting if it has one, else the one published for all ranks. */
static int64_t engine_metrics_pick(const struct engine_metrics_acc *acc,
                                   enum engine_metrics_field f, unsigned rank)
{
    int64_t v = acc->num[f][rank];

    return v != ENGINE_UNKNOWN ? v : acc->num[f][ENGINE_METRICS_ALL];
}

static void engine_metrics_finish_rank(const struct engine_metrics_acc *acc, unsigned r)
{
    struct engine_rank *er = &acc->out->ranks[r];
    int64_t total = engine_metrics_pick(acc, EM_TOTAL_TOKENS, r);
    int64_t page = engine_metrics_pick(acc, EM_PAGE_SIZE, r);

    er->kv_usage = !isnan(acc->kv[0][r]) ? acc->kv[0][r] : acc->kv[1][r];
    er->running = acc->num[EM_RUNNING][r];
    er->waiting = acc->num[EM_WAITING][r];
    er->block_size = engine_metrics_pick(acc, EM_BLOCK_SIZE, r);
    er->num_gpu_blocks = engine_metrics_pick(acc, EM_GPU_BLOCKS, r);
    er->max_num_batched_tokens = engine_metrics_pick(acc, EM_BATCHED, r);
    /* SGLang counts its pool in tokens; a page (1 token unless told) plays vLLM's block.
     * vLLM's own geometry wins in the odd scrape that has both. */
    if (er->block_size == ENGINE_UNKNOWN && er->num_gpu_blocks == ENGINE_UNKNOWN) {
        if (page != ENGINE_UNKNOWN)
            er->block_size = page;
        else if (total != ENGINE_UNKNOWN)
            er->block_size = 1;
        if (total != ENGINE_UNKNOWN)
            er->num_gpu_blocks = total / er->block_size;
    }
}

int engine_metrics_parse(const char *text, size_t len, struct engine_snapshot *out)
{
    struct engine_metrics_acc acc;

    memset(out, 0, sizeof *out);
    memset(&acc, 0, sizeof acc);
    acc.out = out;
    for (unsigned f = 0; f < EM_NFIELDS; f++) {
        for (unsigned i = 0; i < ENGINE_METRICS_SLOTS; i++)
            acc.num[f][i] = ENGINE_UNKNOWN;
    }
    for (unsigned i = 0; i < ENGINE_MAX_RANKS; i++) {
        acc.kv[0][i] = acc.kv[1][i] = NAN;
        out->ranks[i].kv_usage = NAN;
        out->ranks[i].running = out->ranks[i].waiting = ENGINE_UNKNOWN;
        out->ranks[i].block_size = out->ranks[i].num_gpu_blocks = ENGINE_UNKNOWN;
        out->ranks[i].max_num_batched_tokens = ENGINE_UNKNOWN;
    }
    out->malformed_lines = promparse(text, len, engine_metrics_sample, &acc);
    for (unsigned r = 0; r < ENGINE_MAX_RANKS; r++) {
        if (out->ranks[r].present) {
            engine_metrics_finish_rank(&acc, r);
            out->nranks = r + 1;
        }
    }
    out->kind = acc.vllm ? ENGINE_KIND_VLLM : acc.sglang ? ENGINE_KIND_SGLANG : ENGINE_KIND_UNKNOWN;
    return acc.found ? 0 : -1;
}
