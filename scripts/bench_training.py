"""The data and the cases of workloads 12-14 of ``scripts/bench.py``: the training path.

``step-tax`` (12): a user's own jitted training step (a two-layer MLP with Adam on in-memory
batches), 400 steps, in a process that imported oocarr (and ran one oocarr op) beside one that
never did.  ``step`` runs the steps back to back, ``step-host`` does some host NumPy work
between them, as a loop that logs or augments does.  oocarr touches nothing of JAX's, so the
two should take the same time.

``train`` (13): one epoch of training that MLP on a stored dataset (``X``: rows × 64 float32,
``y``: rows × 1) through ``oocarr.batches`` of 1024 rows, in order and shuffled (the default
shuffle buffer), from HDF5, Zarr and ``.npy``, under a memory budget of an eighth of the
dataset, with the files in the page cache.  The peer is the same loop over the same batch
shapes sliced from the arrays loaded into NumPy (consecutive slices in order; rows gathered by
a random permutation with fancy indexing when shuffled), in a process that never imports
oocarr.

``stream-sum`` (14): ``jax.value_and_grad`` of a least-squares ``oocarr.stream_sum`` over the
same dataset (1 GiB at full size), warm, under the run's ``--budget``, beside the same function
on ``jax.numpy`` arrays loaded before timing.

Data (written once with h5py, NumPy and zarr-python, reused): ``train.h5`` (``X``, ``y``;
8192-row chunks), ``train_X.npy``/``train_y.npy``, ``train_X.zarr``/``train_y.zarr`` (Zarr v3,
uncompressed, the same chunks).  Heavy libraries are imported inside the runners, so a worker
imports only what its engine uses; the in-memory engines never import oocarr.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import bench_workloads as bw
import numpy as np

STEP_TAX, TRAIN, STREAM_SUM = "step-tax", "train", "stream-sum"
WORKLOADS = (STEP_TAX, TRAIN, STREAM_SUM)
FORMATS = ("hdf5", "zarr", "npy")
COLS, HIDDEN, BATCH, CHUNK_ROWS = 64, 256, 1024, 8192
#: Rows of the dataset of each size of run: 1 GiB of ``X`` at full size.
ROWS = {"full": 4_194_304, "quick": 524_288, "tiny": 65_536}
#: Steps of the step-tax loop, and the host work between two steps of ``step-host``.
STEPS, HOST_ROWS = 400, 4096
SEED = 12


def mode_of(sizes: bw.Sizes) -> str:
    """The size of run (``full``, ``quick``, ``tiny``) whose shapes are ``sizes``."""
    return next(mode for mode, s in bw.SIZES.items() if s == sizes)


def rows_of(sizes: bw.Sizes) -> int:
    return ROWS[mode_of(sizes)]


def budget_bytes(sizes: bw.Sizes) -> int:
    """The budget of workload 13: an eighth of the dataset (``X`` and ``y``)."""
    return rows_of(sizes) * (COLS + 1) * 4 // 8


def size_label(workload: str, sizes: bw.Sizes) -> str:
    """The size column of a row of these workloads."""
    if workload == STEP_TAX:
        return f"{STEPS} steps of a {COLS}-{HIDDEN}-{HIDDEN}-1 MLP, batch {BATCH}"
    rows = rows_of(sizes)
    return f"{rows}×{COLS} + {rows}×1 ({rows * (COLS + 1) * 4 / 2**30:.2f} GiB)"


# --------------------------------------------------------------------------------------------
# The data


def paths(data_dir: str, fmt: str) -> tuple[str, str]:
    """URLs of ``X`` and ``y`` in ``fmt``."""
    if fmt == "hdf5":
        path = os.path.join(data_dir, "train.h5")
        return f"{path}#/X", f"{path}#/y"
    suffix = ".npy" if fmt == "npy" else ".zarr"
    return tuple(os.path.join(data_dir, f"train_{name}{suffix}") for name in "Xy")


def _files(data_dir: str, fmt: str) -> list[str]:
    return sorted({url.split("#")[0] for url in paths(data_dir, fmt)})


def _slabs(rows: int) -> Any:
    """``(start, X, y)`` of the dataset, a slab at a time: features drawn from a normal
    distribution, labels 1 where the first two features share a sign."""
    step = 16 * CHUNK_ROWS
    for start in range(0, rows, step):
        rng = np.random.default_rng([SEED, start])
        x = rng.standard_normal((min(step, rows - start), COLS), dtype=np.float32)
        yield start, x, (x[:, :1] * x[:, 1:2] > 0).astype(np.float32)


def _write(fmt: str, targets: tuple[str, str], rows: int) -> None:
    chunks = ((CHUNK_ROWS, COLS), (CHUNK_ROWS, 1))
    if fmt == "hdf5":
        import h5py

        with h5py.File(targets[0], "w") as f:
            dx = f.create_dataset("X", (rows, COLS), "f4", chunks=chunks[0])
            dy = f.create_dataset("y", (rows, 1), "f4", chunks=chunks[1])
            for start, x, y in _slabs(rows):
                dx[start : start + len(x)], dy[start : start + len(x)] = x, y
    elif fmt == "npy":
        mx = np.lib.format.open_memmap(targets[0], "w+", np.float32, (rows, COLS))
        my = np.lib.format.open_memmap(targets[1], "w+", np.float32, (rows, 1))
        for start, x, y in _slabs(rows):
            mx[start : start + len(x)], my[start : start + len(x)] = x, y
        mx.flush()
        my.flush()
        del mx, my
    else:
        import zarr

        zx, zy = (
            zarr.create_array(t, shape=(rows, c), chunks=ch, dtype="f4", compressors=None)
            for t, c, ch in zip(targets, (COLS, 1), chunks)
        )
        for start, x, y in _slabs(rows):
            zx[start : start + len(x)], zy[start : start + len(x)] = x, y


def ensure_data(
    data_dir: str, sizes: bw.Sizes, workloads: list[str], log: Callable[[str], None]
) -> dict[str, float]:
    """Write the dataset in every format, when missing (each file under a temporary name,
    renamed when complete); reuse it when present."""
    if not {TRAIN, STREAM_SUM} & set(workloads):
        return {}
    os.makedirs(data_dir, exist_ok=True)
    rows, seconds = rows_of(sizes), {}
    for fmt in FORMATS:
        files = _files(data_dir, fmt)
        if all(os.path.exists(f) for f in files):
            continue
        t0 = time.perf_counter()
        log(f"writing the training dataset as {fmt} ({rows * (COLS + 1) * 4 / 2**30:.2f} GiB)")
        partial = [
            os.path.join(os.path.dirname(f), f".partial-{os.path.basename(f)}") for f in files
        ]
        targets = tuple(partial) if fmt != "hdf5" else (partial[0], partial[0])
        _write(fmt, targets, rows)
        for src, dst in zip(partial, files):
            os.rename(src, dst)
        seconds[f"train ({fmt})"] = time.perf_counter() - t0
    if seconds:
        os.sync()
    return seconds


# --------------------------------------------------------------------------------------------
# The model: the same in every engine


def _model() -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``(init(), step(params, state, x, y) -> (params, state, loss))``: a jitted Adam step
    of a two-layer MLP with a logistic loss."""
    import jax
    import jax.numpy as jnp
    import optax

    opt = optax.adam(1e-3)

    def init() -> tuple[Any, Any]:
        k1, k2, k3 = jax.random.split(jax.random.PRNGKey(SEED), 3)
        params = {
            "w1": jax.random.normal(k1, (COLS, HIDDEN)) / 8,
            "b1": jnp.zeros(HIDDEN),
            "w2": jax.random.normal(k2, (HIDDEN, HIDDEN)) / 16,
            "b2": jnp.zeros(HIDDEN),
            "w3": jax.random.normal(k3, (HIDDEN, 1)) / 16,
            "b3": jnp.zeros(1),
        }
        return params, opt.init(params)

    def loss(p: Any, x: Any, y: Any) -> Any:
        h = jax.nn.relu(x @ p["w1"] + p["b1"])
        h = jax.nn.relu(h @ p["w2"] + p["b2"])
        return jnp.mean(optax.sigmoid_binary_cross_entropy(h @ p["w3"] + p["b3"], y))

    @jax.jit
    def step(p: Any, s: Any, x: Any, y: Any) -> tuple[Any, Any, Any]:
        value, grad = jax.value_and_grad(loss)(p, x, y)
        updates, s = opt.update(grad, s, p)
        return optax.apply_updates(p, updates), s, value

    return init, step


