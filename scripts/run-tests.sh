#!/usr/bin/env bash
# Runs the test suite in .venv (PY= another Python), all of it or what the arguments select (`make test-fast`).
# pytest's exit 5 ("no tests collected") is a failure here: a green run must have run tests.
set -uo pipefail
cd "$(dirname "$0")/.."
"${PY:-.venv/bin/python}" -m pytest "$@"
rc=$?
if [ $rc -eq 5 ]; then echo "run-tests: pytest collected no tests; that is a failure" >&2; exit 1; fi
exit $rc
