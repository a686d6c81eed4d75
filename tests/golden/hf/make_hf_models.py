#!/usr/bin/env python3
"""Hugging Face model directories and transformers' goldens for kvgate's HF loader.

transformers (with CPU torch) is the independent implementation here, as llama.cpp is for GGUF
(tests/golden/README.md). Two modes:

  make_hf_models.py tiny OUT_DIR
      A tiny random model of each supported architecture (llama with llama3 rope scaling,
      mistral, qwen2, qwen3, gemma3_text), each with a small tokenizer trained here and built
      through transformers' own tokenizer class of the family (so normalizer, pre-tokenizer,
      byte fallback and added tokens are what transformers writes for that family), saved with
      save_pretrained, plus golden.json: token ids of texts and the f32 forward's logits.

  make_hf_models.py default GGUF OUT_DIR GOLDEN_JSON
      The default model (SmolLM2-135M-Instruct Q4_1 GGUF) loaded by transformers, dequantized,
      saved in bf16 with its tokenizer; goldens from the saved directory in f32.

Offline tooling only (scripts/make-hf-default runs the second mode in a pinned venv); kvgate
never runs Python.
"""
import json
import math
import os
import sys

import torch
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

TEXTS = [
    "Hello world! How are you doing today?",
    " leading space and  two spaces",
    "Numbers: 12345 and 3.14159, 2024-12-06; 1,000,000",
    "def f(x):\n\treturn x ** 2  # square\n",
    "한국어 텍스트와 日本語のテキスト, 中文",
    "emoji 🤖🚀 and accents: café naïve Ångström",
    "line one\r\nline two\n\n\nline five",
    "   ",
    "",
    "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX!",
    "don't can't we'll I'M you'RE",
    "tabs\tand\u00a0nbsp and \u3000 ideographic space",
    "café (composed) vs cafe\u0301 (decomposed)",
]

CORPUS = (
    [
        "The quick brown fox jumps over the lazy dog.",
        "Hello world, hello there, how are you today?",
        "def square(x):\n    return x * x\n",
        "for i in range(10):\n\tprint(i)\n",
        "Numbers like 12345, 3.14159 and 2024 are common in tables.",
        "KV cache quantization keeps quality within a small KL divergence.",
        "The model answers questions about capitals: Paris, Berlin, Seoul, Tokyo.",
        "이것은 한국어 문장입니다. 모델은 한국어도 처리합니다.",
        "It's a test; they're here, we've seen it, I'll go, you'd know.",
    ]
    * 20
)


def gpt2_bytes():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def train_byte_level(vocab_size, specials, pre):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=alphabet, special_tokens=specials, show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    data = json.loads(tok.to_str())
    return data["model"]["vocab"], [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in data["model"]["merges"]]


