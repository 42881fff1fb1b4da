#!/usr/bin/env python3
"""Checks scripts/ncu-steps, which the per-kernel tables of docs/performance.md
come from: on a small hand-written ncu CSV (two decode steps of three
launches, a header and a units row, ncu's thousands separators) the chosen
step's kernels, their sums and means are the ones derived by hand, so are a
range of steps' and those of a CSV without the DRAM column or with the
written bytes' too, the same from ncu's default page (a row a kernel and
metric), --each lists a step's launches in order with their IDs, and bad
input is refused with a message naming it."""
import os
import tempfile

from script_check import check, check_refuses_files, finish, root, run_script

script = os.path.join(root, "scripts", "ncu-steps")


def run(*args):
    return run_script(script, *args)


ROWS = [
    ("embed_kernel", "(1, 1, 1)", "(256, 1, 1)", "1,000", "2,000"),
    ("void gemv_kernel<1, 0>(float *)", "(896, 1, 1)", "(256, 1, 1)", "500", "10,000"),
    ("void gemv_kernel<1, 0>(float *)", "(896, 1, 1)", "(256, 1, 1)", "700", "14,000"),
    ("embed_kernel", "(1, 1, 1)", "(256, 1, 1)", "3,000", "4,000"),
    ("void gemv_kernel<1, 0>(float *)", "(896, 1, 1)", "(256, 1, 1)", "100", "1,000"),
    ("attention_merge", "(1, 32, 1)", "(128, 1, 1)", "50", "3,000"),
]

# Metric columns: name, unit, and the value for launch i of ROWS.
READ = ("dram__bytes_read.sum", "byte", lambda i, r: r[3])
WRITE = ("dram__bytes_write.sum", "byte", lambda i, r: 20 * i + 20)
TIME = ("gpu__time_duration.sum", "ns", lambda i, r: r[4])


def raw_csv(path, metrics, prelude=""):
    """ROWS as ncu's raw page (a header, a units row, a row a launch) with
    the given metric columns, after the prelude lines."""
    with open(path, "w") as f:
        f.write(prelude + '"ID","Kernel Name","Grid Size","Block Size"' +
                "".join(f',"{m}"' for m, _, _ in metrics) + '\n"","","",""' +
                "".join(f',"{u}"' for _, u, _ in metrics) + "\n")
        for i, r in enumerate(ROWS):
            f.write(f'"{i}","{r[0]}","{r[1]}","{r[2]}"' +
                    "".join(f',"{v(i, r)}"' for _, _, v in metrics) + "\n")
    return path


