#!/usr/bin/env python3
"""Checks scripts/drain-trace, which the eighty-third session's per-block
table (run ZZ142, docs/performance-notes.md) comes from: on a hand-written
trace (five blocks on two SMs) the span, block times, drain and blocks per SM
are the ones derived by hand, and bad input is refused with a message naming
it."""
import os
import tempfile

from script_check import check, check_refuses_files, finish, root, run_script

script = os.path.join(root, "scripts", "drain-trace")


def run(*args):
    return run_script(script, *args)


# Blocks (ns): 0 on SM 7 from 0 to 100000, 1 on SM 8 from 0 to 120000, 2 on
# SM 7 from 100500 to 150000, 3 on SM 8 from 120400 to 160000, 4 on SM 7 from
# 150200 to 210000. Span 210.0 us; times 100.0, 120.0, 49.5, 39.6, 59.8 us,
# sorted 39.6 49.5 59.8 100.0 120.0: shortest 39.6, median (index 2) 59.8,
# longest 120.0; the last start 150.2 us, so 59.8 us after it; SM 7 ran 3
# blocks, SM 8 2.
TRACE = "0 0 100000 7\n1 0 120000 8\n2 100500 150000 7\n3 120400 160000 8\n4 150200 210000 7\n"

with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "b1_c8192_s5_o0.txt")
    with open(path, "w") as f:
        f.write(TRACE)
    rc, out, err = run(path)
    check(rc == 0, f"runs (rc {rc}, {err.strip()})")
    check(out.strip() == f"{path}: 5 blocks, span 210.0 us, block us 39.6 / 59.8 / 120.0, "
          "after the last start 59.8, blocks per SM 2-3",
          f"the hand-derived summary ({out.strip()})")
    rc, out2, _ = run(path, path)
    check(rc == 0 and out2 == out + out, "one line a file, in the order given")

    check_refuses_files(run, tmp, "txt", empty_says="no blocks")
    bad = os.path.join(tmp, "bad.txt")
    with open(bad, "w") as f:
        f.write("0 0 100 7\n1 0 x 8\n")
    rc, _, err = run(bad)
    check(rc == 1 and "bad.txt:2" in err, f"a line not of numbers is named ({err.strip()})")
    with open(bad, "w") as f:
        f.write("0 0 100\n")
    rc, _, err = run(bad)
    check(rc == 1 and "bad.txt:1" in err, f"a short line is named ({err.strip()})")
    rc, _, err = run()
    check(rc != 0 and "usage" in err, f"no file: the usage ({err.strip()})")
finish()
