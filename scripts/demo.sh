#!/usr/bin/env bash
# Make a virtual environment, install oocarr, and run the demo job on a sample HDF5 dataset.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
VENV="${OOCARR_VENV:-.venv}"

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -e .
exec "$VENV/bin/python" scripts/demo.py "$@"
