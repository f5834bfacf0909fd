# One entry point for people and CI. `make demo` sets up and runs the main job on its embedded default;
# `make test` runs every test (CI runs exactly that through .ci/run). `make help` lists the rest.
# Targets that run .venv's Python either depend on `setup` (`setup-demo`: no Docker) or stop with "run make setup first"
# (scripts/need-venv.sh); recipes that print a result (demo-json) echo nothing else on stdout.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PY := .venv/bin/python

include overlay/patcher.mk
include smoke_tests/smoke.mk
include overlay/aot.mk
include harness/harness.mk
include docker/docker.mk
include deploy/deploy.mk

.PHONY: help setup setup-demo demo demo-json test test-fast lint status
help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | sort -t: -k1,1 | awk -F':.*## ' \
	  '{ name[NR] = $$1; text[NR] = $$2; if (length($$1) > width) width = length($$1) } \
	   END { for (i = 1; i <= NR; i++) printf "  make %-" width "s  %s\n", name[i], text[i] }'

setup: ## what make test needs: Debian packages (as root) and .venv with the real SGLang 0.5.19 on CPU
	@bash scripts/setup-system.sh test
	@bash scripts/setup-venv.sh

setup-demo: ## what make demo needs: Python's venv package (as root; no Docker) and .venv
	@bash scripts/setup-system.sh demo
	@bash scripts/setup-venv.sh

# the release both demo targets run on: SGLANG_RELEASE=0.5.2X (default: docker/base.lock's, via docker/docker.mk)
DEMO_RELEASE = $(if $(SGLANG_RELEASE),--release $(SGLANG_RELEASE))

demo: setup-demo ## main job: stock refusing, the overlay accepting, a bitwise commit on CPU (SGLANG_RELEASE=0.5.2X)
	$(PY) -m harness.demo $(DEMO_RELEASE)

demo-json: setup-demo ## main job as JSON, only JSON on stdout (progress on stderr; SGLANG_RELEASE= as demo)
	@$(PY) -m harness.demo $(DEMO_RELEASE) --json

test: setup ## run all tests: root, four streams, ~32-36 min on 2 cores (+16 first setup), Docker daemons, test hosts (README)
	bash scripts/run-tests.sh

# the unit tier (tests/conftest.py's UNIT_TIER, by folder): no root, no Docker, no network namespaces, no copies
# of SGLang probed in subprocesses (`probe`); in random order (pytest-randomly prints its seed; adding
# `--randomly-seed=N` to the same command reruns that order)
test-fast: ## the unit tier in random order, no root, Docker or network: ~2 min CPU, 3-9 min wall on 2 shared cores
	@bash scripts/need-venv.sh $(PY) $@
	@$(PY) -c "import pytest_randomly" 2>/dev/null || { echo "make test-fast: pytest-randomly is missing;" \
	  "run make setup (scripts/setup-venv.sh pins it)" >&2; exit 2; }
	PY=$(PY) bash scripts/run-tests.sh -q -p randomly --tier unit -m "not slow and not gpu and not probe"

lint: ## ruff check and ruff format --check over every Python file (pyproject.toml's [tool.ruff]; seconds)
	@bash scripts/need-venv.sh $(PY) $@
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

status: ## ambiguous on purpose: says to use patch-status (SGLang's files) or fleet-status (the nodes)
	@echo "make status: which one? make patch-status (is .venv's SGLang patched) or make fleet-status INVENTORY=... (what each node runs)" >&2
	@exit 2
