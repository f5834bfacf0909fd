#!/usr/bin/env bash
# Runs the whole test suite in .venv. pytest's exit 5 ("no tests collected") is a failure here: a green
# run must have run tests.
set -uo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest "$@"
rc=$?
if [ $rc -eq 5 ]; then echo "run-tests: pytest collected no tests; that is a failure" >&2; exit 1; fi
exit $rc
