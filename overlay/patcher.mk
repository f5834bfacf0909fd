# Make targets for the patcher (included from the top Makefile; alone: make -f overlay/patcher.mk <target>).
PY ?= .venv/bin/python

.PHONY: test-patcher patch-status
test-patcher: ## run the patcher's tests (real SGLang 0.5.19 files): ~45 s CPU, 1-2 min wall on 2 shared cores
	@bash scripts/need-venv.sh $(PY) $@
	$(PY) -m pytest tests/patcher -q

patch-status: ## is .venv's SGLang patched? file by file (replayssm-overlay status; the nodes: fleet-status)
	@bash scripts/need-venv.sh $(PY) $@
	@PYTHONPATH=overlay $(PY) -m replayssm_overlay status
