"""What the sweep tests share: scripts/compare-results as a module (load()
and differences() of results files), the ckv binary and data dir from the
environment, failure recording, and the tiny `ckv synth` model with a RULER
pack prepared for it."""
import importlib.machinery
import importlib.util
import os
import subprocess

_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                     "compare-results")
_loader = importlib.machinery.SourceFileLoader("compare_results", _path)
compare = importlib.util.module_from_spec(importlib.util.spec_from_loader("compare_results", _loader))
_loader.exec_module(compare)

CKV = os.environ.get("CKV", "build/ckv")
ROOT = os.environ.get("CKV_SOURCE_ROOT", ".")
DATA = os.environ.get("CKV_DATA_DIR") or os.path.join(ROOT, "../shared/data")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(*args, **kw):
    return subprocess.run([CKV, *args], capture_output=True, text=True, **kw)


def rows(path):
    """/samples keyed by (task, length, sample, run name); a row present twice fails."""
    out, twice = compare.load(path)
    check(not twice, f"{path}: rows {twice} appear twice")
    return out


def same(a, b, what):
    """Same rows, every field but the timings equal."""
    for m in compare.differences(a, b, what):
        check(False, m)


def tiny_model_and_pack(d, hidden, heads, kv_heads, samples):
    """A 2-layer llama `ckv synth` model and a pack of `samples` RULER
    niah_single_1 prompts at 1024 tokens for it, in folder d."""
    model, pack = os.path.join(d, "tiny.gguf"), os.path.join(d, "pack.h5")
    r = run("synth", "--arch", "llama", "--layers", "2", "--hidden", str(hidden), "--heads",
            str(heads), "--kv-heads", str(kv_heads), "--ctx", "4096", "--out", model)
    check(r.returncode == 0, "synth: " + r.stderr)
    r = run("prepare", "ruler", "--model", model, "--tasks", "niah_single_1", "--lengths",
            "1024", "--samples", str(samples), "--data-dir", DATA, "--out", pack)
    check(r.returncode == 0, "prepare: " + r.stderr)
    return model, pack
