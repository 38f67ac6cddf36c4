"""The layers of docs/architecture.md, checked on the source.

Two boundaries are physical (DESIGN.md): the core imports no storage library or driver by name,
and a driver imports nothing of oocarr but the interface and errors.  Inside the core the layers
below are folders, each importing only its own layer and those below it; no oocarr module takes
part in an import cycle; every module imports alone in a fresh interpreter; the old module paths
still work, with a warning.  (That importing oocarr changes nothing process-wide is
tests/test_guest.py.)

Imports are read from the AST of every file, so function-local imports count; imports under
``if TYPE_CHECKING:`` never run and do not.
"""

from __future__ import annotations

import ast
import json
import pathlib
import subprocess
import sys
import textwrap
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
DRIVERS = ROOT / "drivers"

STORAGE = {
    "h5py",
    "hdf5plugin",
    "fsspec",
    "zarr",
    "numcodecs",
    "s3fs",
    "tensorstore",
    "zstandard",
    "drivers",
    "oocarr_drivers",
}
DRIVER_MAY_IMPORT = {"oocarr.store", "oocarr.errors"}

#: The layers, top to bottom: (name, module patterns).  ``x*`` is ``x`` and everything under it.
LAYERS = [
    # the driver conformance suite drives a driver through the public API, as a user would
    ("driver tests", ["oocarr.store.testing"]),
    ("cli", ["oocarr.cli*"]),
    # the package's face re-exports the training helpers (``oocarr.stream_sum``, ``oocarr.optim``)
    # the package's faces re-export the public API and the training helpers
    (
        "package faces",
        ["oocarr", "oocarr.array_api", "oocarr.config", "oocarr.linalg", "oocarr.fft"],
    ),
    ("train", ["oocarr.train*"]),
    ("public API", ["oocarr.api*"]),
    ("jax layer", ["oocarr.jaxlayer*"]),
    ("ops", ["oocarr.ops*"]),
    ("engine", ["oocarr.engine*"]),
    ("store", ["oocarr.store*"]),
    ("base", ["oocarr.errors"]),
]

#: What may stand at the top of ``src/oocarr``: the package's thin faces (``linalg`` and ``fft``
#: when those extensions come), and one folder per layer.
TOP_FACES = {
    "__init__.py",
    "array_api.py",
    "config.py",
    "errors.py",
    "linalg.py",
    "fft.py",
}
LAYER_FOLDERS = {
    "cli": "cli",
    "train": "train",
    "api": "public API",
    "jaxlayer": "jax layer",
    "ops": "ops",
    "engine": "engine",
    "store": "store",
}

#: Narrower rules on top of the layers: (modules, the only oocarr modules they may import, why).
EXTRA_RULES = [
    (
        ["oocarr.ops*"],
        ["oocarr.engine.op", "oocarr.errors", "oocarr.ops*"],
        "ops see only the op contract, errors and other ops",
    ),
    (
        ["oocarr.engine.op"],
        ["oocarr.store*", "oocarr.errors", "oocarr.engine.plan"],
        "the op contract imports nothing of oocarr but store, errors and the memory model",
    ),
]

#: Modules whose import needs a test-only package; skipped where that package is missing.
NEEDS = {"oocarr.store.testing": "pytest"}


@dataclass(frozen=True)
class Import:
    """One imported module, as resolved from one import statement."""

    path: pathlib.Path
    line: int
    module: str
    local: bool  # inside a function: runs only when it is called

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def module_name(path: pathlib.Path, base: pathlib.Path, package: str) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def modules_under(base: pathlib.Path, package: str) -> dict[str, pathlib.Path]:
    return {module_name(p, base, package): p for p in sorted(base.rglob("*.py"))}


CORE = modules_under(SRC / "oocarr", "oocarr")
DRIVER_MODULES = modules_under(DRIVERS, "oocarr_drivers")


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _statements(nodes: Iterable[ast.AST], local: bool = False) -> Iterator[tuple[ast.stmt, bool]]:
    """Every import statement, with whether it sits inside a function (those under
    ``if TYPE_CHECKING:`` too)."""
    for node in nodes:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, local
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            # imports for annotations only are dependencies too: they count like the others
            yield from _statements(node.body, local)
            yield from _statements(node.orelse, local)
        else:
            inner = local or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            yield from _statements(ast.iter_child_nodes(node), inner)


