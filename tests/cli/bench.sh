#!/usr/bin/env bash
# Checks `ckv bench attention`, `decode`, `generate` and `throughput` where there is no usable GPU (CI): every option
# is documented, bad values are usage errors (2) naming the option, and a valid
# command fails (1) with a message that says why, writing no results file; the
# SDPA peer exits 3 with the reason.
# Skipped (77) on a machine with a GPU: the benchmark itself runs there.
set -uo pipefail
: "${CKV:?CKV must point at the ckv binary}"
if "$CKV" devices >/dev/null 2>&1; then echo "a GPU is usable here: skipped"; exit 77; fi
. "$(dirname "$0")/checks.sh"

"$CKV" bench attention --help >"$tmp/help"
for opt in --device --contexts --batches --groups --head-dims --kv-heads --bias --scores --prefill \
           --gemm-shape --gemm-rows --gemm-lt --max-gib --warmup --repeats --seed --out --peer \
           --peer-script --python --copy-rate; do
  check "attention --help documents $opt" grep -q -- "$opt" "$tmp/help"
done
check "attention --help says the shapes are timed by fewest bytes read first" \
  grep -q "each by fewest bytes read" "$tmp/help"
check "bench --help lists attention" grep -q attention <<<"$("$CKV" bench --help)"
check "--device cpu is a usage error" status_is 2 "$CKV" bench attention --device cpu
check "  naming the GPU" grep -q "GPU only" "$tmp/err"
check "--head-dims 96 is a usage error" status_is 2 "$CKV" bench attention --head-dims 96
check "--contexts x is a usage error" status_is 2 "$CKV" bench attention --contexts 1024,x
check "  naming the option" grep -q -- "--contexts" "$tmp/err"
check "--bias maybe is a usage error" status_is 2 "$CKV" bench attention --bias maybe
check "--scores maybe is a usage error" status_is 2 "$CKV" bench attention --scores maybe
check "  naming the option" grep -q -- "--scores" "$tmp/err"
check "--gemm-shape unknown is a usage error" status_is 2 "$CKV" bench attention --gemm-shape gpt-5
check "  listing the known shapes" grep -q "llama3.1-8b" "$tmp/err"
check "--gemm-lt 9 is a usage error" status_is 2 "$CKV" bench attention --gemm-lt 9
check "  naming the option" grep -q -- "--gemm-lt" "$tmp/err"
check "--gemm-lt with --gemm-shape none is a usage error" status_is 2 \
  "$CKV" bench attention --gemm-lt 2 --gemm-shape none
check "  saying why" grep -q -- "--gemm-shape none times no GEMMs" "$tmp/err"
check "--peer torch is a usage error" status_is 2 "$CKV" bench attention --peer torch
check "an unknown benchmark is a usage error" status_is 2 "$CKV" bench nothing
for b in attention "decode --shape smollm2-135m --synthetic" throughput \
         "generate --shape smollm2-135m --synthetic" "compress --synthetic --tokens 512"; do
  check "$b --kv-dtype fp16 is a usage error" status_is 2 "$CKV" bench $b --kv-dtype fp16
  check "  naming the option and the value" grep -q -- "--kv-dtype: 'fp16'" "$tmp/err"
done
for b in throughput "compress --synthetic --tokens 512 --device cuda"; do
  check "$b --row-order diagonal is a usage error" status_is 2 "$CKV" bench $b --row-order diagonal
  check "  naming the option and the value" grep -q -- "--row-order 'diagonal': expected slot or random" "$tmp/err"
  check "$b --row-order random passes the options (no GPU here)" status_is 1 \
    "$CKV" bench $b --row-order random --out "$tmp/r.h5"
done
for b in attention "decode --shape smollm2-135m --synthetic"; do
  check "$b --copy-rate fast is a usage error" status_is 2 "$CKV" bench $b --copy-rate fast
  check "  naming the option and the value" grep -q -- "--copy-rate: 'fast'" "$tmp/err"
  check "$b --copy-rate 0 is a usage error" status_is 2 "$CKV" bench $b --copy-rate 0
  check "  naming the option and the value" grep -q -- "--copy-rate: 0 is out of range" "$tmp/err"
  check "$b --copy-rate 4.19 passes the options (no GPU here)" status_is 1 \
    "$CKV" bench $b --copy-rate 4.19 --out "$tmp/c.h5"
  check "$b --copy-rate measure passes the options (no GPU here)" status_is 1 \
    "$CKV" bench $b --copy-rate measure --out "$tmp/c.h5"
done
check "attention --help documents --kv-dtype" grep -q -- --kv-dtype <<<"$("$CKV" bench attention --help)"
check "attention without a GPU fails" status_is 1 "$CKV" bench attention --out "$tmp/a.h5"
check "  saying why" grep -q -E "no usable GPU|built without CUDA" "$tmp/err"
check "  and writes no file" test ! -e "$tmp/a.h5"

"$CKV" bench decode --help >"$tmp/help"
for opt in --shape --synthetic --device --contexts --batches --budgets --warmup --repeats --seed --pdl \
           --copy-rate --out; do
  check "decode --help documents $opt" grep -q -- "$opt" "$tmp/help"
done
check "decode --pdl maybe is a usage error" status_is 2 \
  "$CKV" bench decode --shape smollm2-135m --synthetic --pdl maybe
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

"$CKV" bench generate --help >"$tmp/help"
for opt in --shape --synthetic --device --contexts --batches --new-tokens --repeats --seed \
           --prefill-rows --peer --peer-script --python --out; do
  check "generate --help documents $opt" grep -q -- "$opt" "$tmp/help"
