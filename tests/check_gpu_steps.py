#!/usr/bin/env python3
"""Checks scripts/gpu-steps without a GPU: in a scratch checkout holding one
xz-packed stand-in binary, a steps file whose steps use $B, $R and $M, exit
with a status, overrun their limit (124 within it plus the kill's grace),
read a '|' inside the command, and one left under the deadline (skipped);
then --tar's single file; a limit cut to the deadline less 10 s; a second
run into one OUT; a relative OUT; a binary staged again unpacked again;
FROM resuming a list at a step, and a FROM naming none refused;
malformed lines (a bad, zero, leading-zero or huge limit, a trailing '|', a
carriage return, a reserved or repeated name) and a bad DEADLINE refused,
naming the file and line, before any step runs; and every committed list in
scripts/steps parsing (each step skipped under a past deadline)."""
import os
import subprocess
import tarfile
import tempfile
import time

from script_check import check, finish, root

steps_script = os.path.join(root, "scripts", "gpu-steps")


def run(cwd, args, deadline=None, start=None):
    env = dict(os.environ)
    env["GPU_STEPS_BINS"] = os.path.join(cwd, "unpacked")
    env.pop("DEADLINE", None)
    env.pop("FROM", None)
    if deadline is not None:
        env["DEADLINE"] = str(deadline)
    if start is not None:
        env["FROM"] = start
    t0 = time.monotonic()
    p = subprocess.run([steps_script, *args], cwd=cwd, capture_output=True, text=True, env=env)
    return p.returncode, p.stdout, p.stderr, time.monotonic() - t0


def read(path):
    with open(path) as f:
        return f.read()


