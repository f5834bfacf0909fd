#!/usr/bin/env bash
# The device call that checks the shipped CUDA commit kernel for out-of-bounds accesses and exactness across
# every window it takes (benchmarks/gpu_sweep.py), then the kernel's GPU tests, under compute-sanitizer
# memcheck with the GPU machine's Triton; then the sweep again, without the sanitizer, under the Triton the
# v0.5.19 image ships (3.7.1, carried: benchmarks/triton_carry.sh). From the repository root:
#
#   RSO_SGLANG_KERNELS=$PWD/.sglang-kernels TRITON_CARRY=.carry/triton-3.7.1.tar.xz \
#     OUT=/tmp/out bash benchmarks/gpu_memcheck_run.sh
#
# Only the overlay's kernels are instrumented (--kernel-name kns=gdn_fold): SGLang's Triton kernels, which
# compute the references, run at full speed. torch's caching allocator is off under the sanitizer, so each
# tensor is an allocation of its own and a read past one is reported. Leaves memcheck_sweep.txt,
# memcheck_tests.txt, the sweep's JSON and logs in $OUT; exit 1 if any step failed (the sanitizer's error
# exit is 3).
set -uo pipefail
out=${OUT:?set OUT to the results folder}
: "${RSO_SGLANG_KERNELS:?set RSO_SGLANG_KERNELS to the folder of SGLang 0.5.19 kernel files}"
cd "$(dirname "$0")/.." || exit 2
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/overlay:$PWD" RSO_SGLANG_KERNELS
status=0
step() {  # $1: label; the rest: the command, its output kept in $out/$1.txt
  local label=$1 rc
  shift
  echo "== $label: $*"
  "$@" >"$out/$label.txt" 2>&1
  rc=$?
  tail -n 45 "$out/$label.txt"
  echo "== $label: rc $rc"
  [ "$rc" -eq 0 ] || status=1
}
memcheck=(compute-sanitizer --tool memcheck --kernel-name kns=gdn_fold --error-exitcode 3 --print-limit 20)
compute-sanitizer --version | tail -n 1
step memcheck_sweep env PYTORCH_NO_CUDA_MEMORY_CACHING=1 "${memcheck[@]}" \
  python3 benchmarks/gpu_sweep.py --out "$out/machine"
step memcheck_tests env PYTORCH_NO_CUDA_MEMORY_CACHING=1 "${memcheck[@]}" \
  python3 -m pytest -p no:cacheprovider -q -m gpu tests/kernels/test_cuda_fold.py
mkdir -p /tmp/triton && tar xJf "${TRITON_CARRY:?set TRITON_CARRY to the Triton 3.7.1 tarball}" -C /tmp/triton
step sweep_triton371 env PYTHONPATH="/tmp/triton:$PYTHONPATH" TRITON_BACKENDS_IN_TREE=1 \
  TRITON_PTXAS_PATH=/tmp/triton/triton/backends/nvidia/bin/ptxas python3 benchmarks/gpu_sweep.py --out "$out/triton371"
exit $status
