#!/usr/bin/env python3
"""The offline gate on what nvcc made of kvgate's GPU kernels (scripts/gpu-static-check runs it).

  gpu_static_check.py --rules scripts/gpu-static-rules.tsv --cuobjdump PATH --build DIR [--nvcc NVCC]

For every source the rules name: compiles it for sm_90 with the project's flags into DIR (a cubin
and ptxas's -v report), reads each kernel's registers, stack and spills from the report and its
opcodes from `cuobjdump -sass`, applies every matching rule, prints one table row per kernel and
exits 1 when a rule fails (2 for a bad rules file, 3 when a tool fails). Offline tooling: nothing
in kvgate's product runs it.
"""
import argparse
import collections
import os
import re
import resource
import subprocess
import sys

FLAGS = ["-std=c++17", "-O3", "-gencode", "arch=compute_90,code=sm_90", "--fmad=false", "-DKVGATE_HAVE_CUDA=1",
         "-Xptxas", "-v", "-cubin"]
BUDGET_SECONDS = 15.0  # compile time per translation unit per architecture on 2 cores (CPU seconds)


class Rule:
    def __init__(self, fields, line):
        if len(fields) != 8:
            raise ValueError(f"line {line}: expected 8 tab-separated fields, got {len(fields)}")
        self.source, pattern, regs, local, require, forbid, calls, self.why = fields
        self.line = line
        self.pattern = re.compile(pattern)
        self.max_regs = None if regs == "-" else int(regs)
        self.max_local = None if local == "-" else int(local)
        # Requirements are '|'-separated; one may hold '|' inside a group, so split at the top level.
        self.require = [] if require == "-" else [re.compile(r) for r in split_top(require)]
        self.forbid = None if forbid == "-" else re.compile(forbid)
        self.max_calls = None if calls == "-" else int(calls)


def split_top(text):
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "|" and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p for p in parts if p]


def read_rules(path):
    rules = []
    with open(path) as f:
        header_seen = False
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            if not header_seen:
                header_seen = True  # the column names
                continue
            try:
                rules.append(Rule(line.split("\t"), n))
            except (ValueError, re.error) as e:
                raise SystemExit(f"{path}:{n}: {e}") from None
    if not rules:
        raise SystemExit(f"{path}: no rules")
    return rules


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return dict(zip(names, out.splitlines()))


