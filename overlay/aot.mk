# Ahead-of-time CUDA commit kernel (build: overlay/replayssm_overlay/aot/, node side: kernels/{loader,cli}.py);
# see overlay/replayssm_overlay/aot/README.md.
# Included from the top Makefile; alone: make -f overlay/aot.mk TARGET (from the repo root).
PY ?= .venv/bin/python
AOT_OUT ?= build/kernels-sm90

.PHONY: aot-test aot-build
aot-test: ## CPU tests of the ahead-of-time build, loader and kernels CLI (~35 s)
	@bash scripts/need-venv.sh $(PY) $@
	$(PY) -m pytest tests/aot -q

aot-build: ## build the CUDA commit kernel for sm_90 with this venv's NVRTC into AOT_OUT
	@bash scripts/need-venv.sh $(PY) $@
	mkdir -p $(dir $(AOT_OUT))
	PYTHONPATH=overlay $(PY) -m replayssm_overlay kernels build --out $(AOT_OUT)
