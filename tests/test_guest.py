"""oocarr is a guest in its user's process: importing and using it changes nothing outside it.

Two fresh interpreters run the same plain JAX work; one also imports oocarr and runs oocarr
ops (eagerly, under jit and under grad, with errors).  The oracle is the process that never
imported oocarr: both must see the same JAX configuration and the same malloc behaviour, and in
the one that used oocarr no attribute of any JAX or NumPy module (nor of a class they define)
may have been replaced, beyond what the same plain JAX work replaces without oocarr.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

PROBE = """
    import ctypes, json, logging, signal, sys, warnings
    import jax, jax.numpy as jnp, numpy as np
    from jax.experimental import io_callback

    def attributes():
        # id() of every attribute of every JAX / NumPy module and of the classes they define
        seen = {}
        for name, module in list(sys.modules.items()):
            if module is None or not name.startswith(("jax", "numpy")):
                continue
            for key, value in list(vars(module).items()):
                seen[f"{name}:{key}"] = id(value)
                if isinstance(value, type) and value.__module__ == name:
                    for k, v in list(vars(value).items()):
                        seen[f"{name}:{key}.{k}"] = id(v)
        return seen

    def mmapped_after_freeing_a_larger_mapped_chunk():
        # glibc offers no call to read its mmap threshold, but marks a chunk it served with
        # mmap in its size field (bit 0x2).  Freeing a mapped 4 MiB chunk raises glibc's own
        # dynamic threshold past 2 MiB, so a 2 MiB chunk then comes from the heap, unless the
        # threshold was fixed with mallopt (which also turns the dynamic threshold off).
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc.restype = ctypes.c_void_p
        libc.malloc.argtypes = [ctypes.c_size_t]
        libc.free.argtypes = [ctypes.c_void_p]

        def mapped(p):
            return bool(ctypes.c_size_t.from_address(p - ctypes.sizeof(ctypes.c_size_t)).value & 2)

        seen = []
        for size in (600 << 10, 4 << 20, 2 << 20):
            p = libc.malloc(size)
            seen.append(mapped(p))
            libc.free(p)
        return seen[-1]

    def loggers():
        names = [n for n in logging.root.manager.loggerDict if n.startswith("jax")]
        return sorted(
            f"{n}:{len(logging.getLogger(n).filters)}:{len(logging.getLogger(n).handlers)}"
            for n in names
        )

    def plain_jax_work():
        step = jax.jit(lambda w, x: jnp.tanh(x @ w).sum())
        jax.grad(step)(jnp.ones((8, 4)), jnp.ones((16, 8)))
        cb = jax.jit(lambda x: io_callback(lambda v: np.asarray(v * 2), x, x))
        cb(jnp.ones(3)).block_until_ready()

    before = attributes()
    def hooks():
        return (sys.excepthook, sys.unraisablehook, signal.getsignal(signal.SIGINT))

    hooks_before = hooks()
    meta = list(sys.meta_path)
    n_filters = len(warnings.filters)
    if sys.argv[1] == "oocarr":
        import oocarr  # before JAX's backend starts, when its dispatch mode could be changed
    mapped = mmapped_after_freeing_a_larger_mapped_chunk()
    plain_jax_work()
    if sys.argv[1] == "oocarr":
        x = oocarr.from_numpy(np.arange(4000, dtype=np.float32).reshape(100, 40))
        with oocarr.memory_budget(4096):
            float(oocarr.sum(oocarr.exp(x * 0.001)))
            float(jax.jit(lambda x: oocarr.sum(x * 2.0))(x))
            jax.grad(lambda w: oocarr.mean(oocarr.square(x @ w)))(jnp.ones((40, 1)))
        for fn in (jax.jit(oocarr.sum), oocarr.jit(oocarr.sum)):
            try:
                with oocarr.memory_budget(8):
                    fn(x)
            except Exception:
                pass
        try:
            jnp.sum(x)
        except TypeError:
            pass
    after = attributes()
    print(json.dumps({
        "config": {k: repr(v) for k, v in jax.config.values.items()},
        "replaced": sorted(k for k in before if k in after and before[k] != after[k]),
        "mmapped": mapped,
        "loggers": loggers(),
        "hooks_kept": hooks_before == hooks(),
        "meta_path_added": [type(f).__module__ for f in sys.meta_path if f not in meta],
        "warning_filters_added": len(warnings.filters) - n_filters,
    }))
"""


def _probe(which: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_", "MALLOC_"))}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PROBE), which],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def probes() -> tuple[dict, dict]:
    return _probe("plain"), _probe("oocarr")


def test_jax_configuration_is_the_same_with_oocarr(probes):
    plain, used = probes
    differ = {k: (plain["config"].get(k), v) for k, v in used["config"].items()}
    differ = {k: pair for k, pair in differ.items() if pair[0] != pair[1]}
    assert not differ, differ
    assert used["config"]["jax_cpu_enable_async_dispatch"] == "True"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads glibc's chunk headers")
def test_malloc_behaves_the_same_with_oocarr(probes):
    plain, used = probes
    assert used["mmapped"] == plain["mmapped"]


def test_no_function_of_jax_or_numpy_is_replaced(probes):
    plain, used = probes
    # attributes JAX's own work replaces (caches, counters) show up in both processes
    assert sorted(set(used["replaced"]) - set(plain["replaced"])) == []
    for name in (
        "jax._src.interpreters.pxla:ExecuteReplicated.__call__",
        "jax._src.numpy.util:check_arraylike",
    ):
        assert name not in used["replaced"]


def test_no_hook_logger_filter_or_warning_filter_is_added(probes):
    plain, used = probes

    def touched(names):
        return sorted(n for n in names if n.split(":")[1:] != ["0", "0"])

    assert touched(used["loggers"]) == touched(plain["loggers"])  # filters and handlers
    assert used["hooks_kept"] and plain["hooks_kept"]
    assert used["warning_filters_added"] == plain["warning_filters_added"]
    assert used["meta_path_added"] == plain["meta_path_added"] == []
