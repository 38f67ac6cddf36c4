#!/usr/bin/env bash
# Run the Array API standard's own test suite (data-apis/array-api-tests) against
# oocarr.array_api, with the skips that scripts/array_api_skips.txt lists and explains.
#
#   git clone https://github.com/data-apis/array-api-tests && cd array-api-tests
#   git submodule update --init          # its array-api submodule, at the commit it pins
#   /path/to/oocarr/scripts/array_api_tests.sh "$PWD" [--max-examples 20] [pytest args]
#
# 64-bit dtypes are skipped: without jax_enable_x64, JAX (and so every oocarr op) computes
# int64/uint64/float64/complex128 in 32 bits, which the suite reports as wrong dtypes.
set -euo pipefail
HERE="$(cd "$(dirname "$0")/.." && pwd)"
SUITE="${1:?the path of an array-api-tests checkout}"
shift
cd "$HERE"
source scripts/venv.sh "[test]" >/dev/null
VENV="$(cd "$VENV" && pwd)"
"$VENV/bin/python" -m pip install --quiet -r "$SUITE/requirements.txt"
cd "$SUITE"
PYTHONPATH="$HERE/scripts${PYTHONPATH:+:$PYTHONPATH}" \
ARRAY_API_TESTS_MODULE=oocarr.array_api \
ARRAY_API_TESTS_VERSION=2023.12 \
ARRAY_API_TESTS_SKIP_DTYPES=uint64,int64,float64,complex128 \
  "$VENV/bin/python" -m pytest array_api_tests -p no:cacheprovider -p array_api_tests_settings \
    --skips-file "$HERE/scripts/array_api_skips.txt" \
    --disable-extension linalg --disable-extension fft \
    --disable-deadline --derandomize "$@"
