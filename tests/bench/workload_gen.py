"""Workloads of tests/bench/workload.py (issue 25): deterministic prompt text, multi-turn chat
sessions, and Mooncake traces (read from a file or made up by a small built-in generator).

Everything here is a pure function of its parameters and a seed, so two policies of one run
send the very same requests. Sizes are in tokens; text is made at `cpt` characters per token
(workload.py measures the mock's ratio with POST /tokenize when the mock has it, else uses 4,
the mock's and admitd's default), so a size in tokens is what the engine will count.
"""
import json
import random

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def text(seed, tokens, cpt):
    """Words of random letters seeded by `seed` (any hashable printed by repr), exactly
    tokens * cpt characters, ending in a space so that texts joined end to end keep their
    words apart: a piece of text is a function of its seed alone."""
    n = max(0, int(round(tokens * cpt)))
    rnd = random.Random(repr(seed))
    out = []
    size = 0
    while size < n:
        w = "".join(rnd.choice(_LETTERS) for _ in range(rnd.randint(2, 9))) + " "
        out.append(w)
        size += len(w)
    s = "".join(out)[:n]
    return s[:-1] + " " if s else s


# ---------------------------------------------------------------- multi-turn chat sessions

class ChatSpec:
    """The shape of a chat workload. Each session opens with a system prompt (one of `groups`
    shared ones, or the same one for every session when groups == 1 and shared_all), its own
    opening text, then `turns` turns of a user message; the answer is max_tokens long."""

    def __init__(self, name, users, turns, sys_tokens, groups, own_tokens, user_tokens,
                 answer_tokens, think_s, seed):
        self.name = name
        self.users = users
        self.turns = turns
        self.sys_tokens = sys_tokens
        self.groups = groups
        self.own_tokens = own_tokens
        self.user_tokens = user_tokens
        self.answer_tokens = answer_tokens
        self.think_s = think_s
        self.seed = seed

    def final_context(self):
        """Tokens of a session's last prompt plus its last answer (chat template aside)."""
        return self.sys_tokens + self.own_tokens + self.turns * (self.user_tokens + self.answer_tokens)

    def working_set(self, workers):
        """(tokens the fleet must hold, tokens one worker must hold when sessions are
        partitioned): every live session's context, plus each system prompt once per worker
        that serves it (every worker, when users outnumber workers)."""
        per_session = self.final_context() - self.sys_tokens
        total = self.users * per_session + self.groups * self.sys_tokens
        sys_per_worker = min(self.groups, max(1, -(-self.users // workers)))
        return total, -(-self.users // workers) * per_session + sys_per_worker * self.sys_tokens

    def session(self, user, k, cpt):
        """Session number k of user `user`: (session id, system text, opening text, [user
        message texts]). The system prompt is group g's, g drawn from the session's seed."""
        sid = "s%d-%d-%d" % (self.seed, user, k)
        rnd = random.Random("%s/%s" % (self.name, sid))
        g = rnd.randrange(self.groups)
        system = text(("sys", self.name, self.seed, g), self.sys_tokens, cpt)
        opening = text(("own", self.name, sid), self.own_tokens, cpt)
        msgs = [text(("user", self.name, sid, t), self.user_tokens, cpt) for t in range(self.turns)]
        return sid, system, opening, msgs

    def think(self, rnd):
        return rnd.expovariate(1.0 / self.think_s) if self.think_s > 0 else 0.0


# ---------------------------------------------------------------- Mooncake traces

def load_trace(path, limit=0):
    """Mooncake's JSONL: one {"timestamp" (ms), "input_length", "output_length", "hash_ids"}
    an line; other fields are ignored. The first `limit` records (0: all)."""
    out = []
    with open(path) as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            out.append({"timestamp": float(r["timestamp"]), "input_length": int(r["input_length"]),
                        "output_length": int(r["output_length"]),
                        "hash_ids": [int(h) for h in r["hash_ids"]]})
            if limit and len(out) >= limit:
                break
    return out


def sample_trace(requests, rate, block_tokens, seed, groups=4, conversations=24,
                 prefix_blocks=2, open_blocks=(1, 3), turn_blocks=(1, 2), max_blocks=8,
                 output=(32, 96)):
    """A small trace in Mooncake's shape, made up: `conversations` chains, each opening with
    one of `groups` shared prefixes of prefix_blocks blocks then blocks of its own, every next
    request of a chain resending the chain so far plus new blocks (until max_blocks, when the
    chain starts over as a new one); Poisson arrivals at `rate` a second, the chain of each
    arrival drawn at random. input_length ends inside its last block, as real ones do."""
    rnd = random.Random("mooncake/%d" % seed)
    next_id = groups * prefix_blocks

    def new_chain():
        nonlocal next_id
        g = rnd.randrange(groups)
        own = rnd.randint(*open_blocks)
        ids = list(range(g * prefix_blocks, (g + 1) * prefix_blocks)) + list(range(next_id, next_id + own))
        next_id += own
        return ids

    chains = [None] * conversations
    out = []
    t = 0.0
    for _ in range(requests):
        t += rnd.expovariate(rate) * 1000.0
        c = rnd.randrange(conversations)
        if chains[c] is None or len(chains[c]) >= max_blocks:
            chains[c] = new_chain()
        else:
            add = rnd.randint(*turn_blocks)
            chains[c] = chains[c] + list(range(next_id, next_id + add))
            next_id += add
        ids = chains[c]
        inp = (len(ids) - 1) * block_tokens + rnd.randint(block_tokens // 2, block_tokens)
        out.append({"timestamp": round(t, 3), "input_length": inp,
                    "output_length": rnd.randint(*output), "hash_ids": list(ids)})
    return out


def write_trace(path, records):
    with open(path, "w") as fh:
        for r in records:
            fh.write(json.dumps(r, separators=(",", ":")) + "\n")


def trace_prompt(rec, block_tokens, cpt, cache):
    """The prompt of one trace record: hash id h is always the same text of block_tokens
    tokens (seeded by h), so equal hash ids give equal text prefixes; cut to input_length."""
    parts = []
    for h in rec["hash_ids"]:
        s = cache.get(h)
        if s is None:
            s = cache[h] = text(("hash", h), block_tokens, cpt)
        parts.append(s)
    return "".join(parts)[:max(1, int(rec["input_length"] * cpt))]


def trace_working_set(records, block_tokens):
    """Tokens of the trace's distinct blocks (what the fleet must hold to miss nothing)."""
    return len({h for r in records for h in r["hash_ids"]}) * block_tokens
