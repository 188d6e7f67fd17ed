/* Unit tests for kvevents: payloads built with msgpack-c's packer in both of vLLM's encodings
 * (positional events and maps keyed by "type"; the batch as an array or a map), read back
 * field by field; hashes past INT64_MAX, negative and as bytes; unknown fields and events
 * counted; other media skipped; and every malformed payload (each prefix of a good one, wrong
 * types, counts that lie) an error with nothing reported. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "admission/kvevents.h"

#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#define CAP 256

static struct kve_decoder *dec;
static struct kve_event events[CAP];
static uint64_t hashes[CAP];
static uint32_t tokens[CAP];
static struct kve_out out = {.events = events,
                             .events_cap = CAP,
                             .hashes = hashes,
                             .hashes_cap = CAP,
                             .tokens = tokens,
                             .tokens_cap = CAP};
static char err[160];

static msgpack_sbuffer sb;
static msgpack_packer pk;

static int setup(void **state)
{
    (void) state;
    dec = kve_decoder_new();
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    return 0;
}

static int teardown(void **state)
{
    (void) state;
    kve_decoder_free(dec);
    msgpack_sbuffer_destroy(&sb);
    return 0;
}

/* An output over the given arrays. */
static struct kve_out with(struct kve_event *e, size_t ne, uint64_t *h, size_t nh, uint32_t *t,
                           size_t nt)
{
    return (struct kve_out){.events = e,
                            .events_cap = ne,
                            .hashes = h,
                            .hashes_cap = nh,
                            .tokens = t,
                            .tokens_cap = nt};
}

/* A new payload. */
static void start(void)
{
    msgpack_sbuffer_clear(&sb);
}

/* A new payload: a positional batch of items (2, or 3 with the rank the test packs after its
 * events), ts 0, and the header of an array of n events, which the test packs next. */
static void batch(unsigned items, unsigned n)
{
    start();
    msgpack_pack_array(&pk, items);
    msgpack_pack_double(&pk, 0);
    msgpack_pack_array(&pk, n);
}

static void str(const char *s)
{
    msgpack_pack_str(&pk, strlen(s));
    msgpack_pack_str_body(&pk, s, strlen(s));
}

static void bin(const uint8_t *b, size_t n)
{
    msgpack_pack_bin(&pk, n);
    msgpack_pack_bin_body(&pk, b, n);
}

static void u64s(const uint64_t *v, size_t n)
{
    msgpack_pack_array(&pk, n);
    for (size_t i = 0; i < n; i++)
        msgpack_pack_uint64(&pk, v[i]);
}

/* n token ids 100, 101, ... */
static void ids(size_t n)
{
    msgpack_pack_array(&pk, n);
    for (size_t i = 0; i < n; i++)
        msgpack_pack_uint32(&pk, (uint32_t) (100 + i));
}

static int decode(void)
{
    return kve_decode(dec, sb.data, sb.size, &out, err, sizeof err);
}

/* Decodes, expecting an error: nothing may be reported. */
static void malformed(const char *what)
{
    int rv = decode();

    if (rv != KVE_EMALFORMED)
        fail_msg("%s: %d, not KVE_EMALFORMED", what, rv);
    assert_int_equal(out.n_events, 0);
    assert_int_equal(out.n_hashes, 0);
    assert_int_equal(out.n_tokens, 0);
    assert_true(err[0] != '\0');
}

/* The three events of vLLM's first encoding, with every field of today's BlockStored. */
static void positional_events(void)
{
    static const uint64_t h[] = {11, 12};

    msgpack_pack_array(&pk, 3);
    msgpack_pack_array(&pk, 12);
    str("BlockStored");
    u64s(h, 2);
    msgpack_pack_uint64(&pk, 10);
    ids(8);
    msgpack_pack_uint32(&pk, 4);
    msgpack_pack_nil(&pk); /* lora_id */
    str("GPU");
    str("adapter-a");
    msgpack_pack_array(&pk, 2); /* extra_keys: none for either block */
    msgpack_pack_nil(&pk);
    msgpack_pack_nil(&pk);
    msgpack_pack_uint32(&pk, 0);
    str("full_attention");
    msgpack_pack_nil(&pk);
    msgpack_pack_array(&pk, 3);
    str("BlockRemoved");
    u64s(h + 1, 1);
    str("GPU");
    msgpack_pack_array(&pk, 1);
    str("AllBlocksCleared");
}

