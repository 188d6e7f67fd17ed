-- wrk script: non-streaming chat completions with a 2,048-token prompt (about 8 KiB of text
-- at 4 bytes a token): a 2 KiB system prompt every request shares, then a 6 KiB user message
-- that opens with the number of one of C conversations taken in turn (C: the first argument
-- after wrk's "--", 100 by default). A prefix-aware router finds each prompt's opening and,
-- past it, one of C chains it may still hold: at 100, what the mock's KV capacity holds, its
-- index only refreshes blocks; at 1,000 every request inserts its conversation's blocks again
-- and evicts as many. Prints machine-readable results as post.lua does.
local sys = string.rep("you are a careful assistant that answers briefly and well. ", 34)
local user = string.rep("summarise the notes on routing, caches and queues below. ", 108)
local head = '{"model":"mock-model","max_tokens":1,"messages":[{"role":"system","content":"'
    .. sys .. '"},{"role":"user","content":"conversation '
local tail = ' ' .. user .. '"}]}'
local headers = {["Content-Type"] = "application/json"}
local n = 0
local conversations = 100

function init(args)
    conversations = tonumber(args[1]) or conversations
end

function request()
    n = n + 1
    return wrk.format("POST", nil, headers, head .. (n % conversations) .. tail)
end

function done(summary, latency, requests)
    io.write(string.format("BENCH requests=%d duration_us=%d connect_err=%d read_err=%d write_err=%d timeout_err=%d status_err=%d\n",
        summary.requests, summary.duration, summary.errors.connect, summary.errors.read,
        summary.errors.write, summary.errors.timeout, summary.errors.status))
    io.write(string.format("BENCH p50_us=%d p90_us=%d p99_us=%d max_us=%d\n",
        latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
