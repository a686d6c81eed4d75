#!/usr/bin/env python3
"""Renders the committed chat templates (tests/golden/hf/chat/*.jinja) with transformers' own
Jinja environment (render_jinja_template: jinja2's sandbox, trim_blocks, lstrip_blocks, its
tojson, raise_exception, namespace) into tests/golden/hf/chat/golden.json, which
tests/runtime/jinja_test.cc compares kvgate's renderer with byte for byte.

Offline tooling only (run in the venv scripts/make-hf-default makes):
  $KVGATE_HOME/venvs/hf-transformers-5.23.0/bin/python tests/golden/hf/make_chat_goldens.py
"""
import json
import os
import sys

import jinja2
import transformers
from transformers.utils.chat_template_utils import _compile_jinja_template, render_jinja_template

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "chat")

# Each template with the special tokens its tokenizer_config.json names (transformers passes
# tokenizer.special_tokens_map to the template).
TEMPLATES = {
    "llama3.1-instruct.jinja": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "mistral-7b-instruct-v0.3.jinja": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "mixtral-8x7b-instruct-v0.1.jinja": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "qwen2.5-instruct.jinja": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "qwen3.jinja": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "gemma-3-it.jinja": {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>",
                         "mask_token": "<mask>"},
}

SYSTEM = {"role": "system", "content": "You are terse. Answer in one line."}
CONVERSATIONS = [
    [{"role": "user", "content": "What is 2+2?"}],
    [SYSTEM, {"role": "user", "content": "What is 2+2?"}],
    [SYSTEM, {"role": "user", "content": "Name a prime."}, {"role": "assistant", "content": "7"},
     {"role": "user", "content": "Another one?"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"}],
    # Surrounding whitespace (ASCII, NBSP, ideographic space), newlines, quotes and non-ASCII text:
    # what trim and string handling must get exactly right.
    [{"role": "user", "content": "  \u00a0Spaces\taround, \"quotes\" and 'apostrophes'\n\n\u3000"},
     {"role": "assistant", "content": "\n caf\u00e9 \u2014 \u65e5\u672c\u8a9e \U0001f600 \n"},
     {"role": "user", "content": "{{ not a tag }} {% neither %}"}],
    # A reasoning model's answer with its thinking, then a follow-up.
    [{"role": "user", "content": "Think: 3*3?"},
     {"role": "assistant", "content": "<think>\nthree threes\n</think>\n\n9"},
     {"role": "user", "content": "And 4*4?"}],
    # Roles out of order: the alternating templates raise.
    [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}],
    [SYSTEM],
]

# Small templates for the constructs one at a time, rendered in the same environment.
CONSTRUCTS = [
    ("  {% if true %}\n  x\n  {% endif %}\n{# c #}\n  {#- d #}\ny\n", {}),
    ("a  {%- if true -%}  b  {%- endif -%}  c\n\n", {}),
    ("{{- ' a ' -}}\n  {{ 'b' }}  \n{%+ if true %}x{% endif +%}\n", {}),
    ("{% for i in [1, 2, 3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}"
     "{{ loop.revindex }}|{% endfor %}", {}),
    ("{% for i in xs if i % 2 == 1 %}{{ i }}:{{ loop.index0 }}/{{ loop.length }} {% else %}none{% endfor %}",
     {"xs": [1, 2, 3, 4, 5]}),
    ("{% for i in [] %}x{% else %}empty{% endfor %}", {}),
    ("{% for k, v in d | items %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
     {"d": {"b": 1, "a": [1, "x"]}}),
    ("{% for k, v in d.items() if k != 'b' %}{{ k }}{% endfor %}", {"d": {"b": 1, "a": 2, "c": 3}}),
    ("{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = 5 %}{{ x }}{% endfor %}{{ x }}", {}),
    ("{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}"
     "{% endfor %}{{ ns.n }} {{ ns.s }}", {}),
    ("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}"
     "{% endfor %}", {}),
    ("{{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[-2] }} {{ s[1:3] }} {{ s[::-1] }} {{ s[-1] }} {{ xs[5] }}.",
     {"xs": [1, 2, 3, 4], "s": "h\u00e9llo"}),
    ("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 'ab' * 2 }}"
     " {{ 'a' ~ 1 ~ none ~ true }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 3.0 }}", {}),
    ("{{ 1 < 2 < 3 }} {{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'cat' }} {{ 1 == 1.0 }}"
     " {{ [1, {'a': 2}] == [1, {'a': 2}] }} {{ not 0 }} {{ none or 'x' }} {{ 'y' and 0 }}", {}),
    ("{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ n is none }} {{ s is string }} {{ 3 is number }}"
     " {{ 3 is integer }} {{ 3.5 is float }} {{ d is mapping }} {{ xs is iterable }} {{ s is iterable }}"
     " {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 'a' is equalto 'a' }} {{ false is false }}"
     " {{ x is not none }} {{ xs is sequence }} {{ true is boolean }}",
     {"x": 1, "n": None, "s": "str", "d": {}, "xs": [1]}),
    ("[{{ '  a b \n' | trim }}] {{ xs | length }} {{ 'h\u00e9' | length }} {{ d | length }} {{ y | default('dflt') }}"
     " {{ '' | default('e', true) }} {{ xs | join(', ') }} {{ xs | first }} {{ xs | last }} {{ 'Ab' | upper }}"
     " {{ 'Ab' | lower }} {{ 'hello world' | capitalize }} {{ 'a-b-a' | replace('a', 'x') }} {{ 3 | string }}"
     " {{ '42' | int + 1 }} {{ -3 | abs }} {{ none | string }} {{ xs | list }}",
     {"xs": [1, 2, 3], "d": {"a": 1}}),
    ("{{ ms | selectattr('role', 'equalto', 'user') | list | length }} "
     "{{ ms | rejectattr('role', 'equalto', 'user') | map(attribute='content') | join('+') }} "
     "{{ ['a', 'code', 'b'] | reject('equalto', 'code') | join(', ') }} {{ [0, 1, 2] | select | list }}",
     {"ms": [{"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1"},
             {"role": "user", "content": "u2"}, {"role": "tool", "content": "t1"}]}),
    ("{{ d | tojson }} {{ d | tojson(indent=2) }} {{ [] | tojson }} {{ 'caf\u00e9 \"q\" \\\\ \n' | tojson }}"
     " {{ [1.5, none, true, {}] | tojson }}",
     {"d": {"name": "f", "args": {"x": [1, 2], "y": "z"}}}),
    ("{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ t.strip('\\n') }}|{{ t.lstrip('\\n') }}|"
     "{{ t.split('</think>')[-1] }}|{{ 'a  b c'.split() }}|{{ 'a,b,,c'.split(',') }}|{{ s.startswith(' ') }}"
     "|{{ t.endswith('\\n') }}|{{ 'x'.startswith(('a', 'x')) }}|{{ 'Hi'.upper() }}{{ 'Hi'.lower() }}"
     "|{{ d.get('a') }}{{ d.get('z', 'no') }}{{ d.keys() | list }}{{ d.values() | list }}",
     {"s": "  pad\u00a0 ", "t": "\n<think>x</think>\n\nanswer\n", "d": {"a": 1}}),
    ("{{ 'yes' if x else 'no' }} {{ 'yes' if y else 'no' }} [{{ 'only' if y }}] {{ (1, 2) }} {{ [1, 'a', none] }}"
     " {{ {'k': 'v'} }} {{ \"it's\" }} {{ 'a' 'b' }}", {"x": True}),
    ("{% set a, b = [1, 2] %}{{ b }}{{ a }}{% set l = [1, 2] + [3] %}{{ l }}", {}),
    ("{% if x %}A{% elif y %}B{% else %}C{% endif %}{% if not x and not y %}D{% endif %}", {"y": 1}),
    ("{{ m.content.content is defined }} {{ m.missing }}|{{ m['role'] }} {{ m.role }}",
     {"m": {"role": "user", "content": "text"}}),
    ("{% generation %}kept {{ 1 }}{% endgeneration %}", {}),
    ("\r\nline one\r\n{% if true %}\r\nline two\r\n{% endif %}\r\n", {}),
]

# Templates kvgate must refuse to render, and the problem its message names.
ERRORS = [
    ("{{ raise_exception('custom failure') }}", {}, "custom failure"),
    ("{{ x.y }}", {}, "'x' is undefined"),
    ("{{ 'a' + 1 }}", {}, "unsupported operand"),
    ("{% for m in messages %}{{ m.content", {}, None),
    ("{% if x %}a", {}, "endif"),
    ("{{ x | nosuchfilter }}", {"x": 1}, "nosuchfilter"),
    ("{% endfor %}", {}, "without its opening tag"),
    ("{{ 'unterminated }}", {}, "unterminated string"),
]


# Valid Jinja outside the subset: refused when parsed, naming the construct (no jinja2 run).
REFUSALS = [
    ("{% macro f() %}x{% endmacro %}{{ f() }}", "unsupported tag '{% macro %}'"),
    ("{% include 'other.jinja' %}", "unsupported tag '{% include %}'"),
    ("{% set x %}block{% endset %}", "block assignment"),
    ("{{ x | wordcount }}", "unsupported filter '|wordcount'"),
]


# The tiny Llama 3 and Mistral fixtures (tests/golden/hf) with their family's real template:
# the ids transformers' apply_chat_template gives, for the test that loads such a directory.
FIXTURE_CHATS = {"llama3": "llama3.1-instruct.jinja", "mistral": "mistral-7b-instruct-v0.3.jinja"}
FIXTURE_MESSAGES = [SYSTEM, {"role": "user", "content": "Name a prime."}, {"role": "assistant", "content": "7"},
                    {"role": "user", "content": "Another one?"}]


def main():
    out = {"transformers": transformers.__version__, "jinja2": jinja2.__version__, "templates": [],
           "constructs": [], "errors": [],
           "refusals": [{"template": t, "problem": p} for t, p in REFUSALS]}
    for name, special in TEMPLATES.items():
        with open(os.path.join(HERE, name), encoding="utf-8") as f:
            source = f.read()
        entry = {"file": name, "special_tokens": special, "renders": []}
        for messages in CONVERSATIONS:
            for add_generation_prompt in (False, True):
                case = {"messages": messages, "add_generation_prompt": add_generation_prompt}
                try:
                    text, _ = render_jinja_template(conversations=[messages], chat_template=source,
                                                    add_generation_prompt=add_generation_prompt, **special)
                    case["text"] = text[0]
                except jinja2.exceptions.TemplateError as e:
                    case["error"] = str(e)
                entry["renders"].append(case)
        out["templates"].append(entry)
    out["fixture_chats"] = []
    for fixture, name in FIXTURE_CHATS.items():
        with open(os.path.join(HERE, name), encoding="utf-8") as f:
            source = f.read()
        tok = transformers.AutoTokenizer.from_pretrained(os.path.join(HERE, "..", fixture))
        tok.chat_template = source
        text = tok.apply_chat_template(FIXTURE_MESSAGES, add_generation_prompt=True, tokenize=False)
        ids = tok.apply_chat_template(FIXTURE_MESSAGES, add_generation_prompt=True, tokenize=True)
        if hasattr(ids, "keys"):
            ids = ids["input_ids"]
        out["fixture_chats"].append({"fixture": fixture, "template": name, "messages": FIXTURE_MESSAGES,
                                     "text": text, "ids": list(ids)})
    for source, context in CONSTRUCTS:
        out["constructs"].append({"template": source, "context": context,
                                  "text": _compile_jinja_template(source).render(**context)})
    for source, context, problem in ERRORS:
        try:
            _compile_jinja_template(source).render(**context)
        except jinja2.exceptions.TemplateError as e:
            out["errors"].append({"template": source, "context": context, "jinja2": f"{type(e).__name__}: {e}",
                                  "problem": problem})
            continue
        except TypeError as e:
            out["errors"].append({"template": source, "context": context, "jinja2": f"TypeError: {e}",
                                  "problem": problem})
            continue
        sys.exit(f"expected an error from {source!r}")
    with open(os.path.join(HERE, "golden.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
