#!/usr/bin/env python3
"""`ckv sweep`, `ckv merge` and `ckv report` end to end on a tiny `ckv synth`
model and a RULER pack prepared for it: the HDF5 schema, resume after a real
SIGKILL (same rows and scores as an uninterrupted run, none doubled or
missing), shards merged equal to the whole, refusals (changed config on
resume, mismatched merge), and report tables of a file with hand-set scores.

Uses numpy and h5py (hashlib for the model sha256). The ckv binary comes from
$CKV; data from $CKV_DATA_DIR or ../shared/data beside the source tree (a
missing data directory fails the check: it cannot run without it)."""
import hashlib
import os
import signal
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results_check import (CKV, DATA, check, failures, rows, run, same,  # noqa: E402
                           tiny_model_and_pack)


def main():
    if not os.path.isdir(os.path.join(DATA, "ruler")):
        print("FAIL: no RULER data in", DATA, "(set CKV_DATA_DIR)")
        return 1
    d = tempfile.mkdtemp(prefix="ckv_sweep_")
    model, pack = tiny_model_and_pack(d, hidden=64, heads=4, kv_heads=2, samples=4)
    cfg = os.path.join(d, "c.yaml")
    text = (f"model: {model}\ntasks:\n  - pack: {pack}\npolicies:\n  - full\n"
            "  - name: centroid\n    budgets: [25%, 50%]\n  - name: streaming\n"
            "    budgets: [25%]\n  - name: h2o\n    budgets: [25%]\n"
            "  - name: snapkv\n    budgets: [25%]\n    decode: on\n    window: 8\n    interval: 16\n"
            "threads: 1\nfidelity: true\n")
    open(cfg, "w").write(text)

    # Dry run: 6 runs x 4 samples.
    r = run("sweep", cfg, "--dry-run")
    check(r.returncode == 0 and "4 samples x 6 runs = 24 rows" in r.stdout, "dry-run: " + r.stdout + r.stderr)
    check("     1  centroid@25%" in r.stdout, "dry-run lists run 1: " + r.stdout)

    # Whole run, then the schema.
    whole = os.path.join(d, "whole.h5")
    r = run("sweep", cfg, "-o", whole)
    check(r.returncode == 0, "sweep: " + r.stderr)
    with h5py.File(whole, "r") as f:
        a = f.attrs
        check(a["config_text"] == text, "config text verbatim")
        check(a["model_sha256"] == hashlib.sha256(open(model, "rb").read()).hexdigest(), "model sha256")
        for k in ("tool_version", "git_rev", "device", "host", "start_time", "config_hash", "mode"):
            check(k in a, "root attribute " + k)
        s = f["samples"]
        check(s.chunks is not None and s.maxshape == (None,), "/samples chunked and extendible")
        need = ["task", "length", "sample", "run", "policy", "budget", "score", "prompt_tokens",
                "kv_entries", "kv_bytes", "ttft_ms", "tpot_ms", "compress_ms", "prediction",
                "budget_spec", "budget_entries", "kv_entries_peak", "kv_bytes_peak",
                "generated_tokens", "device", "status", "kl", "top1"]
        for n in need:
            check(n in s.dtype.names, "/samples field " + n)
        v = s[:]
        check(len(v) == 24, f"24 rows, got {len(v)}")
        hd = 64 // 4
        for row in v:
            check(row["kv_bytes"] == row["kv_entries"] * (2 * hd + 1) * 4, "kv bytes = entries x (2d+1) x 4")
            check(row["status"] == b"ok", "status ok")
        full = v[v["run"] == 0]
        # B = ceil(0.25 * N) for the 25% runs; the full cache keeps N per list.
        c25 = v[v["run"] == 1]
        for fr, cr in zip(full, c25):
            n = fr["prompt_tokens"]
            check(cr["budget_entries"] == -(-n // 4), "B = ceil(N/4)")
            check(fr["kv_entries"] == n * 2 * 2, "full: N entries in each of 2 layers x 2 heads")
            check(cr["kv_entries"] <= cr["budget_entries"] * 4, "compressed within B per list")
            check(fr["kl"] == 0 and fr["top1"] == 1, "full vs itself: KL 0, top-1 1")
        # Decode compressions keep every list within B + interval (2 layers x 2 heads);
        # SnapKV with decode on compresses from its own decode queries.
        for run_, interval in ((3, 64), (4, 64), (5, 16)):
            for row in v[v["run"] == run_]:
                check(row["kv_entries_peak"] <= (row["budget_entries"] + interval) * 4,
                      f"run {run_}: peak {row['kv_entries_peak']} within (B + {interval}) x 4")
                check(row["kv_entries_peak"] > row["kv_entries"], f"run {run_}: grew while decoding")
        check(len(f["runs"]) == 6 and f["runs"][1]["name"] == b"centroid@25%", "/runs")
        check(len(f["summary"]) == 6, "/summary: one task x 6 runs")

    # SIGKILL after the first flush, then --resume.
    killed = os.path.join(d, "killed.h5")
    p = subprocess.Popen([CKV, "sweep", cfg, "-o", killed, "--log-every", "0.1"],
                         stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        if "flushed" in line:
            break
    p.send_signal(signal.SIGKILL)
    p.wait()
    check(p.returncode == -signal.SIGKILL, "killed with SIGKILL")
    with h5py.File(killed, "r") as f:
        n_before = len(f["samples"])
    print(f"killed after the first flush with {n_before} of 24 rows")
    check(0 < n_before < 24, f"killed mid-sweep with {n_before} of 24 rows")
    r = run("sweep", cfg, "-o", killed)
    check(r.returncode == 1 and "--resume" in r.stderr, "existing file refused without --resume")
    r = run("sweep", cfg, "-o", killed, "--resume")
    check(r.returncode == 0, "resume: " + r.stderr)
    same(rows(whole), rows(killed), "resumed vs whole")

    # SIGINT: flush, exit 130, then resume to the same rows.
    inter = os.path.join(d, "int.h5")
    p = subprocess.Popen([CKV, "sweep", cfg, "-o", inter, "--log-every", "0.1"],
                         stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        if "flushed" in line:
            break
    p.send_signal(signal.SIGINT)
    rest = p.stderr.read()
    p.wait()
    check(p.returncode == 130, f"SIGINT exits 130, got {p.returncode}: {rest}")
    with h5py.File(inter, "r") as f:
        check(len(f["samples"]) % 6 == 0, "SIGINT keeps whole samples only")
    r = run("sweep", cfg, "-o", inter, "--resume")
    check(r.returncode == 0, "resume after SIGINT: " + r.stderr)
    same(rows(whole), rows(inter), "resumed after SIGINT vs whole")

    # A changed config is refused on resume unless forced.
    cfg2 = os.path.join(d, "c2.yaml")
    open(cfg2, "w").write(text.replace("threads: 1", "threads: 1\nlimit: 4"))
    r = run("sweep", cfg2, "-o", killed, "--resume")
    check(r.returncode == 1 and "another config" in r.stderr, "changed config refused: " + r.stderr)

    # Shards merged equal the whole.
    s0, s1, merged = (os.path.join(d, n) for n in ("s0.h5", "s1.h5", "merged.h5"))
    for i, out in enumerate((s0, s1)):
        r = run("sweep", cfg, "-o", out, "--shard", f"{i}/2")
        check(r.returncode == 0, "shard: " + r.stderr)
    r = run("merge", s1, s0, "--out", merged)
    check(r.returncode == 0, "merge: " + r.stderr)
    same(rows(whole), rows(merged), "merged shards vs whole")
    r = run("merge", s0, s0, "-o", os.path.join(d, "dup.h5"))
    check(r.returncode == 1 and "twice" in r.stderr, "duplicate rows refused: " + r.stderr)
    other = os.path.join(d, "other.h5")
    r = run("sweep", cfg2, "-o", other, "--limit", "1")
    r = run("merge", s0, other, "-o", os.path.join(d, "mix.h5"))
    check(r.returncode == 1 and "config hash" in r.stderr, "mismatched configs refused: " + r.stderr)

    # Query-agnostic: B = ceil(25% of the context tokens), the question is
    # appended after the compression (peak = compressed context + question).
    agn = os.path.join(d, "agn.yaml")
    # A fractional budget below centroid's 68 protected entries: a skipped row.
    open(agn, "w").write(text.replace("threads: 1", "  - name: centroid\n    budgets: [3%]\n"
                                      "threads: 1\nmode: query_agnostic"))
    r = run("sweep", agn, "-o", os.path.join(d, "agn.h5"), "--limit", "1")
    check(r.returncode == 0, "agnostic sweep: " + r.stderr)
    with h5py.File(pack, "r") as f:
        n_ctx, n_tok = int(f["samples/n_context_tokens"][0]), int(f["samples/n_tokens"][0])
    check(0 < n_ctx < n_tok, "pack has a context/question split")
    with h5py.File(os.path.join(d, "agn.h5"), "r") as f:
        check(f.attrs["mode"] == "query_agnostic", "mode attribute")
        v = f["samples"][:]
        streaming = v[v["run"] == 3][0]  # streaming@25%: evicts to exactly B per list
        b = -(-n_ctx // 4)
        check(streaming["budget_entries"] == b, f"agnostic B = ceil(N_ctx/4) = {b}")
        check(streaming["kv_entries"] == b * 4, "context compressed to B per list")
        full = v[v["run"] == 0][0]
        check(full["kv_entries"] == n_ctx * 4, "full: the context only before the question")
        skipped = v[v["run"] == 6][0]
        check(skipped["status"].startswith(b"skipped: budget 3.0000%% of %d tokens" % n_ctx)
              and np.isnan(skipped["score"]), f"skipped row: {skipped['status']!r}")

    report_tables(d)
    print(f"{len(failures)} failures")
    return 1 if failures else 0


def report_tables(d):
    """A results file written here with hand-set scores; the report must
    show RULER scores x100 per task, the mean only for complete rows, and the
    LongBench table separately."""
    path = os.path.join(d, "hand.h5")
    st = h5py.string_dtype()
    sdt = np.dtype([("unit", "i8"), ("task", st), ("length", "i4"), ("sample", "i4"), ("run", "i4"),
                    ("policy", st), ("budget", "f8"), ("budget_spec", st), ("budget_entries", "i8"),
                    ("metric", st), ("score", "f8"), ("prompt_tokens", "i4"), ("kv_entries", "i8"),
                    ("kv_bytes", "i8"), ("kv_entries_peak", "i8"), ("kv_bytes_peak", "i8"),
                    ("ttft_ms", "f8"), ("compress_ms", "f8"), ("tpot_ms", "f8"),
                    ("generated_tokens", "i4"), ("prediction", st), ("device", st), ("status", st),
                    ("kl", "f8"), ("top1", "f8"), ("fidelity_steps", "i4")])
    rdt = np.dtype([("run", "i4"), ("name", st), ("policy", st), ("budget_spec", st),
                    ("params", st), ("params_set", st)])
    runs = [(0, "full", "full", "", "", ""), (1, "h2o@25%", "h2o", "25%", "interval=64", "")]
    # (unit, task, length, run, metric, score)
    spec = [(0, "niah_single_1", 4096, 0, "string_match_all", 1.0),
            (1, "niah_single_1", 4096, 0, "string_match_all", 0.5),
            (2, "vt", 4096, 0, "string_match_all", 0.2),
            (0, "niah_single_1", 4096, 1, "string_match_all", 0.0),
            (1, "niah_single_1", 4096, 1, "string_match_all", 1 / 3),
            (3, "qasper", 0, 0, "qa_f1_score", 0.25),
            (4, "trec", 0, 0, "classification_score", 1.0)]
    data = np.zeros(len(spec), dtype=sdt)
    for i, (u, t, L, run_, m, sc) in enumerate(spec):
        data[i] = (u, t, L, u, run_, runs[run_][2], 0.25 if run_ else 0, runs[run_][3], 10, m, sc,
                   100, 10, 1290, 12, 1548, 5.0, 1.0, 2.0, 3, "x", "cpu", "ok", np.nan, np.nan, 0)
    # TPOT: none for a row that generated one token; the mean is over the rows
    # that have one: full (2 + 4 + 2 + 2) / 4 = 2.50.
    data[1]["tpot_ms"] = np.nan
    data[2]["tpot_ms"] = 4.0
    with h5py.File(path, "w") as f:
        for k in ("tool_version", "git_rev", "model_path", "model_sha256", "config_path",
                  "config_text", "config_hash", "device", "host", "start_time", "mode"):
            f.attrs[k] = "hand"
        f.attrs["format"] = "ckv-results"
        f.attrs["version"] = "1"
        f.create_dataset("samples", data=data, maxshape=(None,), chunks=True)
        f.create_dataset("runs", data=np.array(runs, dtype=rdt), maxshape=(None,), chunks=True)
    r = run("report", path)
    check(r.returncode == 0, "report: " + r.stderr)
    out = r.stdout
    # niah_single_1: full (1 + 0.5)/2 = 75.00, vt 20.00, mean 47.50; h2o (0 + 1/3)/2 =
    # 16.67 (16.666.. rounded), vt missing so no mean.
    check("| run | niah_single_1 | vt | mean |" in out, "RULER header:\n" + out)
    check("| full | 75.00 | 20.00 | 47.50 |" in out, "RULER full row:\n" + out)
    check("| h2o@25% | 16.67 | - | - |" in out, "RULER h2o row:\n" + out)
    check("### LongBench" in out and "| full | 25.00 | 100.00 | 62.50 |" in out,
          "LongBench table:\n" + out)
    # qasper is 1 of 3 English single-document QA sets, trec 1 of 3 English few-shot sets:
    # the 16-dataset mean (25 + 100) / 2 over 2 of 16, each category over 1 of 3.
    check("| full | 62.50 (2/16) | 25.00 (1/3) | - | - | 100.00 (1/3) | - | - |" in out,
          "LongBench means:\n" + out)
    check("### Fidelity" not in out, "no fidelity table without fidelity")
    check("| full | 100.00 | 0.00 | 0.00 | 5.00 | 1.00 | 2.50 | 3.00 |" in out,
          "speed row of full, TPOT over the rows that have one:\n" + out)
    r = run("report", path, "--format", "csv")
    check("RULER,4096,\"full\",mean,47.5000" in r.stdout, "csv:\n" + r.stdout)


if __name__ == "__main__":
    sys.exit(main())
