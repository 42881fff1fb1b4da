#!/usr/bin/env python3
"""Checks scripts/kmeans-cone-count, which the cone counts of the thirtieth
session in docs/performance-notes.md come from: its cone bound against
values derived by hand and against every member's cosine on random cones
(the bound is what the count rests on: a tile it drops must hold no cosine
at the row's second best); a small run's output (a row keeps at least the
tile of its best, and the unions of rows keep at least as much), also of
the decode-time call's first assignment (--decode) and of keys from a dump
(--dump: four groups along orthogonal axes, where each row keeps its own
tile alone); the own pass's bound (--own) against exact distances, and on
uniform keys (--uniform); its banded form's counts against two cases
derived by hand; at another w (--own-w: sound at 1/32 with a narrower
window, none clear at 2); bad arguments refused."""
import importlib.machinery
import importlib.util
import math
import os
import re
import tempfile

import h5py
import numpy as np

from script_check import check, finish, root, run_script

script = os.path.join(root, "scripts", "kmeans-cone-count")
loader = importlib.machinery.SourceFileLoader("kmeans_cone_count", script)
spec = importlib.util.spec_from_loader(loader.name, loader)
cc = importlib.util.module_from_spec(spec)
loader.exec_module(cc)

c30, c45, c60 = math.cos(math.pi / 6), math.cos(math.pi / 4), math.cos(math.pi / 3)
# (angle to the axis, half-angle) -> cos(max(0, angle - half-angle))
for cf, cth, want, what in [
        (1.0, c30, 1.0, "on the axis"),
        (c45, c45, 1.0, "on the cone's edge"),
        (0.0, c30, c60, "90 degrees out, half-angle 30: cos 60"),
        (-1.0, c30, -c30, "180 degrees out, half-angle 30: cos 150"),
        (c30, -1.0, 1.0, "a half-angle of 180 holds everything")]:
    got = float(cc.cone_bound(np.float64(cf), np.float64(cth)))
    check(abs(got - want) < 1e-12, f"cone_bound: {what} ({got:.15f}, want {want:.15f})")

rng = np.random.default_rng(7)
worst = math.inf
for _ in range(50):
    C = rng.normal(size=(cc.AN, 16)) + 3 * rng.normal(size=16)
    C /= np.linalg.norm(C, axis=1, keepdims=True)
    U, cth = cc.cones(C)
    F = rng.normal(size=(40, 16))
    F /= np.linalg.norm(F, axis=1, keepdims=True)
    bound = cc.cone_bound(F @ U[0], cth[0])
    worst = min(worst, float((bound - (F @ C.T).max(1)).min()))
check(worst > -1e-12, f"cone_bound at or over every member's cosine (least margin {worst:.3g})")

rc, out, err = run_script(script, "--tokens", "1024", "--iters", "1")
m = re.search(r"1024 tokens, 4 tiles: kept a row mean ([\d.]+) median \d+ p90 \d+ most (\d+)", out)
check(rc == 0 and m is not None, f"a run at 1024 tokens prints its row counts ({out!r} {err!r})")
if m:
    mean, most = float(m.group(1)), int(m.group(2))
    check(1.0 <= mean <= most <= 4, f"a row keeps 1 to 4 tiles ({mean}, most {most})")
    unions = [float(x) for x in re.findall(r"union of .* rows: mean ([\d.]+) most \d+", out)]
    check(len(unions) == 3 and all(mean <= u <= 4 for u in unions),
          f"three unions, each between a row's mean and all tiles ({unions})")

rc, out, err = run_script(script, "--tokens", "1024", "--iters", "1", "--decode")
m = re.search(r"1024 tokens, 4 tiles: kept a row mean ([\d.]+) median \d+ p90 \d+ most (\d+)", out)
unions = [(int(n), float(x)) for n, x in
          re.findall(r"union of (\d+) consecutive rows: mean ([\d.]+) most \d+", out)]
check(rc == 0 and m is not None and [n for n, _ in unions] == [64, 192],
      f"--decode prints its row counts and the unions of 64 and 192 rows ({out!r} {err!r})")
if m and len(unions) == 2:
    mean, most = float(m.group(1)), int(m.group(2))
    check(1.0 <= mean <= most <= 4 and mean <= unions[0][1] <= unions[1][1] <= 4,
          f"--decode: a row 1 to 4 tiles, 192 rows at least what 64 keep ({mean}, {unions})")

