#!/usr/bin/env python3
"""Runs `ckv compress` ($CKV) for every policy on the committed SmolLM2
fixture dump and compares the output with policies_ref.py: decisions
(length, assign, degree) exactly, keys and values to float32 rounding.
Also checks `ckv analyze keys` against NumPy and the exit statuses and
messages of `ckv compress` on bad input. Exits non-zero on any difference."""
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import policies_ref  # noqa: E402

ROOT = os.environ.get("CKV_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
CKV = os.environ["CKV"]
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "kv_small.h5")

CASES = [
    ("full", "25%", []),
    ("streaming", "25%", []),
    ("streaming", "100", ["sinks=0"]),
    ("h2o", "25%", []),
    ("h2o", "0.4", ["recent=16"]),
    ("snapkv", "25%", []),
    ("snapkv", "200", ["pooling=avg", "kernel=5", "window=16"]),
    ("snapkv", "150", ["kernel=4"]),
    ("kmeans", "25%", []),
    ("kmeans", "100", ["iters=3", "sinks=2", "recent=8"]),
    ("centroid", "25%", []),
    ("centroid", "100", ["partition=sequential"]),
    ("centroid", "100", ["partition=random", "seed=12345"]),
    ("centroid", "0.3", ["schedule=constant", "chunk=8", "recent=16"]),
    ("centroid", "150", ["round=3", "r_init=0.7", "r_step=0.25", "r_min=0.2"]),
    # Exact decimal ties: 292968.5 ppm -> 292969, so B = ceil(150.0001) = 151;
    # 462.5, 12.5 and 37.5 per-mille -> 463, 13, 38.
    ("h2o", "0.2929685", []),
    ("centroid", "0.2929685", ["r_init=0.4625", "r_step=0.0125", "r_min=0.0375"]),
]


def read(path):
    with h5py.File(path, "r") as f:
        d = {name: f[name][...] for name in f}
        d.update({key: f.attrs[key] for key in f.attrs})
    return d


def compare(tag, got, ref):
    k, v, n, length, assign, rounds = ref
    bad = []
    if not np.array_equal(got["length"], length):
        bad.append(f"length {got['length'].tolist()} != {length.tolist()}")
    if not np.array_equal(got["assign"], assign):
        diff = np.argwhere(got["assign"] != assign)
        bad.append(f"assign differs at {len(diff)} places, first {diff[0].tolist()}")
    if got["k"].shape[2] != k.shape[2]:
        bad.append(f"max length {got['k'].shape[2]} != {k.shape[2]}")
    elif not bad:
        if not np.array_equal(got["degree"], n.astype(np.float32)):
            bad.append("degree differs")
        for name, want in (("k", k), ("v", v)):
            err = np.abs(got[name] - want) / (np.abs(want) + 1e-3)
            if err.max() > 1e-5:
                bad.append(f"{name} max relative error {err.max():.3g}")
    if "policy" in got and got["policy"] == "centroid" and int(got["csm_round"]) != rounds:
        bad.append(f"csm_round {int(got['csm_round'])} != {rounds}")
    print(("FAIL " if bad else "ok   ") + tag + ("" if not bad else ": " + "; ".join(bad)))
    return not bad


def run(inp, out, policy, budget, sets):
    cmd = [CKV, "compress", "--policy", policy, "--budget", budget, "--in", inp, "--out", out]
    for s in sets:
        cmd += ["--set", s]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"FAIL {' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
        return False
    return True


def cli_errors(tmp):
    """Bad input: clear message, documented exit status."""
    nan = os.path.join(tmp, "nan.h5")
    bare = os.path.join(tmp, "bare.h5")
    with h5py.File(FIXTURE, "r") as f, h5py.File(nan, "w") as g, h5py.File(bare, "w") as b:
        k = f["k"][...]
        k[1, 2, 300, 5] = np.nan
        g["k"], g["v"] = k, f["v"][...]
        b["k"], b["v"] = f["k"][...], f["v"][...]
    out = os.path.join(tmp, "err.h5")
    cases = [
        (["--policy", "centroid", "--budget", "68", "--in", FIXTURE], 2, "68 entries"),
        (["--policy", "centroid", "--budget", "10%", "--in", FIXTURE], 3, "skipped"),
        (["--policy", "h2o", "--budget", "25%", "--set", "window=3", "--in", FIXTURE], 2, "window"),
        (["--policy", "kmeans", "--budget", "25%", "--set", "iters=-1", "--in", FIXTURE], 2, "-1"),
        (["--policy", "nosuch", "--budget", "25%", "--in", FIXTURE], 2, "nosuch"),
        (["--policy", "h2o", "--budget", "2.5", "--in", FIXTURE], 2, "2.5"),
        (["--policy", "h2o", "--budget", "25%", "--in", os.path.join(tmp, "absent.h5")], 1,
         "absent.h5"),
        (["--policy", "streaming", "--budget", "25%", "--in", nan], 1, "'k' [1, 2, 300]"),
        (["--policy", "snapkv", "--budget", "25%", "--in", bare], 1, "q_window"),
        (["--policy", "h2o", "--budget", "25%", "--in", bare], 1, "h2o_score"),
    ]
    ok = True
    for args, code, text in cases:
        r = subprocess.run([CKV, "compress", *args, "--out", out], capture_output=True, text=True)
        good = r.returncode == code and text in r.stderr and not os.path.exists(out)
        print(("ok   " if good else "FAIL ") + f"compress {' '.join(args[:4])}: exit {r.returncode}"
              + ("" if good else f" (want {code} and '{text}'): {r.stderr.strip()}"))
        ok &= good
    return ok


def analyze_keys():
    """`ckv analyze keys` against NumPy: mean cosine of keys t, t + dist."""
    r = subprocess.run([CKV, "analyze", "keys", FIXTURE, "--max-distance", "5"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"FAIL analyze keys: exit {r.returncode}: {r.stderr.strip()}")
        return False
    got = np.array([[float(x) for x in line.split()[1:]] for line in r.stdout.splitlines()[1:]])
    k = read(FIXTURE)["k"].astype(np.float64)
    kn = k / np.linalg.norm(k, axis=-1, keepdims=True)
    want = np.array([[(kn[l, :, dist:] * kn[l, :, :-dist]).sum(-1).mean() for l in range(2)]
                     for dist in range(1, 6)])
    good = got.shape == want.shape and np.abs(got - want).max() < 1e-4
    print(("ok   " if good else "FAIL ") + "analyze keys matches NumPy"
          + ("" if good else f": {got} vs {want}"))
    return good


def main():
    dump = read(FIXTURE)
    ok = analyze_keys()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.h5")
        for policy, budget, sets in CASES:
            tag = f"{policy} --budget {budget} {' '.join(sets)}"
            if not run(FIXTURE, out, policy, budget, sets):
                ok = False
                continue
            ok &= compare(tag, read(out), policies_ref.compress(policy, sets, budget, dump))
        # A second compression of a compressed cache: degrees > 1, a
        # `length` dataset, and the CSM round counter carried on.
        first = os.path.join(tmp, "first.h5")
        for policy, sets in (("centroid", []), ("kmeans", []), ("snapkv", []), ("h2o", [])):
            if not run(FIXTURE, first, policy, "40%", sets) or \
                    not run(first, out, policy, "20%", sets):
                ok = False
                continue
            ok &= compare(f"{policy} 40% then 20%", read(out),
                          policies_ref.compress(policy, sets, "20%", read(first)))
        ok &= cli_errors(tmp)
    print("all policies match the reference" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
