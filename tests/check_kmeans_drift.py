#!/usr/bin/env python3
"""Checks scripts/kmeans-drift, which the tables of K-Means's next steps in
docs/performance-notes.md (twenty-fifth and twenty-sixth sessions) come
from: on hand-written probe lines (two lists, one of which stops after its
second assignment) the sums and shares are the ones derived by hand; bad
input is refused with a message naming the file and line; and
scripts/kmeans-drift-probe.patch, which makes the lines, still applies to
src/policies/kmeans.c."""
import os
import subprocess
import tempfile

from script_check import check, check_refuses_files, finish, root, run_script

script = os.path.join(root, "scripts", "kmeans-drift")


def run(*args):
    return run_script(script, *args)


LINES = (
    "a line the probe did not write\n"
    "KMP M 100 k 80 it 1 changed 3 moved 50 big 10/8/6/4 rows 20/18/16/14\n"
    "KMP M 200 k 150 it 1 changed 0 moved 70 big 5/5/5/5 rows 30/30/30/30\n"
    "KMP M 100 k 80 it 2 changed 0 moved 2 big 2/2/1/0 rows 4/4/3/3\n"
    "KMN M 100 k 80 it 0 near 25\n"
    "KMN M 200 k 150 it 0 near 15\n"
    "KMN M 100 k 80 it 1 near 7\n"
)

with tempfile.TemporaryDirectory() as tmp:
    good = os.path.join(tmp, "good.txt")
    with open(good, "w") as f:
        f.write(LINES)
    rc, out, err = run(good)
    lines = out.splitlines()
    cut = next((i for i, l in enumerate(lines) if l.startswith("assignment lists near")), 0)
    rows = [l.split() for l in lines[1:cut]]
    near = [l.split() for l in lines[cut + 1:]]
    check(rc == 0 and len(rows) == 2, f"two assignments summed (rc {rc}, {err.strip()})")
    # The near-ties: assignment 1 both lists, 25 + 15 of 300 rows: 13.3%;
    # assignment 2 the KMN line of it 1 alone, 7 of 100: 7.0%.
    check(near == [["1", "2", "40", "of", "300", "(13.3%)"], ["2", "1", "7", "of", "100", "(7.0%)"]],
          f"near-ties summed: {near}")
    if len(rows) == 2:
        # Assignment 2: both lists; changed 3 + 0, moved 50 + 70, big 15/13/11/9 of
        # 80 + 150 centroids, rows 50/48/46/44 of 300 rows: 50 / 300 = 16.7%.
        check(rows[0] == ["2", "2", "3", "120", "15/13/11/9", "of", "230", "50/48/46/44",
                          "of", "300", "(16.7%)"], "assignment 2: " + " ".join(rows[0]))
        # Assignment 3: the first list alone; rows 4 of its 100: 4.0%.
        check(rows[1] == ["3", "1", "0", "2", "2/2/1/0", "of", "80", "4/4/3/3", "of", "100",
                          "(4.0%)"], "assignment 3: " + " ".join(rows[1]))
    bad = os.path.join(tmp, "bad.txt")
    with open(bad, "w") as f:
        f.write(LINES + "KMP M 100 k 80 it 2 changed x moved 2 big 2/2/1/0 rows 4/4/3/3\n")
    rc, out, err = run(bad)
    last = LINES.count("\n") + 1  # the bad line, after the good ones
    check(rc == 1 and f"{bad}:{last}" in err and "integer" in err,
          f"a bad field refused: {err.strip()}")
    with open(bad, "w") as f:
        f.write("KMP M 100 k 80 it 2 changed 0 moved 2 big 2/2/1 rows 4/4/3/3\n")
    rc, out, err = run(bad)
    check(rc == 1 and f"{bad}:1" in err and "4 values" in err, f"three taus refused: {err.strip()}")
    with open(bad, "w") as f:
        f.write("KMN M 0 k 80 it 0 near 0\n")
    rc, out, err = run(bad)
    check(rc == 1 and f"{bad}:1" in err and "positive" in err, f"an empty list refused: {err.strip()}")
    with open(bad, "w") as f:
        f.write("KMN M 100 k 80 it 0 near\n")
    rc, out, err = run(bad)
    check(rc == 1 and f"{bad}:1" in err and "not a probe line" in err,
          f"a short near line refused: {err.strip()}")
    check_refuses_files(run, tmp, "txt", "no probe lines")

p = subprocess.run(["git", "apply", "--check", os.path.join("scripts", "kmeans-drift-probe.patch")],
                   cwd=root, capture_output=True, text=True)
check(p.returncode == 0, f"the probe patch applies to the tree ({p.stderr.strip()})")

finish()