static void check_positional(void)
{
    assert_int_equal(out.n_events, 3);
    assert_int_equal(events[0].kind, KVE_STORED);
    assert_int_equal(events[0].n_hashes, 2);
    assert_int_equal(hashes[events[0].hash_first], 11);
    assert_int_equal(hashes[events[0].hash_first + 1], 12);
    assert_int_equal(events[0].has_parent, 1);
    assert_int_equal(events[0].parent, 10);
    assert_int_equal(events[0].n_tokens, 8);
    assert_int_equal(tokens[events[0].token_first], 100);
    assert_int_equal(tokens[events[0].token_first + 7], 107);
    assert_int_equal(events[0].block_size, 4);
    assert_int_equal(events[0].lora_id, -1);
    assert_int_equal(events[0].lora_name_len, 9);
    assert_memory_equal(events[0].lora_name, "adapter-a", 9);
    assert_int_equal(events[0].group_idx, 0);
    assert_int_equal(events[0].spec_kind_len, 14);
    assert_int_equal(events[0].has_extra_keys, 0);
    assert_int_equal(events[0].n_plain, 2);
    assert_int_equal(events[1].kind, KVE_REMOVED);
    assert_int_equal(events[1].n_hashes, 1);
    assert_int_equal(events[1].n_plain, 0);
    assert_int_equal(hashes[events[1].hash_first], 12);
    assert_int_equal(events[2].kind, KVE_CLEARED);
    assert_int_equal(events[2].n_hashes, 0);
    assert_int_equal(out.unknown_fields, 0);
    assert_int_equal(out.unknown_events, 0);
    assert_int_equal(out.other_medium, 0);
}

/* [ts, [positional events], rank], and the oldest form: no rank, events of 5 and 2 fields. */
static void test_positional(void **state)
{
    (void) state;
    start();
    msgpack_pack_array(&pk, 3);
    msgpack_pack_double(&pk, 1750000000.5);
    positional_events();
    msgpack_pack_uint32(&pk, 3);
    assert_int_equal(decode(), KVE_OK);
    check_positional();
    assert_true(out.ts == 1750000000.5);
    assert_int_equal(out.dp_rank, 3);

    start();
    msgpack_pack_array(&pk, 2);
    msgpack_pack_uint32(&pk, 7); /* an integer ts */
    msgpack_pack_array(&pk, 2);
    msgpack_pack_array(&pk, 5);
    str("BlockStored");
    u64s((const uint64_t[]){5}, 1);
    msgpack_pack_nil(&pk);
    ids(16);
    msgpack_pack_uint32(&pk, 16);
    msgpack_pack_array(&pk, 2);
    str("BlockRemoved");
    u64s((const uint64_t[]){5}, 1);
    assert_int_equal(decode(), KVE_OK);
    assert_int_equal(out.n_events, 2);
    assert_true(out.ts == 7.0);
    assert_int_equal(out.dp_rank, -1);
    assert_int_equal(events[0].has_parent, 0);
    assert_int_equal(events[0].lora_id, -1);
    assert_null(events[0].lora_name);
    assert_int_equal(events[0].group_idx, -1);
    assert_null(events[0].spec_kind);
    assert_int_equal(events[1].kind, KVE_REMOVED);
}

/* A BlockStored as vLLM 0.26 sends it (kthena's capture), with parent and block hashes. */
static void map_stored(const char *medium, size_t nblocks, size_t ntokens)
{
    msgpack_pack_map(&pk, 11);
    str("type");
    str("BlockStored");
    str("block_hashes");
    u64s((const uint64_t[]){21, 22, 23}, nblocks);
    str("parent_block_hash");
    msgpack_pack_uint64(&pk, 20);
    str("token_ids");
    ids(ntokens);
    str("block_size");
    msgpack_pack_uint32(&pk, 2);
    str("lora_id");
    msgpack_pack_uint32(&pk, 4);
    str("medium");
    if (medium)
        str(medium);
    else
        msgpack_pack_nil(&pk);
    str("lora_name");
    msgpack_pack_nil(&pk);
    str("extra_keys");
    msgpack_pack_array(&pk, 1);
    msgpack_pack_array(&pk, 1); /* a block with a salt in its hash */
    str("salt");
    str("group_idx");
    msgpack_pack_uint32(&pk, 1);
    str("kv_cache_spec_kind");
    str("sliding_window");
}

