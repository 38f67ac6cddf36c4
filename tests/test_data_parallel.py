"""Data parallelism across two processes on this machine: each reads its shard of one HDF5
file with ``batches(shard=(i, 2))``, the gradients are averaged with JAX's CPU collectives
(``jax.distributed`` on 127.0.0.1, gloo), and both end with the parameters of one process
training on the global batches (the oracle: optax in memory on the same rows)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import h5py
import jax
import jax.numpy as jnp
import numpy as np
import optax

import oocarr

ROWS, FEATURES, LOCAL_BATCH = 4096, 8, 128

WORKER = """
import json, sys
import jax
jax.config.update("jax_cpu_collectives_implementation", "gloo")
index, port, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=index)
import jax.numpy as jnp, numpy as np, optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec
import oocarr

mesh = Mesh(np.array(jax.devices()), ("p",))
split, whole = NamedSharding(mesh, PartitionSpec("p")), NamedSharding(mesh, PartitionSpec())
mean_over_processes = jax.jit(lambda g: g.mean(0), out_shardings=whole)

def all_reduce(local):
    part = jax.device_put(local[None], jax.local_devices()[0])
    return mean_over_processes(
        jax.make_array_from_single_device_arrays((2, *local.shape), split, [part])
    ).addressable_data(0)

X, y = oocarr.open(f"{path}#/X"), oocarr.open(f"{path}#/y")
loader = oocarr.batches(X, y, batch_size=int(sys.argv[4]), shard="jax", drop_last=True)
assert loader.shard == (index, 2)
tx = optax.adam(0.05)
w = jnp.zeros(X.shape[1])
state = tx.init(w)
grad = jax.jit(jax.grad(lambda w, xb, yb: jnp.mean((xb @ w - yb) ** 2)))
steps = 0
for xb, yb in loader:
    g = all_reduce(grad(w, xb, yb))
    updates, state = tx.update(g, state, w)
    w = optax.apply_updates(w, updates)
    steps += 1
print(json.dumps({"index": index, "steps": steps, "w": np.asarray(w).tolist()}))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_average_their_shards_gradients_like_one_process(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((ROWS, FEATURES)).astype(np.float32)
    y = (x @ rng.standard_normal(FEATURES) + 0.1 * rng.standard_normal(ROWS)).astype(np.float32)
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("X", data=x, chunks=(256, FEATURES))
        f.create_dataset("y", data=y, chunks=(256,))
    port = _free_port()
    env = {**os.environ, "XLA_FLAGS": "", "JAX_PLATFORMS": "cpu"}
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(i), str(port), str(path), str(LOCAL_BATCH)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = []
    for w in workers:
        out, err = w.communicate(timeout=300)
        assert w.returncode == 0, err[-3000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))

    # one process on the global batches: step k holds batch k of each shard
    shards = [
        [
            (np.asarray(xb), np.asarray(yb))
            for xb, yb in oocarr.batches(
                oocarr.open(f"{path}#/X"),
                oocarr.open(f"{path}#/y"),
                batch_size=LOCAL_BATCH,
                shard=(i, 2),
                drop_last=True,
            )
        ]
        for i in range(2)
    ]
    tx = optax.adam(0.05)
    w = jnp.zeros(FEATURES)
    state = tx.init(w)
    grad = jax.grad(lambda w, xb, yb: jnp.mean((xb @ w - yb) ** 2))
    for (x0, y0), (x1, y1) in zip(*shards, strict=True):
        g = grad(w, np.concatenate([x0, x1]), np.concatenate([y0, y1]))
        updates, state = tx.update(g, state, w)
        w = optax.apply_updates(w, updates)
    steps = ROWS // 2 // LOCAL_BATCH
    assert [o["steps"] for o in outs] == [steps, steps]
    np.testing.assert_array_equal(outs[0]["w"], outs[1]["w"])  # replicas stay identical
    np.testing.assert_allclose(outs[0]["w"], np.asarray(w), rtol=1e-5, atol=1e-6)
