#!/usr/bin/env bash
# Checks tests/fidelity/run-fidelity's own logic without llama.cpp or the model: fake
# llama-perplexity and kvgate binaries print reports in the real formats with chosen numbers,
# and the script must turn them into the right verdicts and exit codes (0 all rows within the
# bounds, 1 a row outside, 2 usage, 3 an environment problem such as a rotation that was not
# disabled or token streams that differ).
set -uo pipefail
script="$1"
tmp="$(mktemp -d)"
trap 'rm -rf -- "$tmp"' EXIT
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

mkdir -p "$tmp/llama" "$tmp/home"
printf 'a small text\n' >"$tmp/text.txt"

# llama-perplexity: the base run writes a base file (header and tokens 1..2*ctx, no log-probs:
# the script reads only the header and tokens) and a final PPL; a KLD run prints the report
# lines the script reads. KLD 0.0100 and top 95.000 % everywhere; the rotation warning only
# when LLAMA_ATTN_ROT_DISABLE is set, unless FAKE_IGNORE_ROT_ENV is.
cat >"$tmp/llama/llama-perplexity" <<'EOF'
#!/usr/bin/env bash
ctx=0 base="" kld=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    -c) ctx="$2"; shift 2 ;;
    --kl-divergence-base) base="$2"; shift 2 ;;
    --kl-divergence) kld=1; shift ;;
    *) shift ;;
  esac
done
le32() { printf "\\x$(printf %02x $(($1 & 255)))\\x$(printf %02x $((($1 >> 8) & 255)))\\x00\\x00"; }
if ((kld == 0)); then
  { printf '_logits_'; le32 "$ctx"; le32 100; le32 2
    for ((i = 1; i <= 2 * ctx; i++)); do le32 "$i"; done; } >"$base"
  echo "0.00.000.001 I Final estimate: PPL = 20.0000 +/- 0.50000"
  exit 0
fi
if [[ -n "${LLAMA_ATTN_ROT_DISABLE:-}" && -z "${FAKE_IGNORE_ROT_ENV:-}" ]]; then
  echo "0.00.000.001 W llama_kv_cache: attention rotation force disabled (LLAMA_ATTN_ROT_DISABLE)"
fi
echo "Mean PPL(Q)                   :  20.100000 ±   0.500000"
echo "Mean    KLD:   0.010000 ±   0.000200"
echo "Same top p: 95.000 ± 0.300 %"
EOF