static void map_events(void)
{
    msgpack_pack_array(&pk, 3);
    map_stored("GPU", 3, 6);
    msgpack_pack_map(&pk, 3);
    str("type");
    str("BlockRemoved");
    str("block_hashes");
    u64s((const uint64_t[]){23}, 1);
    str("medium");
    str("GPU");
    msgpack_pack_map(&pk, 1);
    str("type");
    str("AllBlocksCleared");
}

static void check_map(void)
{
    assert_int_equal(out.n_events, 3);
    assert_int_equal(events[0].kind, KVE_STORED);
    assert_int_equal(events[0].n_hashes, 3);
    assert_int_equal(hashes[events[0].hash_first + 2], 23);
    assert_int_equal(events[0].parent, 20);
    assert_int_equal(events[0].n_tokens, 6);
    assert_int_equal(events[0].block_size, 2);
    assert_int_equal(events[0].lora_id, 4);
    assert_null(events[0].lora_name);
    assert_int_equal(events[0].has_extra_keys, 1);
    assert_int_equal(events[0].n_plain, 0); /* the first block is salted */
    assert_int_equal(events[0].group_idx, 1);
    assert_int_equal(events[0].spec_kind_len, strlen("sliding_window"));
    assert_memory_equal(events[0].spec_kind, "sliding_window", events[0].spec_kind_len);
    assert_int_equal(events[1].kind, KVE_REMOVED);
    assert_int_equal(hashes[events[1].hash_first], 23);
    assert_int_equal(events[2].kind, KVE_CLEARED);
    assert_int_equal(out.unknown_fields, 0);
}

/* Map events in a positional batch (vLLM 0.26), and in a map batch (EventBatch without
 * array_like), with data_parallel_rank or SGLang's attn_dp_rank or neither. */
static void test_maps(void **state)
{
    (void) state;
    start();
    msgpack_pack_array(&pk, 3);
    msgpack_pack_double(&pk, 2.25);
    map_events();
    msgpack_pack_uint32(&pk, 0);
    assert_int_equal(decode(), KVE_OK);
    check_map();
    assert_int_equal(out.dp_rank, 0);

    static const char *const rank_keys[] = {"data_parallel_rank", "attn_dp_rank", NULL};
    for (int k = 0; k < 3; k++) {
        start();
        msgpack_pack_map(&pk, rank_keys[k] ? 3 : 2);
        str("events"); /* before ts: a map's order is not a rule */
        map_events();
        str("ts");
        msgpack_pack_double(&pk, 3.5);
        if (rank_keys[k]) {
            str(rank_keys[k]);
            msgpack_pack_uint32(&pk, 2);
        }
        assert_int_equal(decode(), KVE_OK);
        check_map();
        assert_true(out.ts == 3.5);
        assert_int_equal(out.dp_rank, rank_keys[k] ? 2 : -1);
    }

    /* positional events in a map batch */
    start();
    msgpack_pack_map(&pk, 2);
    str("ts");
    msgpack_pack_double(&pk, 1);
    str("events");
    positional_events();
    assert_int_equal(decode(), KVE_OK);
    check_positional();
}

/* Hashes: u64 above INT64_MAX as they are, negative int64 as their bits, bytes as their last 8
 * big-endian (the int form of the same digest), short bytes whole. */
