"""The task seam: an op call's tile tasks pickle, run in a fresh process (reopening their
inputs by locator) and give the bytes the local engine writes."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import oocarr
from oocarr.engine import OOCAlgorithm, Operand
from oocarr.engine.executor import DaskExecutor
from oocarr.ops.elementwise import BINARY
from oocarr.ops.matmul import Matmul
from oocarr.ops.reductions import Sum

RUN_TASKS = textwrap.dedent(
    """
    import pickle, sys
    import numpy as np
    import oocarr

    with open(sys.argv[1], "rb") as f:
        plan, dtype = pickle.load(f)
    out = plan.combine((task.run() for task in plan), dtype)
    np.save(sys.argv[2], out)
    """
)


def _cases(tmp_path, fmt):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((300, 70)).astype("f4")
    b = rng.standard_normal((70, 90)).astype("f4")
    w = rng.standard_normal((70,)).astype("f4")
    if fmt == "npy":
        x, y = oocarr.save(a, str(tmp_path / "a.npy")), oocarr.save(b, str(tmp_path / "b.npy"))
    elif fmt == "h5":
        x = oocarr.save(a, str(tmp_path / "d.h5") + "#/a", chunks=(64, 32))
        y = oocarr.save(b, str(tmp_path / "e.h5") + "#/b", chunks=(32, 32))
    else:
        x = oocarr.save(a, str(tmp_path / "a.zarr"), chunks=(64, 32), compression="zstd")
        y = oocarr.save(b, str(tmp_path / "b.zarr"), chunks=(32, 32))
    return [
        (Sum((300, 70), axis=0), [x.store], a.sum(axis=0)),
        (Matmul((300, 70), (70, 90)), [x.store, y.store], a @ b),
        (BINARY["multiply"]((300, 70), (70,)), [x.store, w], a * w),
    ]


@pytest.mark.parametrize("fmt", ["npy", "h5", "zarr"])
def test_tasks_run_in_a_fresh_process_give_the_local_bytes(tmp_path, fmt):
    for i, (op, inputs, expected) in enumerate(_cases(tmp_path, fmt)):
        operands = [Operand(v) for v in inputs]
        dtype = np.dtype("f4")
        with oocarr.memory_budget(64 * 1024):  # several tiles, several steps per tile
            local = np.empty(op.output_shape, dtype)
            OOCAlgorithm(op).forward(operands, local)
            plan = OOCAlgorithm(op).tasks(operands)
        assert len(plan.tasks) > 1 or len(plan.tasks[0].steps) > 1, op.name
        np.testing.assert_allclose(local, expected, rtol=2e-5, atol=2e-5)  # NumPy, the oracle
        pickled = tmp_path / f"plan{i}.pkl"
        pickled.write_bytes(pickle.dumps((plan, dtype)))
        result = tmp_path / f"out{i}.npy"
        subprocess.run(
            [sys.executable, "-c", RUN_TASKS, str(pickled), str(result)],
            check=True,
            capture_output=True,
        )
        remote = np.load(result)
        assert remote.tobytes() == local.tobytes(), f"{op.name} on {fmt}: bytes differ"


def test_a_task_holds_no_open_handle(tmp_path):
    x = oocarr.save(np.ones((40, 8), "f4"), str(tmp_path / "x.h5") + "#/x", chunks=(8, 8))
    with oocarr.memory_budget(4096):
        plan = OOCAlgorithm(Sum((40, 8), axis=1)).tasks([Operand(x.store)])
    for task in plan:
        (locator,) = task.inputs
        assert isinstance(locator, oocarr.Locator) and locator == x.locator
    assert np.array_equal(plan.combine((t.run() for t in plan), np.dtype("f4")), np.full(40, 8.0))


RUN_BACKWARD = textwrap.dedent(
    """
    import pickle, sys
    import numpy as np
    import oocarr

    with open(sys.argv[1], "rb") as f:
        plan, shapes = pickle.load(f)
    targets = [None if s is None else np.zeros(s, "f4") for s in shapes]
    plan.combine((task.run() for task in plan), targets)
    np.savez(sys.argv[2], *[t for t in targets if t is not None])
    """
)


@pytest.mark.parametrize("fmt", ["npy", "h5"])
def test_backward_tasks_run_in_a_fresh_process_give_the_local_bytes(tmp_path, fmt):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((120, 50)).astype("f4")
    b = rng.standard_normal((50, 40)).astype("f4")
    g = rng.standard_normal((120, 40)).astype("f4")
    if fmt == "npy":
        x, y = oocarr.save(a, str(tmp_path / "a.npy")), oocarr.save(b, str(tmp_path / "b.npy"))
    else:
        x = oocarr.save(a, str(tmp_path / "d.h5") + "#/a", chunks=(32, 16))
        y = oocarr.save(b, str(tmp_path / "d2.h5") + "#/b", chunks=(16, 16))
    op = Matmul(a.shape, b.shape)
    operands = [Operand(x.store), Operand(y.store)]
    local = [np.zeros(a.shape, "f4"), np.zeros(b.shape, "f4")]
    with oocarr.memory_budget(16 * 1024):
        OOCAlgorithm(op).backward(operands, g, local)
        plan = OOCAlgorithm(op).backward_tasks(operands, Operand(g), (True, True))
    assert len(plan.tasks) > 1
    np.testing.assert_allclose(local[0], g @ b.T, rtol=1e-4, atol=1e-4)  # NumPy, the oracle
    np.testing.assert_allclose(local[1], a.T @ g, rtol=1e-4, atol=1e-4)
    pickled, result = tmp_path / "plan.pkl", tmp_path / "grads.npz"
    pickled.write_bytes(pickle.dumps((plan, [a.shape, b.shape])))
    subprocess.run(
        [sys.executable, "-c", RUN_BACKWARD, str(pickled), str(result)],
        check=True,
        capture_output=True,
    )
    with np.load(result) as remote:
        assert remote["arr_0"].tobytes() == local[0].tobytes()
        assert remote["arr_1"].tobytes() == local[1].tobytes()


LOSS_MODULE = textwrap.dedent(
    """
    import jax.numpy as jnp

    def per_row(params, x, y):
        return (x @ params["w"] + params["b"] - y) ** 2
    """
)

RUN_ROWS = textwrap.dedent(
    """
    import pickle, sys
    import numpy as np
    sys.path.insert(0, sys.argv[3])
    import oocarr

    with open(sys.argv[1], "rb") as f:
        plan = pickle.load(f)
    value, grad_b, grad_w = plan.combine(task.run() for task in plan)  # leaves: b, w
    np.savez(sys.argv[2], value=value, w=grad_w, b=grad_b)
    """
)


@pytest.mark.parametrize("fmt", ["npy", "h5"])
def test_stream_sum_row_tasks_in_a_fresh_process_give_value_and_grad(tmp_path, fmt):
    import jax
    import jax.numpy as jnp

    (tmp_path / "lossmod.py").write_text(LOSS_MODULE)
    sys.path.insert(0, str(tmp_path))
    try:
        import lossmod
    finally:
        sys.path.remove(str(tmp_path))
    rng = np.random.default_rng(5)
    a = rng.standard_normal((1000, 12)).astype("f4")
    t = rng.standard_normal(1000).astype("f4")
    if fmt == "npy":
        x = oocarr.save(a, str(tmp_path / "x.npy"))
    else:
        x = oocarr.save(a, str(tmp_path / "x.h5") + "#/x", chunks=(128, 12))
    params = {"w": jnp.asarray(rng.standard_normal(12).astype("f4")), "b": jnp.float32(0.5)}
    loss = oocarr.stream_sum(lossmod.per_row, mean=True)
    with oocarr.memory_budget(16 * 1024):
        value, grads = jax.value_and_grad(loss)(params, x, t)
        plan = loss.tasks(params, x, t)
    assert len(plan.tasks) > 1
    oracle = lambda p: jnp.mean((a @ p["w"] + p["b"] - t) ** 2)  # noqa: E731
    np.testing.assert_allclose(value, oracle(params), rtol=1e-5)
    np.testing.assert_allclose(grads["w"], jax.grad(oracle)(params)["w"], rtol=1e-4, atol=1e-5)
    pickled, result = tmp_path / "rows.pkl", tmp_path / "rows.npz"
    pickled.write_bytes(pickle.dumps(plan))
    subprocess.run(
        [sys.executable, "-c", RUN_ROWS, str(pickled), str(result), str(tmp_path)],
        check=True,
        capture_output=True,
    )
    with np.load(result) as remote:
        assert remote["value"].tobytes() == np.asarray(value).tobytes()
        assert remote["w"].tobytes() == np.asarray(grads["w"]).tobytes()
        assert remote["b"].tobytes() == np.asarray(grads["b"]).tobytes()


@pytest.mark.parametrize(
    "op, reference",
    [
        (lambda x: oocarr.sum(x), lambda a: a.sum(dtype=np.float64)),
        (lambda x: oocarr.sum(x, axis=0), lambda a: a.sum(axis=0, dtype=np.float64)),
        (lambda x: oocarr.max(x, axis=0), lambda a: a.max(axis=0)),
        (lambda x: x.T @ x, lambda a: a.T.astype(np.float64) @ a),
    ],
    ids=["sum", "sum-axis0", "max-axis0", "gram"],
)
def test_tiles_of_many_steps_fold_in_groups_with_the_tasks_bits(
    tmp_path, monkeypatch, op, reference
):
    """A tile whose steps read more than FOLD_GROUP_BYTES folds in groups (one task each):
    the local loop merges the groups' partials as the tasks' combine does, bit for bit."""
    from oocarr.engine import run

    a = np.random.default_rng(5).standard_normal((4000, 64)).astype("f4")
    x = oocarr.save(a, str(tmp_path / "a.zarr"), chunks=(100, 64))
    monkeypatch.setattr(run, "FOLD_GROUP_BYTES", 100 * 64 * 4 * 3)  # three chunks a group
    with oocarr.memory_budget("2MB"), oocarr.io_stats() as stats:
        local = np.asarray(oocarr.to_numpy(op(x)))
        captured = []
        original = run.OOCAlgorithm.tasks

        def spy(self, operands, plan=None):
            captured.append(original(self, operands, plan))
            return captured[-1]

        monkeypatch.setattr(run.OOCAlgorithm, "tasks", spy)
        with oocarr.executor(_InProcess()):
            remote = np.asarray(oocarr.to_numpy(op(x)))
    (plan,) = [p for p in captured if any(t.partial for t in p.tasks)] or [None]
    assert plan is not None and sum(t.partial for t in plan.tasks) > 2
    assert remote.tobytes() == local.tobytes()
    np.testing.assert_allclose(local, reference(a), rtol=2e-4, atol=2e-3)
    assert 0 < max(s.projected_bytes for s in stats.by_site.values()) <= 2_000_000


class _InProcess(DaskExecutor):
    """An executor that runs the plan's tasks here, one by one, pickled as to a worker (what
    a cluster's workers do, without the cluster): the engine's cluster path, end to end."""

    def __init__(self):
        super().__init__(None)

    def map(self, tasks, counts=None, what="oocarr"):
        for task in tasks:
            yield pickle.loads(pickle.dumps(task)).run(counts)

    def check_fits(self, projected, what):
        pass

    def check_reachable(self, refs, what):
        pass
