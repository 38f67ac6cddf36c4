"""The Python versions pyproject declares are the ones scripts/test.sh runs."""

from __future__ import annotations

import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _declared() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    prefix = "Programming Language :: Python :: "
    return [
        c.removeprefix(prefix)
        for c in project["classifiers"]
        if re.fullmatch(re.escape(prefix) + r"3\.\d+", c)
    ]


def test_classifiers_name_the_suites_python_and_the_smoke_runs():
    test_sh = (ROOT / "scripts" / "test.sh").read_text()
    smoke = re.search(r"OOCARR_SMOKE_PYTHONS-([0-9. ]+)\}", test_sh).group(1).split()
    venv_sh = (ROOT / "scripts" / "venv.sh").read_text()
    suite = re.search(r"command -v python(3\.\d+)", venv_sh).group(1)
    assert sorted([suite, *smoke], key=lambda v: tuple(map(int, v.split(".")))) == _declared()


def test_requires_python_admits_the_oldest_declared_and_this_one():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    oldest = _declared()[0]
    assert project["requires-python"] == f">={oldest}"
    assert sys.version_info[:2] >= tuple(map(int, oldest.split(".")))
