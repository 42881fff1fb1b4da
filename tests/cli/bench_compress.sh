#!/usr/bin/env bash
# Checks `ckv bench compress` on the CPU (runs with or without a GPU): every
# option is documented, bad lists and shapes are usage errors (2) naming the
# option, --intervals without --device cuda is refused, and a tiny run over
# two synthetic lengths prints a row per (tokens, policy) and writes them to
# HDF5; without a GPU, --device cuda fails saying why. CSM's one-round row is checked against policies.md by hand: at T
# tokens the middle is T - 4 - 64 slots in chunks of 32, each chunk of L >= 2
# slots gives ceil(L / 2) candidates and round 0 merges ceil(0.5 x them):
#   T = 256: middle 188 = 5 x 32 + 28 -> 80 + 14 = 94 candidates, 47 merges, budget 209
#   T = 512: middle 444 = 13 x 32 + 28 -> 208 + 14 = 222 candidates, 111 merges, budget 401
# and the whole call from 256 to 128 (50%) runs rounds at rates 0.5, 0.4, 0.3, 0.2, then 0.1:
#   256 -47-> 209 -29-> 180 -17-> 163 -10-> 153 -5-> 148 -4-> 144 -4-> 140 -4-> 136 -4-> 132 -4-> 128
#   (middles 188, 141 = 71 cand., 112 = 56, 95 = 48, 85 = 43, 80 = 40, 76, 72, 68, 64 = 38..32):
#   10 rounds.
# No timing is asserted.
set -uo pipefail
: "${CKV:?CKV must point at the ckv binary}"
. "$(dirname "$0")/checks.sh"

"$CKV" bench compress --help >"$tmp/help"
for opt in --synthetic --tokens --shape --layers --kv-heads --head-dim --seed --budget --policies \
           --repeats --device --intervals --row-order --out iters=10 "n/a (cpu)"; do
  check "compress --help documents $opt" grep -q -- "$opt" "$tmp/help"
done
c=("$CKV" bench compress --synthetic)
check "--tokens 256,x is a usage error" status_is 2 "${c[@]}" --tokens 256,x
check "  naming the option" grep -q -- "--tokens" "$tmp/err"
check "--tokens , (no values) is a usage error" status_is 2 "${c[@]}" --tokens ,
check "--tokens 1 is a usage error" status_is 2 "${c[@]}" --tokens 1
check "--synthetic without --tokens is a usage error" status_is 2 "${c[@]}"
check "--shape unknown is a usage error" status_is 2 "${c[@]}" --tokens 256 --shape gpt-5
check "  listing the known shapes" grep -q "llama3.1-8b" "$tmp/err"
check "--shape with --layers is a usage error" status_is 2 \
  "${c[@]}" --tokens 256 --shape smollm2-135m --layers 2
check "--intervals without --device cuda is refused" status_is 2 "${c[@]}" --tokens 256 --intervals 64
check "  saying the GPU only" grep -q "GPU only" "$tmp/err"
check "--row-order random without --device cuda is refused" status_is 2 "${c[@]}" --tokens 256 \
  --row-order random
check "  saying the GPU's cache is the one with a map" grep -q -- "--row-order random: .*--device cuda" "$tmp/err"
check "--intervals 0 is a usage error" status_is 2 "${c[@]}" --tokens 256 --device cuda --intervals 16,0
check "--policies unknown is a usage error" status_is 2 "${c[@]}" --tokens 256 --policies centroid,lru
check "--device tpu is a usage error" status_is 2 "${c[@]}" --tokens 256 --device tpu
check "a dump and --synthetic is a usage error" status_is 2 "${c[@]}" --tokens 256 kv.h5
check "--tokens with a dump is a usage error" status_is 2 "$CKV" bench compress kv.h5 --tokens 256

if ! "$CKV" devices >/dev/null 2>&1; then
  check "--device cuda without a GPU fails" status_is 1 "${c[@]}" --tokens 256 --device cuda \
    --out "$tmp/g.h5"
  check "  saying why" grep -q -E "no usable GPU|built without CUDA" "$tmp/err"
  check "  and writes no file" test ! -e "$tmp/g.h5"
fi

check "an --out that cannot be written fails before any timing" status_is 1 \
  "${c[@]}" --tokens 256 --budget 50% --layers 2 --repeats 1 --policies centroid \
  --out "$tmp/no/such/dir/c.h5"
check "  naming the file and why" grep -q "c.h5.part: cannot create the HDF5 file: No such file" "$tmp/err"
check "  with no HDF5 error stack" bash -c "! grep -q 'HDF5-DIAG' '$tmp/err'"
check "  and no policy timed" bash -c "! grep -q ' ms$' '$tmp/err'"

h5=$tmp/sub/compress.h5
check "a CPU run over 512,256 tokens succeeds" status_is 0 "${c[@]}" --tokens 512,256 --budget 50% \
  --layers 2 --repeats 1 --out "$h5"
