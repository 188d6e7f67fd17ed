/* Unit tests for engine_metrics: real-looking vLLM and SGLang scrapes to per-rank load. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "admission/engine_metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LLAMA "model_name=\"meta-llama/Llama-3.1-8B-Instruct\""

static int parse(const char *text, struct engine_snapshot *s)
{
    return engine_metrics_parse(text, strlen(text), s);
}

static void assert_rank_unknown(const struct engine_rank *r)
{
    assert_false(r->present);
    assert_true(isnan(r->kv_usage));
    assert_int_equal(r->running, ENGINE_UNKNOWN);
    assert_int_equal(r->waiting, ENGINE_UNKNOWN);
    assert_int_equal(r->block_size, ENGINE_UNKNOWN);
    assert_int_equal(r->num_gpu_blocks, ENGINE_UNKNOWN);
    assert_int_equal(r->max_num_batched_tokens, ENGINE_UNKNOWN);
}

/* vLLM V1 with two data-parallel engines, as `vllm serve --data-parallel-size 2` shows it. */
static const char vllm_v1[] =
    "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
    "# TYPE vllm:num_requests_running gauge\n"
    "vllm:num_requests_running{engine=\"0\"," LLAMA "} 3.0\n"
    "vllm:num_requests_running{engine=\"1\"," LLAMA "} 5.0\n"
    "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
    "# TYPE vllm:num_requests_waiting gauge\n"
    "vllm:num_requests_waiting{engine=\"0\"," LLAMA "} 0.0\n"
    "vllm:num_requests_waiting{engine=\"1\"," LLAMA "} 2.0\n"
    "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
    "# TYPE vllm:kv_cache_usage_perc gauge\n"
    "vllm:kv_cache_usage_perc{engine=\"0\"," LLAMA "} 0.125\n"
    "vllm:kv_cache_usage_perc{engine=\"1\"," LLAMA "} 0.5\n"
    "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of tokens.\n"
    "# TYPE vllm:prefix_cache_queries_total counter\n"
    "vllm:prefix_cache_queries_total{engine=\"0\"," LLAMA "} 1.2e+04\n"
    "vllm:prefix_cache_queries_created{engine=\"0\"," LLAMA "} 1.7296e+09\n"
    "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.\n"
    "# TYPE vllm:num_preemptions_total counter\n"
    "vllm:num_preemptions_total{engine=\"1\"," LLAMA "} 0.0\n"
    "vllm:num_preemptions_created{engine=\"1\"," LLAMA "} 1.7296e+09\n"
    "# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.\n"
    "# TYPE vllm:time_to_first_token_seconds histogram\n"
    "vllm:time_to_first_token_seconds_sum{engine=\"0\"," LLAMA "} 4.2\n"
    "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.001\"," LLAMA "} 0.0\n"
    "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"+Inf\"," LLAMA "} 17.0\n"
    "vllm:time_to_first_token_seconds_count{engine=\"0\"," LLAMA "} 17.0\n"
    "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
    "# TYPE vllm:cache_config_info gauge\n"
    "vllm:cache_config_info{block_size=\"16\",cache_dtype=\"auto\",calculate_kv_scales=\"False\","
    "cpu_offload_gb=\"0\",enable_prefix_caching=\"True\",engine=\"0\","
    "gpu_memory_utilization=\"0.9\",is_attention_free=\"False\",num_cpu_blocks=\"None\","
    "num_gpu_blocks=\"29127\",num_gpu_blocks_override=\"None\",prefix_caching_hash_algo="
    "\"builtin\","
    "sliding_window=\"None\",swap_space=\"4\",swap_space_bytes=\"4294967296\"} 1.0\n"
    "vllm:cache_config_info{block_size=\"16\",cache_dtype=\"auto\",engine=\"1\","
    "num_gpu_blocks=\"29000\",num_gpu_blocks_override=\"None\"} 1.0\n"
    "# HELP python_gc_objects_collected_total Objects collected during gc\n"
    "# TYPE python_gc_objects_collected_total counter\n"
    "python_gc_objects_collected_total{generation=\"0\"} 12345.0\n"
    "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
    "# TYPE process_resident_memory_bytes gauge\n"
    "process_resident_memory_bytes 3.123456e+09\n";

