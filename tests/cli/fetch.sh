#!/bin/sh
# datasets/fetch --from: copies the data dir's files into a fresh data dir
# laid out as ckv_data_dir() expects, warns for a copy that differs from the
# official file (the SQuAD dev subset), stays quiet for identical copies
# (essays, wonderwords, LongBench config), reports absent sources (HotpotQA)
# and leaves a dir `ckv prepare` can read. Usage errors exit 2. Needs the
# real data dir: $CKV_DATA_DIR, else ../shared/data beside the source tree;
# fails when it is missing.
set -u
CKV=${CKV:?CKV must name the ckv binary}
ROOT=${CKV_SOURCE_ROOT:-.}
DATA=${CKV_DATA_DIR:-$ROOT/../shared/data}
FETCH=$ROOT/datasets/fetch
MODEL=${CKV_MODEL:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

fail() {
    echo "FAIL $*"
    fails=$((fails + 1))
}

if [ ! -d "$DATA" ]; then
    echo "FAIL: data dir $DATA missing: set CKV_DATA_DIR"
    exit 1
fi

"$FETCH" --bogus >"$tmp/out" 2>"$tmp/err"
[ $? -eq 2 ] || fail "unknown argument exits 2"
"$FETCH" --from "$tmp/none" --dest "$tmp/d0" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 2 ] || fail "--from a missing dir exits 2"
"$FETCH" --help >"$tmp/out" 2>&1 && grep -q -- "--from DIR" "$tmp/out" || fail "--help documents --from"

dest=$tmp/data
"$FETCH" --from "$DATA" --dest "$dest" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] || fail "fetch --from exits 0: $(cat "$tmp/err")"
grep -q "warning: squad/dev-v2.0.json differs from the official file" "$tmp/err" ||
    fail "the SQuAD subset is accepted with a warning"
for f in ruler/PaulGrahamEssays.json ruler/wonderwords/nounlist.txt \
    longbench/config/dataset2prompt.json; do
    grep -q "warning: $f" "$tmp/err" && fail "$f is the official file: no warning"
    cmp -s "$DATA/$f" "$dest/$f" || fail "$f copied"
done
if [ -f "$DATA/hotpotqa/hotpot_dev_distractor_v1.json" ]; then
    [ -f "$dest/hotpotqa/hotpot_dev_distractor_v1.json" ] || fail "HotpotQA copied"
else
    grep -q "missing in $DATA: hotpotqa/hotpot_dev_distractor_v1.json" "$tmp/err" ||
        fail "absent HotpotQA reported"
fi
for f in "$DATA"/longbench/*.jsonl; do
    cmp -s "$f" "$dest/longbench/$(basename "$f")" || fail "$(basename "$f") copied"
done
cmp -s "$DATA/ruler/templates.json" "$dest/ruler/templates.json" || fail "templates.json copied"
ls "$dest"/*/*.tmp "$dest"/*/*/*.tmp >/dev/null 2>&1 && fail "no temporary files left"

# the fetched dir is a data dir for ckv
"$CKV" prepare ruler --model "$MODEL" --data-dir "$dest" --tasks niah_single_2,qa_1 \
    --lengths 2048 --samples 1 --jsonl "$tmp/r.jsonl" >"$tmp/out" 2>"$tmp/err" ||
    fail "prepare ruler reads the fetched dir: $(cat "$tmp/err")"
"$CKV" prepare longbench --model "$MODEL" --data-dir "$dest" --tasks trec --samples 1 \
    --out "$tmp/lb.h5" >"$tmp/out" 2>"$tmp/err" ||
    fail "prepare longbench reads the fetched dir: $(cat "$tmp/err")"

# a copy that is not a LongBench file is refused
mkdir -p "$tmp/bad/longbench"
echo '{"input": "x"}' >"$tmp/bad/longbench/trec.jsonl"
"$FETCH" --from "$tmp/bad" --dest "$tmp/d2" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "not a LongBench jsonl file" "$tmp/err" || fail "bad LongBench copy refused"

[ $fails -eq 0 ] && echo "fetch: all checks passed"
exit $((fails > 0))
