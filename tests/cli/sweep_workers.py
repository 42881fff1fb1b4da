#!/usr/bin/env python3
"""`ckv sweep --workers N` / `--devices` (worker processes, the parent writing
every row) on a tiny `ckv synth` model and a RULER pack prepared for it, as
tests/cli/sweep.py sets them up:

- 2 CPU workers give the same rows (predictions, scores, every non-timing
  field) as one process, order aside; so does a pool that is itself shard
  1/2 (workers run 1/4 and 3/4);
- a worker SIGKILLed mid-run: its shard's unfinished samples are rerun and
  the file still equals the single-process one;
- killed again on the rerun: exit 1 naming both deaths and the missing
  samples, the rows that did arrive are in the file, `--resume` completes it;
- SIGINT to the parent alone: forwarded, exit 130, whole samples kept,
  `--resume` completes it, no worker left behind;
- `--devices` without a GPU: a clear error, exit 1, no output file; on a
  GPU host instead, `--devices all` equals one process on the first GPU.

Uses numpy and h5py; the ckv binary comes from $CKV, data from $CKV_DATA_DIR
or ../shared/data beside the source tree."""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import h5py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results_check import (CKV, DATA, check, failures, rows, run, same,  # noqa: E402
                           tiny_model_and_pack)

RUNS = 4


def children(pid):
    """Live child processes of pid with their command lines."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = open(f"/proc/{d}/stat").read()
            cmd = open(f"/proc/{d}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            out[int(d)] = [c.decode() for c in cmd if c]
    return out


def worker_of(parent, shard, other_than=None, wait=10.0):
    """The pid of the parent's worker running `shard`, waiting for it to start."""
    end = time.time() + wait
    while time.time() < end:
        for pid, cmd in children(parent).items():
            if pid != other_than and "--shard" in cmd and cmd[cmd.index("--shard") + 1] == shard:
                return pid
        time.sleep(0.01)
    return None


def start(cfg, out, *extra):
    return subprocess.Popen([CKV, "sweep", cfg, "-o", out, "--workers", "2", "--log-every",
                             "0.1", *extra], stderr=subprocess.PIPE, text=True)


def read_until(p, pred, log):
    for line in p.stderr:
        log.append(line)
        if pred(line):
            return line
    return None


def worker0_started(line):
    """A progress line where worker cpu:0 has finished a unit, not all four."""
    if "cpu:0 " not in line:
        return False
    done = int(line.split("cpu:0 ")[1].split("/")[0])
    return 0 < done < 4 * RUNS