static void test_vllm_v1_two_engines(void **state)
{
    struct engine_snapshot s;

    (void) state;
    assert_int_equal(parse(vllm_v1, &s), 0);
    assert_int_equal(s.kind, ENGINE_KIND_VLLM);
    assert_int_equal(s.nranks, 2);
    assert_int_equal(s.malformed_lines, 0);
    assert_true(s.ranks[0].present);
    assert_true(s.ranks[0].kv_usage == 0.125);
    assert_int_equal(s.ranks[0].running, 3);
    assert_int_equal(s.ranks[0].waiting, 0);
    assert_int_equal(s.ranks[0].block_size, 16);
    assert_int_equal(s.ranks[0].num_gpu_blocks, 29127);
    assert_int_equal(s.ranks[0].max_num_batched_tokens, ENGINE_UNKNOWN);
    assert_true(s.ranks[1].kv_usage == 0.5);
    assert_int_equal(s.ranks[1].running, 5);
    assert_int_equal(s.ranks[1].waiting, 2);
    assert_int_equal(s.ranks[1].num_gpu_blocks, 29000);
    assert_rank_unknown(&s.ranks[2]);
}

/* vLLM V0: one engine, no engine label, the old KV gauge, cache_config_info without engine. */
static void test_vllm_v0_old_names(void **state)
{
    struct engine_snapshot s;
    const char *text =
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        "# TYPE vllm:cache_config_info gauge\n"
        "vllm:cache_config_info{block_size=\"32\",cache_dtype=\"auto\",enable_prefix_caching="
        "\"False\","
        "gpu_memory_utilization=\"0.9\",num_cpu_blocks=\"2048\",num_gpu_blocks=\"7000\","
        "num_gpu_blocks_override=\"None\",sliding_window=\"None\",swap_space_bytes=\"4294967296\"} "
        "1.0\n"
        "# HELP vllm:num_requests_running Number of requests currently running on GPU.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        "vllm:num_requests_running{" LLAMA "} 4.0\n"
        "# HELP vllm:num_requests_swapped Number of requests swapped to CPU.\n"
        "# TYPE vllm:num_requests_swapped gauge\n"
        "vllm:num_requests_swapped{" LLAMA "} 0.0\n"
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        "vllm:num_requests_waiting{" LLAMA "} 1.0\n"
        "# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.\n"
        "# TYPE vllm:gpu_cache_usage_perc gauge\n"
        "vllm:gpu_cache_usage_perc{" LLAMA "} 0.75\n"
        "# HELP vllm:cpu_cache_usage_perc CPU KV-cache usage. 1 means 100 percent usage.\n"
        "# TYPE vllm:cpu_cache_usage_perc gauge\n"
        "vllm:cpu_cache_usage_perc{" LLAMA "} 0.0\n";

    (void) state;
    assert_int_equal(parse(text, &s), 0);
    assert_int_equal(s.kind, ENGINE_KIND_VLLM);
    assert_int_equal(s.nranks, 1);
    assert_true(s.ranks[0].kv_usage == 0.75);
    assert_int_equal(s.ranks[0].running, 4);
    assert_int_equal(s.ranks[0].waiting, 1);
    assert_int_equal(s.ranks[0].block_size, 32);
    assert_int_equal(s.ranks[0].num_gpu_blocks, 7000);
}

