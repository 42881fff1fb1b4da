#!/usr/bin/env python3
"""Compares two `ckv dump-kv` files of the same prompt, one made on the GPU
and one on the CPU: relative L2 error of k, v, q_window and h2o_score (the
worst (layer, head) list for the per-list datasets), and equal degrees and
lengths. Exit 1 when an error exceeds the tolerance the parity program uses
for the KV cache (3e-2) or the attention mass (5e-2).

With --exact, the two files are `ckv compress --device cuda` and `--device
cpu` outputs of one dump: k, v, degree, length and assign must be identical
(the policy kernels make the CPU's decisions and the same fp32 values)."""
import sys

import h5py
import numpy as np

TOL = {"k": 3e-2, "v": 3e-2, "q_window": 3e-2, "h2o_score": 5e-2}


def rel(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def exact(gpu_path, cpu_path):
    g, c = h5py.File(gpu_path, "r"), h5py.File(cpu_path, "r")
    fails = 0
    for name in ("k", "v", "degree", "length", "assign"):
        a, b = g[name][()], c[name][()]
        diff = float(np.abs(a.astype(np.float64) - b).max()) if a.shape == b.shape else np.inf
        fails += diff != 0
        print(f"{name:10s} max |difference| {diff:.3g}  {'ok' if diff == 0 else 'FAIL'}")
    return 1 if fails else 0


def main(gpu_path, cpu_path):
    g, c = h5py.File(gpu_path, "r"), h5py.File(cpu_path, "r")
    fails = 0
    for name, tol in TOL.items():
        if name not in c:
            continue
        a, b = g[name][()], c[name][()]
        if a.shape != b.shape:
            print(f"{name}: shapes {a.shape} vs {b.shape} FAIL")
            fails += 1
            continue
        lists = a.reshape(a.shape[0] * a.shape[1], -1), b.reshape(b.shape[0] * b.shape[1], -1)
        err = max(rel(x, y) for x, y in zip(*lists))
        ok = np.isfinite(a).all() and err <= tol
        fails += not ok
        print(f"{name:10s} worst list rel. err {err:.3e}  tol {tol:.0e}  {'ok' if ok else 'FAIL'}")
    for name in ("degree", "length"):
        if name in c:
            same = name in g and np.array_equal(g[name][()], c[name][()])
            fails += not same
            print(f"{name:10s} {'equal' if same else 'DIFFER'}")
    return 1 if fails else 0


if __name__ == "__main__":
    args = sys.argv[1:]
    strict = args[:1] == ["--exact"]
    if strict:
        args = args[1:]
    if len(args) != 2:
        sys.exit("usage: compare_dumps.py [--exact] GPU.h5 CPU.h5")
    sys.exit((exact if strict else main)(*args))