def compile_source(nvcc, source, build):
    base = os.path.join(build, os.path.basename(source).replace(".cu", ""))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([nvcc, *FLAGS, "-I.", source, "-o", base + ".cubin"], capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(3)
    return base + ".cubin", proc.stdout + proc.stderr, cpu


def ptxas_report(text):
    """{mangled kernel: {regs, stack, spill_st, spill_ld}} from ptxas -v."""
    kernels, current = {}, None
    for line in text.splitlines():
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            current = m.group(1)
            kernels.setdefault(current, {"regs": 0, "stack": 0, "spill_st": 0, "spill_ld": 0})
            continue
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            current = m.group(1)
            kernels.setdefault(current, {"regs": 0, "stack": 0, "spill_st": 0, "spill_ld": 0})
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            k = kernels[current]
            k["stack"], k["spill_st"], k["spill_ld"] = (int(x) for x in m.groups())
        m = re.search(r"Used (\d+) registers", line)
        if m:
            kernels[current]["regs"] = int(m.group(1))
    return kernels


def sass_opcodes(cuobjdump, cubin):
    """{mangled kernel: Counter(opcode)} from cuobjdump -sass."""
    proc = subprocess.run([cuobjdump, "-sass", cubin], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise SystemExit(3)
    out, current = {}, None
    for line in proc.stdout.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            current = m.group(1)
            out[current] = collections.Counter()
            continue
        m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m and current:
            out[current][m.group(1)] += 1
    return out


def short(name):
    name = re.sub(r"kvgate::kernels::gpu::|kvgate::kernels::|kvgate::", "", name)
    name = name.replace("KvTile<", "").replace("Rows", "")
    return re.sub(r"\(AttentionParams\)$", "", name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rules", required=True)
    ap.add_argument("--cuobjdump", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--nvcc", default="nvcc")
    args = ap.parse_args()
    rules = read_rules(args.rules)
    os.makedirs(args.build, exist_ok=True)
    sources = list(dict.fromkeys(r.source for r in rules))
    failures, rows, budget_lines = [], [], []
    for source in sources:
        if not os.path.exists(source):
            raise SystemExit(f"{args.rules}: source {source} does not exist")
        cubin, report, cpu = compile_source(args.nvcc, source, args.build)
        budget_lines.append(f"{source}: {cpu:.1f} s CPU for sm_90 (budget {BUDGET_SECONDS:.0f} s)"
                            + ("" if cpu <= BUDGET_SECONDS else "  OVER BUDGET"))
        resources = ptxas_report(report)
        opcodes = sass_opcodes(args.cuobjdump, cubin)
        names = demangle(sorted(opcodes))
        matched_any = collections.Counter()
        for mangled in sorted(opcodes, key=lambda m: names[m]):
            name = names[mangled]
            res = resources.get(mangled, {"regs": -1, "stack": -1, "spill_st": -1, "spill_ld": -1})
            ops = opcodes[mangled]
            applied = [r for r in rules if r.source == source and r.pattern.search(name)]
            if not applied:
                continue
            problems = []
            for r in applied:
                matched_any[r.line] += 1
                if r.max_regs is not None and res["regs"] > r.max_regs:
                    problems.append(f"{res['regs']} registers > {r.max_regs}")
                if r.max_local is not None:
                    for key in ("stack", "spill_st", "spill_ld"):
                        if res[key] > r.max_local:
                            problems.append(f"{key} {res[key]} B > {r.max_local}")
                for req in r.require:
                    if not any(req.match(op) for op in ops):
                        problems.append(f"no {req.pattern} ({r.why})")
                if r.forbid is not None:
                    bad = sorted(op for op in ops if r.forbid.search(op))
                    if bad:
                        problems.append("forbidden " + ", ".join(f"{op} x{ops[op]}" for op in bad))
                if r.max_calls is not None:
                    calls = sum(n for op, n in ops.items() if op.startswith("CALL"))
                    if calls > r.max_calls:
                        problems.append(f"{calls} CALLs > {r.max_calls}")
            count = lambda pred: sum(n for op, n in ops.items() if pred(op))
            rows.append([short(name), str(res["regs"]), f"{res['stack']}/{res['spill_st']}/{res['spill_ld']}",
                         str(count(lambda o: o.startswith("LDGSTS") and o.endswith(".128"))),
                         str(count(lambda o: o.startswith("LDG.") or o == "LDG")),
                         str(count(lambda o: o.startswith(("LDL", "STL")))),
                         str(count(lambda o: o.startswith(("BRX", "CALL")))),
                         str(count(lambda o: o.startswith("HMMA"))),
                         str(count(lambda o: o.startswith("F2FP") and "E4M3" in o)),
                         str(sum(ops.values())),
                         "ok" if not problems else "FAIL: " + "; ".join(problems)])
            if problems:
                failures.append(name)
        for r in rules:
            if r.source == source and matched_any[r.line] == 0:
                rows.append([f"(rule line {r.line}: {r.pattern.pattern})", "-", "-", "-", "-", "-", "-", "-", "-", "-",
                             "FAIL: matches no kernel"])
                failures.append(f"rule line {r.line}")
    header = ["kernel (sm_90)", "regs", "stack/spill st/ld", "LDGSTS.128", "LDG", "LDL/STL", "BRX/CALL", "HMMA",
              "F2FP E4M3", "SASS", "verdict"]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()
    for line in budget_lines:
        print(line)
    print(f"gpu-static-check: {len(rows) - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
