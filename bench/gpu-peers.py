#!/usr/bin/env python3
"""Peers for kvgate's GPU benchmarks, timed on the same GPU in the same run (offline tooling:
PyTorch is on the GPU machines, never in kvgate's path).

  bench/gpu-peers.py [--tokens 8192,32768] [--batch 1,8] [--iterations 50] [--prefill 2048x32768]

Prints two Markdown tables:
  - decode attention, the shape of gpu_kv_bench (one Llama-3-8B layer: 32 query heads over 8 KV
    heads, head_dim 128, one query token per sequence): PyTorch scaled_dot_product_attention with
    enable_gqa=True on an f16 cache, µs per step and the K+V bytes read per second, the same
    convention as gpu_kv_bench's "KV GB/s" (K and V of every cached token once; the query and
    output are noise at these sizes), against the read bandwidth a reduction reaches;
  - with --prefill QxK: causal attention of Q queries over a K-token f16 cache (the queries the
    last Q positions, as kvgate's prefill chunk; 32 query heads over 8 KV heads, head_dim 128),
    through SDPA's flash kernel, in TFLOP/s (4 x head_dim x heads per query-key pair it sees);
  - the matmul peers of `kvgate bench model --backend cuda` at the 8B shapes: an f16 GEMM
    (2048 x 4096 x 14336) in TFLOP/s and the f16 GEMVs of a decode step (14336 x 4096,
    4096 x 14336, 4096 x 4096) in GB/s of weights read.
Timing: CUDA events around `iterations` calls after 5 warm-ups, the median of 5 such batches.
"""
import argparse
import statistics

import torch
import torch.nn.functional as F


def time_us(fn, iterations):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    batches = []
    for _ in range(5):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iterations):
            fn()
        end.record()
        torch.cuda.synchronize()
        batches.append(start.elapsed_time(end) * 1000.0 / iterations)
    return statistics.median(batches)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="8192,32768")
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--prefill", default="")
    args = ap.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")

    # Read bandwidth as a read-only reduction sees it, the bound of the ratio column (a copy counts
    # reads and writes and reaches about the same total, so it is no read bound by itself).
    n = 1 << 30
    src = torch.ones(n, dtype=torch.float32, device=dev)
    read_us = time_us(lambda: src.sum(), 20)
    read_gbs = 4 * n / read_us / 1e3
    dst = torch.empty_like(src)
    copy_us = time_us(lambda: dst.copy_(src), 20)
    copy_gbs = 2 * 4 * n / copy_us / 1e3
    del src, dst
    print(f"read bandwidth (sum of 4 GiB): {read_gbs:.0f} GB/s; device-to-device copy: {copy_gbs:.0f} GB/s (read + write)")
    print()
    print("| cache | tokens | sequences | PyTorch SDPA µs/step | KV GB/s | of read bandwidth |")
    print("|---|---|---|---|---|---|")
    hq, hkv, d = 32, 8, 128
    for tokens in [int(t) for t in args.tokens.split(",")]:
        for b in [int(x) for x in args.batch.split(",")]:
            q = torch.randn(b, hq, 1, d, dtype=torch.float16, device=dev)
            k = torch.randn(b, hkv, tokens, d, dtype=torch.float16, device=dev)
            v = torch.randn(b, hkv, tokens, d, dtype=torch.float16, device=dev)
            us = time_us(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), args.iterations)
            kv_bytes = 2 * b * hkv * tokens * d * 2
            gbs = kv_bytes / us / 1e3
            print(f"| f16 | {tokens} | {b} | {us:.1f} | {gbs:.0f} | {gbs / read_gbs:.2f} |")
            del q, k, v
    print()
    if args.prefill:
        nq, nk = (int(x) for x in args.prefill.lower().split("x"))
        q = torch.randn(1, hq, nq, d, dtype=torch.float16, device=dev)
        k = torch.randn(1, hkv, nk, d, dtype=torch.float16, device=dev)
        v = torch.randn(1, hkv, nk, d, dtype=torch.float16, device=dev)
        # Query i sits at position nk - nq + i and sees keys 0..that position.
        pos = torch.arange(nk - nq, nk, device=dev)[:, None]
        mask = torch.arange(nk, device=dev)[None, :] <= pos
        with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.FLASH_ATTENTION,
                                             torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION]):
            us = time_us(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True), 5)
        pairs = nq * (nk - nq) + nq * (nq + 1) / 2
        print("| prefill attention (f16, causal) | queries | keys | µs | TFLOP/s |")
        print("|---|---|---|---|---|")
        print(f"| PyTorch SDPA | {nq} | {nk} | {us:.1f} | {4 * d * hq * pairs / us / 1e6:.1f} |")
        del q, k, v, mask
        print()
    m, kdim, ffn = 2048, 4096, 14336
    a = torch.randn(m, kdim, dtype=torch.float16, device=dev)
    w = torch.randn(kdim, ffn, dtype=torch.float16, device=dev)
    gemm_us = time_us(lambda: a @ w, args.iterations)
    print("| matmul (f16, cuBLAS through PyTorch) | µs | rate |")
    print("|---|---|---|")
    print(f"| GEMM {m}x{kdim}x{ffn} | {gemm_us:.1f} | {2 * m * kdim * ffn / gemm_us / 1e6:.0f} TFLOP/s |")
    # The decode GEMVs of an 8B layer: gate/up (14336 x 4096), down (4096 x 14336), q/o (4096 x 4096).
    for rows, cols in ((ffn, kdim), (kdim, ffn), (kdim, kdim)):
        wv = torch.randn(cols, rows, dtype=torch.float16, device=dev)
        x = torch.randn(1, cols, dtype=torch.float16, device=dev)
        gemv_us = time_us(lambda: x @ wv, args.iterations)
        gemv_gbs = rows * cols * 2 / gemv_us / 1e3
        print(f"| GEMV {rows}x{cols} | {gemv_us:.1f} | {gemv_gbs:.0f} GB/s of weights ({gemv_gbs / read_gbs:.2f} of read) |")
        del wv, x


if __name__ == "__main__":
    main()
