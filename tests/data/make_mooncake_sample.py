#!/usr/bin/env python3
"""Writes tests/data/mooncake_sample.jsonl: a small synthetic trace in the Mooncake FAST'25 JSONL
format, so the importer, profile and simulator tests run on a fresh clone (the real trace must not
be copied into the tree; see ../shared/traces/README.md).

Same shape as the conversation trace: one JSON object per line with `timestamp` (integer ms from
the first request), `input_length`, `output_length` (tokens) and `hash_ids`, one id per 512-token
block (len == ceil(input_length / 512)), ids numbered by first appearance. Multi-turn
conversations re-send their history, so a turn's full blocks repeat the previous turn's ids; two
system prompts give conversations a shared first block (1 block) or two (2 blocks).

Deterministic: its own splitmix64 generator, no dependency on Python's `random`. Run from the
repository root:  python3 tests/data/make_mooncake_sample.py
"""
import json
import math
import os
import sys

BLOCK = 512
SEED = 17
CONVERSATIONS = 60
WINDOW_MS = 20 * 60 * 1000  # conversations start within 20 minutes
SYSTEM_PROMPTS = [700, 1100]  # tokens: one shared full block, or two


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & 0xFFFFFFFFFFFFFFFF

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        return z ^ (z >> 31)

    def uniform(self):  # [0, 1)
        return (self.next() >> 11) / float(1 << 53)

    def integer(self, lo, hi):  # [lo, hi]
        return lo + self.next() % (hi - lo + 1)

    def log_uniform(self, lo, hi):  # heavy-tailed lengths, as chat traffic has
        return int(round(math.exp(math.log(lo) + self.uniform() * (math.log(hi) - math.log(lo)))))


def main():
    rng = SplitMix64(SEED)
    next_id = [0]

    def fresh():
        next_id[0] += 1
        return ("raw", next_id[0])

    system_blocks = [[("sys", s, i) for i in range(tokens // BLOCK)] for s, tokens in enumerate(SYSTEM_PROMPTS)]
    requests = []
    for _ in range(CONVERSATIONS):
        system = rng.integer(0, len(SYSTEM_PROMPTS) - 1)
        at_ms = rng.integer(0, WINDOW_MS)
        turns = rng.integer(1, 6)
        context = SYSTEM_PROMPTS[system]  # tokens every turn re-sends
        full_ids = list(system_blocks[system])  # ids of the blocks that are full in the history
        first = True
        for _ in range(turns):
            user = rng.log_uniform(300, 24000) if first else rng.log_uniform(20, 3000)
            first = False
            input_length = context + user
            output_length = min(2000, rng.log_uniform(3, 1600))
            ids = [full_ids[i] if i < len(full_ids) else fresh() for i in range(math.ceil(input_length / BLOCK))]
            requests.append((at_ms, input_length, output_length, ids))
            # Blocks full in this prompt stay as they are in the next one; a partial last block
            # is extended by the answer and the next message, so it becomes a new block.
            full_ids = ids[: input_length // BLOCK]
            context = input_length + output_length
            at_ms += rng.integer(15_000, 150_000)  # the user reads the answer and types

    requests.sort(key=lambda r: r[0])
    t0 = requests[0][0]
    numbering = {}
    lines = []
    for at_ms, input_length, output_length, ids in requests:
        numbered = [numbering.setdefault(i, len(numbering)) for i in ids]
        row = {"timestamp": at_ms - t0, "input_length": input_length, "output_length": output_length, "hash_ids": numbered}
        lines.append(json.dumps(row))

    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mooncake_sample.jsonl")
    with open(out, "w", encoding="ascii", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    n = len(requests)
    print(f"{out}: {n} requests, {len(numbering)} distinct blocks, "
          f"mean input {sum(r[1] for r in requests) / n:.2f}, mean output {sum(r[2] for r in requests) / n:.2f}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
