#!/usr/bin/env bash
# Every GPU check in one device call: every GPU test (`pytest -m gpu`) under the Triton the v0.5.19
# image ships (3.7.1, carried: benchmarks/triton_carry.sh) and under the GPU machine's own, then the
# node's self-check before serving (gpu_selfcheck.py), then the eager/graph commit benchmark
# (gpu_commit_run.sh: full under 3.7.1, --quick under the machine's).
# Run from the repository root with SGLang 0.5.19's kernel files (never committed) in RSO_SGLANG_KERNELS,
# the Triton tarball in TRITON_CARRY, and $OUT set:
#
#   RSO_SGLANG_KERNELS=$PWD/.sglang-kernels TRITON_CARRY=.carry/triton-3.7.1.tar.xz \
#     bash benchmarks/gpu_integration.sh
#
# Leaves pytest_<triton>.txt, selfcheck.log and selfcheck/ beside gpu_commit_run.sh's files in $OUT; exit 1 if anything failed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:?set OUT to the results folder}
: "${RSO_SGLANG_KERNELS:?set RSO_SGLANG_KERNELS to the folder of SGLang 0.5.19 kernel files}"
RSO_SGLANG_KERNELS=$(realpath "$RSO_SGLANG_KERNELS")
export PYTHONUNBUFFERED=1 RSO_SGLANG_KERNELS
cd "$root" || exit 2
tests=${GPU_TESTS:-tests/kernels/test_gdn_fold.py tests/kernels/test_cuda_fold.py tests/kernels/test_selfcheck.py
  tests/kernels/test_sglang_warmup_gpu.py}
carry=$(realpath "${TRITON_CARRY:?set TRITON_CARRY}")
mkdir -p /tmp/triton && tar xJf "$carry" -C /tmp/triton
status=0
gpu_tests() {  # $1: label, then env assignments
  local label=$1
  shift
  echo "== pytest -m gpu ($label)"
  env "$@" python3 -m pytest -m gpu -q -p no:cacheprovider $tests >"$out/pytest_$label.txt" 2>&1 || status=1
  tail -3 "$out/pytest_$label.txt"
}
gpu_tests triton-3.7.1 PYTHONPATH="/tmp/triton" TRITON_BACKENDS_IN_TREE=1 \
  TRITON_PTXAS_PATH=/tmp/triton/triton/backends/nvidia/bin/ptxas
gpu_tests machine
echo "== self-check before serving (benchmarks/gpu_selfcheck.py, Triton 3.7.1, the CUDA kernel built here)"
t371=(PYTHONPATH="/tmp/triton:$root/overlay:$root" TRITON_BACKENDS_IN_TREE=1
      TRITON_PTXAS_PATH=/tmp/triton/triton/backends/nvidia/bin/ptxas)
env "${t371[@]}" python3 -m replayssm_overlay kernels build --out /tmp/rso-selfcheck-kernels \
  >"$out/selfcheck_build.log" 2>&1 || status=1
env "${t371[@]}" python3 benchmarks/gpu_selfcheck.py --artifacts /tmp/rso-selfcheck-kernels \
  --out "$out/selfcheck" >"$out/selfcheck.log" 2>&1 || status=1
tail -8 "$out/selfcheck.log"
[ -n "${SKIP_COMMIT_BENCH:-}" ] && exit $status
# gpu_commit_run.sh runs from a folder holding overlay/, benchmarks/ and sglang-kernels/: lay one out
bench=$(mktemp -d) && cp -r overlay benchmarks "$bench/" && ln -s "$RSO_SGLANG_KERNELS" "$bench/sglang-kernels"
GPU_COMMIT_ARGS_MACHINE=--quick TRITON_CARRY="$carry" bash "$bench/benchmarks/gpu_commit_run.sh" || status=1
exit $status
