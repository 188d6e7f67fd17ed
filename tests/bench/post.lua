-- wrk script: a small non-streaming chat completion; prints machine-readable results.
-- No response() callback here: it would make wrk parse every reply and slow it down.
wrk.method = "POST"
wrk.body = '{"model":"mock-model","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}'
wrk.headers["Content-Type"] = "application/json"

local threads = {}
function setup(thread)
    table.insert(threads, thread)
end



function done(summary, latency, requests)
    io.write(string.format("BENCH requests=%d duration_us=%d connect_err=%d read_err=%d write_err=%d timeout_err=%d status_err=%d\n",
        summary.requests, summary.duration, summary.errors.connect, summary.errors.read,
        summary.errors.write, summary.errors.timeout, summary.errors.status))
    io.write(string.format("BENCH p50_us=%d p90_us=%d p99_us=%d max_us=%d\n",
        latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
    for _, t in ipairs(threads) do
        local c = t:get("counts")
        if c then
            for s, n in pairs(c) do
                io.write(string.format("BENCH status %d %d\n", s, n))
            end
        end
    end
end