# A dump whose 1,024 keys are four groups of 256 along four orthogonal axes
# (plus noise of 1e-3): the 256 centroids start at every fourth key, so each
# tile of 64 lies along one axis and every other tile's cone is about 90
# degrees from a row, whose second best is a near neighbour: each row keeps
# its own tile alone.
with tempfile.TemporaryDirectory() as tmp:
    dump = os.path.join(tmp, "kv.h5")
    g = np.random.default_rng(3)
    keys = np.repeat(np.eye(16)[:4] * 10, 256, axis=0) + 1e-3 * g.normal(size=(1024, 16))
    with h5py.File(dump, "w") as h:
        h["k"] = keys[None, None]
        h["length"] = np.array([[1024]], dtype=np.int32)
    rc, out, err = run_script(script, "--dump", dump, "--iters", "1")
    check(rc == 0 and "1024 tokens, 4 tiles: kept a row mean 1.0 median 1 p90 1 most 1" in out,
          f"--dump: four orthogonal groups, each row keeps its own tile alone ({out!r} {err!r})")
    rc, out, err = run_script(script, "--dump", dump, "--iters", "1", "--tiles", "pca")
    check(rc == 0 and "1024 tokens, 4 tiles: kept a row mean 1.0 median 1 p90 1 most 1" in out,
          f"--tiles pca: the tree's leaves are the four groups ({out!r} {err!r})")
    rc, _, err = run_script(script, "--dump", dump, "--head", "1")
    check(rc == 2 and "--dump" in err and "head 1" in err,
          f"--dump with a head it lacks refused, naming it ({err.strip()!r})")

for n in (64, 65, 700, 1000):
    leaves = cc.pca_order(rng.normal(size=(n, 8)), np.arange(n))
    check(sorted(np.concatenate(leaves).tolist()) == list(range(n))
          and all(len(x) <= cc.AN for x in leaves) and sum(len(x) < cc.AN for x in leaves) <= 1,
          f"pca_order of {n}: a permutation in leaves of 64, at most one short "
          f"({[len(x) for x in leaves]})")

# The own pass's bound (--own) is sound: a centroid it shows clear has no
# other within w by the exact distances, on features with planted near
# pairs (at 0.16, 0.8 and 0.998 of w) and exact duplicates among spread
# ones; spread features alone nearly all come out clear.
F = rng.normal(size=(600, 64))
F /= np.linalg.norm(F, axis=1, keepdims=True)
planted = {0: 0.16 * cc.OWN_W, 1: 0.8 * cc.OWN_W, 2: 0.998 * cc.OWN_W, 3: 0.0}
for i, dist in planted.items():
    step = rng.normal(size=64)
    step -= (step @ F[i]) * F[i]
    F[300 + i] = F[i] + dist * step / np.linalg.norm(step)
    F[300 + i] /= np.linalg.norm(F[300 + i])
clear, window, _, span, _, _ = cc.own_clear(F)
D = np.sqrt(np.maximum(0.0, 2 - 2 * (F @ F.T)))
np.fill_diagonal(D, np.inf)
check(not (clear & (D.min(1) <= cc.OWN_W)).any(),
      f"--own: no centroid within w of another shown clear "
      f"({int((clear & (D.min(1) <= cc.OWN_W)).sum())} of {int((D.min(1) <= cc.OWN_W).sum())})")
check(not clear[[0, 1, 2, 3, 300, 301, 302, 303]].any(),
      "--own: the planted pairs (0.16, 0.8, 0.998 of w apart, equal) are never clear")
check(window.mean() <= span <= 1,
      f"--own: a block's span holds at least a row's window ({span:.3f}, {window.mean():.3f})")
# The banded form by hand: 512 centroids in one band of a0 (all at 0.03),
# their a1 one apart. a0's blocks of 256 each bound all 512 (1,024 pairs);
# a band's blocks of 256 bound their own 256 alone (512 pairs: 0.5, the
# same two blocks), blocks of 128 their own 128 (half the rows: 0.25, four
# blocks, 2.0 in blocks of 256).
bands = cc.band_spans(np.full(512, 0.03), np.arange(512, dtype=float))
check(bands == [(0.5, 1.0), (0.25, 2.0)],
      f"--own: the banded blocks' pairs and count in one band of spread a1 ({bands})")
# Two bands: 512 centroids at a0 = 0 with a1 0 .. 511, 512 at a0 = w
# with a1 256 .. 767. a0's four blocks bound all 1,024 (4,096 pairs). A
# band's block bounds its own 256 and, beside it, those of the other band
# within its a1 range: 0, 256, 256, 0 (1,536 pairs: 0.375); in blocks of
# 128, 128 own each and 128 from beside for four of the eight (768 in
# half-rows: 0.1875).
a0 = np.concatenate([np.zeros(512), np.full(512, cc.OWN_W)])
a1 = np.concatenate([np.arange(512.0), 256 + np.arange(512.0)])
bands = cc.band_spans(a0, a1)
check(bands == [(0.375, 1.0), (0.1875, 2.0)],
      f"--own: two bands beside each other, a block bounding the other's overlap ({bands})")
