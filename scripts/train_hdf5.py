"""Train two models on an HDF5 dataset larger than the memory budget, through oocarr.

1. Logistic regression with exact full-batch gradients (``oocarr.stream_sum``) and optax's
   L-BFGS: every step reads each training row once.
2. A small MLP with minibatch Adam (``oocarr.batches``, shuffled, read ahead in a thread).

It prints the loss per step or epoch, the throughput in rows and MB per second read, the train
and held-out accuracy (streamed too), saves both models with ``oocarr.save_params``, reloads
them and checks they are identical. A plain h5py loop that only reads the same training data
gives the I/O reference. Without ``--data`` it first writes a synthetic dataset::

    python scripts/train_hdf5.py --rows 600000 --features 64 --budget 16MB
    python scripts/train_hdf5.py --data mydata.h5   # /train/X, /train/y, /test/X, /test/y

The MLP (``--mlp-only`` trains it alone) uses ``chain(clip_by_global_norm, adamw)`` on a cosine
schedule and checkpoints parameters, optimizer state and the loader's state every
``--checkpoint-every`` steps; ``--resume`` continues from the checkpoint at exactly the next
batch and ends with the parameters of an uninterrupted run, bitwise on CPU::

    python scripts/train_hdf5.py --mlp-only --workdir w --die-at-step 250   # killed
    python scripts/train_hdf5.py --mlp-only --workdir w --resume --data w/train.h5

``--plot losses.png`` also draws the losses (matplotlib, in the ``bench`` extra): the
logistic regression's per L-BFGS step, and the MLP's per batch and its mean per epoch::

    python scripts/train_hdf5.py --plot losses.png
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import h5py
import jax
import jax.numpy as jnp
import numpy as np
import optax

import oocarr

CHUNK_ROWS = 8192


# ----------------------------------------------------------------------------
# The data
# ----------------------------------------------------------------------------
def make_dataset(path: str, rows: int, features: int, test_fraction: float = 0.1) -> None:
    """Write float32 features and 0/1 labels with plain h5py, chunked by rows.

    The labels come from a logistic model plus an interaction of the first two features,
    which a linear model cannot fit and an MLP can.
    """
    rng = np.random.default_rng(0)
    w_true = rng.standard_normal(features).astype(np.float32) / np.sqrt(features)
    n_test = int(rows * test_fraction)
    with h5py.File(path, "w") as f:
        for split, n in (("train", rows - n_test), ("test", n_test)):
            chunk = (min(CHUNK_ROWS, n), features)
            x = f.create_dataset(f"{split}/X", (n, features), "f4", chunks=chunk)
            y = f.create_dataset(f"{split}/y", (n,), "f4", chunks=(chunk[0],))
            for start in range(0, n, 65536):
                stop = min(n, start + 65536)
                block = rng.standard_normal((stop - start, features), dtype=np.float32)
                logit = 2.0 * block @ w_true + 1.5 * block[:, 0] * block[:, 1]
                p = 1.0 / (1.0 + np.exp(-logit))
                x[start:stop] = block
                y[start:stop] = (rng.random(stop - start) < p).astype(np.float32)


def h5py_read_loop(path: str) -> tuple[float, int]:
    """Seconds and bytes to read the training data once, chunk by chunk, with plain h5py."""
    start, nbytes = time.perf_counter(), 0
    with h5py.File(path, "r") as f:
        for name in ("train/X", "train/y"):
            ds = f[name]
            buf = np.empty((CHUNK_ROWS, *ds.shape[1:]), ds.dtype)
            for lo in range(0, ds.shape[0], CHUNK_ROWS):
                hi = min(ds.shape[0], lo + CHUNK_ROWS)
                ds.read_direct(buf, np.s_[lo:hi], np.s_[: hi - lo])
                nbytes += buf[: hi - lo].nbytes
    return time.perf_counter() - start, nbytes


def loader_rows_per_second(
    x: oocarr.DiskArray, y: oocarr.DiskArray, batch_size: int, shuffle: bool
) -> float:
    """Rows per second of one epoch of ``oocarr.batches`` with nothing done per batch (the
    loader's own speed, batches delivered as jax.Arrays)."""
    loader = oocarr.batches(x, y, batch_size=batch_size, shuffle=shuffle, seed=0, drop_last=True)
    start, rows = time.perf_counter(), 0
    for xb, _ in loader:
        rows += xb.shape[0]
    return rows / (time.perf_counter() - start)


# ----------------------------------------------------------------------------
# The models
# ----------------------------------------------------------------------------
def linear(p: dict, xb: jax.Array) -> jax.Array:
    return xb @ p["w"] + p["b"]


def init_mlp(key: jax.Array, sizes: list[int]) -> list[dict]:
    keys = jax.random.split(key, len(sizes) - 1)
    return [
        {"w": jax.random.normal(k, (m, n)) * jnp.sqrt(2.0 / m), "b": jnp.zeros(n)}
        for k, m, n in zip(keys, sizes[:-1], sizes[1:])
    ]


def mlp(params: list[dict], xb: jax.Array) -> jax.Array:
    h = xb
    for layer in params[:-1]:
        h = jax.nn.relu(h @ layer["w"] + layer["b"])
    return (h @ params[-1]["w"] + params[-1]["b"])[:, 0]


def accuracy_of(model: Callable[[Any, jax.Array], jax.Array]) -> Callable[..., jax.Array]:
    """The fraction of rows a model classifies right, streamed over stored rows."""
    correct = oocarr.stream_sum(
        lambda p, xb, yb: ((model(p, xb) > 0) == (yb > 0.5)).astype(jnp.float32), mean=True
    )
    return jax.jit(correct)


# ----------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------
@dataclass
class Losses:
    """The losses of a run, ``(step, loss)`` each, for ``--plot``: the logistic regression's
    objective per L-BFGS step, and the MLP's loss per batch and mean per epoch (at the step
    that ends the epoch)."""

    lbfgs: list[tuple[int, float]] = field(default_factory=list)
    batch: list[tuple[int, float]] = field(default_factory=list)
    epoch: list[tuple[int, float]] = field(default_factory=list)


def rate(nbytes: int, rows: int, seconds: float) -> str:
    return f"{rows / seconds:,.0f} rows/s, {nbytes / seconds / 1e6:,.0f} MB/s read"


def fit_logistic(
    x: oocarr.DiskArray, y: oocarr.DiskArray, steps: int, l2: float, losses: Losses | None = None
) -> dict:
    """L-BFGS on the exact full-batch regularised log loss; each step's objective goes to
    ``losses.lbfgs``."""
    losses = losses or Losses()
    log_loss = oocarr.stream_sum(
        lambda p, xb, yb: optax.sigmoid_binary_cross_entropy(linear(p, xb), yb), mean=True
    )

    def objective(p: dict) -> jax.Array:
        return log_loss(p, x, y) + 0.5 * l2 * jnp.sum(p["w"] ** 2)

    opt = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(objective)

    @jax.jit
    def step(p, state):
        value, grad = value_and_grad(p, state=state)
        updates, state = opt.update(grad, state, p, value=value, grad=grad, value_fn=objective)
        return optax.apply_updates(p, updates), state, value

    p = {"w": jnp.zeros(x.shape[1], jnp.float32), "b": jnp.zeros((), jnp.float32)}
    state = opt.init(p)
    print(f"logistic regression, L-BFGS on exact full-batch gradients ({steps} steps)")
    start = time.perf_counter()
    p, state, value = step(p, state)  # compiles
    losses.lbfgs.append((1, float(value)))
    print(f"  step   1  loss {float(value):.5f}  ({time.perf_counter() - start:.1f} s, compiling)")
    start = time.perf_counter()
    with oocarr.io_stats() as stats:
        for i in range(1, steps):
            p, state, value = step(p, state)
            losses.lbfgs.append((i + 1, float(value)))
            print(f"  step {i + 1:3d}  loss {float(value):.5f}", flush=True)
    seconds = time.perf_counter() - start
    nbytes = stats.total.bytes_read
    passes = nbytes / (x.nbytes + y.nbytes)
    print(
        f"  steps 2-{steps}: {seconds:.1f} s, {passes:.0f} passes over the data (line search "
        f"included): {rate(nbytes, round(passes * x.shape[0]), seconds)}"
    )
    return p


def mlp_optimizer(steps: int) -> optax.GradientTransformation:
    """Clip by the global norm, then AdamW on a cosine schedule over the whole run."""
    schedule = optax.cosine_decay_schedule(3e-3, max(1, steps))
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=1e-4))


