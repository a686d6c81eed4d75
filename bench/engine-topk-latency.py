#!/usr/bin/env python3
"""What top-k logprobs cost a serving engine's greedy stream (offline tooling; issue 39 item 4:
kvgate's greedy answers ask for no top-k lists, since nothing reads them and the engines pay per
token for them: llama-server copies and sorts the vocabulary for n_probs and turns backend
sampling off).

  bench/engine-topk-latency.py URL [--rounds 15] [--tokens 32] [--top-k 20]

URL is a running llama-server (/completion). The same greedy request as kvgate's (the sampling
pinned neutral, token ids, cache_prompt, ignore_eos so every answer is --tokens long), streamed,
alternately without and with n_probs = --top-k, after one warm-up each. Prints the median TTFT
and TPOT of each, from the client's arrival time of each chunk, as kvgate measures them.
"""
import argparse
import json
import statistics
import time
import urllib.request

NEUTRAL = {"temperature": 0, "dynatemp_range": 0, "samplers": ["temperature"], "mirostat": 0, "repeat_penalty": 1,
           "presence_penalty": 0, "frequency_penalty": 0, "dry_multiplier": 0, "top_k": 0, "top_p": 1, "min_p": 0,
           "typical_p": 1, "xtc_probability": 0}


def post(url, body):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(request)


def stream(url, prompt, tokens, top_k):
    body = {"prompt": prompt, "n_predict": tokens, "cache_prompt": True, "return_tokens": True, "stream": True,
            "ignore_eos": True, **NEUTRAL}
    if top_k:
        body["n_probs"] = top_k
    start = time.perf_counter()
    arrivals = []
    with post(url + "/completion", body) as response:
        for line in response:
            if line.startswith(b"data: ") and json.loads(line[6:]).get("tokens"):
                arrivals.append(time.perf_counter() - start)
    return 1000 * arrivals[0], 1000 * (arrivals[-1] - arrivals[0]) / (len(arrivals) - 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--top-k", type=int, default=20)
    a = ap.parse_args()
    text = "Write a short story about a lighthouse keeper who finds a message in a bottle. " * 4
    with post(a.url + "/tokenize", {"content": text, "add_special": False}) as response:
        prompt = json.loads(response.read())["tokens"]
    for k in (0, a.top_k):
        stream(a.url, prompt, a.tokens, k)
    runs = {0: [], a.top_k: []}
    for _ in range(a.rounds):
        for k in runs:
            runs[k].append(stream(a.url, prompt, a.tokens, k))
    print(f"| top-k lists | TTFT p50 | TPOT p50 | requests |\n|---|---|---|---|")
    for k, r in runs.items():
        print(f"| {'none' if k == 0 else f'n_probs {k}'} | {statistics.median(t for t, _ in r):.1f} ms | "
              f"{statistics.median(p for _, p in r):.2f} ms | {len(r)} |")


if __name__ == "__main__":
    main()