# The cell forms' exact work by hand. One band of a0 (all at 0.03), a1 one
# apart: blocks of 128 stage their own 128 alone, 4 x 128 x 128 of 512^2
# pairs (0.25), four blocks; each one chunk for four warps, 16 k8 steps a
# warp: 4 x (13 x 64 + 25 x 4) = 3,728. Two cells beside each other in a1
# (a0 = a1 = 0.01, and a1 = 0.01 + w), a2 0 .. 63 in the first and 32 .. 95
# in the second: blocks of 32 stage their own 32 and, beside, 0, 32, 32, 0
# (32 x 192 pairs of 128^2: 0.375), four blocks; chunks 1, 2, 2, 1 for one
# warp, 4 k8 steps a chunk: 6 x (13 x 4 + 25) = 462.
one = np.stack([np.full(512, 0.03), np.arange(512.0)], axis=1)
work = cc.cell_work(one, 1, 128)
check(work == (0.25, 4, 3728), f"--own: one band's cell work by hand ({work})")
two = np.zeros((128, 3))
two[:, 0] = 0.01
two[:64, 1], two[64:, 1] = 0.01, 0.01 + cc.OWN_W
two[:64, 2], two[64:, 2] = np.arange(64.0), 32 + np.arange(64.0)
work = cc.cell_work(two, 2, 32)
check(work == (0.375, 4, 462), f"--own: two cells' work by hand ({work})")
check(clear.mean() > 0.95 and 0 < window.mean() < 1,
      f"--own: spread features nearly all clear ({clear.mean():.3f}), a window a part "
      f"({window.mean():.3f})")
rc, out, err = run_script(script, "--tokens", "1024", "--iters", "1", "--decode", "--own")
m = re.search(r"1024 tokens, 320 rows, 256 start a centroid: the own pass shows (\d+) clear", out)
check(rc == 0 and m is not None and int(m.group(1)) <= 256,
      f"--own --decode: the decode-time call's rows and the clear count ({out!r} {err!r})")

rc, out, err = run_script(script, "--tokens", "1024", "--decode", "--own", "--uniform",
                          "--head-dim", "32")
m = re.search(r"1024 tokens, 320 rows, 256 start a centroid: the own pass shows (\d+) clear "
              r"\([\d.]+%\); a window holds ([\d.]+)% of the centroids, 3 x 3 cells ([\d.]+)%",
              out)
forms = re.findall(r"cells of the first (\d) coordinates, then the next sorted, blocks of "
                   r"(\d+): ([\d.]+)% of k\^2 pairs bounded, (\d+) blocks, ([\d.]+)x the "
                   r"first form's cost", out)
check(rc == 0 and m is not None and int(m.group(1)) == 256
      and 0 < float(m.group(3)) < 100 and 0 < float(m.group(2)) < 100
      and [(f[0], f[1]) for f in forms] == [("1", "128"), ("2", "128"), ("2", "64"), ("2", "32"),
                                            ("3", "32")]
      and all(0 < float(f[2]) <= 100 and float(f[4]) > 0 for f in forms),
      f"--uniform --decode: k + 64 uniform keys at head_dim 32, every centroid clear, the "
      f"window's and cells' shares and the cell forms' work printed ({out!r} {err!r})")

# A narrower w (--own-w): the bound stays sound against the exact distances
# at 1/32 on the same features (the planted pairs at 0.16 w and equal are
# within it, so never clear), and a row's window shrinks.
saved = cc.OWN_W
cc.OWN_W = 1.0 / 32
clear32, window32, _, _, _, _ = cc.own_clear(F)
cc.OWN_W = saved
check(not (clear32 & (D.min(1) <= 1.0 / 32)).any() and not clear32[[0, 3, 300, 303]].any(),
      f"--own-w 1/32: no centroid within 1/32 of another shown clear "
      f"({int((clear32 & (D.min(1) <= 1.0 / 32)).sum())})")
check(window32.mean() < window.mean(),
      f"--own-w 1/32: a row's window narrower ({window32.mean():.3f}, {window.mean():.3f})")
rc, out, err = run_script(script, "--tokens", "1024", "--decode", "--own", "--uniform",
                          "--head-dim", "32", "--own-w", "2")
m = re.search(r"the own pass shows (\d+) clear \([\d.]+%\); a window holds ([\d.]+)% of the "
              r"centroids", out)
check(rc == 0 and m is not None and int(m.group(1)) == 0 and abs(float(m.group(2)) - 99.6) < 0.05,
      f"--own-w 2: every other centroid within reach, so none clear and a window of 255 of 256 "
      f"({out!r} {err!r})")
rc, _, err = run_script(script, "--own", "--own-w", "0")
check(rc == 2 and "--own-w 0" in err, f"--own-w 0 refused, naming it ({err.strip()!r})")

rc, _, err = run_script(script, "--tokens", "100")
check(rc == 2 and "--tokens 100" in err, f"too few tokens refused, naming them ({err.strip()!r})")

finish()
