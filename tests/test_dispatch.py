"""JAX's CPU dispatch: a jitted oocarr step interleaved with eager JAX work must not hang.

JAX's CPU client dispatches asynchronously (oocarr leaves it so); oocarr's callbacks run their
block functions on the engine's own synchronous client (``oocarr.engine.device``), so they
never queue behind the program that waits for them.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

INTERLEAVED = textwrap.dedent(
    """
    import tempfile
    import jax, jax.numpy as jnp, numpy as np, oocarr, optax

    rng = np.random.default_rng(0)
    Xa = rng.standard_normal((37, 13)).astype(np.float32)
    ya = rng.standard_normal((37, 3)).astype(np.float32)
    w0 = rng.standard_normal((13, 3)).astype(np.float32) * 0.1
    X, y = oocarr.from_numpy(Xa), oocarr.from_numpy(ya)

    def loss(w):
        return oocarr.mean(oocarr.square(X @ w - y))

    def ref_loss(p):
        return jnp.mean(jnp.square(Xa @ p["w"] - ya))

    @jax.jit
    def step(w):
        return w.update_(w - 0.1 * jax.grad(loss)(w))

    opt = optax.adam(0.05)
    for trial in range(4):
        w = oocarr.save(w0, tempfile.mkdtemp() + "/w.npy", mode="r+")
        rp = {"w": jnp.asarray(w0)}
        rs = opt.init(rp)
        with oocarr.memory_budget(4 * 4 * 24):  # many tiles: many callbacks per step
            for i in range(5):
                w = step(w)
                g = jax.grad(ref_loss)(rp)
                u, rs = opt.update(g, rs, rp)
                rp = optax.apply_updates(rp, u)
    want = w0.astype(np.float64)
    for i in range(5):  # the same five steps of gradient descent, in NumPy
        want = want - 0.1 * 2 * Xa.T @ (Xa @ want - ya) / ya.size
    np.testing.assert_allclose(np.asarray(w), want, rtol=1e-4, atol=1e-5)
    """
)


@pytest.mark.parametrize("start_jax_first", [False, True])
def test_a_jitted_step_interleaved_with_eager_jax_work_finishes(start_jax_first):
    # This hung within a few steps on 2 cores when block functions ran on JAX's own client
    # with its asynchronous dispatch.  A watchdog prints every thread's stack if it stalls.
    prelude = "import faulthandler; faulthandler.dump_traceback_later(90, exit=True)\n"
    if start_jax_first:  # JAX's backend running before oocarr is imported changes nothing
        prelude += "import jax.numpy as jnp; jnp.ones(2).block_until_ready()\n"
    result = subprocess.run(
        [sys.executable, "-c", prelude + INTERLEAVED], capture_output=True, text=True, timeout=150
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "RuntimeWarning" not in result.stderr
