#!/usr/bin/env bash
# Start or stop a TensorBoard server (the project's .venv, loopback only) over a run base dir.
#   scripts/tensorboard.sh start RUN_BASE_DIR [PORT]   -> waits until it answers, prints the URL
#   scripts/tensorboard.sh stop  RUN_BASE_DIR [PORT]
# Each run is a subdirectory of RUN_BASE_DIR (a Doctor's summary_dir); PORT defaults to 6006.
# The server's pid and log go to RUN_BASE_DIR/.tensorboard-PORT.pid and .log (TensorBoard reads only
# *tfevents* files, MindInsight only *summary.<n>* ones: neither looks at them).
# Runs still training show up: TensorBoard rereads the directory every 2 s.
# Data loading: --load_fast=auto uses the Rust data server (the tensorboard-data-server wheel, no network
# needed) and falls back to the Python loader where that binary is missing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TENSORBOARD="$ROOT/.venv/bin/tensorboard"
PYTHON="$ROOT/.venv/bin/python"
START_TIMEOUT_S=60

usage() {
  echo "usage: $0 start|stop RUN_BASE_DIR [PORT]" >&2
  exit 2
}

# The pid in the pid file, when that process is still a TensorBoard (a stale file's pid may be reused).
running_pid() {
  local pid
  [ -f "$PIDFILE" ] || return 1
  pid="$(cat "$PIDFILE")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  ps -p "$pid" -o args= 2>/dev/null | grep -q tensorboard || return 1
  echo "$pid"
}

start() {
  local pid
  if pid="$(running_pid)"; then
    echo "[tensorboard] already running (pid $pid) over $BASE on port $PORT" >&2
    echo "http://127.0.0.1:$PORT"
    return 0
  fi
  if [ ! -x "$TENSORBOARD" ]; then
    echo "[tensorboard] $TENSORBOARD not found: run ./scripts/test.sh (creates .venv)" \
      "or $ROOT/.venv/bin/pip install tensorboard==2.21.0" >&2
    exit 2
  fi
  # Its own session: the server outlives this script and the caller's Ctrl-C; stdout/stderr to the log only
  # (a caller capturing our output must not wait on the server).
  setsid "$TENSORBOARD" --logdir "$BASE" --host 127.0.0.1 --port "$PORT" --reload_interval 2 \
    --load_fast=auto --window_title "mindspore_doctor: $(basename "$BASE")" \
    >"$LOGFILE" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$PIDFILE"
  if ! "$PYTHON" - "$PORT" "$pid" "$START_TIMEOUT_S" <<'EOF'
import os, sys, time, urllib.request
port, pid, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
deadline = time.monotonic() + timeout
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        sys.exit(1)  # died: the log says why (port taken, bad logdir...)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/data/runs", timeout=2) as response:
            if response.status == 200:
                sys.exit(0)
    except OSError:
        pass
    time.sleep(0.25)
sys.exit(1)
EOF
  then
    echo "[tensorboard] did not answer on http://127.0.0.1:$PORT within ${START_TIMEOUT_S}s; log $LOGFILE:" >&2
    tail -n 20 "$LOGFILE" >&2 || true
    kill "$pid" 2>/dev/null || true
    rm -f "$PIDFILE"
    exit 1
  fi
  echo "[tensorboard] pid $pid over $BASE, log $LOGFILE" >&2
  echo "http://127.0.0.1:$PORT"
}

stop() {
  local pid
  if ! pid="$(running_pid)"; then
    echo "[tensorboard] none running over $BASE on port $PORT" >&2
    rm -f "$PIDFILE"
    return 0
  fi
  kill "$pid"
  for _ in $(seq 1 50); do  # it exits within a second; its Rust data server follows it (--die-after-stdin)
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$PIDFILE"
  echo "[tensorboard] stopped pid $pid" >&2
}

cmd="${1:-}"
case "$cmd" in
  start|stop) ;;
  *) usage ;;
esac
[ $# -ge 2 ] && [ $# -le 3 ] || usage
PORT="${3:-6006}"
[[ "$PORT" =~ ^[0-9]+$ ]] && [ "$PORT" -ge 1 ] && [ "$PORT" -le 65535 ] || usage
if [ "$cmd" = start ]; then
  mkdir -p "$2"
elif [ ! -d "$2" ]; then
  echo "[tensorboard] none running: $2 is not a directory" >&2
  exit 0
fi
BASE="$(cd "$2" && pwd)"
PIDFILE="$BASE/.tensorboard-$PORT.pid"
LOGFILE="$BASE/.tensorboard-$PORT.log"
"$cmd"