static void test_hashes(void **state)
{
    static const uint8_t digest[32] = {0xde, 0xad, [24] = 0x80, 1, 2, 3, 4, 5, 6, 0xff};
    (void) state;
    batch(2, 2);
    msgpack_pack_array(&pk, 5);
    str("BlockStored");
    msgpack_pack_array(&pk, 4);
    msgpack_pack_uint64(&pk, UINT64_MAX);
    msgpack_pack_int64(&pk, -2);
    bin(digest, sizeof digest);
    bin((const uint8_t[]){1, 2, 3}, 3);
    msgpack_pack_uint64(&pk, (uint64_t) INT64_MAX + 1); /* parent */
    ids(4);
    msgpack_pack_uint32(&pk, 1);
    msgpack_pack_array(&pk, 2);
    str("BlockRemoved");
    msgpack_pack_array(&pk, 1);
    bin(digest, sizeof digest);
    assert_int_equal(decode(), KVE_OK);
    assert_int_equal(out.n_events, 2);
    assert_int_equal(out.n_hashes, 5);
    assert_true(hashes[0] == UINT64_MAX);
    assert_true(hashes[1] == UINT64_MAX - 1);
    assert_true(hashes[2] == 0x80010203040506ffULL);
    assert_true(hashes[3] == 0x010203);
    assert_true(events[0].parent == 0x8000000000000000ULL);
    assert_true(hashes[events[1].hash_first] == 0x80010203040506ffULL);

    /* a bytes parent, and the same digest as an int (vLLM's default) gives the same key */
    batch(2, 1);
    msgpack_pack_array(&pk, 5);
    str("BlockStored");
    u64s((const uint64_t[]){0x80010203040506ffULL}, 1);
    bin(digest, sizeof digest);
    ids(1);
    msgpack_pack_uint32(&pk, 1);
    assert_int_equal(decode(), KVE_OK);
    assert_true(events[0].parent == hashes[0]);
}

/* Unknown fields (past the known ones, unknown keys, the batch's own) and unknown events are
 * counted and skipped; what is known around them is read. */
static void test_unknown(void **state)
{
    (void) state;
    batch(4, 4);
    msgpack_pack_array(&pk, 14); /* 12 known fields after the tag... and two more */
    str("BlockStored");
    u64s((const uint64_t[]){1}, 1);
    msgpack_pack_nil(&pk);
    ids(2);
    msgpack_pack_uint32(&pk, 2);
    for (int i = 0; i < 7; i++)
        msgpack_pack_nil(&pk);
    msgpack_pack_map(&pk, 1); /* a field of tomorrow */
    str("x");
    msgpack_pack_array(&pk, 0);
    msgpack_pack_true(&pk);
    msgpack_pack_array(&pk, 2); /* an event of tomorrow */
    str("BlockPinned");
    msgpack_pack_uint32(&pk, 1);
    msgpack_pack_map(&pk, 3);
    str("type");
    str("BlockRemoved");
    str("event_version"); /* RFC #55487's */
    msgpack_pack_uint32(&pk, 2);
    str("block_hashes");
    u64s((const uint64_t[]){1}, 1);
    msgpack_pack_map(&pk, 2);
    str("type");
    str("Compacted");
    str("block_hashes");
    msgpack_pack_uint32(&pk, 3); /* wrong for us, but not ours to judge */
    msgpack_pack_uint32(&pk, 0);
    str("trailing");
    assert_int_equal(decode(), KVE_OK);
    assert_int_equal(out.n_events, 2);
    assert_int_equal(events[0].kind, KVE_STORED);
    assert_int_equal(events[1].kind, KVE_REMOVED);
    assert_int_equal(out.unknown_events, 2);
    assert_int_equal(out.unknown_fields, 2 + 1 + 1);

    start();
    msgpack_pack_map(&pk, 3);
    str("ts");
    msgpack_pack_double(&pk, 0);
    msgpack_pack_uint32(&pk, 5); /* a key that is not a string */
    msgpack_pack_nil(&pk);
    str("events");
    msgpack_pack_array(&pk, 0);
    assert_int_equal(decode(), KVE_OK);
    assert_int_equal(out.n_events, 0);
    assert_int_equal(out.unknown_fields, 1);
}

/* Another medium than the GPU's: skipped and counted, an offload store without token ids
 * included; null, absent and "gpu" are the GPU's. */
