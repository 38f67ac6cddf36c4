"""``oocarr.stream_sum`` on every driver: full-batch least squares against ``np.linalg.lstsq``,
L-BFGS logistic regression against scikit-learn, values and gradients against
``jax.value_and_grad`` on the in-memory data, one read of the data per step, ``jax.lax``
control flow with the data closed over, and peak memory on data 8x the budget."""

from __future__ import annotations

import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import oocarr
from oocarr import errors
from subprocess_rss import run_script, write_features_and_labels


def stored(backend, array, chunk_rows=32):
    chunks = (chunk_rows, *array.shape[1:])
    return oocarr.DiskArray(backend.store(array, chunks=chunks))


def skip_s3(backend):
    if backend.id == "fsspec-s3":
        pytest.skip("fsspec is covered on memory:// and local disk; S3 round trips are slow here")


def one_per_driver(backend):
    """Run a slow test once per driver (each configuration compiles its own training step)."""
    if backend.id not in ("memmap-npy", "hdf5-chunked", "fsspec-memory", "testmem"):
        pytest.skip("covered on another configuration of the same driver")


def close(got, want, tol=1e-5):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=tol, atol=tol)


def close_tree(got, want, tol=1e-5):
    jax.tree.map(lambda a, b: close(a, b, tol), got, want)


# ----------------------------------------------------------------------------
# Values and gradients against jax.value_and_grad on the in-memory data
# ----------------------------------------------------------------------------
N, D, K = 50, 6, 3
TILE = 7  # does not divide N


def per_row_loss(p, x, y):
    return jnp.sum(jnp.tanh(x @ p["W"] + p["b"]) - y, axis=1) ** 2


def tile_loss(p, x, y):
    return jnp.sum(per_row_loss(p, x, y))


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, D)).astype(np.float32)
    y = rng.standard_normal((N, K)).astype(np.float32)
    w = rng.uniform(0.5, 2.0, N).astype(np.float32)
    params = {
        "W": jnp.asarray(rng.standard_normal((D, K)), jnp.float32) * 0.3,
        "b": jnp.asarray(rng.standard_normal(K), jnp.float32),
    }
    return x, y, w, params


# Made once, so their per-tile functions compile once for the whole module.
SUM = oocarr.stream_sum(tile_loss, tile_rows=TILE)
SUM_MEAN = oocarr.stream_sum(tile_loss, mean=True, tile_rows=TILE)
ROWS_SUM = oocarr.stream_sum(per_row_loss, tile_rows=TILE)
ROWS_MEAN = oocarr.stream_sum(per_row_loss, mean=True, tile_rows=TILE)


@pytest.fixture(scope="module")
def cases(problem):
    """``(g, weights, value and gradient of the same loss on the in-memory data)``; the weights
    ``"stored"`` are stored on the backend under test."""
    x, y, w, params = problem

    def weighted(p):
        return jnp.sum(w * per_row_loss(p, x, y))

    oracles = [
        (SUM, None, lambda p: tile_loss(p, x, y)),
        (SUM_MEAN, None, lambda p: tile_loss(p, x, y) / N),
        (ROWS_SUM, None, lambda p: jnp.sum(per_row_loss(p, x, y))),
        (ROWS_SUM, "stored", weighted),
        (ROWS_MEAN, "stored", lambda p: weighted(p) / np.sum(w)),
        (ROWS_MEAN, w, lambda p: weighted(p) / np.sum(w)),
    ]
    return [(g, ws, jax.value_and_grad(fn)(params)) for g, ws, fn in oracles]


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_value_and_grad_equal_the_in_memory_ones(backend, problem, cases, jit):
    if jit:
        skip_s3(backend)
    x, y, w, params = problem
    xd, yd, wd = stored(backend, x, 16), stored(backend, y, 16), stored(backend, w, 16)
    wrap = jax.jit if jit else (lambda f: f)
    # S3 round trips are slow here: a scalar and a weighted per-row loss are enough there
    for g, weights, (want_value, want_grad) in cases[::4] if backend.id == "fsspec-s3" else cases:
        ws = wd if isinstance(weights, str) else weights

        def loss(p, g=g, ws=ws):
            return g(p, xd, yd, weights=ws)

        value, grad = wrap(jax.value_and_grad(loss))(params)
        close(value, want_value)
        close_tree(grad, want_grad)
        assert grad["W"].dtype == jnp.float32 and grad["W"].shape == (D, K)
        close(wrap(loss)(params), want_value)
        if weights is not None:
            close_tree(wrap(jax.grad(loss))(params), want_grad)