/* The old KV gauge counts only where the new one is missing, whatever the order. */
static void test_vllm_kv_fallback_per_rank(void **state)
{
    struct engine_snapshot s;
    const char *text = "vllm:gpu_cache_usage_perc{engine=\"0\"," LLAMA "} 0.9\n"
                       "vllm:gpu_cache_usage_perc{engine=\"1\"," LLAMA "} 0.4\n"
                       "vllm:kv_cache_usage_perc{engine=\"0\"," LLAMA "} 0.2\n"
                       "vllm:kv_cache_usage_perc{engine=\"2\"," LLAMA "} NaN\n"
                       "vllm:gpu_cache_usage_perc{engine=\"2\"," LLAMA "} 0.3\n";

    (void) state;
    assert_int_equal(parse(text, &s), 0);
    assert_int_equal(s.nranks, 3);
    assert_true(s.ranks[0].kv_usage == 0.2);
    assert_true(s.ranks[1].kv_usage == 0.4);
    assert_true(s.ranks[2].kv_usage == 0.3);
    assert_int_equal(s.ranks[1].running, ENGINE_UNKNOWN);
}

/* cache_config_info without engine applies to every rank seen, even when listed first;
 * bad label values are ignored, and a rank's own labelled value wins. */
static void test_vllm_cache_config_for_all_ranks(void **state)
{
    struct engine_snapshot s;
    const char *text =
        "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"2048\"} 1.0\n"
        "vllm:num_requests_running{engine=\"0\"," LLAMA "} 1.0\n"
        "vllm:num_requests_running{engine=\"2\"," LLAMA "} 1.0\n"
        "vllm:cache_config_info{block_size=\"-16\",num_gpu_blocks=\"None\",engine=\"0\"} 1.0\n"
        "vllm:cache_config_info{block_size=\"16x\",num_gpu_blocks=\" 5\",engine=\"0\"} 1.0\n"
        "vllm:cache_config_info{block_size=\"0\",num_gpu_blocks=\"99999999999999999999\","
        "engine=\"0\"} 1.0\n"
        "vllm:cache_config_info{block_size=\"32\",num_gpu_blocks=\"100\",engine=\"2\"} 1.0\n";

    (void) state;
    assert_int_equal(parse(text, &s), 0);
    assert_int_equal(s.nranks, 3);
    assert_int_equal(s.ranks[0].block_size, 16);
    assert_int_equal(s.ranks[0].num_gpu_blocks, 2048);
    assert_rank_unknown(&s.ranks[1]);
    assert_int_equal(s.ranks[2].block_size, 32);
    assert_int_equal(s.ranks[2].num_gpu_blocks, 100);
}

/* admitd's mock engine: vLLM names, engine labels, one unlabelled setting of its own. */
static void test_mock_engine_and_batched_tokens(void **state)
{
    struct engine_snapshot s;
    const char *text =
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        "vllm:num_requests_running{engine=\"0\",model_name=\"mock\"} 2\n"
        "vllm:num_requests_running{engine=\"1\",model_name=\"mock\"} 0\n"
        "# HELP admit_mock_max_num_batched_tokens Configured --max-num-batched-tokens\n"
        "# TYPE admit_mock_max_num_batched_tokens gauge\n"
        "admit_mock_max_num_batched_tokens 8192\n"
        "vllm:max_num_batched_tokens{engine=\"1\",model_name=\"mock\"} 4096\n";

    (void) state;
    assert_int_equal(parse(text, &s), 0);
    assert_int_equal(s.kind, ENGINE_KIND_VLLM);
    assert_int_equal(s.nranks, 2);
    assert_int_equal(s.ranks[0].max_num_batched_tokens, 8192);
    assert_int_equal(s.ranks[1].max_num_batched_tokens, 4096);
    assert_int_equal(s.ranks[1].running, 0);
    assert_true(isnan(s.ranks[1].kv_usage));
}