static void test_medium(void **state)
{
    (void) state;
    batch(2, 6);
    map_stored("CPU", 2, 0);
    msgpack_pack_array(&pk, 3);
    str("BlockRemoved");
    u64s((const uint64_t[]){7, 8, 9}, 3);
    str("DISK");
    map_stored(NULL, 1, 2);
    map_stored("gpu", 1, 2);
    msgpack_pack_array(&pk, 3);
    str("BlockRemoved");
    u64s((const uint64_t[]){7}, 1);
    msgpack_pack_nil(&pk);
    msgpack_pack_array(&pk, 2);
    str("BlockRemoved");
    u64s((const uint64_t[]){8}, 1);
    assert_int_equal(decode(), KVE_OK);
    assert_int_equal(out.other_medium, 2);
    assert_int_equal(out.other_medium_blocks, 5);
    assert_int_equal(out.n_events, 4);
    assert_int_equal(out.n_hashes, 4); /* the skipped events' hashes are not kept */
    assert_int_equal(out.n_tokens, 4);
    assert_int_equal(hashes[events[0].hash_first], 21);
    assert_int_equal(events[0].hash_first, 0);
    assert_int_equal(events[0].token_first, 0);
    assert_int_equal(hashes[events[3].hash_first], 8);

    /* the skipped take no room: arrays of exactly what was reported suffice */
    {
        struct kve_out exact = with(events, 4, hashes, 4, tokens, 4);

        assert_int_equal(kve_decode(dec, sb.data, sb.size, &exact, err, sizeof err), KVE_OK);
        assert_int_equal(exact.other_medium, 2);
        exact = with(events, 3, hashes, 4, tokens, 4);
        assert_int_equal(kve_decode(dec, sb.data, sb.size, &exact, err, sizeof err), KVE_EFULL);
    }
}

/* SGLang's salted store, positional: its metadata map where vLLM has lora_name. */
static void sglang_salted(void)
{
    msgpack_pack_array(&pk, 8);
    str("BlockStored");
    u64s((const uint64_t[]){1}, 1);
    msgpack_pack_nil(&pk);
    ids(2);
    msgpack_pack_uint32(&pk, 2);
    msgpack_pack_nil(&pk);
    str("GPU");
    msgpack_pack_map(&pk, 1);
    str("cache_salt");
    str("tenant-1");
}

/* SGLang's salted store: tag "BlockStored", its metadata map where vLLM has lora_name. */
static void test_sglang_metadata(void **state)
{
    (void) state;
    batch(3, 2);
    sglang_salted();
    msgpack_pack_map(&pk, 5); /* and by name */
    str("type");
    str("BlockStored");
    str("block_hashes");
    u64s((const uint64_t[]){1}, 1);
    str("token_ids");
    ids(2);
    str("block_size");
    msgpack_pack_uint32(&pk, 2);
    str("metadata");
    msgpack_pack_map(&pk, 1);
    str("cache_salt");
    str("tenant-1");
    msgpack_pack_uint32(&pk, 1);
    assert_int_equal(decode(), KVE_OK);
    assert_int_equal(out.n_events, 2);
    assert_int_equal(events[0].has_extra_keys, 1);
    assert_int_equal(events[0].n_plain, 0);
    assert_null(events[0].lora_name);
    assert_int_equal(events[1].has_extra_keys, 1);
    assert_int_equal(events[1].n_plain, 0);
    assert_int_equal(out.unknown_fields, 0);
    assert_int_equal(out.dp_rank, 1);

    /* a store by name must carry token_ids and block_size */
    batch(2, 1);
    msgpack_pack_map(&pk, 2);
    str("type");
    str("BlockStored");
    str("block_hashes");
    u64s((const uint64_t[]){1}, 1);
    malformed("map BlockStored without token_ids");
}

/* A positional store of four blocks with lora_name (NULL: nil) and the extra_keys entries the
 * caller packs next (four of them). */
static void stored_with_extras(const char *lora)
{
    batch(2, 1);
    msgpack_pack_array(&pk, 9);
    str("BlockStored");
    u64s((const uint64_t[]){1, 2, 3, 4}, 4);
    msgpack_pack_nil(&pk);
    ids(8);
    msgpack_pack_uint32(&pk, 2);
    msgpack_pack_nil(&pk);
    str("GPU");
    if (lora)
        str(lora);
    else
        msgpack_pack_nil(&pk);
    msgpack_pack_array(&pk, 4);
}

/* n_plain: the leading blocks whose extra keys are nothing or the LoRA name alone. A salt
 * that happens to equal the LoRA name, media beside it, or a name without a lora_name to
 * match end the plain part; nil entries after it do not bring it back. */
