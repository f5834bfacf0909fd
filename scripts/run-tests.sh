#!/usr/bin/env bash
# Runs the test suite in .venv (PY= another Python): with no arguments every test, in three streams side by
# side (scripts/test_streams.py says why and how they are split); with arguments one pytest over what they
# select (`make test-fast`). pytest's exit 5 ("no tests collected") is a failure here: a green run must have
# run tests.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
if [ $# -eq 0 ]; then
  PY="$PY" exec "$PY" scripts/test_streams.py
fi
"$PY" -m pytest "$@"
rc=$?
if [ $rc -eq 5 ]; then echo "run-tests: pytest collected no tests; that is a failure" >&2; exit 1; fi
exit $rc
