#!/usr/bin/env python3
"""Writes the small random-weight GGUFs in tiny_models/ (~110-140 KB each) that pin the
architectures no packaged model covers: qwen2 (Q/K/V biases, RoPE on halves, separate output
matrix), qwen3 (per-head Q/K RMSNorm), llama3 (Llama 3.1-style rope_freqs.weight factors and a
500000 base) and llama-linear (rope.scaling.type linear, factor 4). Deterministic: the same
gguf-py version writes the same bytes. Needs gguf-py and numpy only (a throwaway venv):

    python3 -m venv /tmp/venv-gguf && /tmp/venv-gguf/bin/pip install gguf numpy
    /tmp/venv-gguf/bin/python tests/golden/make_tiny_models.py

Shapes: 2 layers, n_embd 32, 4 query heads and 2 KV heads of 8, FFN 64, a byte-level BPE
vocabulary of 260 tokens (ids 0-2 control tokens, 3-258 the bytes, 259 one merge). Every tensor
is F32, so llama.cpp multiplies in float too and the comparison isolates the graph (RoPE layout,
frequencies, biases, norms) from weight and activation quantization, which the default model
and Gemma 3 cover. With head size 8 the Llama 3 factors take all three branches (1, smoothed, 8).
"""
import math
import os

import numpy as np
import gguf

HERE = os.path.dirname(os.path.abspath(__file__))
N_EMBD, N_HEAD, N_KV, HEAD, N_FF, N_LAYER = 32, 4, 2, 8, 64, 2


def byte_vocab():
    # GPT-2's byte alphabet (printable bytes as themselves, the rest shifted to U+0100...).
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    mapping, extra = {}, 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + [mapping[b] for b in range(256)] + ["\u0120t"]
    types = [3, 3, 3] + [1] * 257
    return tokens, types, ["\u0120 t"]


def llama3_rope_factors(base, dim, factor=8.0, low=1.0, high=4.0, original_ctx=8192):
    # convert_hf_to_gguf.py's LlamaModel.generate_extra_tensors for rope_type "llama3".
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    low_wavelen, high_wavelen = original_ctx / low, original_ctx / high
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (original_ctx / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def write_model(name, arch, rng, *, bias=False, qk_norm=False, separate_output=False, rope_base=10000.0,
                rope_factors=None, linear_factor=None):
    path = os.path.join(HERE, "tiny_models", f"tiny-{name}.gguf")
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"kvgate tiny {name} (random weights)")
    w.add_block_count(N_LAYER)
    w.add_context_length(256)
    w.add_embedding_length(N_EMBD)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_KV)
    w.add_key_length(HEAD)
    w.add_value_length(HEAD)
    w.add_rope_dimension_count(HEAD)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(rope_base)
    if linear_factor:
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(linear_factor)
    tokens, types, merges = byte_vocab()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def matrix(tensor, rows, cols, scale):
        data = (rng.standard_normal((rows, cols)) * scale / math.sqrt(cols)).astype(np.float32)
        w.add_tensor(tensor, data)

    def vector(tensor, n, mean, spread):
        w.add_tensor(tensor, (mean + spread * rng.standard_normal(n)).astype(np.float32))

    vocab = len(tokens)
    matrix("token_embd.weight", vocab, N_EMBD, math.sqrt(N_EMBD))
    vector("output_norm.weight", N_EMBD, 1.0, 0.1)
    if separate_output:
        matrix("output.weight", vocab, N_EMBD, 4.0)
    if rope_factors is not None:
        w.add_tensor("rope_freqs.weight", rope_factors)
    for l in range(N_LAYER):
        p = f"blk.{l}."
        vector(p + "attn_norm.weight", N_EMBD, 1.0, 0.1)
        matrix(p + "attn_q.weight", N_HEAD * HEAD, N_EMBD, 2.0)
        matrix(p + "attn_k.weight", N_KV * HEAD, N_EMBD, 2.0)
        matrix(p + "attn_v.weight", N_KV * HEAD, N_EMBD, 1.0)
        matrix(p + "attn_output.weight", N_EMBD, N_HEAD * HEAD, 1.0)
        if bias:
            vector(p + "attn_q.bias", N_HEAD * HEAD, 0.0, 0.5)
            vector(p + "attn_k.bias", N_KV * HEAD, 0.0, 0.5)
            vector(p + "attn_v.bias", N_KV * HEAD, 0.0, 0.5)
        if qk_norm:
            vector(p + "attn_q_norm.weight", HEAD, 1.0, 0.2)
            vector(p + "attn_k_norm.weight", HEAD, 1.0, 0.2)
        vector(p + "ffn_norm.weight", N_EMBD, 1.0, 0.1)
        matrix(p + "ffn_gate.weight", N_FF, N_EMBD, 1.0)
        matrix(p + "ffn_up.weight", N_FF, N_EMBD, 1.0)
        matrix(p + "ffn_down.weight", N_EMBD, N_FF, 1.0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def main():
    os.makedirs(os.path.join(HERE, "tiny_models"), exist_ok=True)
    write_model("qwen2", "qwen2", np.random.default_rng(2), bias=True, separate_output=True, rope_base=1000000.0)
    write_model("qwen3", "qwen3", np.random.default_rng(3), qk_norm=True, rope_base=1000000.0)
    write_model("llama3", "llama", np.random.default_rng(31), rope_base=500000.0,
                rope_factors=llama3_rope_factors(500000.0, HEAD))
    write_model("llama-linear", "llama", np.random.default_rng(7), linear_factor=4.0)


if __name__ == "__main__":
    main()