def fit_mlp(
    x: oocarr.DiskArray,
    y: oocarr.DiskArray,
    epochs: int,
    batch_size: int,
    hidden: int,
    checkpoint: str | None = None,
    every: int = 0,
    resume: bool = False,
    die_at: int | None = None,
    losses: Losses | None = None,
) -> tuple[list[dict], float]:
    """Minibatch training on shuffled batches read ahead from storage; the parameters and
    the last epoch's mean loss.

    Every ``every`` steps the parameters, the optimizer state, the loader's state and the
    epoch's running loss go to ``checkpoint`` with ``oocarr.save_params`` (atomically: a
    checkpoint is whole or absent). With ``resume``, training continues from it at exactly
    the next batch, and ends with the parameters of an uninterrupted run, bitwise on CPU.
    ``die_at`` kills this process (SIGKILL, nothing flushed) after that many steps: the
    demo's preemption. Each step's loss goes to ``losses.batch``, each epoch's mean to
    ``losses.epoch``.
    """
    losses = losses or Losses()
    loader = oocarr.batches(x, y, batch_size=batch_size, shuffle=True, seed=0, drop_last=True)
    tx = mlp_optimizer(epochs * len(loader))
    params = init_mlp(jax.random.key(0), [x.shape[1], hidden, hidden, 1])
    state = tx.init(params)
    done, total, count = 0, 0.0, 0
    if resume and checkpoint and os.path.exists(checkpoint):
        saved = oocarr.load_params(checkpoint)
        params, state = saved["params"], saved["opt_state"]
        done, total, count = int(saved["step"]), float(saved["total"]), int(saved["count"])
        loader = oocarr.batches(
            x, y, batch_size=batch_size, shuffle=True, drop_last=True, state=saved["loader"]
        )
        where = loader.state()
        print(
            f"  resumed from {checkpoint}: step {done}, epoch {where['epoch'] + 1}, "
            f"batch {where['batch']}"
        )

    @jax.jit
    def step(params, state, xb, yb):
        def loss(params):
            return optax.sigmoid_binary_cross_entropy(mlp(params, xb), yb).mean()

        value, grads = jax.value_and_grad(loss)(params)
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state, value

    print(
        f"MLP {x.shape[1]}-{hidden}-{hidden}-1, clip_by_global_norm(1) + AdamW on a cosine "
        f"schedule, batches of {batch_size} ({epochs} epochs)"
    )
    mean = float("nan")
    while loader.epoch < epochs:
        epoch = loader.epoch
        start, waits, steps = time.perf_counter(), 0, 0
        with oocarr.io_stats() as stats:
            for xb, yb in loader:
                params, state, value = step(params, state, xb, yb)
                total, count, done, steps = total + float(value), count + 1, done + 1, steps + 1
                losses.batch.append((done, float(value)))
                if checkpoint and every and done % every == 0:
                    oocarr.save_params(
                        {
                            "params": params,
                            "opt_state": state,
                            "loader": loader.state(),
                            "step": done,
                            "total": total,
                            "count": count,
                        },
                        checkpoint,
                    )
                if die_at is not None and done == die_at:
                    print(
                        f"  killed at step {done} (last checkpoint: step {done - done % every})",
                        flush=True,
                    )
                    os.kill(os.getpid(), signal.SIGKILL)
            waits, waited = loader.stats.waits, loader.stats.wait_seconds
        seconds = time.perf_counter() - start
        mean = total / max(count, 1)
        losses.epoch.append((done, mean))
        print(
            f"  epoch {epoch + 1}  loss {mean:.6f}  {seconds:.1f} s: "
            f"{rate(stats.total.bytes_read, steps * batch_size, seconds)}, "
            f"waited for data in {waits} of {steps} steps ({waits / max(steps, 1):.1%}, "
            f"{waited:.2f} s)",
            flush=True,
        )
        total, count = 0.0, 0
    return params, mean