static void test_plain_blocks(void **state)
{
    (void) state;
    stored_with_extras("lo");
    msgpack_pack_array(&pk, 1);
    str("lo");
    msgpack_pack_nil(&pk);
    msgpack_pack_array(&pk, 1);
    str("lo");
    msgpack_pack_array(&pk, 1);
    str("lo");
    assert_int_equal(decode(), KVE_OK);
    assert_int_equal(events[0].has_extra_keys, 1);
    assert_int_equal(events[0].n_plain, 4);

    stored_with_extras("lo");
    msgpack_pack_array(&pk, 1);
    str("lo");
    msgpack_pack_array(&pk, 2); /* the LoRA name and a media identifier */
    str("lo");
    str("mm-hash");
    msgpack_pack_nil(&pk);
    msgpack_pack_nil(&pk);
    assert_int_equal(decode(), KVE_OK);
    assert_int_equal(events[0].n_plain, 1);

    stored_with_extras("lo");
    msgpack_pack_nil(&pk);
    msgpack_pack_nil(&pk);
    msgpack_pack_array(&pk, 1);
    str("l"); /* another string: a salt */
    msgpack_pack_nil(&pk);
    assert_int_equal(decode(), KVE_OK);
    assert_int_equal(events[0].n_plain, 2);

    stored_with_extras("lo");
    msgpack_pack_array(&pk, 1);
    msgpack_pack_uint32(&pk, 7); /* not a string */
    msgpack_pack_nil(&pk);
    msgpack_pack_nil(&pk);
    msgpack_pack_nil(&pk);
    assert_int_equal(decode(), KVE_OK);
    assert_int_equal(events[0].n_plain, 0);

    stored_with_extras(NULL); /* a salt alone: no lora_name to be */
    msgpack_pack_array(&pk, 1);
    str("lo");
    msgpack_pack_nil(&pk);
    msgpack_pack_nil(&pk);
    msgpack_pack_nil(&pk);
    assert_int_equal(decode(), KVE_OK);
    assert_int_equal(events[0].has_extra_keys, 1);
    assert_int_equal(events[0].n_plain, 0);

    stored_with_extras(NULL);
    for (int i = 0; i < 4; i++)
        msgpack_pack_nil(&pk);
    assert_int_equal(decode(), KVE_OK);
    assert_int_equal(events[0].has_extra_keys, 0);
    assert_int_equal(events[0].n_plain, 4);
}

/* Every prefix of a good payload, and the payload with a byte more, are malformed. */
static void test_truncations(void **state)
{
    char whole[4096];
    size_t n;

    (void) state;
    for (int form = 0; form < 2; form++) {
        start();
        msgpack_pack_array(&pk, 3);
        msgpack_pack_double(&pk, 1.5);
        if (form == 0)
            positional_events();
        else
            map_events();
        msgpack_pack_uint32(&pk, 1);
        assert_true(sb.size < sizeof whole - 1);
        n = sb.size;
        memcpy(whole, sb.data, n);
        for (size_t cut = 0; cut < n; cut++) {
            int rv;

            err[0] = '\0';
            rv = kve_decode(dec, whole, cut, &out, err, sizeof err);
            if (rv != KVE_EMALFORMED)
                fail_msg("form %d cut at %zu of %zu: %d", form, cut, n, rv);
            assert_int_equal(out.n_events, 0);
            assert_true(err[0] != '\0');
        }
        whole[n] = (char) 0xc0;
        assert_int_equal(kve_decode(dec, whole, n + 1, &out, err, sizeof err), KVE_EMALFORMED);
        assert_int_equal(kve_decode(dec, whole, n, &out, err, sizeof err), KVE_OK);
    }
}

/* A stored event at positions: hashes, parent, tokens, block size; what to break given. */
static void stored_with(int bad)
{
    batch(2, 1);
    msgpack_pack_array(&pk, 5);
    str("BlockStored");
    if (bad == 0)
        str("not hashes");
    else if (bad == 1) {
        msgpack_pack_array(&pk, 1); /* a hash as a string */
        str("x");
    } else if (bad == 2) {
        msgpack_pack_array(&pk, 1);
        msgpack_pack_double(&pk, 1.0);
    } else
        u64s((const uint64_t[]){1}, 1);
    if (bad == 3)
        str("parent");
    else
        msgpack_pack_nil(&pk);
    if (bad == 4) {
        msgpack_pack_array(&pk, 2);
        msgpack_pack_int32(&pk, -1);
        msgpack_pack_uint32(&pk, 1);
    } else if (bad == 5) {
        msgpack_pack_array(&pk, 2);
        msgpack_pack_uint64(&pk, (uint64_t) UINT32_MAX + 1);
        msgpack_pack_uint32(&pk, 1);
    } else if (bad == 6) {
        ids(3); /* 3 ids for 1 block of 2 */
    } else {
        ids(2);
    }
    if (bad == 7)
        msgpack_pack_uint32(&pk, 0);
    else if (bad == 8)
        str("2");
    else if (bad == 9)
        msgpack_pack_nil(&pk);
    else
        msgpack_pack_uint32(&pk, 2);
}

