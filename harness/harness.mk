# Make targets for the runtime hooks, the CPU harness and the main job's variants (included from the top
# Makefile; alone: make -f harness/harness.mk <target>). `make demo` itself lives in the top Makefile.
PY ?= .venv/bin/python

.PHONY: demo-json test-hooks
demo-json: ## main job with the full result as JSON on stdout (progress on stderr)
	$(PY) -m harness.demo --json

test-hooks: ## hook, configurator-rule and verify->commit cycle tests on the real SGLang 0.5.19 (1-2 min)
	$(PY) -m pytest tests/hooks tests/cycle -q