done
check "bench --help lists generate" grep -q generate <<<"$("$CKV" bench --help)"
gen=("$CKV" bench generate --shape smollm2-135m --synthetic)
check "generate without --shape is a usage error" status_is 2 "$CKV" bench generate --synthetic
check "generate without --synthetic is a usage error" status_is 2 \
  "$CKV" bench generate --shape smollm2-135m
check "  saying no model file is read" grep -q "synthetic" "$tmp/err"
check "generate --shape unknown is a usage error" status_is 2 "$CKV" bench generate --shape x --synthetic
check "  listing the known shapes" grep -q "llama3.1-8b" "$tmp/err"
check "generate --new-tokens 1 is a usage error" status_is 2 "${gen[@]}" --new-tokens 1
check "  naming the option" grep -q -- "--new-tokens" "$tmp/err"
check "generate --repeats 0 is a usage error" status_is 2 "${gen[@]}" --repeats 0
check "generate --prefill-rows below the decode rows is a usage error" status_is 2 \
  "${gen[@]}" --prefill-rows 100
check "  naming the option" grep -q -- "--prefill-rows" "$tmp/err"
check "generate --batches 1,x is a usage error" status_is 2 "${gen[@]}" --batches 1,x
check "  naming the option" grep -q -- "--batches" "$tmp/err"
check "generate --contexts 0 is a usage error" status_is 2 "${gen[@]}" --contexts 0,1024
check "generate --peer vllm is a usage error" status_is 2 "${gen[@]}" --peer vllm
check "  naming hf and none" grep -q "hf or none" "$tmp/err"
check "generate --peer hf on mistral-7b is a usage error" status_is 2 \
  "$CKV" bench generate --shape mistral-7b --synthetic
check "  saying --peer none" grep -q -- "--peer none" "$tmp/err"
check "generate --device cpu is a usage error" status_is 2 "${gen[@]}" --device cpu
check "  naming the GPU" grep -q "GPU only" "$tmp/err"
check "generate with an extra argument is a usage error" status_is 2 "${gen[@]}" extra
check "generate without a GPU fails" status_is 1 "${gen[@]}" --out "$tmp/g.h5"
check "  saying why" grep -q -E "no usable GPU|built without CUDA" "$tmp/err"
check "  and writes no file" test ! -e "$tmp/g.h5"
check "generate --peer none without a GPU fails too" status_is 1 \
  "$CKV" bench generate --shape mistral-7b --synthetic --peer none --out "$tmp/g.h5"

"$CKV" bench throughput --help >"$tmp/help"
for opt in --shape --device --contexts --kv-cap --budgets --policies --interval --max-batch \
           --compress-group --warmup --repeats --seed --row-order --out; do
  check "throughput --help documents $opt" grep -q -- "$opt" "$tmp/help"
done
check "bench --help lists throughput" grep -q throughput <<<"$("$CKV" bench --help)"
check "throughput --kv-cap 0 is a usage error" status_is 2 "$CKV" bench throughput --kv-cap 0
check "  naming the option" grep -q -- "--kv-cap" "$tmp/err"
check "throughput --budgets 1 is a usage error" status_is 2 "$CKV" bench throughput --budgets 0.25,1
check "throughput --policies full is a usage error" status_is 2 \
  "$CKV" bench throughput --policies centroid,full
check "throughput --policies unknown is a usage error" status_is 2 \
  "$CKV" bench throughput --policies centroid,lru
check "  listing the known policies" grep -q "streaming" "$tmp/err"
check "throughput --interval 0 is a usage error" status_is 2 "$CKV" bench throughput --interval 0
check "throughput --max-batch x is a usage error" status_is 2 "$CKV" bench throughput --max-batch x
check "throughput --compress-group 0 is a usage error" status_is 2 \
  "$CKV" bench throughput --compress-group 0
check "  naming the option" grep -q -- "--compress-group" "$tmp/err"
check "throughput --shape unknown is a usage error" status_is 2 "$CKV" bench throughput --shape x
check "throughput --device cpu is a usage error" status_is 2 "$CKV" bench throughput --device cpu
check "throughput without a GPU fails" status_is 1 \
  "$CKV" bench throughput --shape smollm2-135m --out "$tmp/t.h5"
check "  saying why" grep -q -E "no usable GPU|built without CUDA" "$tmp/err"
check "  and writes no file" test ! -e "$tmp/t.h5"

peer=${CKV_SOURCE_ROOT:-.}/harness/peers/sdpa_attention.py
check "the SDPA peer without a GPU exits 3" status_is 3 python3 "$peer" --json "$tmp/p.json"
check "  saying why" grep -q -E "torch is not available|torch sees no CUDA device" "$tmp/err"

hf=${CKV_SOURCE_ROOT:-.}/harness/peers/hf_generate.py
printf '1 2 3\n4 x 6\n' >"$tmp/ids.txt"
check "the transformers peer refuses a bad --ids file (before importing torch)" \
  status_is 2 python3 "$hf" --shape tiny --contexts 2 --batches 1 --ids "$tmp/ids.txt"
check "  naming the file, line and value" grep -q "ids.txt:2: 'x'" "$tmp/err"
printf '1 2 3\n4 5 6\n' >"$tmp/ids.txt"
check "the transformers peer refuses an --ids file shorter than the contexts" \
  status_is 2 python3 "$hf" --shape tiny --contexts 2,4 --batches 1 --ids "$tmp/ids.txt"
check "  saying how many ids are needed" grep -q "4 needed" "$tmp/err"

finish "bench"
