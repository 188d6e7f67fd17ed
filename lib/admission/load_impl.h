/* load_impl.h: what the two parts of the load module share: load.c (model lists, encoding)
 * and load_decode.c (decoding), which both follow the wire's list of numeric fields. */
#ifndef ADMIT_LOAD_IMPL_H
#define ADMIT_LOAD_IMPL_H

/* The nullable numeric fields of struct admit_load, in wire order, as X(field, least value,
 * optional): an optional field was added to v1 later, and a reader takes a message without it
 * (as unknown), since publishers from before it do not send it. */
#define LOAD_NUMFIELDS(X)                                                                          \
    X(kv_used_blocks, 0, 0)                                                                        \
    X(kv_total_blocks, 0, 0)                                                                       \
    X(kv_block_size, 1, 1)                                                                         \
    X(active_decode_blocks, 0, 0)                                                                  \
    X(active_prefill_tokens, 0, 0)                                                                 \
    X(max_num_batched_tokens, 0, 0)                                                                \
    X(engine_requests, 0, 0)                                                                       \
    X(engine_request_limit, 0, 0)                                                                  \
    X(queued_requests, 0, 0)                                                                       \
    X(request_queue_limit, 0, 0)

#endif
