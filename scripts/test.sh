#!/usr/bin/env bash
# Create .venv if needed, install, and run the whole test suite (exit non-zero on any failure or on no tests).
source "$(dirname "$0")/_venv.sh"
# The end-to-end tests need a headless browser and MindInsight 2.3.1 (its own venv): set them up first.
"$ROOT/scripts/install_chromium.sh"
"$ROOT/scripts/mindinsight.sh" install
set +e
python -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "[msdoctor] pytest collected no tests: failing the run" >&2
  exit 1
fi
exit "$rc"
