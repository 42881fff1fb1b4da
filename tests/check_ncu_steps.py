#!/usr/bin/env python3
"""Checks scripts/ncu-steps, which the per-kernel tables of docs/performance.md
come from: on a small hand-written ncu CSV (two decode steps of three
launches, a header and a units row, ncu's thousands separators) the chosen
step's kernels, their sums and means are the ones derived by hand, so are a
range of steps' and those of a CSV without the DRAM column, the same from
ncu's default page (a row a kernel and metric), and bad input is refused
with a message naming it."""
import os
import tempfile

from script_check import check, check_refuses_files, finish, root, run_script

script = os.path.join(root, "scripts", "ncu-steps")


def run(*args):
    return run_script(script, *args)


HEADER = ('"ID","Kernel Name","Grid Size","Block Size","dram__bytes_read.sum",'
          '"gpu__time_duration.sum"\n"","","","","byte","ns"\n')
ROWS = [
    ("embed_kernel", "(1, 1, 1)", "(256, 1, 1)", "1,000", "2,000"),
    ("void gemv_kernel<1, 0>(float *)", "(896, 1, 1)", "(256, 1, 1)", "500", "10,000"),
    ("void gemv_kernel<1, 0>(float *)", "(896, 1, 1)", "(256, 1, 1)", "700", "14,000"),
    ("embed_kernel", "(1, 1, 1)", "(256, 1, 1)", "3,000", "4,000"),
    ("void gemv_kernel<1, 0>(float *)", "(896, 1, 1)", "(256, 1, 1)", "100", "1,000"),
    ("attention_merge", "(1, 32, 1)", "(128, 1, 1)", "50", "3,000"),
]

with tempfile.TemporaryDirectory() as tmp:
    csv_path = os.path.join(tmp, "ncu.txt")
    with open(csv_path, "w") as f:
        f.write("==PROF== Connected to process 1\nckv bench: a table line\n" + HEADER)
        for i, r in enumerate(ROWS):
            f.write(f'"{i}","{r[0]}","{r[1]}","{r[2]}","{r[3]}","{r[4]}"\n')

    # Step 0: embed (2000 ns) and two gemv calls (10000 + 14000 = 24000 ns,
    # mean 12000, mean read (500 + 700) / 2 = 600): 3 kernels, 26000 summed.
    rc, out, err = run(csv_path, "embed", "0")
    lines = out.splitlines()
    check(rc == 0, f"step 0 runs (rc {rc}, {err.strip()})")
    check("steps 2, step 0: 3 kernels, 26000 summed" in out, "step 0: 3 kernels, 26000 ns")
    gemv = [l for l in lines if "gemv_kernel<1, 0>" in l]
    check(len(gemv) == 1 and gemv[0].split()[:5] == ["2", "24000.0", "12000.00", "rd", "600"],
          f"gemv: 2 calls, 24000 summed, mean 12000, 600 bytes read ({gemv})")
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
    rc, out, _ = run(csv_path, "embed", "1-1")
    check(rc == 0 and "step 1: 3 kernels, 8000 summed" in out, "a range of one step is that step")
    for bad_step in ("2", "1-0", "0-2", "-1"):
        rc, _, err = run(csv_path, "embed", bad_step)
        check(rc == 1 and f"STEP {bad_step}" in err and "0 to 1" in err,
              f"STEP {bad_step} is refused ({err.strip()})")

    # Without dram__bytes_read.sum: the times as before, the bytes "-".
    no_dram = os.path.join(tmp, "nodram.txt")
    with open(no_dram, "w") as f:
        f.write('"ID","Kernel Name","Grid Size","Block Size","gpu__time_duration.sum"\n'
                '"","","","","ns"\n')
        for i, r in enumerate(ROWS):
            f.write(f'"{i}","{r[0]}","{r[1]}","{r[2]}","{r[4]}"\n')
    rc, out, err = run(no_dram, "embed", "0")
    gemv = [l for l in out.splitlines() if "gemv_kernel<1, 0>" in l]
    check(rc == 0 and "step 0: 3 kernels, 26000 summed" in out and len(gemv) == 1 and
          gemv[0].split()[:5] == ["2", "24000.0", "12000.00", "rd", "-"],
          f"no DRAM column: times as before, bytes '-' ({gemv}, {err.strip()})")
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
