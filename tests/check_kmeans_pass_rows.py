#!/usr/bin/env python3
"""Checks that scripts/kmeans-pass-rows.patch, the diagnostic build behind
run ZZ67's table of K-Means's estimate passes (docs/performance-notes.md,
"Sixty-third session"), still applies to kernels/cuda_kmeans.cu."""
import os
import subprocess

from script_check import check, finish, root

patch = os.path.join("scripts", "kmeans-pass-rows.patch")
p = subprocess.run(["git", "apply", "--check", patch], cwd=root, capture_output=True, text=True)
check(p.returncode == 0, f"the pass-rows patch applies to the tree ({p.stderr.strip()})")
finish()
