#!/usr/bin/env bash
# Make a virtual environment, install oocarr, run the demo job on a sample HDF5 dataset, train
# two models on an HDF5 dataset 8x the memory budget (scripts/train_hdf5.py), then train the
# MLP again killed mid-epoch and resumed from its checkpoint, and compare with an
# uninterrupted run.
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/venv.sh "[examples]"
"$VENV/bin/python" scripts/demo.py "$@"
"$VENV/bin/python" scripts/train_hdf5.py

work="$(mktemp -d -t oocarr-resume-XXXXXX)"
trap 'rm -rf "$work"' EXIT
echo
echo "== the MLP uninterrupted =="
"$VENV/bin/python" scripts/train_hdf5.py --mlp-only --workdir "$work/whole" \
    --save-params "$work/whole-params.h5" | tee "$work/whole.log"
data="$work/whole/train.h5"
echo
echo "== the MLP killed mid-epoch (SIGKILL after step 850; checkpoints every 100 steps) =="
status=0
"$VENV/bin/python" scripts/train_hdf5.py --mlp-only --workdir "$work/killed" --data "$data" \
    --die-at-step 850 || status=$?
if [ "$status" -ne 137 ]; then
    echo "expected the run to be killed (exit status 137), got $status" >&2
    exit 1
fi
echo
echo "== resumed from its last checkpoint =="
"$VENV/bin/python" scripts/train_hdf5.py --mlp-only --workdir "$work/killed" --data "$data" \
    --resume --save-params "$work/resumed-params.h5" | tee "$work/resumed.log"
echo
"$VENV/bin/python" - "$work" <<'PY'
import sys

import jax
import numpy as np

import oocarr

work = sys.argv[1]
final = [open(f"{work}/{name}.log").read().split("final epoch loss ")[-1].strip()
         for name in ("whole", "resumed")]
a, b = (oocarr.load_params(f"{work}/{name}-params.h5") for name in ("whole", "resumed"))
same = all(np.array_equal(np.asarray(u), np.asarray(v))
           for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
print(f"final epoch loss: uninterrupted {final[0]}, killed and resumed {final[1]}")
print(f"final parameters: {'bitwise identical' if same else 'DIFFERENT'}")
sys.exit(0 if same and final[0] == final[1] else 1)
PY