/* Known fields of the wrong type, events that are no event, batches that are no batch. */
static void test_wrong_types(void **state)
{
    (void) state;
    for (int bad = 0; bad < 10; bad++) {
        stored_with(bad);
        if (decode() != KVE_EMALFORMED)
            fail_msg("stored event broken as %d decoded: %s", bad, err);
        assert_int_equal(out.n_events, 0);
    }
    stored_with(-1);
    assert_int_equal(decode(), KVE_OK); /* the control */

    start();
    msgpack_pack_uint32(&pk, 1);
    malformed("an integer batch");
    start();
    msgpack_pack_array(&pk, 1);
    msgpack_pack_double(&pk, 0);
    malformed("a batch without events");
    start();
    msgpack_pack_array(&pk, 2);
    str("now");
    msgpack_pack_array(&pk, 0);
    malformed("a string ts");
    start();
    msgpack_pack_map(&pk, 1);
    str("events");
    msgpack_pack_array(&pk, 0);
    malformed("a map batch without ts");
    start();
    msgpack_pack_array(&pk, 2);
    msgpack_pack_double(&pk, 0);
    msgpack_pack_map(&pk, 0);
    malformed("events a map");
    batch(3, 0);
    msgpack_pack_int32(&pk, -1);
    malformed("a negative rank");

    batch(2, 1);
    msgpack_pack_uint32(&pk, 1);
    malformed("an integer event");
    batch(2, 1);
    msgpack_pack_array(&pk, 0);
    malformed("an empty event");
    batch(2, 1);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_uint32(&pk, 1);
    malformed("an integer tag");
    batch(2, 1);
    msgpack_pack_map(&pk, 1);
    str("block_hashes");
    msgpack_pack_array(&pk, 0);
    malformed("a map event without type");
    batch(2, 1);
    msgpack_pack_array(&pk, 3);
    str("BlockRemoved");
    msgpack_pack_array(&pk, 0);
    msgpack_pack_uint32(&pk, 1);
    malformed("an integer medium");
    batch(2, 1);
    msgpack_pack_array(&pk, 1);
    str("BlockRemoved");
    malformed("a removal without hashes");
    batch(2, 1);
    msgpack_pack_array(&pk, 4);
    str("BlockRemoved");
    msgpack_pack_array(&pk, 0);
    msgpack_pack_nil(&pk);
    str("0");
    malformed("a string group_idx");
    batch(2, 1);
    msgpack_pack_array(&pk, 8);
    str("BlockStored");
    msgpack_pack_array(&pk, 0);
    msgpack_pack_nil(&pk);
    msgpack_pack_array(&pk, 0);
    msgpack_pack_uint32(&pk, 16);
    msgpack_pack_nil(&pk);
    msgpack_pack_nil(&pk);
    msgpack_pack_uint32(&pk, 3);
    malformed("an integer lora_name");
}

