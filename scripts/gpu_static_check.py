#!/usr/bin/env python3
"""The offline gate on what nvcc made of kvgate's GPU kernels (scripts/gpu-static-check runs it).

  gpu_static_check.py --rules scripts/gpu-static-rules.tsv --cuobjdump PATH --build DIR [--nvcc NVCC]

For every source and architecture the rules name: compiles the source for that architecture with
the project's flags into DIR (a cubin and ptxas's -v report), reads each kernel's registers, stack
and spills from the report and its instructions from `cuobjdump -sass`, applies every matching
rule, prints one table row per kernel and architecture and exits 1 when a rule fails (2 for a bad
rules file, 3 when a tool fails). Offline tooling: nothing in kvgate's product runs it.
"""
import argparse
import collections
import os
import re
import resource
import subprocess
import sys

FLAGS = ["-std=c++17", "-O3", "--fmad=false", "-DKVGATE_HAVE_CUDA=1", "-Xptxas", "-v", "-cubin"]
# WeightType's order in kernels/gpu/weight_blocks.h, to name the GEMV kernels in the table.
WEIGHT_TYPES = ["f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q6_k"]
BUDGET_SECONDS = 15.0  # compile time per translation unit per architecture on 2 cores (CPU seconds)


class Rule:
    def __init__(self, fields, line):
        if len(fields) != 10:
            raise ValueError(f"line {line}: expected 10 tab-separated fields, got {len(fields)}")
        self.source, archs, pattern, regs, local, require, forbid, calls, loop, self.why = fields
        self.line = line
        self.pattern = re.compile(pattern)
        self.max_regs = None if regs == "-" else int(regs)
        self.max_local = None if local == "-" else int(local)
        # Requirements are '|'-separated; one may hold '|' inside a group, so split at the top level.
        self.require = [] if require == "-" else [re.compile(r) for r in split_top(require)]
        self.forbid = None if forbid == "-" else re.compile(forbid)
        self.max_calls = None if calls == "-" else int(calls)
        self.archs = archs.split(",")
        for a in self.archs:
            if not re.fullmatch(r"sm_\d+", a):
                raise ValueError(f"line {line}: architecture {a!r} is not sm_NN")
        # loop: OPCODE-REGEX>=N, at least N such instructions in one loop body (a backward branch's).
        self.loop = None
        if loop != "-":
            m = re.fullmatch(r"(.+)>=(\d+)", loop)
            if not m:
                raise ValueError(f"line {line}: loop rule {loop!r} is not REGEX>=N")
            self.loop = (re.compile(m.group(1)), int(m.group(2)))


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


def compile_source(nvcc, source, arch, build):
    base = os.path.join(build, os.path.basename(source).replace(".cu", "") + "." + arch)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([nvcc, *FLAGS, "-gencode", f"arch={arch.replace('sm_', 'compute_')},code={arch}", "-I.", source,
                           "-o", base + ".cubin"], capture_output=True, text=True)
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


