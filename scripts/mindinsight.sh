#!/usr/bin/env bash
# Start or stop a MindInsight 2.3.1 server (its own virtualenv, loopback only) over a summary base dir.
#   scripts/mindinsight.sh start SUMMARY_BASE_DIR [PORT]   -> prints the URL
#   scripts/mindinsight.sh stop  SUMMARY_BASE_DIR [PORT]
#   scripts/mindinsight.sh install                          -> only create .venv-mindinsight
# MindInsight 2.3.1 cannot share an environment with MindSpore 2.10 (protobuf <=3.20.1 vs >=7.34),
# hence .venv-mindinsight beside .venv. Override its place with MSDOCTOR_MINDINSIGHT_VENV.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MSDOCTOR_MINDINSIGHT_VENV:-$ROOT/.venv-mindinsight}"
PINS=(mindinsight==2.3.1 protobuf==3.20.1 "numpy<2" "pandas<2.2" "scikit-learn<1.6" "scipy<1.14")

usage() {
  echo "usage: $0 start|stop SUMMARY_BASE_DIR [PORT] | $0 install" >&2
  exit 2
}

ensure_venv() {
  local stamp="$VENV/.msdoctor-installed"
  [ -f "$stamp" ] && return 0
  local py="${PYTHON:-python3.11}"
  command -v "$py" >/dev/null 2>&1 || py=python3
  echo "[mindinsight] creating $VENV (first time: a few minutes)" >&2
  "$py" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet "${PINS[@]}"
  touch "$stamp"
}

cmd="${1:-}"
case "$cmd" in
  install)
    ensure_venv
    ;;
  start|stop)
    [ $# -ge 2 ] || usage
    base="$(mkdir -p "$2" && cd "$2" && pwd)"
    port="${3:-8080}"
    ensure_venv
    if [ "$cmd" = start ]; then
      # MindInsight binds settings.HOST; pin it to loopback whatever the caller's environment says.
      mkdir -p "$VENV/workspace"
      PATH="$VENV/bin:$PATH" MINDINSIGHT_HOST=127.0.0.1 "$VENV/bin/mindinsight" start --summary-base-dir "$base" --port "$port" \
        --workspace "$VENV/workspace" >&2
      echo "http://127.0.0.1:$port"
    else
      PATH="$VENV/bin:$PATH" "$VENV/bin/mindinsight" stop --port "$port" >&2
    fi
    ;;
  *)
    usage
    ;;
esac
