#!/usr/bin/env python3
"""Golden dequantization of ggml weight blocks, made by gguf-py (an independent implementation).

Writes tests/golden/weight_blocks.json: for each weight type the runtime supports, a few random
blocks (random bytes with finite fp16 scales) and the float values gguf-py decodes them to.
Regenerate (offline, in a throwaway venv):
    python3 -m venv /tmp/venv-gguf && /tmp/venv-gguf/bin/pip install gguf==0.19.0 numpy
    /tmp/venv-gguf/bin/python tests/golden/make_weight_golden.py
"""
import json
import os

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

rng = np.random.default_rng(20261202)

# (type, bytes per block, byte offsets of fp16 scale fields that must be finite)
TYPES = [
    (T.Q4_0, 18, [0]),
    (T.Q4_1, 20, [0, 2]),
    (T.Q5_0, 22, [0]),
    (T.Q5_1, 24, [0, 2]),
    (T.Q8_0, 34, [0]),
    (T.Q4_K, 144, [0, 2]),
    (T.Q6_K, 210, [208]),
]

out = {}
for qtype, block_bytes, half_offsets in TYPES:
    n_blocks = 3
    raw = bytearray(rng.integers(0, 256, size=n_blocks * block_bytes, dtype=np.uint8).tobytes())
    for b in range(n_blocks):
        for off in half_offsets:
            h = np.float16(rng.uniform(-0.05, 0.05)).tobytes()
            raw[b * block_bytes + off: b * block_bytes + off + 2] = h
    values = quants.dequantize(np.frombuffer(bytes(raw), dtype=np.uint8), qtype).astype(np.float32)
    out[qtype.name] = {"bytes_hex": bytes(raw).hex(), "values": [float(v) for v in values.reshape(-1)]}

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "weight_blocks.json")
with open(path, "w") as f:
    json.dump(out, f)
print("wrote", path)
