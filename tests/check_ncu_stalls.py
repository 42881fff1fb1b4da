#!/usr/bin/env python3
"""Checks scripts/ncu-stalls, which the stall figures of
docs/performance-notes.md come from: on a small hand-written ncu source page
(six SASS lines, their samples and two stall reasons) the totals, the
reasons' order and shares, the busiest instructions, and each local load's
first reader (a 64-bit load's second register read as a store's address;
a predicated write passed over; none where an unpredicated write replaces
the value first), the samples at each DEPBAR and after it, and with ncu's
executed counts the total, the opcodes that executed most and the count
that carries the most executions with the instructions a trip, are the
ones derived by hand, and bad input is refused with a message naming it."""
import os
import tempfile

from script_check import check, check_refuses_files, finish, root, run_script

script = os.path.join(root, "scripts", "ncu-stalls")


def run(*args):
    return run_script(script, *args)


# Address, source, all samples, stall_long_sb, stall_wait.
LINES = [
    ("0x7f0000000000", "LDL R7, [R1+0x20]", 2, 0, 2),
    ("0x7f0000000010", "@P1   MOV R7, R9", 4, 0, 4),  # a predicated write: R7 may live on
    ("0x7f0000000020", "@P0   IADD3 R5, R7, R2, RZ", 30, 30, 0),  # R7's first reader
    ("0x7f0000000030", "LDL.LU.64 R10, [R1+0x8]", 0, 0, 0),
    ("0x7f0000000040", "STG.E [R11.64], R4", 50, 40, 10),  # reads R11, the load's second
    ("0x7f0000000050", "LDL R20, [R1]", 14, 0, 14),
    ("0x7f0000000060", "MOV R20, RZ", 0, 0, 0),          # replaces R20 unread
    ("0x7f0000000070", "IADD3 R3, R20, 0x1, RZ", 0, 0, 0),  # reads the MOV's R20
]


def page(path, lines=LINES, header=True, executed=None):
    """executed: each line's "Instructions Executed" (ncu's column), or
    None for a page without that column."""
    with open(path, "w") as f:
        f.write('==PROF== Connected to process 1\n"Kernel Name","void k<64>(args)",\n')
        if header:
            f.write('"Address","Source","Warp Stall Sampling (All Samples)",'
                    '"Warp Stall Sampling (Not-issued Samples)","stall_long_sb",'
                    '"stall_wait","stall_long_sb (Not Issued)"'
                    + (',"Instructions Executed"' if executed else "") + "\n")
        for i, (a, s, n, lsb, w) in enumerate(lines):
            f.write(f'"{a}","      {s}","{n}","0","{lsb}","{w}","0"'
                    + (f',"{executed[i]}"' if executed else "") + "\n")
    return path


