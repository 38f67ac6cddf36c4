"""``oocarr.engine.plan.require`` is the one place ``BudgetTooSmallError`` is raised: the
engine's budget check (naming what an op's smallest tile holds), ``to_numpy``'s check against
the memory available and the Dask executor's against its workers' memory per task each state
their need as a ``Projection``, and every refusal names the input, the need and the fix."""

import pathlib

import numpy as np
import pytest

import oocarr
import oocarr.api.storage
from oocarr import errors
from oocarr.api import searching
from oocarr.engine.composed import ComposedOp
from oocarr.engine.executor import DaskExecutor
from oocarr.engine.plan import Buffers, Projection, require
from oocarr.ops.reductions import Sum

SRC = pathlib.Path(oocarr.__file__).parent


def test_only_require_constructs_the_error():
    sites = sorted(
        f"{path.relative_to(SRC)}:{n}"
        for path in SRC.rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "BudgetTooSmallError(" in line and not line.lstrip().startswith("class ")
    )
    assert len(sites) == 1 and sites[0].startswith("engine/plan.py:"), sites


def test_require_names_its_limit_and_remedy():
    need = Projection("copy", (Buffers("tiles", 2, 300),))
    require(need, 600, limit="the moon", remedy="by magic")
    with pytest.raises(errors.BudgetTooSmallError) as info:
        require(need, 599, limit="the moon", remedy="by magic", url="a.zarr")
    assert str(info.value) == (
        "the moon of 599 bytes cannot hold copy of a.zarr: it needs at least 600 bytes "
        "(2 x 300 bytes of tiles); raise it to at least 600 bytes by magic"
    )
    assert info.value.url == "a.zarr"
    assert isinstance(info.value, MemoryError)
    with pytest.raises(errors.BudgetTooSmallError, match="^the memory budget of 1 bytes"):
        require(need, 1)


def test_to_numpy_refuses_more_than_the_memory_available(monkeypatch):
    a = np.zeros((30, 7), "f8")
    x = oocarr.from_numpy(a)
    monkeypatch.setattr(oocarr.api.storage, "available_memory", lambda: a.nbytes - 1)
    with pytest.raises(errors.BudgetTooSmallError) as info:
        oocarr.to_numpy(x)
    message = str(info.value)
    assert message.startswith(f"the memory available of {a.nbytes - 1} bytes ")
    assert f"cannot hold to_numpy of {x.store.url}:" in message
    assert f"needs at least {a.nbytes} bytes" in message
    assert "shape (30, 7) and dtype float64" in message
    assert "read a region of it (x[start:stop])" in message
    assert info.value.url == x.store.url
    monkeypatch.setattr(oocarr.api.storage, "available_memory", lambda: a.nbytes)
    np.testing.assert_array_equal(oocarr.to_numpy(x), a)


def test_an_ops_smallest_tile_is_named_by_the_engines_check():
    x = oocarr.from_numpy(np.zeros((4, 1000), "f4"))
    with oocarr.memory_budget(4096):
        with pytest.raises(errors.BudgetTooSmallError) as info:
            searching.sort(x)
    message = str(info.value)
    assert "the memory budget of 4096 bytes cannot hold sort of" in message
    assert "7 x 4000 bytes of op tiles of whole lines of 1000 elements along axis 1" in message
    assert "with oocarr.set_memory_budget" in message
    assert info.value.url == x.store.url
    assert info.value.__cause__ is None  # the engine's own error, not restated

    x1 = oocarr.from_numpy(np.arange(1000, dtype="f4"))
    with oocarr.memory_budget(4096):
        with pytest.raises(errors.BudgetTooSmallError) as info:
            searching.searchsorted(x1, oocarr.from_numpy(np.zeros((7, 5), "f4")))
    assert "4000 bytes of op tiles holding the whole sorted array x1 of 1000 elements" in str(
        info.value
    )


def test_a_composed_op_forwards_its_smallest_tile():
    op = Sum((6, 2))
    assert ComposedOp(op, [None]).min_tile_label() == "op tiles"
    op.min_tile_label = lambda: "op tiles of whole rows"
    assert ComposedOp(op, [None]).min_tile_label() == "op tiles of whole rows"


@pytest.mark.parametrize(
    "projected",
    [2000, Projection("sum", (Buffers("tiles", 4, 500),))],
    ids=["bytes", "projection"],
)
def test_dask_refuses_a_task_over_the_workers_memory_per_task(monkeypatch, projected):
    cluster = DaskExecutor(None)
    monkeypatch.setattr(cluster, "task_memory", lambda: 1999)
    with pytest.raises(errors.BudgetTooSmallError) as info:
        cluster.check_fits(projected, "mean")
    message = str(info.value)
    assert message.startswith(
        "the cluster's workers' memory per task (memory_limit / nthreads) of 1999 bytes cannot "
        "hold mean: it needs at least 2000 bytes"
    )
    assert "more memory per thread" in message and "lower the memory budget" in message
    monkeypatch.setattr(cluster, "task_memory", lambda: 2000)
    cluster.check_fits(projected, "mean")
    monkeypatch.setattr(cluster, "task_memory", lambda: None)  # workers without a limit
    cluster.check_fits(10**18, "mean")