# kvgate: the commands the script calls. Its f16 PPL is FAKE_REF_PPL (default 20.05); every
# spec gets KLD 0.0105 and top 95.5 % unless FAKE_OVERRIDE="SPEC KLD TOP" says otherwise;
# FAKE_TOKEN_SHIFT adds to every token id.
cat >"$tmp/kvgate" <<'EOF'
#!/usr/bin/env bash
case "$1" in
  --version) echo "kvgate fake" ;;
  model) echo '{"file":"/fake/model.gguf","sha256":"00ff"}' ;;
  tokenize)
    ids="$(seq -s, $((1 + ${FAKE_TOKEN_SHIFT:-0})) $((64 + ${FAKE_TOKEN_SHIFT:-0})))"
    echo "{\"ids\":[$ids],\"n_tokens\":64}" ;;
  perplexity)
    while [[ $# -gt 0 ]]; do
      if [[ "$1" == --kv ]]; then
        read -r o_spec o_kld o_top <<<"${FAKE_OVERRIDE:-}"
        kld=0.010500 top=95.500
        [[ "$2" == "$o_spec" ]] && kld="$o_kld" && top="$o_top"
        echo "kv $2/$2, 2 chunks of 16 tokens, 14 scored tokens, 0.1 s"
        echo "Mean PPL(Q)                   :  20.150000 ±   0.500000"
        echo "Mean PPL(base)                :  ${FAKE_REF_PPL:-20.050000} ±   0.500000"
        echo "Mean    KLD: $kld ±   0.000200"
        echo "Same top p: $top ± 0.300 %"
        shift
      fi
      shift
    done ;;
  *) exit 9 ;;
esac
EOF
chmod +x "$tmp/llama/llama-perplexity" "$tmp/kvgate"

# Runs the script on the fakes (q4_0 rows only, a fresh cache each time); sets rc, out, err.
run() {
  rm -rf "$tmp/home"
  env KVGATE_HOME="$tmp/home" KVGATE_LLAMA_CPP_BIN="$tmp/llama" "$@" "$script" --kvgate "$tmp/kvgate" \
    --text "$tmp/text.txt" --model "$tmp/text.txt" --ctx 16 --only q4_0 >"$tmp/out" 2>"$tmp/err"
  rc=$?
  out="$(cat "$tmp/out")"
  err="$(cat "$tmp/err")"
}
row() { grep -E "^$1 " <<<"$out"; }

run env
[[ $rc -eq 0 && "$out" == *"PASS: all 3 rows"* ]] || fail "all within bounds: rc=$rc out=$out err=$err"
[[ "$(row 'q4_0 rot on')" == *" q4_0@engine=llama.cpp "*"1.050"*"+0.50"*PASS ]] || fail "rotated row: $(row 'q4_0 rot on')"
[[ "$(row 'q4_0 rot off')" == *"LLAMA_ATTN_ROT_DISABLE=1"*" q4_0:rot=none@engine=llama.cpp "*PASS ]] || fail "unrotated row: $(row 'q4_0 rot off')"
[[ "$(row f16)" == *"20.0000"*"20.050000"*"+0.25%"*PASS ]] || fail "f16 row: $(row f16)"

run env FAKE_OVERRIDE="q4_0:rot=none@engine=llama.cpp 0.011600 95.000"
[[ $rc -eq 1 && "$(row 'q4_0 rot off')" == *"1.160"*FAIL && "$(row 'q4_0 rot on')" == *PASS ]] ||
  fail "KLD ratio 1.16 must fail only its row: rc=$rc out=$out"
[[ "$out" == *"FAIL: 1 of 3 rows"* ]] || fail "failure count: $out"

run env FAKE_OVERRIDE="q4_0@engine=llama.cpp 0.008600 92.900"
[[ $rc -eq 1 && "$(row 'q4_0 rot on')" == *"0.860"*"-2.10"*FAIL ]] ||
  fail "top-1 2.1 points below must fail: rc=$rc out=$out"

run env FAKE_OVERRIDE="q4_0@engine=llama.cpp 0.008600 93.100"
[[ $rc -eq 0 ]] || fail "KLD ratio 0.86 and top-1 -1.9 points are within the bounds: rc=$rc out=$out"

run env FAKE_REF_PPL=20.110000
[[ $rc -eq 1 && "$(row f16)" == *"+0.55%"*FAIL ]] || fail "f16 PPL 0.55 % off must fail: rc=$rc out=$out"

run env FAKE_IGNORE_ROT_ENV=1
[[ $rc -eq 3 && "$err" == *"did not disable the rotation"* ]] || fail "rotation not disabled: rc=$rc err=$err"

run env FAKE_TOKEN_SHIFT=5
[[ $rc -eq 3 && "$err" == *"tokenize the text differently"* ]] || fail "token mismatch: rc=$rc err=$err"

# Usage and environment refusals, before anything runs.
for bad in "--ctx abc" "--only q9_9" "--no-such-flag" "--threads 0" "--text /nonexistent/text"; do
  # shellcheck disable=SC2086
  env KVGATE_HOME="$tmp/home" KVGATE_LLAMA_CPP_BIN="$tmp/llama" "$script" --kvgate "$tmp/kvgate" $bad \
    >/dev/null 2>"$tmp/err"
  code=$?
  [[ $code -eq 2 ]] || fail "'$bad' should exit 2, got $code: $(cat "$tmp/err")"
done
"$script" --kvgate /nonexistent/kvgate >/dev/null 2>&1
code=$?
[[ $code -eq 3 ]] || fail "a missing kvgate binary should exit 3, got $code"

if ((failures > 0)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "run-fidelity logic: all checks passed"