# ----------------------------------------------------------------------------
# The chart of --plot
# ----------------------------------------------------------------------------
NO_MATPLOTLIB = "--plot needs matplotlib: pip install 'oocarr[bench]' (or matplotlib)"


def require_matplotlib() -> None:
    """``SystemExit`` naming ``--plot``'s extra when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SystemExit(NO_MATPLOTLIB) from None


def plot_losses(losses: Losses, path: str, title: str) -> Any:
    """Draw ``losses`` to the PNG ``path``, one panel per model trained; the
    ``matplotlib.figure.Figure`` (the Agg canvas, no pyplot)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    panels = [p for p in ("lbfgs", "mlp") if p == "mlp" or losses.lbfgs]
    fig = Figure(figsize=(4.2 * len(panels), 3.4), dpi=100, layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, panel in zip(axes, panels):
        if panel == "lbfgs":
            ax.plot(*zip(*losses.lbfgs), "o-", color="#4878d0", label="full-batch objective")
            ax.set_title("logistic regression, L-BFGS", fontsize=10)
        else:
            if losses.batch:
                ax.plot(*zip(*losses.batch), color="#ee854a", alpha=0.6, lw=0.8, label="batch")
            if losses.epoch:
                mean = "epoch mean, at its last step"
                ax.plot(*zip(*losses.epoch), "o-", color="#c44e52", label=mean)
            ax.set_title("MLP, AdamW on minibatches", fontsize=10)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("loss")
        ax.grid(color="#dddddd", linewidth=0.6)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.savefig(path)
    print(f"drew the losses to {path}")
    return fig


def same_tree(a: Any, b: Any) -> bool:
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    return jax.tree.structure(a) == jax.tree.structure(b) and all(
        np.asarray(u).dtype == np.asarray(v).dtype and np.array_equal(u, v)
        for u, v in zip(leaves_a, leaves_b)
    )


def main(argv: list[str] | None = None) -> None:
    """Train as the command line ``argv`` says (``sys.argv[1:]`` when ``None``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="an HDF5 file with /train/X, /train/y, /test/X, /test/y")
    parser.add_argument("--rows", type=int, default=600_000, help="rows to generate")
    parser.add_argument("--features", type=int, default=64, help="features to generate")
    parser.add_argument("--budget", default="16MB", help="oocarr's memory budget")
    parser.add_argument("--lbfgs-steps", type=int, default=10)
    parser.add_argument("--l2", type=float, default=1e-4, help="L2 penalty of the logistic model")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--workdir", help="keep generated files here (default: a temp dir)")
    parser.add_argument(
        "--mlp-only", action="store_true", help="train the MLP only (no L-BFGS, no accuracy)"
    )
    parser.add_argument(
        "--checkpoint-every", type=int, default=100, help="MLP steps between checkpoints"
    )
    parser.add_argument(
        "--resume", action="store_true", help="continue the MLP from its checkpoint in --workdir"
    )
    parser.add_argument("--die-at-step", type=int, help="kill this process after that MLP step")
    parser.add_argument("--save-params", help="write the MLP's final parameters here")
    parser.add_argument(
        "--plot",
        metavar="FILE.png",
        help="draw the losses to this PNG (needs matplotlib: pip install 'oocarr[bench]')",
    )
    args = parser.parse_args(argv)
    if args.plot:
        require_matplotlib()  # before training, not after

    workdir = args.workdir or tempfile.mkdtemp(prefix="oocarr-train-")
    os.makedirs(workdir, exist_ok=True)
    path = args.data
    if path is None and os.path.exists(os.path.join(workdir, "train.h5")):
        path = os.path.join(workdir, "train.h5")  # made by an earlier run in this workdir
    elif path is None:
        path = os.path.join(workdir, "train.h5")
        start = time.perf_counter()
        make_dataset(path, args.rows, args.features)
        print(f"wrote {path} with h5py in {time.perf_counter() - start:.1f} s")

    oocarr.set_memory_budget(args.budget)
    x, y = oocarr.open(f"{path}#/train/X"), oocarr.open(f"{path}#/train/y")
    x_test, y_test = oocarr.open(f"{path}#/test/X"), oocarr.open(f"{path}#/test/y")
    budget = oocarr.config()["memory_budget"]
    data_bytes = x.nbytes + y.nbytes
    print(
        f"train {x.shape[0]:,} rows x {x.shape[1]} features ({data_bytes / 1e6:.0f} MB, "
        f"{data_bytes / budget:.1f}x the {budget / 1e6:.0f} MB budget), "
        f"held out {x_test.shape[0]:,} rows"
    )
    h5py_read_loop(path)  # the first pass pays for opening the file and faulting in its buffer
    seconds, nbytes = h5py_read_loop(path)
    loop = x.shape[0] / seconds
    print(f"plain h5py read loop over the training data: {rate(nbytes, x.shape[0], seconds)}")
    for shuffle in () if args.mlp_only else (False, True):
        loader_rows_per_second(x, y, args.batch_size, shuffle)  # both passes warm
        speed = loader_rows_per_second(x, y, args.batch_size, shuffle)
        print(
            f"oocarr.batches alone, {'shuffled' if shuffle else 'in order'}, batches of "
            f"{args.batch_size}: {speed:,.0f} rows/s ({speed / loop:.2f}x the h5py loop)"
        )

    losses = Losses()
    title = f"{x.shape[0]:,} rows × {x.shape[1]} features, {os.path.basename(path)}"
    checkpoint = os.path.join(workdir, "mlp-checkpoint.h5")
    if args.mlp_only:
        net, mean = fit_mlp(
            x,
            y,
            args.epochs,
            args.batch_size,
            args.hidden,
            checkpoint,
            args.checkpoint_every,
            args.resume,
            args.die_at_step,
            losses,
        )
        print(f"final epoch loss {mean!r}")
        if args.save_params:
            oocarr.save_params(net, args.save_params)
        if args.plot:
            plot_losses(losses, args.plot, title)
        return
    logistic = fit_logistic(x, y, args.lbfgs_steps, args.l2, losses)
    net, _ = fit_mlp(x, y, args.epochs, args.batch_size, args.hidden, losses=losses)

    linear_accuracy, mlp_accuracy = accuracy_of(linear), accuracy_of(mlp)
    for name, accuracy, params in (
        ("logistic regression", linear_accuracy, logistic),
        ("MLP", mlp_accuracy, net),
    ):
        train, test = accuracy(params, x, y), accuracy(params, x_test, y_test)
        print(f"{name:20s} accuracy: train {float(train):.4f}, held out {float(test):.4f}")

    checkpoint = os.path.join(workdir, "models.h5")
    oocarr.save_params({"logistic": logistic, "mlp": net}, checkpoint)
    restored = oocarr.load_params(checkpoint)
    same = same_tree(restored, {"logistic": logistic, "mlp": net})
    print(f"saved both models to {checkpoint}; reloaded {'identical' if same else 'DIFFERENT'}")
    if args.plot:
        plot_losses(losses, args.plot, title)
    if not same:
        sys.exit(1)
    if args.workdir is None and args.data is None:
        shutil.rmtree(workdir)


if __name__ == "__main__":
    main()
