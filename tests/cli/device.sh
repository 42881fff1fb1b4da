#!/usr/bin/env bash
# Checks the --device option of `ckv generate`, `logits` and `dump-kv` where there is
# no usable GPU (CI): bad values are usage errors, cuda fails with a message
# that says why, auto falls back to the CPU and gives the CPU's logits.
# Skipped (77) on a machine with a GPU: scripts/gpu-check covers that.
set -uo pipefail
: "${CKV:?CKV must point at the ckv binary}"
model=${CKV_MODEL:-${CKV_SOURCE_ROOT:-.}/models/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$model" ] || { echo "model not found: $model (run scripts/get-model)"; exit 1; }
export CKV_MODEL=$model
if "$CKV" devices >/dev/null 2>&1; then echo "a GPU is usable here: skipped"; exit 77; fi
. "$(dirname "$0")/checks.sh"

for cmd in generate logits; do
  check "$cmd --help documents --device" grep -q -- "--device" <<<"$("$CKV" $cmd --help)"
  check "$cmd --device gpu is a usage error" status_is 2 "$CKV" $cmd --device gpu -p x
  check "$cmd --device cuda without a GPU fails" status_is 1 "$CKV" $cmd --device cuda -p x
  check "$cmd: the failure says why" grep -q -E "no usable GPU|built without CUDA" "$tmp/err"
done
check "dump-kv --help documents --device" grep -q -- "--device" <<<"$("$CKV" dump-kv --help)"
check "dump-kv --device gpu is a usage error" status_is 2 "$CKV" dump-kv --device gpu -p x -o "$tmp/kv.h5"
check "dump-kv --device cuda without a GPU fails" status_is 1 "$CKV" dump-kv --device cuda -p x -o "$tmp/kv.h5"
check "dump-kv: the failure says why" grep -q -E "no usable GPU|built without CUDA" "$tmp/err"
check "dump-kv wrote no file" test ! -e "$tmp/kv.h5"
cfg=${CKV_SOURCE_ROOT:-.}/configs/quick.yaml
check "sweep --device cuda without a GPU fails" status_is 1 "$CKV" sweep "$cfg" --device cuda -o "$tmp/s.h5"
check "sweep: the failure says why" grep -q -E "no usable GPU|built without CUDA" "$tmp/err"
check "sweep wrote no file" test ! -e "$tmp/s.h5"
kv=${CKV_SOURCE_ROOT:-.}/tests/fixtures/kv_small.h5
check "compress --device cuda without a GPU fails" status_is 1 "$CKV" compress --device cuda --policy centroid --budget 50% --in "$kv" --out "$tmp/c.h5"
check "compress: the failure says why" grep -q -E "no usable GPU|built without CUDA" "$tmp/err"
check "compress wrote no file" test ! -e "$tmp/c.h5"
check "compress --device auto runs on the CPU" status_is 0 "$CKV" compress --device auto --policy centroid --budget 50% --in "$kv" --out "$tmp/auto.h5"
check "compress auto says it fell back" grep -q "running on the CPU" "$tmp/err"
check "compress --device cpu runs" status_is 0 "$CKV" compress --device cpu --policy centroid --budget 50% --in "$kv" --out "$tmp/cpu.h5"
check "auto and cpu print the same summary" cmp -s "$tmp/out" <("$CKV" compress --device auto --policy centroid --budget 50% --in "$kv" --out "$tmp/auto2.h5" 2>/dev/null)
check "logits --device auto runs on the CPU" status_is 0 "$CKV" logits --device auto --ids "1 2 3" -k 3
cp "$tmp/out" "$tmp/auto"
check "auto says it fell back" grep -q "running on the CPU" "$tmp/err"
check "logits --device cpu runs" status_is 0 "$CKV" logits --device cpu --ids "1 2 3" -k 3
check "auto and cpu print the same logits" cmp -s "$tmp/out" "$tmp/auto"

finish "device"
