#!/usr/bin/env bash
# Create .venv if needed, install, and run the whole test suite (exit non-zero on any failure or on no tests).
source "$(dirname "$0")/_venv.sh"
set +e
python -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "[msdoctor] pytest collected no tests: failing the run" >&2
  exit 1
fi
exit "$rc"