def sass_functions(cuobjdump, cubin):
    """{mangled kernel: [(address, opcode, instruction text)]} from cuobjdump -sass."""
    proc = subprocess.run([cuobjdump, "-sass", cubin], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise SystemExit(3)
    out, current = {}, None
    for line in proc.stdout.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            current = m.group(1)
            out[current] = []
            continue
        m = re.match(r"\s*/\*([0-9a-f]+)\*/\s+((?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)[^;]*);", line)
        if m and current:
            out[current].append((int(m.group(1), 16), m.group(3), m.group(2)))
    return out


def calls_made(instructions):
    """Calls of device functions. A function called out of line ends in RET; without one, a
    `CALL.REL.NOINC` to a nearby address is Ampere's loop-exit convergence idiom, no call."""
    calls = [op for _, op, _ in instructions if op.startswith("CALL")]
    if any(op.startswith("RET") for _, op, _ in instructions):
        return len(calls)
    return sum(1 for op in calls if op.startswith("CALL.ABS"))


def most_in_one_loop(instructions, opcode):
    """The most instructions matching `opcode` in one loop body (a backward branch's target to it)."""
    best = 0
    for addr, op, text in instructions:
        m = re.search(r"\bBRA\s+(?:`\(\.L_x_\d+\)\s*)?0x([0-9a-f]+)", text)
        if op.startswith("BRA") and m and int(m.group(1), 16) < addr:
            target = int(m.group(1), 16)
            best = max(best, sum(1 for a, o, _ in instructions if target <= a <= addr and opcode.match(o)))
    return best


def short(name):
    name = re.sub(r"kvgate::kernels::gpu::|kvgate::kernels::|kvgate::|\(anonymous namespace\)::", "", name)
    name = re.sub(r"\(WeightType\)(\d+)", lambda m: WEIGHT_TYPES[int(m.group(1))], name)
    name = name.replace("KvTile<", "").replace("Rows", "")
    return re.sub(r"^void |\((AttentionParams|[^()]*)\)$", "", name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rules", required=True)
    ap.add_argument("--cuobjdump", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--nvcc", default="nvcc")
    args = ap.parse_args()
    rules = read_rules(args.rules)
    os.makedirs(args.build, exist_ok=True)
    targets = list(dict.fromkeys((r.source, a) for r in rules for a in r.archs))
    failures, rows, budget_lines = [], [], []
    for source, arch in targets:
        if not os.path.exists(source):
            raise SystemExit(f"{args.rules}: source {source} does not exist")
        cubin, report, cpu = compile_source(args.nvcc, source, arch, args.build)
        budget_lines.append(f"{source}: {cpu:.1f} s CPU for {arch} (budget {BUDGET_SECONDS:.0f} s)"
                            + ("" if cpu <= BUDGET_SECONDS else "  OVER BUDGET"))
        resources = ptxas_report(report)
        functions = sass_functions(args.cuobjdump, cubin)
        names = demangle(sorted(functions))
        for_target = [r for r in rules if r.source == source and arch in r.archs]
        matched_any = collections.Counter()
        for mangled in sorted(functions, key=lambda m: names[m]):
            name = names[mangled]
            res = resources.get(mangled, {"regs": -1, "stack": -1, "spill_st": -1, "spill_ld": -1})
            ops = collections.Counter(op for _, op, _ in functions[mangled])
            applied = [r for r in for_target if r.pattern.search(name)]
            if not applied:
                continue
            calls = calls_made(functions[mangled])
            problems, loop_counts = [], []
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
                if r.max_calls is not None and calls > r.max_calls:
                    problems.append(f"{calls} CALLs > {r.max_calls}")
                if r.loop is not None:
                    n = most_in_one_loop(functions[mangled], r.loop[0])
                    loop_counts.append(str(n))
                    if n < r.loop[1]:
                        problems.append(f"{n} {r.loop[0].pattern} in one loop body < {r.loop[1]}")
            problems = list(dict.fromkeys(problems))
            count = lambda pred: sum(n for op, n in ops.items() if pred(op))
            rows.append([short(name), arch, str(res["regs"]), f"{res['stack']}/{res['spill_st']}/{res['spill_ld']}",
                         str(count(lambda o: o.startswith("LDGSTS") and o.endswith(".128"))),
                         str(count(lambda o: o.startswith("LDG.") or o == "LDG")),
                         "/".join(loop_counts) or "-",
                         str(count(lambda o: o.startswith(("LDL", "STL")))),
                         f"{count(lambda o: o.startswith('BRX'))}/{calls}",
                         str(count(lambda o: o.startswith("HMMA"))),
                         str(count(lambda o: o.startswith("F2FP") and "E4M3" in o)),
                         str(sum(ops.values())),
                         "ok" if not problems else "FAIL: " + "; ".join(problems)])
            if problems:
                failures.append(name)
        for r in for_target:
            if matched_any[r.line] == 0:
                rows.append([f"(rule line {r.line}: {r.pattern.pattern})", arch, "-", "-", "-", "-", "-", "-", "-", "-",
                             "-", "-", "FAIL: matches no kernel"])
                failures.append(f"rule line {r.line}")
    header = ["kernel", "arch", "regs", "stack/spill st/ld", "LDGSTS.128", "LDG", "loop rule count", "LDL/STL",
              "BRX/CALL", "HMMA", "F2FP E4M3", "SASS", "verdict"]
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
