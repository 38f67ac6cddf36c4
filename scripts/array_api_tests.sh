#!/usr/bin/env bash
# Run the Array API standard's own test suite (data-apis/array-api-tests), with its linalg and
# fft extensions, against oocarr.array_api -- and, the same way, against jax.numpy to compare:
# same tests, same skips (scripts/array_api_skips.txt, each with its reason), same dtypes
# skipped, same examples (derandomized; the special cases' single draw seeded by test id).
#
#   git clone https://github.com/data-apis/array-api-tests && cd array-api-tests
#   git submodule update --init          # its array-api submodule, at the commit it pins
#   /path/to/oocarr/scripts/array_api_tests.sh "$PWD" [--module M]... [--results DIR] [pytest args]
#
#   --module M     the namespace to test: oocarr.array_api (the default) or jax.numpy; give it
#                  twice to run both, one after the other
#   --results DIR  where each run writes M.results (a counts line, then "outcome<TAB>test id"
#                  for every test), M.xml (JUnit) and M.log (pytest's output); default
#                  build/array-api-tests in this checkout
#   pytest args    passed to every run, after the defaults (--max-examples 10), which they
#                  override: e.g. --max-examples 50, -x, -k linalg, array_api_tests/test_fft.py
#
# After the runs, when DIR holds both modules' results, the tests jax.numpy passes and
# oocarr.array_api does not are listed (and the reverse). The exit status is 1 when a run had
# failures.
#
# 64-bit dtypes are skipped: without jax_enable_x64, JAX (and so every oocarr op) computes
# int64/uint64/float64/complex128 in 32 bits, which the suite reports as wrong dtypes.
set -euo pipefail
HERE="$(cd "$(dirname "$0")/.." && pwd)"
SUITE="$(cd "${1:?the path of an array-api-tests checkout}" && pwd)"
shift
MODULES=()
RESULTS="$HERE/build/array-api-tests"
PYTEST_ARGS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --module) MODULES+=("${2:?--module needs a module name}"); shift 2 ;;
        --module=*) MODULES+=("${1#--module=}"); shift ;;
        --results) RESULTS="${2:?--results needs a directory}"; shift 2 ;;
        --results=*) RESULTS="${1#--results=}"; shift ;;
        *) PYTEST_ARGS+=("$1"); shift ;;
    esac
done
[ ${#MODULES[@]} -gt 0 ] || MODULES=(oocarr.array_api)
mkdir -p "$RESULTS"
RESULTS="$(cd "$RESULTS" && pwd)"

cd "$HERE"
source scripts/venv.sh "[test]" >/dev/null
VENV="$(cd "$VENV" && pwd)"
"$VENV/bin/python" -m pip install --quiet -r "$SUITE/requirements.txt"
COMMIT="$(git -C "$SUITE" rev-parse --short HEAD 2>/dev/null || echo unknown)"

cd "$SUITE"
STATUS=0
for MODULE in "${MODULES[@]}"; do
    echo "== array-api-tests $COMMIT on $MODULE: $RESULTS/$MODULE.{results,xml,log}"
    rc=0
    PYTHONPATH="$HERE/scripts${PYTHONPATH:+:$PYTHONPATH}" \
    ARRAY_API_TESTS_MODULE="$MODULE" \
    ARRAY_API_TESTS_VERSION=2023.12 \
    ARRAY_API_TESTS_SKIP_DTYPES=uint64,int64,float64,complex128 \
    ARRAY_API_TESTS_RESULTS="$RESULTS/$MODULE.results" \
      "$VENV/bin/python" -m pytest array_api_tests -p no:cacheprovider -p array_api_tests_settings \
        --skips-file "$HERE/scripts/array_api_skips.txt" \
        --disable-deadline --derandomize --max-examples 10 -q -rfE \
        --junitxml "$RESULTS/$MODULE.xml" "${PYTEST_ARGS[@]}" >"$RESULTS/$MODULE.log" 2>&1 || rc=$?
    grep '^FAILED\|^ERROR' "$RESULTS/$MODULE.log" || true
    tail -n 1 "$RESULTS/$MODULE.log"
    [ "$rc" -le 1 ] || { echo "pytest stopped (exit $rc): see $RESULTS/$MODULE.log"; exit "$rc"; }
    [ "$rc" -eq 0 ] || STATUS=1
done

# the tests one module passes and the other does not (fails, or skips)
compare() {
    awk -F'\t' 'FNR == NR { if ($1 == "passed") passed[$2] = 1; next }
                /^#/ { next }
                ($2 in passed) && $1 != "passed" { print "  " $1 "\t" $2 }' "$1" "$2"
}
JAX="$RESULTS/jax.numpy.results"
OOCARR="$RESULTS/oocarr.array_api.results"
if [ -f "$JAX" ] && [ -f "$OOCARR" ]; then
    head -n 1 "$OOCARR"
    head -n 1 "$JAX"
    echo "Passed by jax.numpy, not by oocarr.array_api:"
    compare "$JAX" "$OOCARR"
    echo "Passed by oocarr.array_api, not by jax.numpy:"
    compare "$OOCARR" "$JAX"
fi
exit "$STATUS"
