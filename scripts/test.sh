#!/usr/bin/env bash
# Make a virtual environment, install oocarr with its test extras, lint, type-check, prove a plain
# (non-editable) install works from a second, fresh virtual environment, run the whole suite on
# Python 3.11, then the smoke run (scripts/smoke.sh) on the other supported Pythons, 3.12 and 3.13
# (OOCARR_SMOKE_PYTHONS="" skips it).
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/venv.sh "[test]"

# The smoke runs' virtual environments install in the background (mostly downloads) while
# this one lints and tests; their tests run after the suite.
SMOKE_VERSIONS="${OOCARR_SMOKE_PYTHONS-3.12 3.13}"
SMOKE_DIR="$(mktemp -d -t oocarr-smoke-XXXXXX)"
trap 'rm -rf "$SMOKE_DIR"' EXIT
(
    for version in $SMOKE_VERSIONS; do
        scripts/smoke.sh --install-only "$version" "$SMOKE_DIR/$version" \
            > "$SMOKE_DIR/install-$version.log" 2>&1
    done
) &
SMOKE_INSTALL=$!

echo "== lint"
"$VENV/bin/ruff" check src drivers tests scripts
"$VENV/bin/ruff" format --check src drivers tests scripts

echo "== type check (mypy; its strictness is stated in pyproject.toml's [tool.mypy])"
"$VENV/bin/mypy"

echo "== non-editable install into a fresh virtual environment"
WHEEL_VENV="$(mktemp -d)/venv"
"$PYTHON" -m venv "$WHEEL_VENV"
"$WHEEL_VENV/bin/python" -m pip install --quiet --upgrade pip
"$WHEEL_VENV/bin/python" -m pip install --quiet .
(cd "$(dirname "$WHEEL_VENV")" && "$WHEEL_VENV/bin/python" "$OLDPWD/scripts/check_install.py")
rm -rf "$(dirname "$WHEEL_VENV")"

echo "== test suite"
"$VENV/bin/python" -m pytest -n 2 -q "$@"

if ! wait "$SMOKE_INSTALL"; then
    cat "$SMOKE_DIR"/install-*.log >&2
    echo "the smoke runs' installs failed (above)" >&2
    exit 1
fi
for version in $SMOKE_VERSIONS; do
    echo "== smoke run on Python $version"
    scripts/smoke.sh "$version" "$SMOKE_DIR/$version"
done