def test_arrays_may_be_stored_in_memory_or_traced(backend, problem):
    skip_s3(backend)
    x, y, w, params = problem
    xd = stored(backend, x)
    g = ROWS_MEAN
    want_value, want_grad = jax.value_and_grad(lambda p: jnp.mean(per_row_loss(p, x, y)))(params)
    # a DiskArray and a NumPy array passed to jit: a traced DiskArray and a traced jax.Array
    step = jax.jit(jax.value_and_grad(g))
    for args in [(xd, y), (xd, jnp.asarray(y)), (x, y)]:
        value, grad = step(params, *args)
        close(value, want_value)
        close_tree(grad, want_grad)
    # a DiskArray written by an oocarr op inside the same jitted function
    value, grad = jax.jit(jax.value_and_grad(lambda p, xd: g(p, xd * 1.0, y)))(params, xd)
    close(value, want_value)
    close_tree(grad, want_grad)


def test_each_tile_shape_compiles_once(backend, problem):
    skip_s3(backend)
    x, y, _, params = problem
    xd, yd = stored(backend, x), stored(backend, y)
    seen = []

    def per_row(p, x, y):
        seen.append(x.shape[0])
        return per_row_loss(p, x, y)

    def scalar(p, x, y):
        seen.append(x.shape[0])
        return tile_loss(p, x, y)

    for fn, tile_shapes in [(per_row, [TILE]), (scalar, [TILE, N % TILE])]:
        seen.clear()
        g = jax.value_and_grad(oocarr.stream_sum(fn, tile_rows=TILE))
        for _ in range(3):
            g(params, xd, yd)
        # every call traces fn once on the whole data (its output kind); tiles compile once
        assert sorted(n for n in seen if n != N) == sorted(tile_shapes), (fn, seen)