def main():
    if not os.path.isdir(os.path.join(DATA, "ruler")):
        print("FAIL: no RULER data in", DATA, "(set CKV_DATA_DIR)")
        return 1
    d = tempfile.mkdtemp(prefix="ckv_workers_")
    # head_dim 64: the CUDA decoder's smallest, for the GPU check below.
    model, pack = tiny_model_and_pack(d, hidden=128, heads=2, kv_heads=1, samples=8)
    cfg = os.path.join(d, "c.yaml")
    open(cfg, "w").write(
        f"model: {model}\ntasks:\n  - pack: {pack}\npolicies:\n  - full\n"
        "  - name: centroid\n    budgets: [25%]\n  - name: h2o\n    budgets: [25%]\n"
        "  - name: snapkv\n    budgets: [25%]\n    decode: on\n    window: 8\n    interval: 16\n"
        "threads: 1\n")

    whole = os.path.join(d, "whole.h5")
    r = run("sweep", cfg, "-o", whole, "--device", "cpu")  # workers run on the CPU
    check(r.returncode == 0, "single-process sweep: " + r.stderr)
    ref = rows(whole)
    check(len(ref) == 8 * RUNS, f"{8 * RUNS} rows in the single-process file, got {len(ref)}")

    # Two workers, one writer: the same rows.
    two = os.path.join(d, "two.h5")
    r = run("sweep", cfg, "-o", two, "--workers", "2", "--log-every", "0.1")
    check(r.returncode == 0, "--workers 2: " + r.stderr)
    check("2 workers" in r.stderr and "cpu:0" in r.stderr and "cpu:1" in r.stderr,
          "progress names the workers: " + r.stderr)
    same(ref, rows(two), "--workers 2 vs one process")
    with h5py.File(two, "r") as f:
        check(len(f["summary"]) == RUNS, "/summary rewritten: one task x 4 runs")

    # A pool that is itself shard 1/2: its workers take shards 1/4 and 3/4.
    half = os.path.join(d, "half.h5")
    r = run("sweep", cfg, "-o", half, "--workers", "2", "--shard", "1/2")
    check(r.returncode == 0, "--shard 1/2 --workers 2: " + r.stderr)
    same({k: v for k, v in ref.items() if v["unit"] % 2 == 1}, rows(half), "--shard 1/2 --workers 2")

    # One worker killed mid-run: its shard's unfinished samples are rerun.
    killed = os.path.join(d, "killed.h5")
    log = []
    p = start(cfg, killed)
    check(read_until(p, worker0_started, log) is not None, "worker cpu:0 reports a unit")
    w0 = worker_of(p.pid, "0/2")
    check(w0 is not None, "worker of shard 0/2 found under /proc")
    if w0:
        os.kill(w0, signal.SIGKILL)
    log.append(p.stderr.read())
    p.wait()
    text = "".join(log)
    check(p.returncode == 0, f"sweep with a killed worker exits 0 after the rerun: {text}")
    check("worker cpu:0 (shard 0/2) killed by signal 9" in text and "rerunning its" in text,
          "the kill and the rerun are reported: " + text)
    same(ref, rows(killed), "killed worker rerun vs one process")

    # Killed again on its rerun: reported, the arrived rows kept, --resume completes.
    twice = os.path.join(d, "twice.h5")
    log = []
    p = start(cfg, twice)
    read_until(p, worker0_started, log)
    w0 = worker_of(p.pid, "0/2")
    if w0:
        os.kill(w0, signal.SIGKILL)
    check(read_until(p, lambda l: "rerunning its" in l, log) is not None, "rerun announced")
    w0b = worker_of(p.pid, "0/2", other_than=w0)
    check(w0b is not None, "rerun worker found under /proc")
    if w0b:
        os.kill(w0b, signal.SIGKILL)
    log.append(p.stderr.read())
    p.wait()
    text = "".join(log)
    check(p.returncode == 1, f"a worker failing twice exits 1, got {p.returncode}: {text}")
    # A kill that lands mid-record adds "its last record was cut off" to the
    # first death (timing: both forms occur).
    check(re.search(r"killed by signal 9 \(Killed\)(: its last record was cut off)?; "
                    r"on its rerun killed by signal 9", text) is not None
          and "are not in " + twice in text and "--resume" in text,
          "both deaths and the missing samples reported: " + text)
    got = rows(twice)
    units = {v["unit"] for v in got.values()}
    check(all(u in units for u in (1, 3, 5, 7)), f"the healthy worker's shard is complete: {units}")
    check(len(got) % RUNS == 0 and len(got) < len(ref), f"whole samples only, some missing: {len(got)}")
    same({k: ref[k] for k in got if k in ref}, got, "rows before resume")
    r = run("sweep", cfg, "-o", twice, "--workers", "2", "--resume")
    check(r.returncode == 0, "resume after a failed worker: " + r.stderr)
    same(ref, rows(twice), "resumed after a failed worker vs one process")

    # SIGINT to the parent alone: forwarded to the workers, exit 130.
    inter = os.path.join(d, "int.h5")
    log = []
    p = start(cfg, inter)
    read_until(p, worker0_started, log)
    workers = children(p.pid)
    check(len(workers) == 2, f"two workers under /proc: {workers}")
    p.send_signal(signal.SIGINT)
    log.append(p.stderr.read())
    p.wait()
    check(p.returncode == 130, f"SIGINT exits 130, got {p.returncode}: {''.join(log)}")
    check(not any(os.path.exists(f"/proc/{w}") for w in workers),
          "the workers ended and were reaped with the parent")
    got = rows(inter)
    check(len(got) % RUNS == 0, "SIGINT keeps whole samples only")
    r = run("sweep", cfg, "-o", inter, "--workers", "2", "--resume")
    check(r.returncode == 0, "resume after SIGINT: " + r.stderr)
    same(ref, rows(inter), "resumed after SIGINT vs one process")

    # Usage and --devices without a GPU.
    r = run("sweep", cfg, "-o", os.path.join(d, "u.h5"), "--workers", "2", "--devices", "0")
    check(r.returncode == 2 and "exclude each other" in r.stderr, "--devices with --workers: " + r.stderr)
    if run("devices").returncode == 0:
        # On a GPU host: one worker per GPU against one process on the first GPU.
        one, many = os.path.join(d, "gpu1.h5"), os.path.join(d, "gpus.h5")
        r = run("sweep", cfg, "-o", one, "--device", "cuda")
        check(r.returncode == 0, "one-GPU sweep: " + r.stderr)
        r = run("sweep", cfg, "-o", many, "--devices", "all")
        check(r.returncode == 0, "--devices all: " + r.stderr)
        if os.path.exists(one) and os.path.exists(many):
            same(rows(one), rows(many), "--devices all vs one GPU")
    else:
        for spec in ("0", "all", "0,1"):
            out = os.path.join(d, f"dev-{spec}.h5")
            r = run("sweep", cfg, "-o", out, "--devices", spec)
            check(r.returncode == 1 and f"--devices {spec}:" in r.stderr,
                  f"--devices {spec} without a GPU: exit {r.returncode}: {r.stderr}")
            check(not os.path.exists(out), f"--devices {spec}: no output file written")
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
