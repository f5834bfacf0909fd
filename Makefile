# One entry point for people and CI. `make demo` sets up and runs the main job on its embedded default;
# `make test` runs every test (CI runs exactly that through .ci/run). `make help` lists the rest.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PY := .venv/bin/python

include overlay/patcher.mk
include smoke_tests/smoke.mk
include overlay/aot.mk
include harness/harness.mk
include docker/docker.mk
include deploy/deploy.mk

.PHONY: help setup demo test
help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | sort | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

setup: ## install system packages (as root) and build .venv with the real SGLang 0.5.19 on CPU
	bash scripts/setup-system.sh
	bash scripts/setup-venv.sh

demo: setup ## main job: stock 0.5.19 refusing, the overlay accepting, a bitwise-exact commit on CPU (SGLANG_RELEASE=0.5.2X: that release)
	$(PY) -m harness.demo $(if $(SGLANG_RELEASE),--release $(SGLANG_RELEASE))

test: setup ## run all tests (GPU tests are skipped without a GPU)
	bash scripts/run-tests.sh