def _epoch(batches: Callable[[], Any]) -> tuple[float, int]:
    """Train one epoch over ``batches()``; ``(last loss, rows seen)``."""
    init, step = _model()
    params, state = init()
    loss, rows = None, 0
    for xb, yb in batches():
        params, state, loss = step(params, state, xb, yb)
        rows += xb.shape[0]
    return float(loss), rows


def _epoch_check(result: tuple[float, int]) -> dict[str, Any]:
    # the order differs between engines when shuffled: the rows delivered are compared
    return {"rows": result[1], "total": float(np.isfinite(result[0]))}


# --------------------------------------------------------------------------------------------
# Cases


def _step_tax(ctx: bw.Context, op: str, fmt: str) -> bw.Case:
    """The user's own loop: :data:`STEPS` jitted steps on fixed in-memory batches (whatever
    this process imported before is the engine's only difference)."""
    import jax.numpy as jnp

    init, step = _model()
    rng = np.random.default_rng(SEED)
    x = jnp.asarray(rng.standard_normal((BATCH, COLS), dtype=np.float32))
    y = jnp.asarray((rng.random((BATCH, 1)) > 0.5).astype(np.float32))
    host = rng.standard_normal((HOST_ROWS, COLS), dtype=np.float32)

    def run() -> tuple[float, float]:
        params, state = init()
        loss = None
        for _ in range(STEPS):
            params, state, loss = step(params, state, x, y)
            if op == "step-host":  # e.g. augmenting the next batch on the host
                np.tanh(host @ host[:COLS].T).sum()
        return float(loss), float(jnp.sum(params["w3"]))

    def check(result: tuple[float, float]) -> dict[str, Any]:
        return {"value": result[0], "grad": [result[1]]}

    return bw.Case(run, [], check)