/* Recent SGLang with --dp-size 2: `sglang:` names and a dp_rank label per scheduler. */
static void test_sglang_colon_prefix_dp_rank(void **state)
{
    struct engine_snapshot s;
#define SGL0 "{dp_rank=\"0\",engine_type=\"unified\"," LLAMA ",pp_rank=\"0\",tp_rank=\"0\"}"
#define SGL1 "{dp_rank=\"1\",engine_type=\"unified\"," LLAMA ",pp_rank=\"0\",tp_rank=\"0\"}"
    const char *text = "# HELP sglang:num_running_reqs The number of running requests.\n"
                       "# TYPE sglang:num_running_reqs gauge\n"
                       "sglang:num_running_reqs" SGL0 " 12.0\n"
                       "sglang:num_running_reqs" SGL1 " 7.0\n"
                       "# HELP sglang:num_used_tokens The number of used tokens.\n"
                       "# TYPE sglang:num_used_tokens gauge\n"
                       "sglang:num_used_tokens" SGL0 " 40123.0\n"
                       "# HELP sglang:token_usage The token usage.\n"
                       "# TYPE sglang:token_usage gauge\n"
                       "sglang:token_usage" SGL0 " 0.25\n"
                       "sglang:token_usage" SGL1 " 0.1\n"
                       "# HELP sglang:num_queue_reqs The number of requests in the waiting queue.\n"
                       "# TYPE sglang:num_queue_reqs gauge\n"
                       "sglang:num_queue_reqs" SGL0 " 3.0\n"
                       "sglang:num_queue_reqs" SGL1 " 0.0\n"
                       "# HELP sglang:max_total_num_tokens Maximum total number of tokens in the "
                       "KV cache pool.\n"
                       "# TYPE sglang:max_total_num_tokens gauge\n"
                       "sglang:max_total_num_tokens" SGL0 " 160492.0\n"
                       "sglang:max_total_num_tokens" SGL1 " 160490.0\n"
                       "# HELP sglang:num_retracted_requests_total Total number of retracted "
                       "requests.\n"
                       "# TYPE sglang:num_retracted_requests_total counter\n"
                       "sglang:num_retracted_requests_total" SGL0 " 0.0\n"
                       "sglang:num_retracted_requests_created" SGL0 " 1.7296e+09\n"
                       "# HELP sglang:max_prefill_tokens Maximum prefill tokens\n"
                       "# TYPE sglang:max_prefill_tokens gauge\n"
                       "sglang:max_prefill_tokens{" LLAMA "} 16384.0\n";
#undef SGL0
#undef SGL1

    (void) state;
    assert_int_equal(parse(text, &s), 0);
    assert_int_equal(s.kind, ENGINE_KIND_SGLANG);
    assert_int_equal(s.nranks, 2);
    assert_true(s.ranks[0].kv_usage == 0.25);
    assert_int_equal(s.ranks[0].running, 12);
    assert_int_equal(s.ranks[0].waiting, 3);
    assert_int_equal(s.ranks[0].block_size, 1);
    assert_int_equal(s.ranks[0].num_gpu_blocks, 160492);
    assert_int_equal(s.ranks[0].max_num_batched_tokens, 16384);
    assert_true(s.ranks[1].kv_usage == 0.1);
    assert_int_equal(s.ranks[1].running, 7);
    assert_int_equal(s.ranks[1].waiting, 0);
    assert_int_equal(s.ranks[1].num_gpu_blocks, 160490);
    assert_int_equal(s.ranks[1].max_num_batched_tokens, 16384);
}

