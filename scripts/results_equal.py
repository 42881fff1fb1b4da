#!/usr/bin/env python3
"""Compares two `ckv sweep` results files row by row: rows keyed by (unit,
run), every /samples field compared except the timings (ttft_ms, tpot_ms,
compress_ms), NaN equal to NaN, row order ignored. Used by the sweep tests
and to check a multi-GPU sweep against a one-GPU run.

usage: scripts/results_equal.py A.h5 B.h5
Prints the row counts and the first differences; exits 0 when equal, 1 when
not. Needs numpy and h5py."""
import sys

import h5py
import numpy as np

TIMING = {"ttft_ms", "tpot_ms", "compress_ms"}


def rows(path):
    """/samples as {(unit, run): {field: value}} without timings, and the
    keys that appear more than once."""
    with h5py.File(path, "r") as f:
        s = f["samples"][:]
    out, twice = {}, []
    for r in s:
        key = (int(r["unit"]), int(r["run"]))
        if key in out:
            twice.append(key)
        out[key] = {n: r[n] for n in s.dtype.names if n not in TIMING}
    return out, twice


def value_differences(a, b, what):
    """Fields of two rows that differ, as messages."""
    out = []
    for n in a:
        x, y = a[n], b[n]
        eq = np.isnan(y) if isinstance(x, float) and np.isnan(x) else x == y
        if not eq:
            out.append(f"{what}: field {n}: {x!r} vs {y!r}")
    return out


def differences(a, b, what):
    """Messages for keys present on one side only and fields that differ."""
    out = [f"{what}: row {k} only in the first" for k in sorted(a.keys() - b.keys())]
    out += [f"{what}: row {k} only in the second" for k in sorted(b.keys() - a.keys())]
    for k in sorted(a.keys() & b.keys()):
        out += value_differences(a[k], b[k], f"{what} {k}")
    return out


def main(argv):
    if len(argv) != 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    (a, ta), (b, tb) = rows(argv[1]), rows(argv[2])
    diffs = [f"{argv[1]}: row {k} appears twice" for k in ta]
    diffs += [f"{argv[2]}: row {k} appears twice" for k in tb]
    diffs += differences(a, b, "compare")
    print(f"{argv[1]}: {len(a)} rows; {argv[2]}: {len(b)} rows; {len(diffs)} differences")
    for d in diffs[:20]:
        print(" ", d)
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
