# One entry point for people and CI. `make demo` sets up and runs the main job on its embedded default;
# `make test` runs every test (CI runs exactly that through .ci/run). `make help` lists the rest.
# Targets that run .venv's Python either depend on `setup` or stop with "run make setup first"
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

.PHONY: help setup demo demo-json test status
help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | sort -t: -k1,1 | awk -F':.*## ' \
	  '{ name[NR] = $$1; text[NR] = $$2; if (length($$1) > width) width = length($$1) } \
	   END { for (i = 1; i <= NR; i++) printf "  make %-" width "s  %s\n", name[i], text[i] }'

setup: ## install system packages (as root) and build .venv with the real SGLang 0.5.19 on CPU
	@bash scripts/setup-system.sh
	@bash scripts/setup-venv.sh

# the release the demo runs on (both demo targets): SGLANG_RELEASE=0.5.2X, else harness.demo's default (0.5.19)
DEMO_RELEASE = $(if $(SGLANG_RELEASE),--release $(SGLANG_RELEASE))

demo: setup ## main job: stock 0.5.19 refusing, the overlay accepting, a bitwise-exact commit on CPU (SGLANG_RELEASE=0.5.2X: that release)
	$(PY) -m harness.demo $(DEMO_RELEASE)

demo-json: setup ## main job with the full result as JSON on stdout (only JSON there; progress on stderr; SGLANG_RELEASE= as demo)
	@$(PY) -m harness.demo $(DEMO_RELEASE) --json

test: setup ## run all tests: needs root, ~15-20 min, starts Docker daemons and test hosts (README)
	bash scripts/run-tests.sh

status: ## ambiguous on purpose: says to use patch-status (SGLang's files) or fleet-status (the nodes)
	@echo "make status: which one? make patch-status (is .venv's SGLang patched) or make fleet-status INVENTORY=... (what each node runs)" >&2
	@exit 2
