#!/usr/bin/env python3
"""`ckv dump-kv` against an independent reference: tests/fixtures/kv_small.h5
holds layers 0 and 15 of the KV cache, last-32 queries and accumulated
attention that Hugging Face transformers computed for the same prompt
(tests/reference/make_kv_fixture.py). transformers works in the rotate_half
channel layout; the GGUF `llama` layout pairs channels (2i, 2i+1), so ckv's
channel 2i is HF channel i and 2i+1 is HF channel i + d/2.

Also checks a hand-derived invariant: every prompt query's attention sums to
1, so each layer's h2o_score summed over a KV head's entries equals
tokens * (query heads per KV head)."""
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

root = os.environ.get("CKV_SOURCE_ROOT", ".")
ckv = os.environ["CKV"]
ref = h5py.File(os.path.join(root, "tests/fixtures/kv_small.h5"), "r")
LAYERS = [0, 15]
failures = 0


def check(name, ok, detail=""):
    global failures
    print(("ok   " if ok else "FAIL ") + name + (": " + detail if detail else ""))
    failures += 0 if ok else 1


def to_hf(x):
    """ckv/GGUF interleaved channels -> HF half-split channels (last axis)."""
    d = x.shape[-1]
    out = np.empty_like(x)
    out[..., : d // 2] = x[..., 0::2]
    out[..., d // 2:] = x[..., 1::2]
    return out


def rel(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


with tempfile.TemporaryDirectory() as tmp:
    prompt = os.path.join(tmp, "prompt.txt")
    with open(prompt, "w", encoding="utf-8") as fp:
        fp.write(ref.attrs["prompt"])
    out = os.path.join(tmp, "kv.h5")
    r = subprocess.run([ckv, "dump-kv", "--prompt-file", prompt, "--out", out],
                       capture_output=True, text=True)
    check("dump-kv exits 0", r.returncode == 0, r.stderr.strip())
    if r.returncode:
        sys.exit(1)
    got = h5py.File(out, "r")
    n = int(got.attrs["prompt_tokens"])
    check("same prompt tokens as the reference", n == ref["k"].shape[2], f"{n}")
    check("all lists full length", bool(np.all(got["length"][:] == n)))
    check("degrees are 1", bool(np.all(got["degree"][:] == 1.0)))
    for i, l in enumerate(LAYERS):
        e = rel(to_hf(got["k"][l]), ref["k"][i])
        check(f"layer {l} keys match transformers", e < 1e-4, f"rel err {e:.2e}")
        e = rel(got["v"][l], ref["v"][i])
        check(f"layer {l} values match transformers", e < 1e-4, f"rel err {e:.2e}")
        e = rel(to_hf(got["q_window"][l]), ref["q_window"][i])
        check(f"layer {l} window queries match transformers", e < 1e-4, f"rel err {e:.2e}")
        e = rel(got["h2o_score"][l], ref["h2o_score"][i])
        check(f"layer {l} accumulated attention matches transformers", e < 1e-3,
              f"rel err {e:.2e}")
    heads, kv_heads = got["q_window"].shape[1], got["k"].shape[1]
    sums = got["h2o_score"][:].sum(axis=2)
    want = n * heads // kv_heads
    check("h2o_score sums to tokens x group size", bool(np.allclose(sums, want, rtol=1e-4)),
          f"want {want}, got {sums.min():.3f}..{sums.max():.3f}")
    r = subprocess.run([ckv, "dump-kv", "--prompt", "x"], capture_output=True, text=True)
    check("missing --out is a usage error", r.returncode == 2 and "--out" in r.stderr)

print(f"{failures} failed")
sys.exit(1 if failures else 0)