/* Bytes that lie about their size, nesting past msgpack-c's stack, bytes never used. */
static void test_hostile(void **state)
{
    static const uint8_t huge_array[] = {0xdd, 0xff, 0xff, 0xff, 0xff, 0x01};
    static const uint8_t huge_map[] = {0x92, 0x00, 0xdf, 0x7f, 0xff, 0xff, 0xff};
    static const uint8_t huge_str[] = {0x92, 0x00, 0xdb, 0xff, 0xff, 0xff, 0xf0, 'x'};
    static const uint8_t huge_ext[] = {0x92, 0x00, 0xc9, 0xff, 0xff, 0xff, 0xf0, 1, 'x'};
    static const uint8_t never_used[] = {0x92, 0x00, 0xc1};
    uint8_t deep[64];
    (void) state;
    assert_int_equal(kve_decode(dec, huge_array, sizeof huge_array, &out, err, sizeof err),
                     KVE_EMALFORMED);
    assert_int_equal(kve_decode(dec, huge_map, sizeof huge_map, &out, err, sizeof err),
                     KVE_EMALFORMED);
    assert_int_equal(kve_decode(dec, huge_str, sizeof huge_str, &out, err, sizeof err),
                     KVE_EMALFORMED);
    assert_int_equal(kve_decode(dec, huge_ext, sizeof huge_ext, &out, err, sizeof err),
                     KVE_EMALFORMED);
    assert_int_equal(kve_decode(dec, never_used, sizeof never_used, &out, err, sizeof err),
                     KVE_EMALFORMED);
    /* [0, [[[...[]...]]]]: well formed, too deep */
    deep[0] = 0x92;
    deep[1] = 0x00;
    memset(deep + 2, 0x91, sizeof deep - 3);
    deep[sizeof deep - 1] = 0x90;
    assert_int_equal(kve_decode(dec, deep, sizeof deep, &out, err, sizeof err), KVE_EMALFORMED);
    assert_non_null(strstr(err, "deep"));
    assert_int_equal(kve_decode(dec, NULL, 0, &out, NULL, 0), KVE_EMALFORMED);
}

/* Arrays too small: KVE_EFULL and nothing; arrays of the payload's length always suffice. */
static void test_full(void **state)
{
    struct kve_event ev[64];
    uint64_t hs[64];
    uint32_t ts[64];
    struct kve_out small = with(ev, 2, hs, 64, ts, 64);

    (void) state;
    start();
    msgpack_pack_array(&pk, 2);
    msgpack_pack_double(&pk, 0);
    positional_events();
    assert_int_equal(kve_decode(dec, sb.data, sb.size, &small, err, sizeof err), KVE_EFULL);
    assert_int_equal(small.n_events, 0);
    small = with(ev, 64, hs, 1, ts, 64);
    assert_int_equal(kve_decode(dec, sb.data, sb.size, &small, err, sizeof err), KVE_EFULL);
    small = with(ev, 64, hs, 64, ts, 7);
    assert_int_equal(kve_decode(dec, sb.data, sb.size, &small, err, sizeof err), KVE_EFULL);
    assert_int_equal(small.n_hashes, 0);
    small = with(ev, 3, hs, 3, ts, 8);
    assert_int_equal(kve_decode(dec, sb.data, sb.size, &small, err, sizeof err), KVE_OK);

    /* the bound: a payload of only empty removals, one element each */
    batch(2, 40);
    for (int i = 0; i < 40; i++) {
        msgpack_pack_array(&pk, 2);
        str("BlockRemoved");
        u64s((const uint64_t[]){1}, 1);
    }
    {
        size_t n = sb.size;
        struct kve_event *e = calloc(n, sizeof(*e));
        uint64_t *h = calloc(n, sizeof(*h));
        uint32_t *t = calloc(n, sizeof(*t));
        struct kve_out o = with(e, n, h, n, t, n);

        assert_int_equal(kve_decode(dec, sb.data, n, &o, err, sizeof err), KVE_OK);
        assert_int_equal(o.n_events, 40);
        free(e);
        free(h);
        free(t);
    }
}

/* All or nothing: good events before a bad one are not reported. */
static void test_all_or_nothing(void **state)
{
    (void) state;
    batch(2, 3);
    msgpack_pack_array(&pk, 1);
    str("AllBlocksCleared");
    map_stored("GPU", 2, 4);
    map_stored("GPU", 2, 5); /* 5 ids for 2 blocks of 2 */
    malformed("a bad third event");
    assert_int_equal(out.unknown_fields, 0);
    assert_non_null(strstr(err, "token_ids"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_positional),     cmocka_unit_test(test_maps),
        cmocka_unit_test(test_hashes),         cmocka_unit_test(test_unknown),
        cmocka_unit_test(test_medium),         cmocka_unit_test(test_sglang_metadata),
        cmocka_unit_test(test_truncations),    cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_hostile),        cmocka_unit_test(test_full),
        cmocka_unit_test(test_all_or_nothing), cmocka_unit_test(test_plain_blocks),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
