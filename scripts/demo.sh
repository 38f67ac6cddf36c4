#!/usr/bin/env bash
# Make a virtual environment, install oocarr, and run the demo job on a sample HDF5 dataset.
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/venv.sh ""
exec "$VENV/bin/python" scripts/demo.py "$@"