def _train_oocarr(ctx: bw.Context, op: str, fmt: str) -> bw.Case:
    import oocarr

    x_url, y_url = paths(ctx.data_dir, fmt)
    budget = budget_bytes(ctx.sizes)

    def run() -> tuple[float, int]:
        with oocarr.memory_budget(budget):
            return _epoch(
                lambda: oocarr.batches(
                    oocarr.open(x_url),
                    oocarr.open(y_url),
                    batch_size=BATCH,
                    shuffle=op == "shuffled",
                    seed=SEED,
                )
            )

    return bw.Case(run, _files(ctx.data_dir, fmt), _epoch_check)


def _train_numpy(ctx: bw.Context, op: str, fmt: str) -> bw.Case:
    """The same epoch over NumPy arrays loaded before the timing (no oocarr here)."""
    x_path, y_path = paths(ctx.data_dir, "npy")
    x, y = np.load(x_path), np.load(y_path)
    rows = len(x)

    def batches() -> Any:
        if op == "in-order":
            for start in range(0, rows, BATCH):
                yield x[start : start + BATCH], y[start : start + BATCH]
            return
        order = np.random.default_rng(SEED).permutation(rows)
        for start in range(0, rows, BATCH):
            picked = order[start : start + BATCH]
            yield x[picked], y[picked]

    return bw.Case(lambda: _epoch(batches), [], _epoch_check)


#: Workload 14's losses, each over the whole dataset: ``value_and_grad`` (least squares, its
#: first), ``logistic`` (logistic regression), ``mlp`` (a 2-layer MLP with a logistic loss)
#: and ``softmax`` (softmax regression over two classes: the cross-entropy of a row
#: ``logsumexp``, the ``y`` column as one-hot targets).
LOSSES = ("value_and_grad", "logistic", "mlp", "softmax")
#: Hidden units of the ``mlp`` loss.
LOSS_HIDDEN = 64


