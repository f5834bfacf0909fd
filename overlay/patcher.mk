# Make targets for the patcher (included from the top Makefile; alone: make -f overlay/patcher.mk <target>).
PY ?= .venv/bin/python

.PHONY: test-patcher patch-status
test-patcher: ## run the patcher's tests (real SGLang 0.5.19 files; under a minute)
	$(PY) -m pytest tests/patcher -q

patch-status: ## show whether the venv's SGLang is patched (replayssm-overlay status)
	PYTHONPATH=overlay $(PY) -m replayssm_overlay status