def imports(path: pathlib.Path, name: str, known: Iterable[str]) -> list[Import]:
    """The modules a file imports; ``from p import x`` is ``p.x`` when that is a module."""
    known = set(known)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node, local in _statements(ast.parse(path.read_text(), str(path)).body):
        if isinstance(node, ast.Import):
            found += [Import(path, node.lineno, a.name, local) for a in node.names]
            continue
        base = node.module or ""
        if node.level:
            parent = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join([*parent, *([base] if base else [])])
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            found.append(Import(path, node.lineno, sub if sub in known else base, local))
    return list(dict.fromkeys(found))


KNOWN = set(CORE) | set(DRIVER_MODULES)
CORE_IMPORTS = {name: imports(path, name, KNOWN) for name, path in CORE.items()}


def ours(module: str) -> bool:
    return module == "oocarr" or module.startswith("oocarr.")


def matches(module: str, patterns: Iterable[str]) -> bool:
    return any(
        module == p.rstrip("*") or (p.endswith("*") and module.startswith(p[:-1] + "."))
        for p in patterns
    )


def layer_of(module: str) -> int | None:
    found = [i for i, (_, patterns) in enumerate(LAYERS) if matches(module, patterns)]
    return found[0] if found else None


def layer_name(module: str) -> str:
    found = layer_of(module)
    return "no layer" if found is None else LAYERS[found][0]


