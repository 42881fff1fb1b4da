#!/bin/sh
# ckv perplexity on the RULER essays with the default model: the full-cache
# perplexity of 64 tokens (prefix 32) against the value Hugging Face
# transformers gives for the same GGUF (weights dequantised to fp32, eager
# attention; run once outside the project: 33.71372557), the `full` policy
# reproducing it with KL 0 and top-1 100%, a streaming cache compressing on
# its interval, and usage errors (exit 2) and a missing essay file (exit 1).
# Needs the real data dir ($CKV_DATA_DIR, else ../shared/data); fails without.
set -u
CKV=${CKV:?CKV must name the ckv binary}
ROOT=${CKV_SOURCE_ROOT:-.}
DATA=${CKV_DATA_DIR:-$ROOT/../shared/data}
MODEL=${CKV_MODEL:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

fail() {
    echo "FAIL $*"
    fails=$((fails + 1))
}

status() { # expected-status args...
    want=$1
    shift
    "$CKV" perplexity --model "$MODEL" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ "$rc" -eq "$want" ] || fail "perplexity $*: exit $rc, expected $want: $(cat "$tmp/err")"
}

if [ ! -d "$DATA" ]; then
    echo "FAIL: data dir $DATA missing: set CKV_DATA_DIR"
    exit 1
fi

status 2 --data-dir "$DATA" --tokens 10 --prefix 9
status 2 --data-dir "$DATA" --policy streaming
status 2 --data-dir "$DATA" --policy nosuch --budget 10
status 2 --data-dir "$DATA" --set sinks=2
status 2 --data-dir "$DATA" --tokens 2
status 1 --data-dir "$tmp" --tokens 64
grep -q "PaulGrahamEssays.json" "$tmp/err" || fail "missing essays name the file"
"$CKV" perplexity --help | grep -q -- "--budget" || fail "--help documents --budget"

status 0 --data-dir "$DATA" --tokens 64 -t 1
grep -q "^essays: 64 tokens, prefix 32, 31 predictions scored$" "$tmp/out" || fail "scored count"
ppl=$(sed -n 's/^full cache: perplexity //p' "$tmp/out")
awk -v p="$ppl" 'BEGIN { exit !(p > 33.70 && p < 33.73) }' ||
    fail "full-cache perplexity $ppl, transformers gives 33.7137"

status 0 --data-dir "$DATA" --tokens 64 -t 1 --policy full --budget 100%
grep -q "perplexity $ppl\$" "$tmp/out" || fail "full policy reproduces $ppl: $(cat "$tmp/out")"
grep -q "mean 0.000000 nats, max 0.000000; top-1 agreement 100.00%" "$tmp/out" ||
    fail "full policy: KL 0, top-1 100%: $(cat "$tmp/out")"

status 0 --data-dir "$DATA" --tokens 64 -t 1 --policy streaming --budget 16 --set interval=8
# one compression after the prefill, then at decode steps 8, 16, 24
grep -q "4 compressions, peak 24 entries" "$tmp/out" || fail "streaming interval: $(cat "$tmp/out")"

[ $fails -eq 0 ] && echo "perplexity: all checks passed"
exit $((fails > 0))
