"""oocarr.optim: optax steps over DiskArray parameters against the same steps of plain optax on
in-memory arrays, eagerly and under jit, with tiles that do not divide the shapes."""

from __future__ import annotations

import gc
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import oocarr
from oocarr import errors

# Small enough that the loss's ops and every optimizer step are cut into several uneven tiles.
BUDGET = 4 * 4 * 24
STEPS = 5
LOCAL = ["memmap-npy", "hdf5-chunked", "fsspec-local"]
OPTIMIZERS = {
    "sgd": lambda: optax.sgd(0.1),
    "momentum": lambda: optax.sgd(0.1, momentum=0.9),
    "adam": lambda: optax.adam(0.05),
}


def data(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


XA, YA, W0 = data((37, 13), 0), data((37, 3), 1), 0.1 * data((13, 3), 2)


def loss(params, x, y):
    return oocarr.mean(oocarr.square(x @ params["w"] - y))


def ref_loss(params):
    return jnp.mean(jnp.square(XA @ params["w"] - YA))


def oracle(opt, params, loss_fn=ref_loss, steps=STEPS):
    """The same steps with plain optax on jax arrays."""
    state = opt.init(params)
    for _ in range(steps):
        updates, state = opt.update(jax.grad(loss_fn)(params), state, params)
        params = optax.apply_updates(params, updates)
    return params


def settle(tree):
    """Wait for a jitted step's callbacks before any other JAX work: a step's io_callbacks run
    jitted block functions, and eager JAX work on the main thread beside them can deadlock the
    CPU runtime on small machines (seen on 2 cores, with plain oocarr ops too)."""
    leaves = jax.tree.leaves(tree)
    markers = [x._marker for x in leaves if isinstance(x, oocarr.DiskArray)]
    jax.block_until_ready(
        [m for m in markers if m is not None] + [x for x in leaves if isinstance(x, jax.Array)]
    )


def train(tx, params, x, y, *, jit, steps=STEPS, loss_fn=loss):
    traces = []

    def step(params, state):
        traces.append(1)
        grads = jax.grad(loss_fn)(params, x, y)
        updates, state = tx.update(grads, state, params)
        return oocarr.optim.apply_updates(params, updates), state

    step = jax.jit(step) if jit else step
    with oocarr.memory_budget(BUDGET):
        state = tx.init(params)
        for _ in range(steps):
            params, state = step(params, state)
            settle((params, state))
    return params, state, len(traces)


def close(got, want, tol=1e-5):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=tol, atol=tol)


@pytest.mark.parametrize("backend", LOCAL, indirect=True)
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_jitted_steps_on_stored_params_match_optax(backend, name):
    want = oracle(OPTIMIZERS[name](), {"w": jnp.asarray(W0)})
    X = oocarr.DiskArray(backend.store(XA, chunks=(10, 7)))
    y = oocarr.DiskArray(backend.store(YA, chunks=(10, 3)))
    w = oocarr.DiskArray(backend.store(W0, chunks=(5, 3), mode="r+"))
    tx = oocarr.optim.blockwise(OPTIMIZERS[name]())
    params, state, traces = train(tx, {"w": w}, X, y, jit=True)
    assert traces == 1
    assert isinstance(params["w"], oocarr.DiskArray)
    assert params["w"].locator == w.locator
    close(params["w"], want["w"])
    close(oocarr.open(w.locator), want["w"])  # written back into the parameter's storage
    for leaf in jax.tree.leaves(state):
        assert isinstance(leaf, oocarr.DiskArray | jax.Array)


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_eager_steps_on_scratch_params_match_optax(name):
    want = oracle(OPTIMIZERS[name](), {"w": jnp.asarray(W0)})
    X, y = oocarr.from_numpy(XA), oocarr.from_numpy(YA)
    tx = oocarr.optim.blockwise(OPTIMIZERS[name]())
    # a scratch parameter: rebinding it each step must not delete its storage
    params, state, traces = train(tx, {"w": oocarr.from_numpy(W0)}, X, y, jit=False)
    gc.collect()
    assert traces == STEPS
    close(params["w"], want["w"])


def test_adam_state_is_stored_in_scratch_and_freed_with_its_handles():
    w = oocarr.from_numpy(W0)
    tx = oocarr.optim.blockwise(optax.adam(0.1))
    X, y = oocarr.from_numpy(XA), oocarr.from_numpy(YA)
    params, state, _ = train(tx, {"w": w}, X, y, jit=True, steps=2)
    gc.collect()
    adam = state.per_leaf[0][0]
    assert isinstance(adam.mu, oocarr.DiskArray) and isinstance(adam.nu, oocarr.DiskArray)
    assert adam.mu.url.startswith(oocarr.scratch_dir())
    assert isinstance(adam.count, jax.Array) and int(adam.count) == 2
    # mu after two steps of the same in-memory computation
    g_state = optax.adam(0.1).init({"w": jnp.asarray(W0)})
    p = {"w": jnp.asarray(W0)}
    for _ in range(2):
        u, g_state = optax.adam(0.1).update(jax.grad(ref_loss)(p), g_state, p)
        p = optax.apply_updates(p, u)
    close(adam.mu, g_state[0].mu["w"])
    paths = [adam.mu.locator.url, adam.nu.locator.url]
    assert all(os.path.exists(p) for p in paths)
    del state, adam
    gc.collect()
    assert not any(os.path.exists(p) for p in paths)


