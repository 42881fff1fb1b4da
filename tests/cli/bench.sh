#!/usr/bin/env bash
# Checks `ckv bench attention` and `ckv bench decode` where there is no usable GPU (CI): every option
# is documented, bad values are usage errors (2) naming the option, and a valid
# command fails (1) with a message that says why, writing no results file; the
# SDPA peer exits 3 with the reason.
# Skipped (77) on a machine with a GPU: the benchmark itself runs there.
set -uo pipefail
: "${CKV:?CKV must point at the ckv binary}"
if "$CKV" devices >/dev/null 2>&1; then echo "a GPU is usable here: skipped"; exit 77; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() { # description, then a command that must succeed
  local what=$1; shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fails=$((fails + 1)); fi
}
status_is() { # expected status, command...
  local want=$1; shift
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [ "$rc" -eq "$want" ] || { echo "  exit $rc, want $want: $*"; cat "$tmp/err"; return 1; }
}

"$CKV" bench attention --help >"$tmp/help"
for opt in --device --contexts --batches --groups --head-dims --kv-heads --bias --prefill \
           --gemm-shape --gemm-rows --max-gib --warmup --repeats --seed --out --peer \
           --peer-script --python; do
  check "attention --help documents $opt" grep -q -- "$opt" "$tmp/help"
done
check "bench --help lists attention" grep -q attention <<<"$("$CKV" bench --help)"
check "--device cpu is a usage error" status_is 2 "$CKV" bench attention --device cpu
check "  naming the GPU" grep -q "GPU only" "$tmp/err"
check "--head-dims 96 is a usage error" status_is 2 "$CKV" bench attention --head-dims 96
check "--contexts x is a usage error" status_is 2 "$CKV" bench attention --contexts 1024,x
check "  naming the option" grep -q -- "--contexts" "$tmp/err"
check "--bias maybe is a usage error" status_is 2 "$CKV" bench attention --bias maybe
check "--gemm-shape unknown is a usage error" status_is 2 "$CKV" bench attention --gemm-shape gpt-5
check "  listing the known shapes" grep -q "llama3.1-8b" "$tmp/err"
check "--peer torch is a usage error" status_is 2 "$CKV" bench attention --peer torch
check "an unknown benchmark is a usage error" status_is 2 "$CKV" bench nothing
check "attention without a GPU fails" status_is 1 "$CKV" bench attention --out "$tmp/a.h5"
check "  saying why" grep -q -E "no usable GPU|built without CUDA" "$tmp/err"
check "  and writes no file" test ! -e "$tmp/a.h5"

"$CKV" bench decode --help >"$tmp/help"
for opt in --shape --synthetic --device --contexts --batches --budgets --warmup --repeats --seed --out; do
  check "decode --help documents $opt" grep -q -- "$opt" "$tmp/help"
done
check "decode without --shape is a usage error" status_is 2 "$CKV" bench decode --synthetic
check "decode without --synthetic is a usage error" status_is 2 "$CKV" bench decode --shape mistral-7b
check "  saying no model file is read" grep -q "synthetic" "$tmp/err"
check "decode --shape unknown is a usage error" status_is 2 "$CKV" bench decode --shape x --synthetic
check "decode --budgets 1 is a usage error" status_is 2 \
  "$CKV" bench decode --shape smollm2-135m --synthetic --budgets 0.25,1
check "decode --device cpu is a usage error" status_is 2 \
  "$CKV" bench decode --shape smollm2-135m --synthetic --device cpu
check "decode without a GPU fails" status_is 1 \
  "$CKV" bench decode --shape smollm2-135m --synthetic --out "$tmp/d.h5"
check "  saying why" grep -q -E "no usable GPU|built without CUDA" "$tmp/err"
check "  and writes no file" test ! -e "$tmp/d.h5"

peer=${CKV_SOURCE_ROOT:-.}/harness/peers/sdpa_attention.py
check "the SDPA peer without a GPU exits 3" status_is 3 python3 "$peer" --json "$tmp/p.json"
check "  saying why" grep -q -E "torch is not available|torch sees no CUDA device" "$tmp/err"

[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all bench checks passed"
