#!/usr/bin/env python3
"""Checks the performance scripts that need a GPU machine's tools, without
them: scripts/gpu-clocks against a stand-in nvidia-smi that prints twelve
fixed samples (its percentiles derived by hand), passing the command's exit
status through and refusing a missing command or nvidia-smi; and
scripts/hf-prefill-profile's usage errors, which come before torch is
imported."""
import os
import shutil
import stat
import subprocess
import sys
import tempfile

from script_check import check, finish, root

clocks = os.path.join(root, "scripts", "gpu-clocks")
profile = os.path.join(root, "scripts", "hf-prefill-profile")


def run(args, path=None):
    env = dict(os.environ)
    env.pop("CKV_CLOCKS_CSV", None)
    if path is not None:
        env["PATH"] = path
    p = subprocess.run(args, capture_output=True, text=True, env=env)
    return p.returncode, p.stdout, p.stderr


with tempfile.TemporaryDirectory() as tmp:
    # Eleven samples at 400 W, SM clocks 1000, 1100, .. 2000 MHz, and one
    # idle sample (100 W, 500 MHz) that the load's percentiles leave out:
    # sorted, p10 is the 2nd (1100), p50 the 6th (1500), p90 the 10th (1900).
    smi = os.path.join(tmp, "nvidia-smi")
    with open(smi, "w") as f:
        f.write("#!/bin/sh\n")
        for mhz in range(1000, 2001, 100):
            f.write(f"echo '2026/11/30 12:00:00.000, {mhz} MHz, 400.00 W, 60'\n")
        f.write("echo '2026/11/30 12:00:00.000, 500 MHz, 100.00 W, 40'\nexec sleep 60\n")
    os.chmod(smi, os.stat(smi).st_mode | stat.S_IEXEC)
    path = tmp + os.pathsep + os.environ.get("PATH", "")
    rc, out, err = run([clocks, "sh", "-c", "exit 3"], path)
    check(rc == 3, f"the command's exit status comes back (rc {rc}, {err.strip()})")
    check("12 samples, 11 above 300 W" in out, f"12 samples, 11 under load ({out.strip()})")
    check("p10 1100 p50 1500 p90 1900" in out, "SM clock percentiles 1100 / 1500 / 1900 MHz")
    check("power W p10 400 p50 400 p90 400 max 400" in out, "power percentiles 400 W")
    rc, _, err = run([clocks], path)
    check(rc == 2 and "usage" in err, f"no command: usage, exit 2 (rc {rc})")
    bare = os.path.join(tmp, "bare")  # bash alone on the PATH
    os.mkdir(bare)
    os.symlink(shutil.which("bash"), os.path.join(bare, "bash"))
    rc, _, err = run([clocks, "true"], bare)
    check(rc == 2 and "nvidia-smi" in err, f"no nvidia-smi: exit 2 naming it ({err.strip()})")

rc, _, err = run([sys.executable, profile, "--shape", "gpt-5"])
check(rc == 2 and "gpt-5" in err, f"hf-prefill-profile: an unknown shape is a usage error ({err.strip()[-80:]})")
rc, _, err = run([sys.executable, profile, "--context", "x"])
check(rc == 2 and "--context" in err, "hf-prefill-profile: --context x is a usage error")
rc, out, _ = run([sys.executable, profile, "--help"])
check(rc == 0 and "llama3.1-8b" in out, "hf-prefill-profile --help lists the shapes")

finish()