def test_in_memory_params_pass_through():
    def mixed_loss(params, x, y):
        return oocarr.mean(oocarr.square(x @ params["w"] + params["b"] - y))

    def ref_mixed(params):
        return jnp.mean(jnp.square(XA @ params["w"] + params["b"] - YA))

    b0 = jnp.full((3,), 0.5, jnp.float32)
    want = oracle(optax.adam(0.05), {"w": jnp.asarray(W0), "b": b0}, ref_mixed)
    X, y = oocarr.from_numpy(XA), oocarr.from_numpy(YA)
    tx = oocarr.optim.blockwise(optax.adam(0.05))
    params = {"w": oocarr.from_numpy(W0), "b": b0}
    params, state, traces = train(tx, params, X, y, jit=True, loss_fn=mixed_loss)
    assert traces == 1
    assert isinstance(params["b"], jax.Array) and isinstance(params["w"], oocarr.DiskArray)
    b_state = state.per_leaf[0][0]  # leaves in jax.tree order: "b" before "w"
    assert isinstance(b_state.mu, jax.Array)
    close(params["b"], want["b"])
    close(params["w"], want["w"])


def test_optimizer_steps_are_tiled_under_the_budget():
    w = oocarr.from_numpy(W0)
    g = oocarr.from_numpy(data((13, 3), 3))
    tx = oocarr.optim.blockwise(optax.adam(0.1))
    state = tx.init({"w": w})
    with oocarr.memory_budget(BUDGET), oocarr.io_stats() as stats:
        updates, state = tx.update({"w": g}, state, {"w": w})
    (site,) = [s for s in stats.by_site if s.startswith("optim.update")]
    # The memory model (oocarr.engine.plan): 4 stored inputs (g, w, mu, nu) hold 3 tiles each
    # (in use, read ahead, held by XLA), 3 outputs (update, mu, nu) 2 each (computed, written
    # behind): 18 buffers of 384 // 18 = 21 bytes, one row of 3 float32 each: 13 tiles
    assert stats.by_site[site].tiles == 13
    assert 0 < stats.by_site[site].projected_bytes <= BUDGET
    want_u, _ = optax.adam(0.1).update(jnp.asarray(np.asarray(g)), optax.adam(0.1).init(W0), W0)
    close(updates["w"], want_u)


def test_read_only_params_raise(tmp_path):
    path = str(tmp_path / "w.h5#/w")
    oocarr.save(W0, path)
    w = oocarr.open(path)
    tx = oocarr.optim.blockwise(optax.sgd(0.1))
    X, y = oocarr.from_numpy(XA), oocarr.from_numpy(YA)
    with pytest.raises(errors.ReadOnlyError, match="r\\+"):
        train(tx, {"w": w}, X, y, jit=False, steps=1)
    with pytest.raises(errors.ReadOnlyError, match="r\\+"):
        train(tx, {"w": w}, X, y, jit=True, steps=1)
    close(oocarr.open(path), W0)
    params, _, _ = train(tx, {"w": oocarr.open(path, "r+")}, X, y, jit=True, steps=1)
    close(oocarr.open(path), oracle(optax.sgd(0.1), {"w": jnp.asarray(W0)}, steps=1)["w"])


def test_an_interrupted_update_leaves_the_old_state(monkeypatch):
    from oocarr.train import optim

    w = oocarr.from_numpy(W0)
    g = oocarr.from_numpy(data((13, 3), 4))
    tx = optim.blockwise(optax.sgd(0.1, momentum=0.9))
    state = tx.init({"w": w})
    trace = state.per_leaf[0][0].trace
    calls = []
    original = optim._pad_edge

    def failing(block, shape):
        calls.append(1)
        if len(calls) > 5:
            raise KeyboardInterrupt
        return original(block, shape)

    monkeypatch.setattr(optim, "_pad_edge", failing)
    with oocarr.memory_budget(BUDGET), pytest.raises(KeyboardInterrupt):
        tx.update({"w": g}, state, {"w": w})
    close(trace, np.zeros_like(W0))
    name = os.path.basename(trace.locator.url)
    assert [n for n in os.listdir(os.path.dirname(trace.locator.url)) if name in n] == [name]


