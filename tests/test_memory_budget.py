"""The memory promise: with a 32 MB budget and 512 MiB inputs on disk, each op's peak RSS above
the process's baseline (after importing oocarr and running one tiny op) stays within 1.25 × the
budget.  Each measurement runs in its own subprocess, since peak RSS only grows.

Select these with ``-m memory``; they run in the default suite too.
"""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest

from subprocess_rss import run_script, write_features_and_labels

BUDGET = 32 * 10**6
ROWS, COLS = 512 * 2**20 // 4 // 256, 256

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import jax, jax.numpy as jnp, numpy as np
    import oocarr

    x_url, y_url, which = sys.argv[1:4]
    # Opening by URL loads every registered driver (h5py, fsspec ...: about 15 MB of code
    # and modules); that is import cost, not the op's, so it happens before the baseline.
    x, y = oocarr.open(x_url), oocarr.open(y_url)
    tiny = oocarr.from_numpy(np.ones((4, 4), "f4"))
    float(oocarr.sum(tiny * tiny))
    # the first matmul loads the host BLAS (SciPy's, about 30 MB of library): import cost too
    float(oocarr.sum(tiny @ tiny))
    baseline = peak_rss()
    with oocarr.memory_budget(int(sys.argv[4])):
        if which == "sum":
            result = float(oocarr.sum(x))
        elif which == "matmul":
            result = float(oocarr.sum(x @ jnp.full((x.shape[1], 8), 0.5, jnp.float32)))
        elif which == "gram":  # k = every row: the host BLAS folds panels in place, in groups
            result = float(oocarr.sum(oocarr.transpose(x) @ x))
        elif which == "chain":
            result = float(oocarr.sum(oocarr.exp(x * 2.0) - 1.0))
        elif which == "fused":  # under jit the chain is computed on the sum's tiles
            chain = jax.jit(lambda x, t: oocarr.sum(oocarr.exp(x * t) - 1.0))
            result = float(chain(x, jnp.float32(2.0)))
        elif which == "fused-grad":  # a stored gradient through a fused chain
            loss = lambda x: oocarr.mean(oocarr.square(oocarr.tanh(x * 2.0) - 0.5))
            step = jax.jit(jax.grad(loss))
            # the first call compiles a block function per op and tile shape (12 of them,
            # 2-10 MB of XLA's working memory each, which glibc keeps resident): measured
            # from the second call, as a training loop runs
            float(oocarr.sum(step(x)))
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # VmHWM restarts from the resident size now
            baseline = peak_rss()
            result = float(oocarr.sum(step(x)))
        else:
            loss = lambda w: oocarr.mean(oocarr.square(x @ w - y))
            result = float(jnp.sum(jax.jit(jax.grad(loss))(jnp.zeros((x.shape[1], 1)))))
    peak = peak_rss()
    print(json.dumps({"growth": peak - baseline, "result": result}))
    """
)


@pytest.fixture(scope="module", params=["memmap", "hdf5"])
def inputs(request, tmp_path_factory):
    """512 MiB of features and a label column, written a slab at a time."""
    root = tmp_path_factory.mktemp(request.param)
    labels = np.ones((ROWS, 1), "f4")
    return write_features_and_labels(request.param, root, ROWS, COLS, labels, scale=0.01)


# Measured at or over the promise, not yet fixed (35-45 MB over repeated runs).  The planner
# fills the whole budget with the tiles it counts, so the 8 MB of slack must absorb what it
# does not count: the copy JAX makes of each input block (NumPy's buffers are not 64-byte
# aligned, so JAX cannot alias them) and the scratch memory each first call frees after
# compiling a block function (2-10 MB that glibc keeps resident under the tiles that follow).
OVER_BUDGET: dict[tuple[str, str], str] = {}


@pytest.mark.memory
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
@pytest.mark.parametrize("which", ["sum", "matmul", "gram", "chain", "fused", "fused-grad", "grad"])
def test_peak_memory_stays_within_the_budget(inputs, which, request):
    driver = "memmap" if inputs[0].endswith(".npy") else "hdf5"
    if (driver, which) in OVER_BUDGET:
        request.applymarker(pytest.mark.xfail(reason=OVER_BUDGET[driver, which], strict=False))
    report = run_script(SCRIPT, *inputs, which, str(BUDGET))
    assert np.isfinite(report["result"])
    growth = report["growth"]
    print(f"{which}: peak RSS {growth / 1e6:.1f} MB above baseline (budget {BUDGET / 1e6:.0f} MB)")
    assert growth <= 1.25 * BUDGET, f"{which} peaked {growth / 1e6:.1f} MB above its baseline"