with tempfile.TemporaryDirectory() as tmp:
    csv_path = raw_csv(os.path.join(tmp, "ncu.txt"), [READ, TIME],
                       "==PROF== Connected to process 1\nckv bench: a table line\n")

    # Step 0: embed (2000 ns) and two gemv calls (10000 + 14000 = 24000 ns,
    # mean 12000, mean read (500 + 700) / 2 = 600): 3 kernels, 26000 summed.
    rc, out, err = run(csv_path, "embed", "0")
    lines = out.splitlines()
    check(rc == 0, f"step 0 runs (rc {rc}, {err.strip()})")
    check("steps 2, step 0: 3 kernels, 26000 summed" in out, "step 0: 3 kernels, 26000 ns")
    gemv = [l for l in lines if "gemv_kernel<1, 0>" in l]
    check(len(gemv) == 1 and gemv[0].split()[:7] == ["2", "24000.0", "12000.00", "rd", "600", "wr", "-"],
          f"gemv: 2 calls, 24000 summed, mean 12000, 600 bytes read, no written column ({gemv})")
    check(len(lines) > 1 and "gemv_kernel" in lines[1], "largest total first")
    check("(float *)" not in out, "argument lists dropped from kernel names")

    # The default step is the second last start, here step 0; step 1 runs to
    # the end: embed 4000 + gemv 1000 + merge 3000 = 8000.
    check(run(csv_path)[1] == out, "default: the last complete step (step 0 here)")
    rc, out, _ = run(csv_path, "embed", "1")
    check(rc == 0 and "step 1: 3 kernels, 8000 summed" in out, "step 1 runs to the end: 8000 ns")

    # Steps 0-1 together: all six launches, 26000 + 8000 = 34000; gemv 3
    # calls, 25000 summed, mean 8333.33, mean read (500 + 700 + 100) / 3.
    rc, out, err = run(csv_path, "embed", "0-1")
    gemv = [l for l in out.splitlines() if "gemv_kernel<1, 0>" in l]
    check(rc == 0 and "steps 0-1: 6 kernels, 34000 summed" in out,
          f"steps 0-1 together: 6 kernels, 34000 ns ({err.strip()})")
    check(len(gemv) == 1 and gemv[0].split()[:5] == ["3", "25000.0", "8333.33", "rd", "433"],
          f"steps 0-1: gemv 3 calls, 25000 summed ({gemv})")
    # --each: step 1's three launches in order, IDs 3 to 5, each its own
    # time and bytes read.
    rc, out, err = run("--each", csv_path, "embed", "1")
    each = [l.split()[:4] for l in out.splitlines()[1:]]
    check(rc == 0 and "step 1: 3 kernels, 8000 summed" in out and
          each == [["3", "4000.0", "rd", "3000"], ["4", "1000.0", "rd", "100"],
                   ["5", "3000.0", "rd", "50"]] and "attention_merge grid (1, 32, 1)" in out,
          f"--each: step 1's launches in order ({out!r}, {err.strip()})")
    rc, out, _ = run(csv_path, "embed", "1-1")
    check(rc == 0 and "step 1: 3 kernels, 8000 summed" in out, "a range of one step is that step")
    for bad_step in ("2", "1-0", "0-2", "-1"):
        rc, _, err = run(csv_path, "embed", bad_step)
        check(rc == 1 and f"STEP {bad_step}" in err and "0 to 1" in err,
              f"STEP {bad_step} is refused ({err.strip()})")

    # Without dram__bytes_read.sum: the times as before, the bytes "-".
    no_dram = raw_csv(os.path.join(tmp, "nodram.txt"), [TIME])
    rc, out, err = run(no_dram, "embed", "0")
    gemv = [l for l in out.splitlines() if "gemv_kernel<1, 0>" in l]
    check(rc == 0 and "step 0: 3 kernels, 26000 summed" in out and len(gemv) == 1 and
          gemv[0].split()[:5] == ["2", "24000.0", "12000.00", "rd", "-"],
          f"no DRAM column: times as before, bytes '-' ({gemv}, {err.strip()})")
    # With dram__bytes_write.sum: the written bytes' mean beside the read's
    # (gemv in step 0: (40 + 60) / 2 = 50).
    writes = raw_csv(os.path.join(tmp, "writes.txt"), [READ, WRITE, TIME])
    rc, out, err = run(writes, "embed", "0")
    gemv = [l for l in out.splitlines() if "gemv_kernel<1, 0>" in l]
    check(rc == 0 and len(gemv) == 1 and
          gemv[0].split()[:7] == ["2", "24000.0", "12000.00", "rd", "600", "wr", "50"],
          f"the written bytes' mean: gemv 50 ({gemv}, {err.strip()})")
    # ncu's default page: the same launches a row a metric (times first here,
    # the bytes after), as the raw page's table.
    long_path = os.path.join(tmp, "long.txt")
    with open(long_path, "w") as f:
        f.write('==PROF== Disconnected\n"ID","Process ID","Kernel Name","Block Size","Grid Size",'
                '"Section Name","Metric Name","Metric Unit","Metric Value"\n')
        for i, r in enumerate(ROWS):
            f.write(f'"{i}","7","{r[0]}","{r[2]}","{r[1]}","Command line profiler metrics",'
                    f'"gpu__time_duration.sum","ns","{r[4]}"\n')
            f.write(f'"{i}","7","{r[0]}","{r[2]}","{r[1]}","Command line profiler metrics",'
                    f'"dram__bytes_read.sum","byte","{r[3]}"\n')
    rc, out, err = run(long_path, "embed", "0")
    gemv = [l for l in out.splitlines() if "gemv_kernel<1, 0>" in l]
    check(rc == 0 and "units: ns, byte; steps 2, step 0: 3 kernels, 26000 summed" in out and
          len(gemv) == 1 and gemv[0].split()[:5] == ["2", "24000.0", "12000.00", "rd", "600"] and
          "grid (896, 1, 1) blk (256, 1, 1)" in gemv[0],
          f"the default page: step 0 as from the raw page ({out!r}, {err.strip()})")
    rc, out, _ = run(long_path, "embed", "1")
    check(rc == 0 and "step 1: 3 kernels, 8000 summed" in out, "the default page: step 1, 8000 ns")
    rc, out, _ = run("--each", long_path, "embed", "1")
    check(rc == 0 and [l.split()[:4] for l in out.splitlines()[1:]] ==
          [["3", "4000.0", "rd", "3000"], ["4", "1000.0", "rd", "100"], ["5", "3000.0", "rd", "50"]],
          f"the default page with --each: the IDs and launches as the raw page's ({out!r})")

    rc, _, err = run(csv_path, "embed", "x")
    check(rc == 1 and "STEP x" in err, f"a STEP that is not a number is refused ({err.strip()})")
    rc, _, err = run(csv_path, "nosuchkernel")
    check(rc == 1 and "nosuchkernel" in err, f"no matching kernel is refused ({err.strip()})")
    bad = os.path.join(tmp, "bad.txt")
    with open(bad, "w") as f:
        f.write('"ID","Kernel Name"\n"",""\n"0","embed_kernel"\n')
    rc, _, err = run(bad)
    check(rc == 1 and "bad.txt" in err and "gpu__time_duration.sum" in err,
          f"a CSV without the metrics names the file and column ({err.strip()})")
    check_refuses_files(run, tmp, "txt")
    rc, _, _ = run()
    check(rc == 2, "no arguments: usage, exit 2")

finish()