/* Older SGLang: `sglang_` names, a `name` label, no dp_rank; a page_size gauge sets blocks. */
static void test_sglang_underscore_prefix_page_size(void **state)
{
    struct engine_snapshot s;
    const char *text = "# HELP sglang_max_total_num_tokens Maximum total number of tokens\n"
                       "# TYPE sglang_max_total_num_tokens gauge\n"
                       "sglang_max_total_num_tokens{name=\"google/gemma-2-9b-it\"} 161721.0\n"
                       "# HELP sglang_page_size Tokens per KV page\n"
                       "# TYPE sglang_page_size gauge\n"
                       "sglang_page_size{name=\"google/gemma-2-9b-it\"} 16.0\n"
                       "# HELP sglang_num_running_reqs Number of running requests\n"
                       "# TYPE sglang_num_running_reqs gauge\n"
                       "sglang_num_running_reqs{name=\"google/gemma-2-9b-it\"} 9.0\n"
                       "sglang_num_running_reqs_created{name=\"google/gemma-2-9b-it\"} 5.0\n"
                       "# HELP sglang_num_queue_reqs Number of queued requests\n"
                       "# TYPE sglang_num_queue_reqs counter\n"
                       "sglang_num_queue_reqs_total{name=\"google/gemma-2-9b-it\"} 4.0\n"
                       "# HELP sglang_token_usage Token usage\n"
                       "# TYPE sglang_token_usage gauge\n"
                       "sglang_token_usage{name=\"google/gemma-2-9b-it\"} 0.5\n"
                       "sglang_cache_hit_rate{name=\"google/gemma-2-9b-it\"} 0.03\n";

    (void) state;
    assert_int_equal(parse(text, &s), 0);
    assert_int_equal(s.kind, ENGINE_KIND_SGLANG);
    assert_int_equal(s.nranks, 1);
    assert_int_equal(s.ranks[0].running, 9);
    assert_int_equal(s.ranks[0].waiting, 4);
    assert_true(s.ranks[0].kv_usage == 0.5);
    assert_int_equal(s.ranks[0].block_size, 16);
    assert_int_equal(s.ranks[0].num_gpu_blocks, 161721 / 16);
}

static void test_unknown_metrics_only(void **state)
{
    struct engine_snapshot s;

    (void) state;
    assert_int_equal(parse("# TYPE up gauge\nup 1\nvllm:something_new{engine=\"0\"} 3\n"
                           "sglang:num_running_reqs_created 1\nadmit_mock_other 2\nsglang_total 1\n"
                           "vllm:_total 1\nsglang:_created 1\n",
                           &s),
                     -1);
    assert_int_equal(s.kind, ENGINE_KIND_UNKNOWN);
    assert_int_equal(s.nranks, 0);
    assert_rank_unknown(&s.ranks[0]);
    assert_int_equal(parse("", &s), -1);
    assert_int_equal(engine_metrics_parse(NULL, 0, &s), -1);
}

/* Rank labels that are not a plain decimal below ENGINE_MAX_RANKS drop the sample. */
static void test_hostile_rank_labels(void **state)
{
    struct engine_snapshot s;
    const char *text = "vllm:num_requests_running{engine=\"99999999999999999999999\"} 1\n"
                       "vllm:num_requests_running{engine=\"64\"} 1\n"
                       "vllm:num_requests_running{engine=\"-1\"} 1\n"
                       "vllm:num_requests_running{engine=\"1.0\"} 1\n"
                       "vllm:num_requests_running{engine=\"+1\"} 1\n"
                       "vllm:num_requests_running{engine=\" 1\"} 1\n"
                       "vllm:num_requests_running{engine=\"\"} 1\n"
                       "sglang:num_running_reqs{dp_rank=\"0x1\"} 1\n"
                       "vllm:num_requests_running{engine=\"63\"} 6\n";

    (void) state;
    assert_int_equal(parse(text, &s), 0);
    assert_int_equal(s.kind, ENGINE_KIND_VLLM);
    assert_int_equal(s.nranks, ENGINE_MAX_RANKS);
    assert_int_equal(s.ranks[63].running, 6);
    for (unsigned i = 0; i < 63; i++)
        assert_rank_unknown(&s.ranks[i]);
}

