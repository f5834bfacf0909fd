#!/usr/bin/env bash
# Pack a Triton release small enough to carry to a GPU machine at once (< 55 MB), so the kernels can be
# checked there under the Triton the released SGLang image ships (3.7.1 for v0.5.19), not only under the
# GPU machine's own. The device scripts (gpu_commit_run.sh, gpu_memcheck_run.sh, gpu_integration.sh) take
# its output in TRITON_CARRY.
#
#   bash benchmarks/triton_carry.sh 3.7.1 .carry        # writes .carry/triton-3.7.1.tar.xz (~50 MB)
#
# It downloads the cp312 manylinux wheel from PyPI, drops what compiling and launching kernels does not
# need (CUPTI, the Blackwell ptxas, the profiler library, instrumentation test libraries), strips
# libtriton.so and packs the `triton` package with xz (3-5 minutes on 2 cores). The device scripts unpack
# it into /tmp/triton and put it first on PYTHONPATH with TRITON_BACKENDS_IN_TREE=1 and its own ptxas
# (TRITON_PTXAS_PATH), beside the machine's torch. Keep the output folder out of git.
set -euo pipefail
version=${1:?usage: triton_carry.sh VERSION OUTDIR}
out=${2:?usage: triton_carry.sh VERSION OUTDIR}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  "triton==$version" -d "$work/whl"
(cd "$work" && python3 -m zipfile -e whl/triton-*.whl x >/dev/null)
t=$work/x/triton
rm -rf "$t/backends/nvidia/lib/cupti" "$t/backends/nvidia/bin/ptxas-blackwell" "$t/_C/libproton.so"
rm -f "$t"/instrumentation/*.so
strip --strip-unneeded "$t/_C/libtriton.so"
chmod +x "$t"/backends/nvidia/bin/* 2>/dev/null || true
tar -C "$work/x" -cf - triton "triton-$version.dist-info" | xz -T0 -9 > "$out/triton-$version.tar.xz"
ls -l "$out/triton-$version.tar.xz"