cp "$tmp/out" "$tmp/run"
for T in 256 512; do
  for p in full streaming snapkv h2o kmeans centroid; do
    check "  a $p row at $T tokens" grep -qE "^$T +$p +call +[0-9]" "$tmp/run"
  done
done
check "  K-Means at iters=10" grep -qE "^256 +kmeans +call +128 +iters=10 " "$tmp/run"
check "  CSM call at 256: 10 rounds" grep -qE "^256 +centroid +call +128 +10 " "$tmp/run"
check "  CSM one round at 256: budget 209, 1 round" grep -qE "^256 +centroid +one round +209 +1 " "$tmp/run"
check "  CSM one round at 512: budget 401, 1 round" grep -qE "^512 +centroid +one round +401 +1 " "$tmp/run"
check "  decode share n/a (cpu)" grep -q "decode share: n/a (cpu)" "$tmp/run"
check "  a targets block" grep -q "^targets:" "$tmp/run"
check "  no round-count warning" bash -c "! grep -q warning '$tmp/err'"
check "  the HDF5 file (its folder made)" test -s "$h5"
check "  HDF5 rows and attributes" python3 - "$h5" <<'EOF'
import sys
import h5py
with h5py.File(sys.argv[1], "r") as f:
    for a in ("date", "device", "command", "git_rev", "kmeans_iters", "kmeans_estimate",
              "kmeans_lazy"):
        assert a in f.attrs, a
    assert f.attrs["device"] in ("cpu", b"cpu"), f.attrs["device"]
    assert f.attrs["kmeans_estimate"] in ("cpu", b"cpu"), f.attrs["kmeans_estimate"]
    assert f.attrs["kmeans_lazy"] in ("cpu", b"cpu"), f.attrs["kmeans_lazy"]
    r = f["compress"][:]
    s = lambda x: x.decode() if isinstance(x, bytes) else x
    rows = {(int(x["tokens"]), s(x["policy"]), s(x["measure"])): x for x in r}
    for T in (256, 512):
        for p in ("full", "streaming", "snapkv", "h2o", "kmeans", "centroid"):
            assert s(rows[(T, p, "call")]["status"]) == "ok", (T, p)
        one = rows[(T, "centroid", "one round")]
        assert int(one["rounds"]) == 1 and int(one["budget"]) == {256: 209, 512: 401}[T]
        assert int(rows[(T, "centroid", "call")]["rounds"]) > 1
        assert s(rows[(T, "kmeans", "call")]["setting"]) == "iters=10"
    assert int(rows[(256, "centroid", "call")]["rounds"]) == 10
    assert [int(x) for x in r["tokens"]] == sorted(int(x) for x in r["tokens"])
    assert "decode_share" not in f
EOF

# A run stopped midway keeps the rows of the lengths it finished in
# PATH.part and leaves an older file at PATH as it was: killed (SIGKILL) once
# it prints the second length's cache line, which comes after the first
# length's rows are in the file and flushed. The second length (K-Means over
# 16,384 tokens on the CPU) takes far longer than the wait.
killed=$tmp/killed.h5
cp "$h5" "$killed"
"${c[@]}" --tokens 256,16384 --budget 50% --layers 2 --repeats 1 --policies kmeans,centroid \
  --out "$killed" >"$tmp/kout" 2>"$tmp/kerr" &
pid=$!
for _ in $(seq 1 600); do
  [ "$(grep -c '^cache:' "$tmp/kout")" -ge 2 ] && break
  sleep 0.1
done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
check "a run killed at its second length printed that length's cache line" \
  grep -q "x 16384 tokens" "$tmp/kout"
check "  leaving the older file at PATH as it was" cmp -s "$h5" "$killed"
check "  and PATH.part with the first length's rows, marked running" python3 - "$killed.part" <<'EOF'
import sys
import h5py
with h5py.File(sys.argv[1], "r") as f:
    s = lambda x: x.decode() if isinstance(x, bytes) else x
    assert s(f.attrs["status"]) == "running", f.attrs["status"]
    for a in ("date", "device", "command", "git_rev"):
        assert a in f.attrs, a
    r = f["compress"][:]
    got = sorted((int(x["tokens"]), s(x["policy"]), s(x["measure"]), s(x["status"])) for x in r)
    assert got == [(256, "centroid", "call", "ok"), (256, "centroid", "one round", "ok"),
                   (256, "kmeans", "call", "ok")], got
EOF
check "a finished run's file is marked complete" python3 - "$h5" <<'EOF'
import sys
import h5py
with h5py.File(sys.argv[1], "r") as f:
    status = f.attrs["status"]
    assert status in ("complete", b"complete"), status
EOF
check "  with no PATH.part left" test ! -e "$h5.part"

finish "bench compress"
