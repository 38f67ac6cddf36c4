#!/usr/bin/env bash
# Make a virtual environment, install oocarr, run the demo job on a sample HDF5 dataset, then
# train two models on an HDF5 dataset 8x the memory budget (scripts/train_hdf5.py).
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/venv.sh "[examples]"
"$VENV/bin/python" scripts/demo.py "$@"
exec "$VENV/bin/python" scripts/train_hdf5.py