def _loss(op: str, xp: Any, nn: Any) -> Callable[..., Any]:
    """Loss ``op`` of ``(params, x, y)`` summed over rows, written once with ``xp``'s
    functions and ``nn``'s ``relu``, ``softplus`` and ``logsumexp``: ``jax.numpy`` and
    ``jax.nn`` (a tile's sum in ``stream_sum``, or the data in memory) or ``oocarr`` (op by op
    on the stored arrays)."""

    def logistic(z: Any, y: Any) -> Any:  # binary cross-entropy of the logits z
        return xp.sum(nn.softplus(z) - y * z)

    def cross_entropy(z: Any, y: Any) -> Any:  # y as one-hot targets of two classes
        targets = y * np.array([0, 1], np.float32) + (1 - y) * np.array([1, 0], np.float32)
        return xp.sum(nn.logsumexp(z, axis=1) - xp.sum(z * targets, axis=1))

    if op == "value_and_grad":
        return lambda w, x, y: xp.sum(xp.square(x @ w - y))
    if op == "logistic":
        return lambda w, x, y: logistic(x @ w, y)
    if op == "softmax":
        return lambda w, x, y: cross_entropy(x @ w, y)
    return lambda p, x, y: logistic(nn.relu(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"], y)


def _start(op: str = "value_and_grad") -> Any:
    if op == "softmax":
        return np.full((COLS, 2), 0.01, np.float32) * np.array([1, -1], np.float32)
    if op != "mlp":
        return np.full((COLS, 1), 0.01, np.float32)
    rng = np.random.default_rng(SEED)
    return {
        "w1": (rng.standard_normal((COLS, LOSS_HIDDEN)) / 8).astype(np.float32),
        "b1": np.zeros(LOSS_HIDDEN, np.float32),
        "w2": (rng.standard_normal((LOSS_HIDDEN, 1)) / 8).astype(np.float32),
        "b2": np.zeros(1, np.float32),
    }


def _loss_check(result: Any) -> dict[str, Any]:
    import jax

    value, grad = result
    flat = np.concatenate([np.asarray(g, float).ravel() for g in jax.tree.leaves(grad)])
    return {"value": float(value), "grad": flat.tolist()}


def _stored_loss_case(ctx: bw.Context, op: str, fmt: str, loss: Callable[..., Any]) -> bw.Case:
    """``jax.jit(jax.value_and_grad(loss))`` on ``X`` and ``y`` opened by oocarr, under the
    run's ``--budget`` (as workload 5's)."""
    import jax

    import oocarr

    x_url, y_url = paths(ctx.data_dir, fmt)
    budget = ctx.budget
    step = jax.jit(jax.value_and_grad(loss))
    params = jax.tree.map(jax.numpy.asarray, _start(op))

    def run() -> Any:
        with oocarr.memory_budget(budget):
            value, grad = step(params, oocarr.open(x_url), oocarr.open(y_url))
            return float(value), jax.tree.map(np.asarray, grad)

    return bw.Case(run, _files(ctx.data_dir, fmt), _loss_check)


def _stream_sum_oocarr(ctx: bw.Context, op: str, fmt: str) -> bw.Case:
    import jax
    import jax.numpy as jnp

    import oocarr

    tile_loss = _loss(op, jnp, jax.nn)
    return _stored_loss_case(ctx, op, fmt, oocarr.stream_sum(tile_loss))


def _opbyop_oocarr(ctx: bw.Context, op: str, fmt: str) -> bw.Case:
    import oocarr

    return _stored_loss_case(ctx, op, fmt, _loss(op, oocarr, oocarr))


def _stream_sum_jax(ctx: bw.Context, op: str, fmt: str) -> bw.Case:
    import jax
    import jax.numpy as jnp

    x_path, y_path = paths(ctx.data_dir, "npy")
    x, y = jnp.asarray(np.load(x_path)), jnp.asarray(np.load(y_path))
    step = jax.jit(jax.value_and_grad(_loss(op, jnp, jax.nn)))
    params = jax.tree.map(jnp.asarray, _start(op))

    def run() -> Any:
        value, grad = step(params, x, y)
        return float(value), jax.tree.map(np.asarray, grad)

    return bw.Case(run, [], _loss_check)


#: The workload column of each operation's row.
OP_LABELS = {
    (STEP_TAX, "step"): f"{STEPS} jitted MLP steps",
    (STEP_TAX, "step-host"): f"{STEPS} jitted MLP steps, host NumPy work between",
    (TRAIN, "in-order"): "MLP epoch, batches(1024), in order",
    (TRAIN, "shuffled"): "MLP epoch, batches(1024), shuffled",
    (STREAM_SUM, "value_and_grad"): "least squares value_and_grad",
    (STREAM_SUM, "logistic"): "logistic regression value_and_grad",
    (STREAM_SUM, "mlp"): f"{COLS}-{LOSS_HIDDEN}-1 MLP, logistic loss, value_and_grad",
    (STREAM_SUM, "softmax"): "2-class softmax regression value_and_grad",
}

#: (workload, engine) -> runner(ctx, op, fmt) -> Case.
RUNNERS: dict[tuple[str, str], Callable[[bw.Context, str, str], bw.Case]] = {
    (STEP_TAX, "oocarr"): _step_tax,
    (STEP_TAX, "jax"): _step_tax,
    (TRAIN, "oocarr"): _train_oocarr,
    (TRAIN, "numpy"): _train_numpy,
    (STREAM_SUM, "oocarr"): _stream_sum_oocarr,
    (STREAM_SUM, "oocarr-opbyop"): _opbyop_oocarr,
    (STREAM_SUM, "jax"): _stream_sum_jax,
}


def prepare_engine(
    workload: str, engine: str, budget: int, scratch: str, fallback: Callable[..., Any]
) -> Callable[[], Any]:
    """Configure ``engine`` for these workloads (``fallback``, the other workloads'
    ``prepare_engine``, for the rest): the in-memory engines import JAX and optax only."""
    if workload not in WORKLOADS or engine.startswith("oocarr"):
        return fallback(workload, engine, budget, scratch)
    import jax.numpy as jnp
    import optax  # noqa: F401

    return lambda: float(jnp.ones((64, 64)).sum())