/* Values a sane engine never sends: ignored for counts, clamped for the KV fraction. */
static void test_hostile_values(void **state)
{
    struct engine_snapshot s;
    const char *text = "vllm:num_requests_running{engine=\"0\"} -1\n"
                       "vllm:num_requests_waiting{engine=\"0\"} NaN\n"
                       "vllm:kv_cache_usage_perc{engine=\"0\"} -0.25\n"
                       "vllm:num_requests_running{engine=\"1\"} +Inf\n"
                       "vllm:num_requests_waiting{engine=\"1\"} 1e300\n"
                       "vllm:kv_cache_usage_perc{engine=\"1\"} 1.5\n"
                       "vllm:num_requests_running{engine=\"2\"} 2.7\n"
                       "vllm:num_requests_waiting{engine=\"2\"} -Inf\n"
                       "vllm:kv_cache_usage_perc{engine=\"2\"} NaN\n"
                       "vllm:kv_cache_usage_perc{engine=\"3\"} +Inf\n"
                       "admit_mock_max_num_batched_tokens -5\n"
                       "sglang:page_size 0\n"
                       "sglang:max_total_num_tokens{dp_rank=\"3\"} 1000\n"
                       "vllm:num_requests_running{engine=\"4\" 1\n"
                       "vllm:num_requests_running{engine=\"4\"} one\n";

    (void) state;
    assert_int_equal(parse(text, &s), 0);
    assert_int_equal(s.malformed_lines, 2);
    assert_int_equal(s.nranks, 4);
    assert_true(s.ranks[0].present);
    assert_int_equal(s.ranks[0].running, ENGINE_UNKNOWN);
    assert_int_equal(s.ranks[0].waiting, ENGINE_UNKNOWN);
    assert_true(s.ranks[0].kv_usage == 0);
    assert_int_equal(s.ranks[0].max_num_batched_tokens, ENGINE_UNKNOWN);
    assert_int_equal(s.ranks[1].running, ENGINE_UNKNOWN);
    assert_int_equal(s.ranks[1].waiting, ENGINE_UNKNOWN);
    assert_true(s.ranks[1].kv_usage == 1);
    assert_int_equal(s.ranks[2].running, 2);
    assert_int_equal(s.ranks[2].waiting, ENGINE_UNKNOWN);
    assert_true(isnan(s.ranks[2].kv_usage));
    assert_true(s.ranks[3].kv_usage == 1);
    assert_int_equal(s.ranks[3].block_size, 1);
    assert_int_equal(s.ranks[3].num_gpu_blocks, 1000);
    assert_rank_unknown(&s.ranks[4]);
}

/* Random bytes, and random damage to a real scrape, must never crash or break invariants. */
static void test_random_input_keeps_invariants(void **state)
{
    size_t len = sizeof vllm_v1 - 1;
    char *text = malloc(len);
    uint32_t seed = 42;
    struct engine_snapshot s;

    (void) state;
    assert_non_null(text);
    for (int round = 0; round < 3000; round++) {
        memcpy(text, vllm_v1, len);
        for (int k = 0; k < 1 + round % 20; k++) {
            seed = seed * 1664525u + 1013904223u;
            text[(seed >> 8) % len] = (round & 1) ? (char) (seed >> 24) : "\"{}=,\n\\ 0"[seed % 9];
        }
        (void) engine_metrics_parse(text, len - (seed >> 4) % 64, &s);
        assert_true(s.nranks <= ENGINE_MAX_RANKS);
        assert_true(s.malformed_lines >= 0);
        for (unsigned r = 0; r < ENGINE_MAX_RANKS; r++) {
            const struct engine_rank *er = &s.ranks[r];

            assert_true(isnan(er->kv_usage) || (er->kv_usage >= 0 && er->kv_usage <= 1));
            assert_true(er->running >= ENGINE_UNKNOWN && er->waiting >= ENGINE_UNKNOWN);
            assert_true(er->block_size == ENGINE_UNKNOWN || er->block_size > 0);
            assert_true(r < s.nranks || !er->present);
        }
    }
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vllm_v1_two_engines),
        cmocka_unit_test(test_vllm_v0_old_names),
        cmocka_unit_test(test_vllm_kv_fallback_per_rank),
        cmocka_unit_test(test_vllm_cache_config_for_all_ranks),
        cmocka_unit_test(test_mock_engine_and_batched_tokens),
        cmocka_unit_test(test_sglang_colon_prefix_dp_rank),
        cmocka_unit_test(test_sglang_underscore_prefix_page_size),
        cmocka_unit_test(test_unknown_metrics_only),
        cmocka_unit_test(test_hostile_rank_labels),
        cmocka_unit_test(test_hostile_values),
        cmocka_unit_test(test_random_input_keeps_invariants),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
