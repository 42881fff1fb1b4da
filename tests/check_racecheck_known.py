#!/usr/bin/env python3
"""Checks scripts/racecheck-known on hand-written racecheck logs: races that
are all the known pair pass; one that is not (another pair, or the known
reader against another writer) fails naming its line; a log without
racecheck's summary fails; a clean log passes; a missing log, no pair or
half a pair is refused."""
import os
import tempfile

from script_check import check, finish, root, run_script

script = os.path.join(root, "scripts", "racecheck-known")
HEAD = "========= COMPUTE-SANITIZER\n"
KNOWN = ("========= Error: Race reported between Write access at ckv_cp_async4(void *, const "
         "void *, bool)+0x41b0 in cuda_async_copy.cuh:51\n"
         "=========     and Read access at void km_col_scales<(int)8>(float2 (&)[T1], const "
         "float *, bool &)+0x4490 in cuda_kmeans.cu:1449 [128 hazards]\n=========\n")
OTHER = ("========= Error: Race reported between Write access at void km_update_kernel<64>(...)"
         "+0x100 in cuda_kmeans.cu:2200\n"
         "=========     and Read access at void km_update_kernel<64>(...)+0x180 in "
         "cuda_kmeans.cu:2210 [4 hazards]\n=========\n")
HALF = ("========= Error: Race reported between Write access at void km_update_kernel<64>(...)"
        "+0x100 in cuda_kmeans.cu:2200\n"
        "=========     and Read access at void km_col_scales<(int)8>(float2 (&)[T1], const "
        "float *, bool &)+0x4490 in cuda_kmeans.cu:1449 [8 hazards]\n=========\n")
SUMMARY = "========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)\n"

with tempfile.TemporaryDirectory() as tmp:
    def log(name, text):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    pair = ("ckv_cp_async4", "km_col_scales")
    rc, out, err = run_script(script, log("known.log", HEAD + KNOWN + KNOWN + SUMMARY), *pair)
    check(rc == 0 and "2 races reported, each known" in out, f"known races pass ({err.strip()})")
    rc, _, err = run_script(script, log("other.log", HEAD + KNOWN + OTHER + SUMMARY), *pair)
    check(rc == 1 and "other.log:5: a race not known" in err,
          f"another race fails, named by its line ({err.strip()})")
    rc, _, err = run_script(script, log("half.log", HEAD + HALF + SUMMARY), *pair)
    check(rc == 1 and "half.log:2: a race not known" in err,
          f"the known reader against another writer fails ({err.strip()})")
    rc, _, err = run_script(script, log("cut.log", HEAD + KNOWN), *pair)
    check(rc == 1 and "no RACECHECK SUMMARY" in err, f"a log cut short fails ({err.strip()})")
    clean = HEAD + "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n"
    rc, out, _ = run_script(script, log("clean.log", clean), *pair)
    check(rc == 0 and "0 races reported" in out, "a clean log passes")
    rc, _, err = run_script(script, os.path.join(tmp, "missing.log"), *pair)
    check(rc == 2 and "missing.log" in err, f"a missing log is refused ({err.strip()})")
    rc, _, err = run_script(script, log("x.log", clean))
    check(rc == 2 and "usage" in err, "no pair is a usage error")
    rc, _, err = run_script(script, log("x.log", clean), pair[0])
    check(rc == 2 and "usage" in err, "half a pair is a usage error")

finish()