def test_updates_of_the_wrong_shape_raise():
    w = oocarr.from_numpy(W0)
    with pytest.raises(errors.ShapeMismatchError):
        oocarr.optim.apply_updates({"w": w}, {"w": oocarr.from_numpy(np.zeros((3, 13), "f4"))})
    tx = oocarr.optim.blockwise(optax.sgd(0.1))
    with pytest.raises(errors.ShapeMismatchError):
        tx.update({"w": jnp.zeros((2, 3))}, tx.init({"w": w}), {"w": w})


def test_missing_optax_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "optax", None)
    with pytest.raises(errors.MissingDependencyError, match="pip install optax"):
        oocarr.optim.blockwise(None)
    # apply_updates does not need optax
    new = oocarr.optim.apply_updates({"w": oocarr.from_numpy(np.ones(2, "f4"))}, {"w": 1.0})
    close(new["w"], np.full(2, 2.0))


@pytest.mark.parametrize(
    ("make", "names"),
    [
        (lambda: optax.adafactor(1e-3), "scale_by_factored_rms"),
        (lambda: optax.chain(optax.clip_by_block_rms(1.0), optax.sgd(0.1)), "clip_by_block_rms"),
        (lambda: optax.chain(optax.centralize(), optax.adam(0.1)), "centralize"),
    ],
    ids=["adafactor", "clip_by_block_rms", "centralize"],
)
def test_transformations_that_combine_elements_are_refused_at_init(make, names):
    """Tile by tile they would use per-tile statistics: refused when the state is made,
    naming the transformation, never a silently different update."""
    tx = oocarr.optim.blockwise(make())
    w = oocarr.from_numpy(data((300, 300), 3))
    with pytest.raises(errors.UnsupportedTransformationError, match=names):
        tx.init({"w": w})


def test_elementwise_transformations_with_schedules_are_accepted():
    schedule = optax.cosine_decay_schedule(0.05, 10)
    params = {"w": jnp.asarray(W0)}
    for opt in [optax.adamw(schedule), optax.chain(optax.clip(1.0), optax.lion(1e-3))]:
        tx = oocarr.optim.blockwise(opt)
        w = oocarr.from_numpy(W0)
        state = tx.init({"w": w})
        for _ in range(3):
            g = {"w": oocarr.from_numpy(np.asarray(jax.grad(ref_loss)({"w": jnp.asarray(w)})["w"]))}
            updates, state = tx.update(g, state, {"w": w})
            w = oocarr.optim.apply_updates({"w": w}, updates)["w"]
        np.testing.assert_allclose(
            np.asarray(w), oracle(opt, params, steps=3)["w"], rtol=1e-5, atol=1e-6
        )


NORM_TAKING = {
    "clip-adamw-cosine": lambda: optax.chain(
        optax.clip_by_global_norm(0.5),
        optax.adamw(optax.cosine_decay_schedule(0.05, 10), weight_decay=0.01),
    ),
    "lamb": lambda: optax.lamb(0.05, weight_decay=0.01),
    "lars": lambda: optax.lars(0.1, weight_decay=0.01, momentum=0.9),
    "scale-then-clip": lambda: optax.chain(
        optax.scale_by_adam(), optax.clip_by_global_norm(1.0), optax.scale(-0.05)
    ),
}


@pytest.mark.parametrize("backend", LOCAL, indirect=True)
@pytest.mark.parametrize("name", sorted(NORM_TAKING))
def test_norm_taking_transformations_match_optax_jitted(backend, name):
    """Global and per-parameter norms over a stored and an in-memory parameter, each in a
    streamed pass of its own: several jitted steps, compiled once, against optax in memory."""

    def loss_b(params, x, y):
        return oocarr.mean(oocarr.square(x @ params["w"] + params["b"] - y))

    def ref_b(params):
        return jnp.mean(jnp.square(XA @ params["w"] + params["b"] - YA))

    start = {"w": jnp.asarray(W0), "b": jnp.full(3, 0.1, jnp.float32)}
    assert optax.tree.norm(jax.grad(ref_b)(start)) > 0.5  # the clip clips
    want = oracle(NORM_TAKING[name](), start, ref_b)
    X = oocarr.DiskArray(backend.store(XA, chunks=(10, 7)))
    y = oocarr.DiskArray(backend.store(YA, chunks=(10, 3)))
    w = oocarr.DiskArray(backend.store(W0, chunks=(5, 3), mode="r+"))
    tx = oocarr.optim.blockwise(NORM_TAKING[name]())
    params, _, traces = train(tx, {"w": w, "b": start["b"]}, X, y, jit=True, loss_fn=loss_b)
    assert traces == 1
    close(params["w"], want["w"])
    close(params["b"], want["b"])
