# Make targets for the runtime hooks and the CPU harness (included from the top Makefile; alone:
# make -f harness/harness.mk <target>). `make demo` and `make demo-json` live in the top Makefile,
# since they depend on `setup`.
PY ?= .venv/bin/python

.PHONY: test-hooks
test-hooks: ## hook, configurator-rule and verify->commit cycle tests on the real SGLang 0.5.19 (1-2 min)
	@bash scripts/need-venv.sh $(PY) $@
	$(PY) -m pytest tests/hooks tests/cycle -q