with tempfile.TemporaryDirectory() as tmp:
    p = page(os.path.join(tmp, "src.csv"))
    rc, out, err = run(p, "2")
    lines = out.splitlines()
    check(rc == 0, f"a page runs (rc {rc}, {err.strip()})")
    # 2 + 4 + 30 + 0 + 50 + 14 = 100 samples; long_sb 70, wait 30.
    check("kernel void k<64>(args): 100 samples over 8 instructions" in out, "the totals")
    reasons = [l.split() for l in lines if l.strip().startswith("stall_")]
    check([r[0] for r in reasons] == ["stall_long_sb", "stall_wait"], "reasons, largest first")
    check([r[1:] for r in reasons] == [["70", "70.0%"], ["30", "30.0%"]], "their counts and shares")
    busiest = [l for l in lines if l.startswith("     ") and "%" in l and "->" not in l]
    check(len(busiest) == 2 and "STG.E" in busiest[1] and "IADD3" in busiest[0],
          f"the two busiest in listing order ({busiest})")
    check("0 LDL R7, [R1+0x20] ->      2      30" in out, "R7's reader is the IADD3, past a predicated write")
    check("3 LDL.LU.64 R10, [R1+0x8] ->      4      50" in out,
          "a 64-bit load's second register read as a store's address")
    check("5 LDL R20, [R1]: no reader" in out, "a load replaced before any read")
    check("the local loads' readers: 80 samples, 80.0% of all" in out, "the readers' sum")

    check("instructions executed" not in out, "no executed counts without ncu's column")
    check("at the 0 DEPBARs and the instruction after each (the wait for async copies): 0 samples, "
          "0.0% of all" in out, "no DEPBAR, no copies' wait")

    # Executed counts, by hand: LDL 10 + 2 = 12, MOV 5 (predicated) + 4 = 9,
    # IADD3 10 + 6 = 16, LDL.LU.64 3, STG.E 7 (ncu's thousands separator):
    # 47 in all; the top 2 IADD3 (34.0%), LDL (25.5%).
    ex = page(os.path.join(tmp, "ex.csv"), executed=[10, 5, 10, 3, "7", 2, 4, 6])
    rc, out, err = run(ex, "2")
    rows = [l.split() for l in out.splitlines() if l.startswith("  ") and len(l.split()) == 3
            and l.split()[2].endswith("%") and not l.split()[0].startswith("stall_")]
    check(rc == 0 and "instructions executed: 47 (warp level); the 2 opcodes" in out
          and rows == [["IADD3", "16", "34.0%"], ["LDL", "12", "25.5%"]],
          f"the executed counts by opcode, predicates left off ({rows}, {err.strip()})")
    big = page(os.path.join(tmp, "big.csv"), executed=[10, 5, 10, 3, "1,048,576", 2, 4, 6])
    rc, out, _ = run(big, "1")
    check(rc == 0 and "instructions executed: 1048616 " in out and "STG.E" in out,
          "a count with thousands separators")
    rc, _, err = run(page(os.path.join(tmp, "badex.csv"), executed=[1, 2, "x", 4, 5, 6, 7, 8]))
    check(rc == 1 and "badex.csv" in err and "executed count" in err,
          f"an executed count that is not a number is refused ({err.strip()})")

    # One pass of straight-line code around a loop of three instructions (a
    # DEPBAR, its waiter, the branch back) run 5 times, the last DEPBAR just
    # before the end. By hand: the DEPBARs and the instructions after them,
    # rows 1, 2, 4 and 5, hold 1 + 9 + 0 + 5 = 15 of 26 samples (57.7%),
    # long_sb 9 + 5 = 14 and wait 1 of them; the loop's count 5 carries 5 x 3
    # = 15 executions against 1 x 3 = 3; executed 18 in all, 3.6 a trip.
    loop = [("0x7f0000000000", "MOV R1, c[0x0][0x28]", 1, 0, 1),
            ("0x7f0000000010", "DEPBAR.LE SB0, 0x1", 1, 0, 1),
            ("0x7f0000000020", "LEA R6, R6, UR13, 0x3", 9, 9, 0),
            ("0x7f0000000030", "@!P0  BRA 0x7f0000000010", 10, 10, 0),
            ("0x7f0000000040", "DEPBAR.LE SB0, 0x0", 0, 0, 0),
            ("0x7f0000000050", "EXIT", 5, 5, 0)]
    rc, out, err = run(page(os.path.join(tmp, "loop.csv"), loop, executed=[1, 5, 5, 5, 1, 1]), "1")
    check(rc == 0 and "at the 2 DEPBARs and the instruction after each (the wait for async "
          "copies): 15 samples, 57.7% of all (stall_long_sb 14, stall_wait 1)" in out,
          f"the samples at each DEPBAR and after it, with their reasons ({out.strip()[-160:]}, "
          f"{err.strip()})")
    check("the count carrying the most executions: 5 (3 instructions); "
          "all executed / it: 3.6 a trip" in out, "the loop's count and the instructions a trip")
    # A tie, 6 x 2 = 12 against 4 x 3 = 12: the larger count, 6; 25 in all,
    # 4.2 a trip; a DEPBAR on the last row counts its own samples.
    tie = loop[:5] + [("0x7f0000000050", "DEPBAR.LE SB0, 0x0", 3, 3, 0)]
    rc, out, err = run(page(os.path.join(tmp, "tie.csv"), tie, executed=[6, 6, 4, 4, 4, 1]), "1")
    check(rc == 0 and "the count carrying the most executions: 6 (2 instructions); "
          "all executed / it: 4.2 a trip" in out, f"a tie goes to the larger count ({err.strip()})")
    check("at the 3 DEPBARs and the instruction after each (the wait for async copies): 13 "
          "samples" in out, "a DEPBAR on the last row")

    rc, _, err = run(page(os.path.join(tmp, "plain.csv"), header=False))
    check(rc == 1 and "plain.csv" in err and "Address" in err, f"no header is refused ({err.strip()})")
    rc, _, err = run(page(os.path.join(tmp, "none.csv"), [(a, s, 0, 0, 0) for a, s, *_ in LINES]))
    check(rc == 1 and "no stall samples" in err, f"no samples is refused ({err.strip()})")
    rc, _, err = run(p, "0")
    check(rc == 2 and "'0'" in err, f"N 0 is refused ({err.strip()})")
    check_refuses_files(run, tmp, "csv")
finish()
