# Ahead-of-time fold kernels (build: overlay/replayssm_overlay/aot/, node side: kernels/{loader,cli}.py);
# see overlay/replayssm_overlay/aot/README.md.
# Included from the top Makefile; alone: make -f overlay/aot.mk TARGET (from the repo root).
PY ?= .venv/bin/python
AOT_PY312 ?= /root/.pyenv/versions/3.12.1/bin/python3.12
AOT_VENV312 ?= .venv-aot312
AOT_OUT ?= build/kernels-sm90

.PHONY: aot-test aot-build aot-proof-artifacts
aot-test: ## CPU tests of the ahead-of-time build, loader and kernels CLI (~30 s)
	@bash scripts/need-venv.sh $(PY) $@
	$(PY) -m pytest tests/aot -q

aot-build: ## build every preset's fold kernels for sm_90 with this venv's Triton into AOT_OUT
	@bash scripts/need-venv.sh $(PY) $@
	mkdir -p $(dir $(AOT_OUT))
	PYTHONPATH=overlay $(PY) -m replayssm_overlay kernels build --out $(AOT_OUT)

aot-proof-artifacts: ## artifacts for the H200 proof: Triton 3.6.0 + Python 3.12 (the device's), into build/aot-proof-*
	test -x $(AOT_VENV312)/bin/python || ($(AOT_PY312) -m venv $(AOT_VENV312) && $(AOT_VENV312)/bin/pip install -q triton==3.6.0)
	mkdir -p build
	PYTHONPATH=overlay:. $(AOT_VENV312)/bin/python -m replayssm_overlay kernels build \
	  --out build/aot-proof-sglang --provider benchmarks.aot_sglang_fold:aot_specializations \
	  --hv 32 --h 16 --k 128 --v 128 --tp 1 --window 16
	PYTHONPATH=overlay:. $(AOT_VENV312)/bin/python -m replayssm_overlay kernels build --out build/aot-proof-overlay
