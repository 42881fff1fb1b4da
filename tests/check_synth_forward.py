#!/usr/bin/env python3
"""The CPU decoder on every architecture against tests/reference/ref_forward.py
(NumPy, float64): `ckv synth` writes small random models (llama: NORM rope;
qwen2: q/k/v biases, NEOX rope; qwen3: per-head q/k norms and a head dim that
differs from hidden/heads; GQA everywhere; tied and untied outputs; a
quantised variant), `ckv logits --raw` gives ckv's next-token logits, and
they must agree to 1e-4 relative error. Weights use --std 0.3 so attention is
sharp and a wrong rotation or mask would show. With `--kv-dtype bf16` the
reference rounds keys and values to bf16 as the cache stores them; the
tolerance is 1e-3 there (the reference rounds its float64 values, ckv its
float32 ones, so an element near a rounding boundary may land one bf16 step
apart), below the gap a missing rounding leaves (printed: the fp32
reference's error against the bf16 logits)."""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference"))
from ref_forward import ref_logits  # noqa: E402

ckv = os.environ["CKV"]
CASES = [
    ("llama", ["--layers", "2", "--hidden", "64", "--heads", "4", "--kv-heads", "2"]),
    ("llama", ["--layers", "2", "--hidden", "64", "--heads", "4", "--kv-heads", "1",
               "--untied", "--type", "q8_0", "--rope-base", "100000"]),
    ("qwen2", ["--layers", "2", "--hidden", "64", "--heads", "4", "--kv-heads", "2"]),
    ("qwen3", ["--layers", "2", "--hidden", "64", "--heads", "4", "--kv-heads", "2",
               "--head-dim", "32", "--rope-base", "1000000"]),
]
IDS = [3, 200, 17, 90, 255, 41, 8, 120, 77, 5, 260, 33, 199, 64, 2, 150, 99, 11, 230, 58]
failures = cases = 0
with tempfile.TemporaryDirectory() as tmp:
    for i, (arch, args) in enumerate(CASES):
        path = os.path.join(tmp, f"m{i}.gguf")
        raw = os.path.join(tmp, f"m{i}.bin")
        subprocess.run([ckv, "synth", "--arch", arch, "--std", "0.3", "--seed", str(7 + i),
                        "--out", path] + args, check=True, capture_output=True)
        for dtype, tol in (("f32", 1e-4), ("bf16", 1e-3)):
            r = subprocess.run([ckv, "logits", "--model", path, "--ids",
                                " ".join(map(str, IDS)), "--top", "1", "--raw", raw,
                                "--kv-dtype", dtype], capture_output=True, text=True)
            cases += 1
            if r.returncode:
                print(f"FAIL {arch} {args} {dtype}: ckv logits: {r.stderr.strip()}")
                failures += 1
                continue
            got = np.fromfile(raw, dtype="<f4").astype(np.float64)
            want = ref_logits(path, IDS, kv_bf16=dtype == "bf16")
            err = np.max(np.abs(got - want)) / np.max(np.abs(want))
            ok = err < tol and np.argmax(got) == np.argmax(want)
            note = ""
            if dtype == "bf16":
                plain = ref_logits(path, IDS)
                note = f" (fp32 reference: {np.max(np.abs(got - plain)) / np.max(np.abs(plain)):.2e})"
            print(("ok   " if ok else "FAIL ") +
                  f"{arch} {' '.join(args)} {dtype}: relative error {err:.2e}{note}")
            failures += 0 if ok else 1
print(f"{cases - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
