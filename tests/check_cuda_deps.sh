#!/bin/sh
# check_cuda_deps.sh BUILD: ninja knows the headers of a CUDA object, so a
# changed header rebuilds it (scripts/nvcc-deps; Meson before 1.4 passes nvcc
# no depfile flags). cuda_csm.cu includes cuda_policy.h, whose struct
# layout its object must agree on with the others'.
b=$1
obj=libckv_core.a.p/kernels_cuda_csm.cu.o
deps=$(ninja -C "$b" -t deps "$obj") || { echo "FAIL: ninja -t deps $obj"; exit 1; }
if printf '%s\n' "$deps" | grep -q 'kernels/cuda_policy\.h$'; then
  echo "ok   $obj depends on kernels/cuda_policy.h"
  exit 0
fi
echo "FAIL: ninja records no kernels/cuda_policy.h for $obj (configure with scripts/configure):"
printf '%s\n' "$deps" | head -n 3
exit 1
