#!/usr/bin/env python3
"""Writes the golden fixtures of the architectures beyond the default model with llama.cpp's C
API (llama_golden.cpp, built from the pinned b11434 source): Gemma 3 270M's tokenizer and
logits, and the logits of the small random-weight models of tiny_models/ (make_tiny_models.py).
README.md in this folder says how to build the tool and what tolerances apply.

    python3 make_arch_golden.py --tool /tmp/llama_golden --gemma GEMMA.gguf [--out DIR]
"""
import argparse
import ast
import json
import os
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def default_token_cases():
    """TOKEN_CASES of make_golden.py (one list for every tokenizer), read without importing the
    binding that script needs."""
    tree = ast.parse(open(os.path.join(HERE, "make_golden.py"), encoding="utf-8").read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "TOKEN_CASES":
            return eval(compile(ast.Expression(node.value), "make_golden.py", "eval"), {})
    raise SystemExit("TOKEN_CASES not found in make_golden.py")


GEMMA_TOKEN_CASES = [
    ("gemma_chat", "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>\n"),
    ("gemma_bos_inside", "<bos>text<eos> and <pad><unk>"),
    ("spaces_and_newlines", "a  b   c\n\n d \n\n\n\n   e\t\tf"),
    ("byte_fallback", "\x01\x02 rare: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ꙮ 𓀀 \U0010FFFD"),
    ("leading_spaces", "   indented"),
    ("html", "<div class=\"x\"><p>Hello</p></div>"),
]

GEMMA_PROMPTS = [
    {"name": "chat_capital", "text": "<start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n"},
    {"name": "korean", "text": "서울은 대한민국의 수도이며, 한강이 도시를 가로질러 흐른다. 서울의 인구는"},
    {"name": "code", "text": "def fibonacci(n):\n    if n < 2:\n        return n\n    return"},
    {"name": "numeric_table", "text": "| city | population |\n|---|---|\n| Paris | 2,148,000 |\n| Lyon | 516,000 |\n| Marseille |"},
    # Longer than the 512-token sliding window: the local layers' mask matters at the last positions.
    {"name": "past_window",
     "text": " ".join(f"Item {i}: the {['red', 'green', 'blue', 'amber'][i % 4]} box holds {i * 7 % 101} coins."
                     for i in range(60)) + " The box of item 3 holds"},
]

# Token ids for the tiny random models (their vocabularies are bytes, so ids are the input).
TINY_PROMPTS = [
    {"name": "short", "ids": [1, 72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100]},
    {"name": "long", "ids": [1] + [(i * 37 + 11) % 250 + 3 for i in range(90)]},
]


def run_tool(tool, request):
    with tempfile.TemporaryDirectory() as tmp:
        req_path, out_path = os.path.join(tmp, "req.json"), os.path.join(tmp, "out.json")
        with open(req_path, "w", encoding="utf-8") as f:
            json.dump(request, f, ensure_ascii=False)
        subprocess.run([tool, req_path, out_path], check=True, stderr=subprocess.DEVNULL)
        with open(out_path, encoding="utf-8") as f:
            return json.load(f)


def write(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", required=True, help="llama_golden binary")
    ap.add_argument("--gemma", help="gemma-3-270m-q4_k_m.gguf (kvgate model fetch --name gemma3-270m)")
    ap.add_argument("--out", default=HERE)
    args = ap.parse_args()

    if args.gemma:
        cases = [[n, t] for n, t in default_token_cases() + GEMMA_TOKEN_CASES]
        out = run_tool(args.tool, {
            "model": args.gemma, "add_bos": True, "top_k": 20, "last_positions": 8, "n_ctx": 1024,
            "kv_types": ["f32"], "token_cases": cases, "prompts": GEMMA_PROMPTS,
            "greedy": {"text": GEMMA_PROMPTS[0]["text"], "n": 24}})
        out["source"]["model"] = os.path.basename(args.gemma)
        write(os.path.join(args.out, "gemma3_tokens.json"),
              {"source": out["source"], "add_bos": False, "cases": out["token_cases"]})
        del out["token_cases"]
        write(os.path.join(args.out, "gemma3_logits.json"), out)

    for name in ("qwen2", "qwen3", "llama3", "llama-linear"):
        model = os.path.join(HERE, "tiny_models", f"tiny-{name}.gguf")
        if not os.path.exists(model):
            raise SystemExit(f"{model} is missing: run make_tiny_models.py first")
        out = run_tool(args.tool, {
            "model": model, "add_bos": False, "top_k": 20, "last_positions": 8, "n_ctx": 256,
            "kv_types": ["f32"], "prompts": TINY_PROMPTS, "greedy": {"ids": TINY_PROMPTS[0]["ids"], "n": 24}})
        out["source"]["model"] = os.path.basename(model)
        del out["token_cases"]
        write(os.path.join(args.out, f"tiny_{name.replace('-', '_')}_logits.json"), out)


if __name__ == "__main__":
    main()
