"""oocarr's public types as a user's type checker sees them: mypy (the oracle) on a user program.

The program is checked with the project's own mypy configuration and cache, so after
``scripts/test.sh``'s type check this takes about a second.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import textwrap
import uuid

import pytest

import oocarr

pytest.importorskip("mypy")

ROOT = pathlib.Path(__file__).resolve().parents[1]

PROGRAM = """
import numpy as np
import oocarr
from oocarr import ArrayLike, Result

def double(x: ArrayLike) -> Result:
    return oocarr.multiply(x, 2)

x = oocarr.open("a.npy")
reveal_type(x)
reveal_type(x + 1)
reveal_type(x @ x)
reveal_type(oocarr.sum(x))
reveal_type(oocarr.save(np.ones(3), "b.npy"))
reveal_type(oocarr.from_numpy(np.ones(3)))
reveal_type(oocarr.batches(x, batch_size=2))
reveal_type(double(np.ones(2)))
oocarr.add(x, "s")
oocarr.create("c.h5#/x", (2, 3), "float32", compression=3.5)
"""


def _mypy(tmp_path: pathlib.Path) -> dict[int, str]:
    # a new module name each run: mypy's cache ties a module name to the first path it saw
    program = tmp_path / f"user_program_{uuid.uuid4().hex}.py"
    program.write_text(textwrap.dedent(PROGRAM))
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", str(program)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1, result.stdout + result.stderr  # the two errors below
    out: dict[int, str] = {}
    for line in result.stdout.splitlines():
        match = re.match(rf"{re.escape(str(program))}:(\d+): (.*)", line)
        if match:
            out[int(match.group(1))] = out.get(int(match.group(1)), "") + match.group(2)
    return out


def test_a_users_program_sees_precise_types(tmp_path):
    seen = _mypy(tmp_path)
    lines = textwrap.dedent(PROGRAM).splitlines()

    def at(code: str) -> str:
        return seen[lines.index(code) + 1]

    disk = "oocarr.jaxlayer.disk_array.DiskArray"
    for code in ("reveal_type(x)", "reveal_type(x + 1)", "reveal_type(x @ x)"):
        assert at(code) == f'note: Revealed type is "{disk}"', code
    for code in (
        'reveal_type(oocarr.save(np.ones(3), "b.npy"))',
        "reveal_type(oocarr.from_numpy(np.ones(3)))",
    ):
        assert at(code) == f'note: Revealed type is "{disk}"', code
    # a 0-d result is a jax.Array at run time, so the declared type says so
    assert at("reveal_type(oocarr.sum(x))") == (
        f'note: Revealed type is "{disk} | jax._src.basearray.Array"'
    )
    assert "oocarr.train.minibatches.Batches" in at("reveal_type(oocarr.batches(x, batch_size=2))")
    assert 'Argument 2 to "add" has incompatible type "str"' in at('oocarr.add(x, "s")')
    assert '"compression" to "create" has incompatible type "float"' in at(
        'oocarr.create("c.h5#/x", (2, 3), "float32", compression=3.5)'
    )


def test_the_package_marks_itself_typed():
    import oocarr_drivers

    for package in (oocarr, oocarr_drivers):
        assert (pathlib.Path(package.__file__).parent / "py.typed").is_file()
