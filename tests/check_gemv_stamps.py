#!/usr/bin/env python3
"""Checks scripts/gemv-stamps, which the block-by-block GEMV readings of
docs/performance.md (runs DQ, DR, DU) come from: on hand-written records
(three launches, one with a straggler) the launches, medians, gaps and
stragglers are the ones derived by hand, and bad input is refused with a
message naming it."""
import os
import struct
import tempfile

from script_check import check, check_refuses_files, finish, root, run_script

script = os.path.join(root, "scripts", "gemv-stamps")


def run(*args):
    return run_script(script, *args)


def rec(kind, sm, block, t0, t1, t2):
    return struct.pack("<4Q", kind << 32 | sm << 16 | block, t0, t1, t2)


ROW1, SWIGLU = 1 << 8, 1 << 8 | 2
# Launch A (one row): waits passed at 1000-1030 ns, so times from 1000 to
# the ends 9000, 9110, 9220, 13000 are 8000, 8110, 8220, 12000: median (the
# upper middle) 8220, and 12000 > 1.25 x 8220 = 10275 makes SM 13 a
# straggler. Launch B (SwiGLU): waits at 14000 and 14100, 1000 ns after A's
# last end (13000); times 50000 and 50500, median 50500, none over 63125.
# Launch C: A's kind again, 56 us later: a launch of its own, and the last
# (left out of the counts).
RECS = [
    rec(ROW1, 10, 0, 0, 1000, 9000), rec(ROW1, 11, 1, 100, 1010, 9110),
    rec(ROW1, 12, 2, 200, 1020, 9220), rec(ROW1, 13, 3, 300, 1030, 13000),
    rec(SWIGLU, 13, 1, 12600, 14100, 64500), rec(SWIGLU, 10, 0, 12500, 14000, 64000),
    rec(ROW1, 10, 0, 65000, 70000, 80000), rec(ROW1, 11, 1, 65100, 70050, 80100),
]

with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "stamps.bin")
    with open(path, "wb") as f:
        f.write(b"".join(RECS))

    rc, out, err = run(path, "3")
    lines = out.splitlines()
    check(rc == 0, f"runs (rc {rc}, {err.strip()})")
    check(lines and lines[0].startswith("8 blocks, 3 launches; the last 3"), f"counts ({lines[:1]})")
    a = [l for l in lines if l.startswith("1 row ") and "[13]" in l]
    check(len(a) == 1 and a[0].split()[2:7] == ["4", "0.0-0.3", "-", "8.2", "12.0"],
          f"launch A: 4 blocks, starts 0.0-0.3 us, median 8.2, max 12.0, SM 13 ({a})")
    b = [l for l in lines if l.startswith("1 row swiglu")]
    check(len(b) == 1 and b[0].split()[3:8] == ["2", "12.5-12.6", "1.0", "50.5", "50.5"]
          and b[0].rstrip().endswith("-"),
          f"launch B: gap 1.0 us after A, median 50.5, no stragglers ({b})")
    check(sum(l.startswith("1 row ") and "swiglu" not in l for l in lines) == 2,
          "the same kind 56 us later is a launch of its own")
    check("launches with stragglers: 1 of 2; SMs most often: [(13, 1)]" in out,
          "the counts leave the last launch out")
    check(run(path)[1] == out, "default: the last 9 launches (all 3 here)")
    rc, out1, _ = run(path, "1")
    check(rc == 0 and "the last 1" in out1 and "swiglu" not in out1, "LAUNCHES 1: only the last")

    rc, _, err = run(path, "x")
    check(rc == 1 and "LAUNCHES x" in err, f"a LAUNCHES that is not a number is refused ({err.strip()})")
    torn = os.path.join(tmp, "torn.bin")
    with open(torn, "wb") as f:
        f.write(b"".join(RECS)[:-5])
    rc, _, err = run(torn)
    check(rc == 1 and "torn.bin" in err and "32-byte" in err, f"a torn file is named ({err.strip()})")
    backwards = os.path.join(tmp, "backwards.bin")
    with open(backwards, "wb") as f:
        f.write(rec(ROW1, 1, 0, 500, 400, 900))
    rc, _, err = run(backwards)
    check(rc == 1 and "backwards.bin" in err and "record 0" in err,
          f"times out of order are refused ({err.strip()})")
    check_refuses_files(run, tmp, "bin", "no records")
    rc, _, _ = run()
    check(rc == 2, "no arguments: usage, exit 2")

finish()