# ----------------------------------------------------------------------------
# One read of the data per value_and_grad
# ----------------------------------------------------------------------------
def test_value_and_grad_reads_the_data_once(backend, problem):
    skip_s3(backend)
    x, y, w, params = problem
    xd, yd, wd = stored(backend, x, 8), stored(backend, y, 8), stored(backend, w, 8)
    total = x.nbytes + y.nbytes + w.nbytes
    g = oocarr.stream_sum(per_row_loss, mean=True)
    vg = jax.value_and_grad(lambda p, x, y, w: g(p, x, y, weights=w))
    # 4 buffers of 8 rows of x, y, w and the mask: tiles of 8 rows (one storage chunk)
    budget = 4 * 8 * (x[0].nbytes + y[0].nbytes + 4 + 4)
    for fn in (vg, jax.jit(vg)):
        with oocarr.memory_budget(budget):
            fn(params, xd, yd, wd)  # compile outside the count
            with oocarr.io_stats() as stats:
                for _ in range(2):
                    jax.block_until_ready(fn(params, xd, yd, wd))
        counts = stats.total
        assert counts.bytes_read == 2 * total
        assert counts.calls == 2
        assert counts.tiles == 2 * -(-N // 8)
        assert counts.bytes_written == 0


def test_tiles_are_whole_storage_chunks_where_they_fit(backend, problem):
    skip_s3(backend)
    x, y, _, params = problem
    xd, yd = stored(backend, x, 8), stored(backend, y, 8)
    # room for 20 rows: 16 (two chunks) on chunked storage, 20 on contiguous storage
    budget = 4 * 20 * (x[0].nbytes + y[0].nbytes + 4)
    rows = 16 if xd.chunks is not None else 20
    with oocarr.memory_budget(budget), oocarr.io_stats() as stats:
        oocarr.stream_sum(per_row_loss)(params, xd, yd)
    assert stats.total.tiles == -(-N // rows)
    assert stats.total.pages_read == 2 * -(-N // rows)


def test_a_budget_below_one_tile_raises(problem):
    x, y, _, params = problem
    g = oocarr.stream_sum(per_row_loss)
    xd = oocarr.from_numpy(x)
    with oocarr.memory_budget(4 * (x[0].nbytes + y[0].nbytes)):
        with pytest.raises(errors.BudgetTooSmallError, match="stream_sum"):
            g(params, xd, y)


def test_bad_calls_raise_clear_errors(problem):
    x, y, w, params = problem
    xd = oocarr.from_numpy(x)
    g = oocarr.stream_sum(per_row_loss)
    with pytest.raises(errors.ShapeMismatchError, match="same number of rows"):
        g(params, xd, y[:-1])
    with pytest.raises(errors.ShapeMismatchError, match="one value per row"):
        g(params, xd, y, weights=y)
    with pytest.raises(errors.InvalidArgumentError, match="one loss per row"):
        oocarr.stream_sum(tile_loss)(params, xd, y, weights=w)
    with pytest.raises(errors.InvalidArgumentError, match="scalar"):
        oocarr.stream_sum(lambda p, x, y: x @ p["W"])(params, xd, y)
    with pytest.raises(errors.InvalidArgumentError, match="params only"):
        jax.grad(lambda x: g(params, x, y))(jnp.asarray(x))
    with pytest.raises(errors.InvalidArgumentError, match="params only"):
        jax.grad(lambda x: g(params, x, y))(xd)
    with pytest.raises(NotImplementedError, match="second-order"):
        jax.hessian(lambda b: g({**params, "b": b}, xd, y))(params["b"])


def test_forward_mode_gives_the_directional_derivative(problem):
    x, y, _, params = problem
    tangent = jax.tree.map(jnp.ones_like, params)
    want = jax.jvp(lambda p: jnp.mean(per_row_loss(p, x, y)), (params,), (tangent,))
    got = jax.jvp(lambda p: ROWS_MEAN(p, oocarr.from_numpy(x), y), (params,), (tangent,))
    close(got[0], want[0])
    close(got[1], want[1], 1e-4)


# ----------------------------------------------------------------------------
# jax.lax control flow, data closed over
# ----------------------------------------------------------------------------
def test_lax_loops_with_the_data_closed_over_or_passed(backend, problem):
    skip_s3(backend)
    x, y, _, params = problem
    xd, yd = stored(backend, x), stored(backend, y)
    g = ROWS_MEAN

    def oracle_loss(p):
        return jnp.mean(per_row_loss(p, x, y))

    def descend(loss):
        def step(p):
            value, grad = jax.value_and_grad(loss)(p)
            return jax.tree.map(lambda a, b: a - 0.05 * b, p, grad), value

        return step

    want = params
    want_values = []
    for _ in range(4):
        want, value = descend(oracle_loss)(want)
        want_values.append(value)

    closed = descend(lambda p: g(p, xd, yd))

    @jax.jit
    def with_while(p):
        def body(c):
            i, p, _ = c
            p, v = closed(p)
            return i + 1, p, v

        return jax.lax.while_loop(lambda c: c[0] < 4, body, (0, p, jnp.float32(0)))[1]

    @jax.jit
    def with_fori(p, xd, yd):
        passed = descend(lambda p: g(p, xd, yd))
        return jax.lax.fori_loop(0, 4, lambda i, p: passed(p)[0], p)

    @jax.jit
    def with_scan(p):
        return jax.lax.scan(lambda p, _: closed(p), p, length=4)

    close_tree(with_while(params), want)
    close_tree(with_fori(params, xd, yd), want)
    got, values = with_scan(params)
    close_tree(got, want)
    close(values, want_values)
    close_tree(jax.lax.fori_loop(0, 4, lambda i, p: closed(p)[0], params), want)  # not jitted


# ----------------------------------------------------------------------------
# Training against independent solvers
# ----------------------------------------------------------------------------
def test_gradient_descent_reaches_the_least_squares_solution(backend):
    skip_s3(backend)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((300, 5)).astype(np.float32)
    y = (x @ rng.standard_normal(5) + 0.5 + 0.1 * rng.standard_normal(300)).astype(np.float32)
    A = np.hstack([x, np.ones((300, 1), np.float32)]).astype(np.float64)
    want = np.linalg.lstsq(A, y.astype(np.float64), rcond=None)[0]
    lr = 1.0 / np.linalg.eigvalsh(2 * A.T @ A / len(A)).max()

    xd, yd = stored(backend, x, 40), stored(backend, y, 40)
    mse = oocarr.stream_sum(lambda p, x, y: (x @ p["w"] + p["b"] - y) ** 2, mean=True)

    @jax.jit
    def fit(p):
        def step(_, p):
            grad = jax.grad(mse)(p, xd, yd)
            return jax.tree.map(lambda a, b: a - lr * b, p, grad)

        return jax.lax.fori_loop(0, 40, step, p)

    with oocarr.memory_budget(4 * 64 * (6 * 4 + 4)):  # tiles of 40 rows: one storage chunk
        p = fit({"w": jnp.zeros(5, jnp.float32), "b": jnp.float32(0)})
    got = np.append(np.asarray(p["w"]), p["b"])
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-3


@pytest.fixture(scope="module")
def breast_cancer():
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    x, y = load_breast_cancer(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(
        x, y, test_size=0.3, random_state=0, stratify=y
    )
    scaler = StandardScaler().fit(X_train)
    X_train = scaler.transform(X_train).astype(np.float32)
    X_test = scaler.transform(X_test).astype(np.float32)
    C = 1.0
    model = LogisticRegression(C=C, tol=1e-8, max_iter=10_000).fit(X_train, y_train)
    return X_train, y_train.astype(np.float32), X_test, y_test, C, model


def _log_loss(p, x, y):
    z = x @ p["w"] + p["b"]
    return jnp.logaddexp(0.0, z) - y * z


LOG_LOSS = oocarr.stream_sum(_log_loss, tile_rows=100)


def test_lbfgs_logistic_regression_matches_scikit_learn(backend, breast_cancer):
    skip_s3(backend)
    one_per_driver(backend)
    X_train, y_train, X_test, y_test, C, model = breast_cancer
    xd, yd = stored(backend, X_train, 64), stored(backend, y_train, 64)

    def objective(p):  # scikit-learn's: C * (sum of log-losses) + |w|^2 / 2, bias not penalised
        return C * LOG_LOSS(p, xd, yd) + 0.5 * jnp.sum(p["w"] ** 2)

    opt = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(objective)

    @jax.jit
    def step(p, state):
        value, grad = value_and_grad(p, state=state)
        updates, state = opt.update(grad, state, p, value=value, grad=grad, value_fn=objective)
        return optax.apply_updates(p, updates), state

    p = {"w": jnp.zeros(X_train.shape[1], jnp.float32), "b": jnp.float32(0)}
    # optax's initial state is weakly typed and the first step's is not: make it strong so
    # that the step compiles once
    state = jax.tree.map(lambda x: jnp.asarray(x, x.dtype), opt.init(p))
    for _ in range(30):
        p, state = step(p, state)

    sk = {"w": model.coef_[0], "b": model.intercept_[0]}
    sk_objective = C * np.sum(
        np.logaddexp(0, X_train @ sk["w"] + sk["b"]) - y_train * (X_train @ sk["w"] + sk["b"])
    ) + 0.5 * np.sum(sk["w"] ** 2)
    assert float(objective(p)) <= sk_objective * (1 + 1e-4)
    ours = np.mean((X_test @ np.asarray(p["w"]) + float(p["b"]) > 0) == y_test)
    theirs = model.score(X_test, y_test)
    assert abs(ours - theirs) <= 0.01, (ours, theirs)


# ----------------------------------------------------------------------------
# Memory: streaming data 8x the budget
# ----------------------------------------------------------------------------
BUDGET = 32 * 10**6
ROWS, COLS = 256 * 2**20 // 4 // 256, 256

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import jax, jax.numpy as jnp, numpy as np
    import oocarr

    x_url, y_url, budget = sys.argv[1], sys.argv[2], int(sys.argv[3])
    x, y = oocarr.open(x_url), oocarr.open(y_url)
    loss = oocarr.stream_sum(
        lambda w, x, y: jnp.logaddexp(0.0, x @ w) - y * (x @ w), mean=True
    )
    step = jax.jit(jax.value_and_grad(loss))
    tiny = oocarr.from_numpy(np.ones((64, x.shape[1]), "f4"))
    jax.block_until_ready(step(jnp.zeros(x.shape[1]), tiny, np.ones(64, "f4")))
    baseline = peak_rss()
    with oocarr.memory_budget(budget), oocarr.io_stats() as stats:
        value, grad = step(jnp.zeros(x.shape[1]), x, y)
        value = float(value)
    peak = peak_rss()
    print(json.dumps({"growth": peak - baseline, "result": value,
                      "read": stats.total.bytes_read, "tiles": stats.total.tiles}))
    """
)


@pytest.fixture(scope="module", params=["memmap", "hdf5"])
def big_inputs(request, tmp_path_factory):
    """256 MiB of features and a label column, written a slab at a time."""
    root = tmp_path_factory.mktemp(request.param)
    labels = (np.random.default_rng(1).random(ROWS) < 0.5).astype(np.float32)
    return write_features_and_labels(request.param, root, ROWS, COLS, labels, shift=-0.5)


@pytest.mark.memory
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_peak_memory_stays_within_the_budget(big_inputs):
    report = run_script(SCRIPT, *big_inputs, str(BUDGET))
    assert abs(report["result"] - np.log(2)) < 1e-6  # w = 0: every row's loss is log 2
    assert report["read"] == ROWS * (COLS + 1) * 4
    growth = report["growth"]
    print(
        f"stream_sum: peak RSS {growth / 1e6:.1f} MB above baseline (budget {BUDGET / 1e6:.0f} MB)"
    )
    assert growth <= 1.25 * BUDGET, f"peaked {growth / 1e6:.1f} MB above its baseline"