with tempfile.TemporaryDirectory() as tmp:
    bins = os.path.join(tmp, ".stage", "bins", "s1")
    os.makedirs(bins)
    tool = os.path.join(tmp, "tool")
    with open(tool, "w") as f:
        f.write("#!/bin/sh\necho \"tool says $1\"\n")
    with open(os.path.join(bins, "tool.xz"), "wb") as f:
        subprocess.run(["xz", "-c", tool], stdout=f, check=True)
    steps = os.path.join(tmp, "a.steps")
    with open(steps, "w") as f:
        f.write("# a comment, then a blank line\n\n"
                "uses|30|$B/s1/tool hello > $R/out.txt; cat $M/marker\n"
                "status|30|echo partial; exit 3\n"
                "pipe|30|printf 'x|y\\n' | cut -d'|' -f2\n"
                "slow|1|sleep 30\n")
    with open(os.path.join(tmp, "marker"), "w") as f:
        f.write("in the checkout\n")
    out = os.path.join(tmp, "out")
    rc, _, err, secs = run(tmp, [steps, out])
    check(rc == 0, f"a steps file runs to its end (rc {rc}, {err.strip()})")
    logs = os.path.join(out, "logs")
    check(read(os.path.join(out, "res", "out.txt")) == "tool says hello\n",
          "the step ran the unpacked binary from $B and wrote under $R")
    check(read(os.path.join(logs, "uses.log")) == "in the checkout\n",
          "$M is the directory it was started in")
    check(read(os.path.join(logs, "pipe.log")) == "y\n", "a '|' inside the command stays in it")
    summary = read(os.path.join(logs, "00-summary.log")).splitlines()
    names = [line.split()[0] for line in summary]
    check(names == ["uses", "status", "pipe", "slow"], f"one summary line a step, in order ({names})")
    status = [line for line in summary if line.startswith("status ")]
    check(bool(status) and " rc=3 " in status[0] and "(limit 30)" in status[0],
          f"the step's exit status and limit ({status})")
    check(read(os.path.join(logs, "status.log")) == "partial\n", "the step's output is its log")
    slow = [line for line in summary if line.startswith("slow ")]
    check(bool(slow) and " rc=124 " in slow[0] and "(limit 1)" in slow[0],
          f"a step past its limit is stopped with 124 ({slow})")
    check(secs < 15, f"the overrunning step cost about its limit ({secs:.1f} s)")

    # Under a deadline 10 s away every step has under 15 s left: skipped.
    out2 = os.path.join(tmp, "out2")
    rc, _, _, _ = run(tmp, ["--tar", steps, out2], deadline=int(time.time()) + 10)
    check(rc == 0 and sorted(os.listdir(out2)) == ["steps.tar"],
          f"--tar leaves one file ({sorted(os.listdir(out2)) if os.path.isdir(out2) else None})")
    with tarfile.open(os.path.join(out2, "steps.tar")) as t:
        summary = t.extractfile("logs/00-summary.log").read().decode().splitlines()
    check(summary == [f"{n} skipped: deadline" for n in ("uses", "status", "pipe", "slow")],
          f"steps with under 15 s to the deadline are skipped ({summary})")

    # A limit past the deadline is cut to the time left less 10 s (the
    # kill's grace and --tar's packing).
    near = os.path.join(tmp, "near.steps")
    with open(near, "w") as f:
        f.write("near|300|true\n")
    out5 = os.path.join(tmp, "out5")
    rc, _, _, _ = run(tmp, [near, out5], deadline=int(time.time()) + 40)
    line = read(os.path.join(out5, "logs", "00-summary.log")).split("(limit ")
    limit = int(line[1].split(")")[0]) if len(line) > 1 else -1
    check(rc == 0 and 25 <= limit <= 30, f"a limit under a deadline 40 s away: {limit}")

    # An OUT holding an earlier run: its summary and logs do not carry over.
    rc, _, _, _ = run(tmp, [near, out5], deadline=0)
    summary = read(os.path.join(out5, "logs", "00-summary.log")).splitlines()
    check(rc == 0 and summary == ["near skipped: deadline"]
          and sorted(os.listdir(os.path.join(out5, "logs"))) == ["00-summary.log"],
          f"a second run into one OUT starts its logs afresh ({summary})")

    # A relative OUT: the steps run elsewhere, yet $R is OUT's res.
    rel = os.path.join(tmp, "rel.steps")
    with open(rel, "w") as f:
        f.write("rel|30|echo here > $R/x.txt\n")
    rc, _, err, _ = run(tmp, [rel, "outrel"])
    path = os.path.join(tmp, "outrel", "res", "x.txt")
    check(rc == 0 and os.path.exists(path) and read(path) == "here\n",
          f"a relative OUT holds the step's results ({err.strip()})")

    # The same binary staged again, newer: unpacked again.
    time.sleep(1.1)
    with open(tool, "w") as f:
        f.write("#!/bin/sh\necho \"new tool says $1\"\n")
    with open(os.path.join(bins, "tool.xz"), "wb") as f:
        subprocess.run(["xz", "-c", tool], stdout=f, check=True)
    out6 = os.path.join(tmp, "out6")
    rc, _, _, _ = run(tmp, [steps, out6])
    check(read(os.path.join(out6, "res", "out.txt")) == "new tool says hello\n",
          "a binary staged again is unpacked again")

    # FROM resumes a list at the step it names; one it does not name is
    # refused before anything runs.
    out8 = os.path.join(tmp, "out8")
    rc, _, err, _ = run(tmp, [steps, out8], start="pipe")
    summary = read(os.path.join(out8, "logs", "00-summary.log")).splitlines()
    check(rc == 0 and summary[:2] == ["uses skipped: before FROM", "status skipped: before FROM"]
          and [line.split()[0] for line in summary[2:]] == ["pipe", "slow"]
          and read(os.path.join(out8, "logs", "pipe.log")) == "y\n"
          and not os.path.exists(os.path.join(out8, "res", "out.txt")),
          f"FROM=pipe skips the steps before pipe, runs it and the rest ({summary}, "
          f"{err.strip()})")
    out9 = os.path.join(tmp, "out9")
    rc, _, err, _ = run(tmp, [steps, out9], start="nosuch")
    check(rc == 2 and "no step named 'nosuch'" in err and "a.steps" in err
          and not os.path.exists(out9), f"a FROM naming no step is refused ({err.strip()})")

    bad = os.path.join(tmp, "bad.steps")
    for second, why in (("no limit|x|true", "a limit that is not a number"),
                        ("zero|0|true", "a zero limit"),
                        ("octal|08|true", "a limit with a leading zero"),
                        ("huge|99999999999999999999|true", "a limit past 999999 s"),
                        ("pipe|5|echo x|", "a trailing '|'"),
                        ("cr|5|true\r", "a carriage return"),
                        ("00-summary|5|true", "a name the runner's logs take"),
                        ("fine|5|true", "a name used twice")):
        with open(bad, "w") as f:
            f.write(f"fine|5|touch $M/ran\n{second}\n")
        rc, _, err, _ = run(tmp, [bad, os.path.join(tmp, "out3")])
        check(rc == 2 and "bad.steps:2:" in err, f"{why} is named ({err.strip()})")
        check(not os.path.exists(os.path.join(tmp, "ran")), "and no step ran before the refusal")
    for value in ("17e8", "tomorrow", "1.7e9", "09999999999"):
        env = dict(os.environ, GPU_STEPS_BINS=os.path.join(tmp, "unpacked"), DEADLINE=value)
        p = subprocess.run([steps_script, near, os.path.join(tmp, "out7")], cwd=tmp,
                           capture_output=True, text=True, env=env)
        check(p.returncode == 2 and f"DEADLINE: not whole epoch seconds: '{value}'" in p.stderr
              and not os.path.exists(os.path.join(tmp, "out7")),
              f"DEADLINE={value} refused before anything runs ({p.stderr.strip()})")
    rc, _, err, _ = run(tmp, [steps])
    check(rc == 2 and "usage" in err, "a missing OUT is a usage error")

    # The committed step lists parse: under a past deadline each step is
    # skipped, none run.
    lists = os.path.join(root, "scripts", "steps")
    for name in sorted(os.listdir(lists)):
        path = os.path.join(lists, name)
        want = [line.split("|")[0] for line in read(path).splitlines()
                if line and not line.startswith("#")]
        out4 = os.path.join(tmp, "out-" + name)
        rc, _, err, _ = run(tmp, [path, out4], deadline=0)
        got = read(os.path.join(out4, "logs", "00-summary.log")).splitlines() if rc == 0 else []
        check(rc == 0 and want and got == [f"{n} skipped: deadline" for n in want],
              f"scripts/steps/{name}: {len(want)} steps parse ({err.strip()})")

finish()
