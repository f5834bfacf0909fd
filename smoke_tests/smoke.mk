# Smoke suite targets (included from the top-level Makefile; alone: make -f smoke_tests/smoke.mk smoke ...).
#   make smoke TARGET=http://node:30000 [REFERENCE=URL | GOLDEN=FILE] [OUT=dir] [SMOKE_ARGS="--classes code"]
#   make smoke-record TARGET=http://reference:30000 GOLDEN=golden.json
# make itself exits 2 on any failure; the CLI's own code (0 pass, 1 gate failed, 2 error) is in
# $(OUT)/report.json as exit_code (OUT defaults to smoke-report; this file sets no global OUT).
SMOKE_PY ?= $(if $(wildcard .venv/bin/python),.venv/bin/python,python3)
SMOKE_RUN = PYTHONPATH=smoke_tests:overlay$${PYTHONPATH:+:$$PYTHONPATH} $(SMOKE_PY) -m replayssm_smoke.cli
SMOKE_USAGE = usage: make smoke TARGET=http://HOST:PORT [REFERENCE=URL | GOLDEN=FILE] [OUT=dir] [SMOKE_ARGS=...]

.PHONY: smoke smoke-record
smoke: ## check acceptance and exactness of a live server: TARGET=URL [REFERENCE=URL|GOLDEN=FILE] [OUT=dir]
	@test -n "$(TARGET)" || { echo "$(SMOKE_USAGE)" >&2; exit 2; }
	$(SMOKE_RUN) --target $(TARGET) $(if $(REFERENCE),--reference $(REFERENCE)) \
		$(if $(GOLDEN),--golden $(GOLDEN)) --out $(or $(OUT),smoke-report) $(SMOKE_ARGS)

smoke-record: ## record greedy outputs of a (non-speculative) server: TARGET=URL GOLDEN=FILE
	@test -n "$(TARGET)" -a -n "$(GOLDEN)" || { echo "usage: make smoke-record TARGET=URL GOLDEN=FILE" >&2; exit 2; }
	$(SMOKE_RUN) --target $(TARGET) --record $(GOLDEN) $(SMOKE_ARGS)