def train_char_level(vocab_size, specials):
    """A SentencePiece-style BPE: spaces as U+2581, characters as symbols, <0xXX> byte tokens."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False)
    tok.train_from_iterator(["\u2581" + t for t in CORPUS], trainer)
    data = json.loads(tok.to_str())
    trained = data["model"]["vocab"]
    vocab = {s: i for i, s in enumerate(specials)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for t, _ in sorted(trained.items(), key=lambda kv: kv[1]):
        if t not in vocab:
            vocab[t] = len(vocab)
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in data["model"]["merges"]]
    return vocab, merges


LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
GEMMA = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim"
    " + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)


def tokenizer_for(family):
    from transformers import GemmaTokenizer, LlamaTokenizer, PreTrainedTokenizerFast, Qwen2Tokenizer

    if family == "qwen":
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        vocab, merges = train_byte_level(
            360, [], pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")), "isolated"),
                                              pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]))
        tok = Qwen2Tokenizer(vocab=vocab, merges=merges, unk_token=None, bos_token=None, eos_token="<|im_end|>",
                             pad_token="<|endoftext|>")
        tok.add_special_tokens({"additional_special_tokens": specials})
        tok.chat_template = CHATML
        return tok
    if family == "llama3":
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
        pre = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(LLAMA3_SPLIT), "isolated"), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        vocab, merges = train_byte_level(360, [], pre)
        backend = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=True))
        backend.pre_tokenizer = pre
        backend.decoder = decoders.ByteLevel()
        backend.add_special_tokens(specials)
        bos = backend.token_to_id("<|begin_of_text|>")
        backend.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                          special_tokens=[("<|begin_of_text|>", bos)]),
        ])
        return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    if family == "mistral":
        vocab, merges = train_char_level(400, ["<unk>", "<s>", "</s>"])
        tok = LlamaTokenizer(vocab=vocab, merges=merges, unk_token="<unk>", bos_token="<s>", eos_token="</s>", legacy=False)
        return tok
    if family == "gemma":
        specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
        vocab, merges = train_char_level(400, specials)
        tok = GemmaTokenizer(vocab=vocab, merges=merges)
        tok.add_special_tokens({"additional_special_tokens": ["<start_of_turn>", "<end_of_turn>"]})
        tok.chat_template = GEMMA
        return tok
    raise ValueError(family)


def tiny_config(arch, vocab, tok):
    from transformers import Gemma3TextConfig, LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-5,
                  bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    if arch == "llama3":
        return LlamaConfig(**common, rope_theta=500000.0, tie_word_embeddings=False,
                           rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
    if arch == "mistral":
        return MistralConfig(**common, rope_theta=10000.0, sliding_window=16, tie_word_embeddings=False)
    if arch == "qwen2":
        return Qwen2Config(**common, rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False)
    if arch == "qwen3":
        return Qwen3Config(**common, head_dim=32, rope_theta=1000000.0, tie_word_embeddings=False)
    if arch == "gemma3":
        c = dict(common)
        c["num_hidden_layers"] = 4
        return Gemma3TextConfig(**c, head_dim=32, query_pre_attn_scalar=24, sliding_window=8, sliding_window_pattern=2,
                                rope_theta=1000000.0, rope_local_base_freq=10000.0, final_logit_softcapping=30.0,
                                rope_scaling={"rope_type": "linear", "factor": 2.0})
    raise ValueError(arch)


TINY = {
    # name: (config arch, tokenizer family, stored dtype, shards)
    "llama3": ("llama3", "llama3", torch.bfloat16, 1),
    "mistral": ("mistral", "mistral", torch.float16, 1),
    "qwen2": ("qwen2", "qwen", torch.bfloat16, 1),
    "qwen3": ("qwen3", "qwen", torch.float32, 2),
    "gemma3": ("gemma3", "gemma", torch.bfloat16, 1),
}

PROMPTS = [
    ("chat", None),
    ("prose", "The quick brown fox jumps over the lazy dog. " * 6 + "Numbers 12345 and more text follow here."),
]


def goldens(model_dir, tok, texts, prompts, chat_messages, positions):
    from transformers import AutoModelForCausalLM

    out = {"transformers": transformers.__version__, "torch": torch.__version__, "tokens": [], "prompts": []}
    for t in texts:
        out["tokens"].append({"text": t, "ids": tok(t, add_special_tokens=False)["input_ids"],
                              "ids_with_special": tok(t)["input_ids"]})
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    for name, text in prompts:
        if text is None:
            if tok.chat_template is None:
                continue
            ids = tok.apply_chat_template(chat_messages, add_generation_prompt=True, tokenize=True, return_dict=False)
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
            rendered = tok.apply_chat_template(chat_messages, add_generation_prompt=True, tokenize=False)
        else:
            ids = tok(text)["input_ids"]
            rendered = None
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].double()
        rows = []
        for p in range(max(0, len(ids) - positions), len(ids)):
            row = logits[p]
            lse = float(torch.logsumexp(row, 0))
            top = torch.topk(row, 20)
            rows.append({"position": p, "lse": lse, "top": [[int(i), float(v)] for v, i in zip(top.values, top.indices)],
                         "logits": [round(float(v), 6) for v in row] if row.numel() <= 1024 else None})
        entry = {"name": name, "ids": ids, "positions": rows}
        if rendered is not None:
            entry["rendered"] = rendered
        out["prompts"].append(entry)
    return out


CHAT = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "Paris."}, {"role": "user", "content": "And of Korea?"}]


def make_tiny(out_root):
    torch.manual_seed(43)
    for name, (arch, family, dtype, shards) in TINY.items():
        d = os.path.join(out_root, name)
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(d):
            os.remove(os.path.join(d, f))
        tok = tokenizer_for(family)
        config = tiny_config(arch, len(tok), tok)
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0.0, 0.2 if p.dim() > 1 else 0.1)
                if p.dim() == 1:
                    p.add_(1.0 if arch != "gemma3" else 0.0)
        model = model.to(dtype)
        kw = {"max_shard_size": "200KB"} if shards > 1 else {}
        model.save_pretrained(d, **kw)
        tok.save_pretrained(d)
        chat = CHAT if family != "gemma" else [m for m in CHAT if m["role"] != "system"]
        g = goldens(d, tok, TEXTS, PROMPTS, chat, 8)
        g["model"] = name
        with open(os.path.join(out_root, name + ".golden.json"), "w") as f:
            json.dump(g, f, ensure_ascii=False, separators=(",", ":"))
        print(name, sorted(os.listdir(d)), file=sys.stderr)


SMOLLM_PRE = {"type": "Sequence", "pretokenizers": [
    {"type": "Digits", "individual_digits": True},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}


def make_default(gguf, out_dir, golden_json):
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    folder, name = os.path.split(os.path.abspath(gguf))
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32,
                                                 quantization_config=GgufConfig(dequantize=True))
    model.hf_quantizer = None
    model = model.to(torch.bfloat16)
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    # transformers' GGUF converter has no entry for llama.cpp's `smollm` pre-tokenizer and falls
    # back to GPT-2's; SmolLM2's own tokenizer.json (and llama.cpp's name) split digits one by one
    # before GPT-2's ByteLevel. Restore that, so the directory tokenizes as the published checkpoint.
    path = os.path.join(out_dir, "tokenizer.json")
    with open(path) as f:
        t = json.load(f)
    t["pre_tokenizer"] = SMOLLM_PRE
    with open(path, "w") as f:
        json.dump(t, f, ensure_ascii=False, indent=2)
    tok = AutoTokenizer.from_pretrained(out_dir)
    prompts = [("chat", None), ("prose", "The capital of France is Paris. It has 2,102,650 inhabitants (2023) and "
                                         "the Eiffel Tower, built in 1889, is 330 m tall.")]
    g = goldens(out_dir, tok, TEXTS, prompts, CHAT, 8)
    g["model"] = "SmolLM2-135M-Instruct (from " + name + ")"
    with open(golden_json, "w") as f:
        json.dump(g, f, ensure_ascii=False, separators=(",", ":"))


if __name__ == "__main__":
    torch.set_num_threads(2)
    if len(sys.argv) == 3 and sys.argv[1] == "tiny":
        make_tiny(sys.argv[2])
    elif len(sys.argv) == 5 and sys.argv[1] == "default":
        make_default(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)
