#!/usr/bin/env bash
# One device call for either card (ninety-first session): on an H200, main's
# tables at its own copy rate (h200-main78.steps with OLD=s447, main
# a522182), since no H200 has run the newest code; on an H100, gc91.steps.
#   scripts/steps/any91.sh $OUT
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  OLD=s447 DEADLINE=$(( $(date +%s) + 540 )) exec scripts/gpu-steps --tar scripts/steps/h200-main78.steps "$1"
fi
DEADLINE=$(( $(date +%s) + 240 )) exec scripts/gpu-steps --tar scripts/steps/gc91.steps "$1"
