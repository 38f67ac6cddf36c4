"""The two physical boundaries of DESIGN.md, checked on the source: the core imports no storage
library or driver by name; a driver imports nothing of oocarr but the interface and errors."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
STORAGE = {
    "h5py",
    "fsspec",
    "zarr",
    "s3fs",
    "tensorstore",
    "zstandard",
    "drivers",
    "oocarr_drivers",
}
DRIVER_MAY_IMPORT = {"oocarr.interface", "oocarr.errors"}


def imports(path: pathlib.Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_core_never_imports_storage_libraries_or_drivers():
    for path in (ROOT / "src" / "oocarr").rglob("*.py"):
        bad = {m for m in imports(path) if m.split(".")[0] in STORAGE}
        assert not bad, f"{path} imports {bad}"


def test_drivers_import_only_the_interface():
    for path in (ROOT / "drivers").rglob("*.py"):
        ours = {m for m in imports(path) if m.split(".")[0] == "oocarr"}
        assert ours <= DRIVER_MAY_IMPORT, f"{path} imports {ours - DRIVER_MAY_IMPORT}"
