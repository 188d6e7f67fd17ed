-- wrk script: non-streaming chat completions with a 2,048-token prompt (about 8 KiB of text
-- at 4 bytes a token): a 2 KiB system prompt every request shares, then a 6 KiB user message
-- that opens with the number of one of C conversations taken in turn (C: the first argument
-- after wrk's "--", 100 by default). A prefix-aware router finds each prompt's opening and,
-- past it, one of C chains it may still hold: at 100, what the mock's KV capacity holds, its
-- index only refreshes blocks; at 1,000 every request inserts its conversation's blocks again
-- and evicts as many. post.lua's setup() and done() print the results run.py reads.
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

local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
dofile(dir .. "post.lua")
