#!/usr/bin/env bash
# The device call for the commit benchmark (benchmarks/gpu_commit.py), under the Triton the v0.5.19 image
# ships (3.7.1, packed as a tarball by benchmarks/triton_carry.sh) and then the GPU machine's own.
# Run from a folder holding overlay/, benchmarks/ and sglang-kernels/ (SGLang 0.5.19's three kernel
# files, never committed), with the tarball's path in TRITON_CARRY and $OUT set:
#
#   TRITON_CARRY=../../.carry/triton-3.7.1.tar.xz bash benchmarks/gpu_commit_run.sh
#
# For each Triton it builds the CUDA commit kernel for this node into /tmp (`replayssm-overlay kernels
# build`, as the image does), then runs gpu_commit.py with it. Leaves gpu.txt, build.log,
# commit_<triton>.json and log_<triton>.txt in $OUT; GPU_COMMIT_ARGS adds arguments to both runs (e.g. a
# --cuda baseline), GPU_COMMIT_ARGS_MACHINE to the second (machine Triton) run only, e.g. --quick.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:?set OUT to the results folder}
export PYTHONUNBUFFERED=1 RSO_SGLANG_KERNELS="$here/sglang-kernels" PYTHONPATH="$here/overlay:$here"
cd "$here" || exit 2
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu \
  --format=csv >"$out/gpu.txt" 2>&1
status=0
run() {  # $1: label, then env assignments for python3
  local label=$1
  shift
  echo "== build ($label)" | tee -a "$out/build.log"
  env "$@" python3 -m replayssm_overlay kernels build --out "/tmp/kernels-$label" >>"$out/build.log" 2>&1
  echo "build rc $?" | tee -a "$out/build.log"
  env "$@" python3 benchmarks/gpu_commit.py --out "$out" --artifacts "/tmp/kernels-$label" ${EXTRA:-} || status=1
}
mkdir -p /tmp/triton && tar xJf "${TRITON_CARRY:?set TRITON_CARRY to the Triton 3.7.1 tarball}" -C /tmp/triton
EXTRA="${GPU_COMMIT_ARGS:-}" run triton-3.7.1 PYTHONPATH="/tmp/triton:$PYTHONPATH" TRITON_BACKENDS_IN_TREE=1 \
  TRITON_PTXAS_PATH=/tmp/triton/triton/backends/nvidia/bin/ptxas
EXTRA="${GPU_COMMIT_ARGS:-} ${GPU_COMMIT_ARGS_MACHINE:-}" run machine
exit $status
