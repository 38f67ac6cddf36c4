"""The memory model, checked per streamer as Cubed checks its plans: in a fresh process, the
peak RSS growth of one call is at most the bytes its plan projected plus a fixed allowance,
and the projection is within the budget.

Each streamer runs once on an input several times the budget (compiling what it needs: XLA's
compiler is not a streamer), then the peak RSS mark is reset (``/proc/self/clear_refs``) and
the same call is measured.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from oocarr.engine.plan import reserved

pytestmark = [
    pytest.mark.memory,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status"),
]

BUDGET = 24_000_000
#: What a call may hold beyond its projection: the part of the budget the planner keeps for
#: XLA's and the threads' own working memory, allocator granularity, the kernel's page tables.
ALLOWANCE = reserved(BUDGET)
ROWS, COLS = 262_144, 128  # 128 MiB of float32, 5.6x the budget

PRELUDE = textwrap.dedent(
    f"""
    import gc, json, os, sys
    import numpy as np
    import jax, jax.numpy as jnp
    import oocarr

    BUDGET, ROWS, COLS = {BUDGET}, {ROWS}, {COLS}
    root = sys.argv[1]

    def status(key):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024

    def measure(run):
        '''Peak RSS growth of run() above the RSS it starts from, and its io_stats.'''
        gc.collect()
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        start = status("VmRSS")
        with oocarr.io_stats() as stats:
            value = run()
        return status("VmHWM") - start, stats, value

    def make(name, rows=ROWS, cols=COLS):
        path = os.path.join(root, name + ".npy")
        x = np.lib.format.open_memmap(path, mode="w+", dtype="f4", shape=(rows, cols))
        step = 16384
        for start in range(0, rows, step):
            x[start:start + step] = (np.arange(start, min(start + step, rows))[:, None] % 7
                                     ).astype("f4") / 7
        x.flush()
        del x
        return oocarr.open(path)

    def report(growth, projected, value):
        print(json.dumps({{"growth": growth, "projected": projected, "value": value}}))
    """
)

SCRIPTS = {
    "sum (op forward)": """
        big = make("big")
        with oocarr.memory_budget(BUDGET):
            np.asarray(oocarr.sum(big, axis=0))
            growth, stats, out = measure(lambda: np.asarray(oocarr.sum(big, axis=0)))
        report(growth, stats.total.projected_bytes, float(out.sum()))
    """,
    "sum of a zstd Zarr array (decoding counted)": """
        big = oocarr.save(make("big"), os.path.join(root, "b.zarr"), chunks=(4096, COLS),
                          compression="zstd")
        with oocarr.memory_budget(BUDGET):
            np.asarray(oocarr.sum(big, axis=0))
            growth, stats, out = measure(lambda: np.asarray(oocarr.sum(big, axis=0)))
        report(growth, stats.total.projected_bytes, float(out.sum()))
    """,
    "elementwise (op forward, stored output)": """
        big = make("big")
        with oocarr.memory_budget(BUDGET):
            oocarr.sqrt(big)
            growth, stats, out = measure(lambda: oocarr.sqrt(big))
        report(growth, stats.total.projected_bytes, float(out.store[ROWS - 1, 0]))
    """,
    "matmul backward (op backward)": """
        big = make("big")
        w = jnp.ones((COLS, 4), "f4") / COLS
        loss = lambda w, x: oocarr.sum(oocarr.matmul(x, w))
        with oocarr.memory_budget(BUDGET):
            np.asarray(jax.grad(loss)(w, big))
            growth, stats, g = measure(lambda: np.asarray(jax.grad(loss)(w, big)))
        report(growth, stats.total.projected_bytes, float(g.sum()))
    """,
    "stream_sum": """
        big = make("big")
        loss = oocarr.stream_sum(lambda w, x: jnp.sum((x @ w) ** 2))
        w = jnp.ones((COLS,), "f4") / COLS
        with oocarr.memory_budget(BUDGET):
            jax.value_and_grad(loss)(w, big)
            growth, stats, (v, g) = measure(lambda: jax.value_and_grad(loss)(w, big))
        report(growth, stats.total.projected_bytes, float(v))
    """,
    "batches": """
        big = make("big")
        def epoch(x):
            total = 0.0
            for (b,) in oocarr.batches(x, batch_size=1024, shuffle=True, seed=0):
                total += float(b[0, 0])
            return total
        with oocarr.memory_budget(BUDGET):
            epoch(big)
            growth, stats, total = measure(lambda: epoch(big))
        report(growth, stats.total.projected_bytes, total)
    """,
    "optax adapter": """
        import optax
        big = make("big")
        tx = oocarr.optim.blockwise(optax.sgd(0.1))
        def step(x, runs=[]):
            runs.append(1)
            params = {"w": oocarr.save(x, os.path.join(root, f"w{len(runs)}.npy"), mode="r+")}
            state = tx.init(params)
            updates, state = tx.update({"w": x}, state, params)
            return float(np.asarray(oocarr.optim.apply_updates(params, updates)["w"].store[0, 0]))
        with oocarr.memory_budget(BUDGET):
            step(big)
            growth, stats, value = measure(lambda: step(big))
        report(growth, stats.total.projected_bytes, value)
    """,
    "save (copy)": """
        big = make("big")
        with oocarr.memory_budget(BUDGET):
            oocarr.save(big, os.path.join(root, "s.zarr"), chunks=(4096, COLS))
            growth, stats, out = measure(
                lambda: oocarr.save(big, os.path.join(root, "b.zarr"), chunks=(4096, COLS))
            )
        report(growth, stats.total.projected_bytes, float(out.store[ROWS - 1, 0]))
    """,
    "inspect --stats (CLI)": """
        from oocarr.cli.main import main
        from oocarr.engine.plan import STATS_TILES
        big = make("big")
        run = lambda x: main(["-q", "--memory", str(BUDGET), "inspect", x.url, "--stats"],
                             standalone_mode=False)
        run(big)
        with oocarr.memory_budget(BUDGET):
            tile = oocarr.api.storage.tile_plan(big.store, "stats")
        projected = STATS_TILES * int(np.prod(tile)) * 4
        growth, _, _ = measure(lambda: run(big))
        report(growth, projected, 0.0)
    """,
}


@pytest.mark.parametrize("streamer", sorted(SCRIPTS))
def test_peak_growth_is_within_the_projection_and_the_budget(tmp_path, streamer):
    result = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(SCRIPTS[streamer]), str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    growth, projected = report["growth"], report["projected"]
    mib = 2**20
    print(f"{streamer}: projected {projected / mib:.1f} MiB, measured {growth / mib:.1f} MiB")
    assert projected > 0 and projected + ALLOWANCE <= BUDGET, (
        f"{streamer}: projected {projected} bytes + {ALLOWANCE} allowance, budget {BUDGET}"
    )
    assert growth <= projected + ALLOWANCE, (
        f"{streamer}: peak RSS grew {growth / mib:.1f} MiB, projected {projected / mib:.1f} MiB"
        f" + {ALLOWANCE / mib:.0f} MiB allowance"
    )