def layer_violations() -> list[str]:
    """Every import that breaks LAYERS or EXTRA_RULES, one line each."""
    problems = [f"{m}: in no layer of LAYERS" for m in CORE if layer_of(m) is None]
    for name, found in CORE_IMPORTS.items():
        for imp in (i for i in found if ours(i.module)):
            own, target = layer_of(name), layer_of(imp.module)
            why = []
            if imp.module not in CORE:
                why.append("no such module file under src/oocarr")
            elif own is not None and target is not None and target < own:
                why.append("a layer above")
            why += [
                reason
                for modules, allowed, reason in EXTRA_RULES
                if matches(name, modules) and not matches(imp.module, allowed)
            ]
            if why:
                problems.append(
                    f"{imp.where()}: {name} ({layer_name(name)}) imports {imp.module} "
                    f"({layer_name(imp.module)}): {'; '.join(why)}"
                )
    return problems


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with a cycle (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1 or node in graph[node]:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def shortest_cycle(graph: dict[str, set[str]], start: str) -> list[str]:
    """The shortest path from ``start`` back to itself (breadth first)."""
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        reached = []
        for module in frontier:
            for nxt in sorted(graph[module]):
                if nxt == start:
                    return [*paths[module], start]
                if nxt not in paths:
                    paths[nxt] = [*paths[module], nxt]
                    reached.append(nxt)
        frontier = reached
    return []


def run_python(code: str, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_core_never_imports_storage_libraries_or_drivers():
    bad = [
        f"{imp.where()}: {imp.module}"
        for found in CORE_IMPORTS.values()
        for imp in found
        if imp.module.split(".")[0] in STORAGE
    ]
    assert not bad, "the core imports storage libraries or drivers:\n" + "\n".join(bad)


def test_drivers_import_only_the_interface():
    bad = [
        f"{imp.where()}: {imp.module}"
        for name, path in DRIVER_MODULES.items()
        for imp in imports(path, name, KNOWN)
        if ours(imp.module) and imp.module not in DRIVER_MAY_IMPORT
    ]
    assert not bad, f"drivers may import only {sorted(DRIVER_MAY_IMPORT)} of oocarr:\n" + "\n".join(
        bad
    )


def test_each_module_imports_only_its_own_layer_and_those_below():
    problems = layer_violations()
    assert not problems, f"{len(problems)} layer violations:\n" + "\n".join(problems)


def test_no_import_cycles():
    graph = {n: {i.module for i in found if i.module in CORE} for n, found in CORE_IMPORTS.items()}
    report = []
    for component in cycles(graph):
        inside = {m: graph[m] & set(component) for m in component}
        report.append("cycle: " + " -> ".join(shortest_cycle(inside, component[0])))
        report += [
            f"    {imp.where()}: {name} imports {imp.module}" + (" (in a function)" * imp.local)
            for name in component
            for imp in CORE_IMPORTS[name]
            if imp.module in inside[name]
        ]
    print("\n".join(report))
    assert not report, "import cycles between oocarr modules:\n" + "\n".join(report)


# Run in a fresh interpreter that has imported oocarr's third-party dependencies and no oocarr
# module; each module is then imported in its own forked child, so no oocarr module is loaded
# before it, at the cost of one interpreter start (jax's import) instead of one per module.
IMPORT_ALONE = """
    import importlib, importlib.util, json, os, sys, tempfile, traceback
    names, preload, needs = (json.loads(arg) for arg in sys.argv[1:4])
    for dep in preload:
        try:
            importlib.import_module(dep)
        except ImportError:
            pass
    assert not [m for m in sys.modules if m == "oocarr" or m.startswith("oocarr.")]
    out = tempfile.mkdtemp()

    def child(name):
        sys.argv = [name, "--help"]  # what a __main__ module is run with
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        try:
            importlib.import_module(name)
        except SystemExit as stop:
            if stop.code not in (0, None):
                return f"exits {stop.code}"
        except BaseException:
            return traceback.format_exc()
        return ""

    failures, skipped, running = {}, [], {}
    todo = list(names)
    while todo or running:
        while todo and len(running) < max(2, min(4, os.cpu_count() or 2)):
            name = todo.pop(0)
            dep = needs.get(name)
            if dep and importlib.util.find_spec(dep) is None:
                skipped.append(name)
                continue
            pid = os.fork()
            if pid == 0:
                message = child(name)
                with open(os.path.join(out, name), "w") as f:
                    f.write(message)
                sys.stdout.flush(), sys.stderr.flush()
                os._exit(0)
            running[pid] = name
        if not running:
            continue
        pid, status = os.wait()
        name = running.pop(pid)
        try:
            with open(os.path.join(out, name)) as f:
                message = f.read()
        except FileNotFoundError:
            message = ""
        if status or message:
            failures[name] = message or f"child died with status {status}"
    print(json.dumps({"failures": failures, "skipped": skipped}))
"""


def test_each_module_imports_alone_in_a_fresh_interpreter():
    preload = sorted(
        {
            imp.module.split(".")[0]
            for found in CORE_IMPORTS.values()
            for imp in found
            if not imp.local and not ours(imp.module)
        }
    )
    names = sorted(CORE)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(IMPORT_ALONE)]
        + [json.dumps(names), json.dumps(preload), json.dumps(NEEDS)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    failures = result["failures"]
    assert not failures, f"{len(failures)} modules fail to import alone:\n" + "\n".join(
        f"--- {name}\n{message}" for name, message in sorted(failures.items())
    )


def test_the_top_of_the_package_holds_only_its_faces_and_the_layer_folders():
    top = SRC / "oocarr"
    modules = sorted(p.name for p in top.glob("*.py"))
    folders = sorted(p.name for p in top.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert set(modules) <= TOP_FACES, (
        f"modules at the top of src/oocarr besides its faces: {sorted(set(modules) - TOP_FACES)}"
    )
    assert folders == sorted(LAYER_FOLDERS), (
        f"folders of src/oocarr: {folders}, layers: {sorted(LAYER_FOLDERS)}"
    )
    for folder, layer in LAYER_FOLDERS.items():
        inside = [m for m in CORE if m == f"oocarr.{folder}" or m.startswith(f"oocarr.{folder}.")]
        assert inside and all(
            layer_name(m) == layer for m in inside if m != "oocarr.store.testing"
        ), f"src/oocarr/{folder}/ is the {layer} layer, and only it: " + ", ".join(
            f"{m} ({layer_name(m)})" for m in inside if layer_name(m) != layer
        )
