# Sourced by demo.sh and test.sh: make (or reuse) the project's virtual environment and install
# oocarr into it, editable, with the extras given as the first argument (e.g. "[test]").
PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
VENV="${OOCARR_VENV:-.venv}"

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -e ".${1:-}"
