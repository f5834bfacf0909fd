#!/usr/bin/env bash
# `make` targets that run .venv's Python (and do not depend on `make setup`) call this first, so a fresh
# clone gets one line that says what to do instead of `.venv/bin/python: No such file or directory`.
# usage: need-venv.sh PYTHON TARGET     exit 0 if PYTHON runs, else 2 with the message on stderr
set -uo pipefail
py=$1 target=$2
if ! command -v "$py" >/dev/null 2>&1; then
  echo "make $target: $py not found; run make setup first (it builds .venv), or pass PY=/path/to/python" >&2
  exit 2
fi
