/* mock_kvpub: one rank's KV events publisher, in vLLM's format over ZMQ.
 *
 * It listens to the rank's prefix cache (mock_kvcache) and publishes what the cache stores
 * and evicts as vLLM does (`vllm/distributed/kv_events.py`): a PUB socket sends each batch as
 * three frames, the topic, the rank's sequence number (8 bytes, big-endian, from 0) and a
 * msgpack payload [ts, [event...], rank]. A batch holds the changes of one turn of the event
 * loop (the mock's scheduler step): a store of consecutive blocks of one chain is one
 * BlockStored, consecutive evictions one BlockRemoved. A ROUTER socket, when configured,
 * answers a replay request for a start sequence with the kept batches from it on, then an
 * end marker of sequence -1. */
#ifndef ADMIT_MOCK_KVPUB_H
#define ADMIT_MOCK_KVPUB_H

#include "mock_kvcache.h"
#include "mock_opts.h"

#include <stddef.h>

struct event_base;
struct mock_kvpub;

/** opens rank's publisher per o (kv_endpoint set) on the ZMQ context zctx and makes it
 * cache's listener; NULL with err set if a socket cannot be bound or connected */
struct mock_kvpub *mock_kvpub_new(struct event_base *base, void *zctx, const struct mock_opts *o,
                                  unsigned rank, struct mock_kvc *cache, char *err, size_t errlen);
/** closes p's sockets (dropping what is unsent) and frees it; NULL is a no-op */
void mock_kvpub_free(struct mock_kvpub *p);
/** writes into out the endpoint of rank: a tcp port plus rank, or "_dp<rank>" appended to an
 * ipc or inproc name (rank 0 unchanged); -1 if it does not fit or the port passes 65535 */
int mock_kvpub_rank_endpoint(const char *endpoint, unsigned rank, char *out, size_t outlen);

#endif
