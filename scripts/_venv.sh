# Sourced by the scripts: create .venv (Python 3.11) if needed and install the project into it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x "$VENV/bin/python" ]; then
  echo "[msdoctor] creating $VENV" >&2
  "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.msdoctor-installed"
if [ ! -f "$STAMP" ] || [ "$ROOT/setup.py" -nt "$STAMP" ]; then
  echo "[msdoctor] installing mindspore_doctor and its dependencies (first run downloads MindSpore, ~2.5 GB)" >&2
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet -e "$ROOT[test]"
  touch "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
# MindSpore 2.10's CPU convolutions on AVX-512 CPUs fall to oneDNN's reference kernel; AVX2 takes the gemm path
# (README, "CPU"). An explicit setting wins.
export ONEDNN_MAX_CPU_ISA="${ONEDNN_MAX_CPU_ISA:-AVX2}"
cd "$ROOT"
