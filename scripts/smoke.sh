#!/usr/bin/env bash
# The smoke run on another supported Python: `scripts/smoke.sh 3.12`.
#
# In a fresh virtual environment made with that Python: a plain (non-editable) install of
# oocarr with its smoke extra, the installed-package check, each driver's conformance suite,
# the CLI's tests and stream_sum's training tests, then scripts/train_hdf5.py on a small dataset.
# scripts/test.sh runs the whole suite on Python 3.11 and this on 3.12 and 3.13.
#
#   scripts/smoke.sh VERSION                    make a venv in a temporary directory, run, remove it
#   scripts/smoke.sh --install-only VERSION DIR  make the venv in DIR and install (no tests)
#   scripts/smoke.sh VERSION DIR                 run with the venv installed in DIR
set -euo pipefail
cd "$(dirname "$0")/.."

install_only=false
if [ "${1:-}" = "--install-only" ]; then
    install_only=true
    shift
fi
version="${1:?usage: scripts/smoke.sh [--install-only] VERSION [DIR]}"
work="${2:-}"

if [ -z "$work" ]; then
    work="$(mktemp -d -t "oocarr-smoke-$version-XXXXXX")"
    trap 'rm -rf "$work"' EXIT
fi
venv="$work/venv"

if [ ! -f "$work/installed" ]; then
    # pyenv's shim for a version that is installed but not selected exists and fails: try each.
    python=""
    for candidate in "$(command -v "python$version" || true)" \
        $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$version".*/bin/python 2>/dev/null | sort -rV); do
        if [ -n "$candidate" ] && "$candidate" -c "" 2>/dev/null; then
            python="$candidate"
            break
        fi
    done
    if [ -z "$python" ]; then
        echo "smoke: Python $version not found; install it (pyenv install $version)" >&2
        exit 1
    fi
    mkdir -p "$work"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet ".[smoke]"
    touch "$work/installed"
fi
if $install_only; then
    exit 0
fi
echo "smoke: $("$venv/bin/python" --version) in $venv"

(cd "$work" && "$venv/bin/python" "$OLDPWD/scripts/check_install.py")

# The tests import the installed oocarr: src/ is not on the path when pytest runs them here.
# The conformance suite once per driver and Zarr format (local .npy, chunked HDF5, Zarr v3 and
# v2 on the local filesystem, sharded Zarr v3 on S3), the CLI's tests, and stream_sum's
# gradients under jit on the local drivers.
"$venv/bin/python" -m pytest -q -n 2 --no-header tests/test_conformance.py tests/test_cli.py \
    -k "test_cli or TestMemmapNpy or TestHDF5Chunked or TestFsspecLocal or TestFsspecV2 \
        or TestFsspecS3Sharded"
"$venv/bin/python" -m pytest -q -n 2 --no-header \
    tests/test_stream_sum.py::test_gradient_descent_reaches_the_least_squares_solution \
    tests/test_stream_sum.py::test_value_and_grad_reads_the_data_once \
    tests/test_stream_sum.py::test_value_and_grad_equal_the_in_memory_ones \
    -k "not eager and not s3"

"$venv/bin/python" scripts/train_hdf5.py --rows 60000 --features 16 --epochs 1 \
    --lbfgs-steps 3 --workdir "$work/train" | tail -n 3
