"""Resuming ``oocarr.batches`` from ``state()``: on every driver, at several points of an
epoch and across epochs, shuffled and in order, the batches after a resume are bitwise those
of an uninterrupted run (the oracle: the uninterrupted run's rows, checked against NumPy's
array); the order does not depend on ``prefetch``; a state that does not fit is refused."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import oocarr
from oocarr import errors

ROWS, COLS, BATCH = 1500, 5, 32


def _skip_s3(backend):
    if backend.id.startswith("fsspec-s3"):
        pytest.skip("the fsspec driver is covered on memory:// and local disk; S3 is slow here")


def _dataset(backend):
    x = np.random.default_rng(0).standard_normal((ROWS, COLS)).astype(np.float32)
    y = np.arange(ROWS, dtype=np.int64)
    xs = oocarr.DiskArray(backend.store(x, chunks=(16, COLS), mode="r"))
    ys = oocarr.DiskArray(backend.store(y, chunks=(32,), mode="r"))
    return x, xs, ys


def _ids(batch, x) -> np.ndarray:
    xb, yb = (np.asarray(b) for b in batch)
    np.testing.assert_array_equal(xb, x[yb])  # rows stay together, and are the stored rows
    return yb


def _run(loader, x, epochs: int, stop_at: int | None = None):
    """The row ids of each batch over ``epochs`` epochs, and the state after ``stop_at``
    batches in all (``None``: not stopped)."""
    seen, saved = [], None
    for _ in range(epochs):
        for batch in loader:
            seen.append(_ids(batch, x))
            if stop_at is not None and len(seen) == stop_at:
                return seen, json.loads(json.dumps(loader.state()))
    return seen, saved


@pytest.mark.parametrize("shuffle", [True, False], ids=["shuffled", "in-order"])
def test_resuming_gives_the_uninterrupted_batches(backend, shuffle):
    _skip_s3(backend)
    x, xs, ys = _dataset(backend)
    per_epoch = -(-ROWS // BATCH)
    kwargs = dict(batch_size=BATCH, shuffle=shuffle, seed=11, shuffle_buffer=400)
    with oocarr.memory_budget("1MB"):
        whole, _ = _run(oocarr.batches(xs, ys, **kwargs), x, epochs=2)
        assert len(whole) == 2 * per_epoch
        np.testing.assert_array_equal(np.sort(np.concatenate(whole[:per_epoch])), np.arange(ROWS))
        for stop_at in [1, 7, per_epoch - 1, per_epoch, per_epoch + 5]:
            head, state = _run(oocarr.batches(xs, ys, **kwargs), x, epochs=2, stop_at=stop_at)
            assert state["epoch"] == stop_at // per_epoch
            assert state["batch"] == stop_at % per_epoch
            resumed = oocarr.batches(xs, ys, batch_size=BATCH, shuffle=shuffle, state=state)
            tail, _ = _run(resumed, x, epochs=2 - state["epoch"])
            for got, want in zip(head + tail, whole, strict=True):
                np.testing.assert_array_equal(got, want)


def test_the_order_does_not_depend_on_prefetch_or_a_larger_budget(tmp_path):
    x = np.random.default_rng(1).standard_normal((20_000, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    xs = oocarr.open(str(tmp_path / "x.npy"))
    ids = oocarr.from_numpy(np.arange(20_000))
    with oocarr.memory_budget("200KB"):
        loader = oocarr.batches(xs, ids, batch_size=64, shuffle=True, seed=2)
        whole = [np.asarray(b[1]) for b in loader]
        loader = oocarr.batches(xs, ids, batch_size=64, shuffle=True, seed=2)
        for i, _ in enumerate(loader):
            if i == 9:
                state = loader.state()
                break
    assert state["buffer_rows"] < 20_000  # the budget set the buffer: it is in the state
    for prefetch, budget in [(0, "200KB"), (5, "64MB")]:
        with oocarr.memory_budget(budget):
            resumed = oocarr.batches(
                xs, ids, batch_size=64, shuffle=True, prefetch=prefetch, state=state
            )
            tail = [np.asarray(b[1]) for b in resumed]
        assert len(tail) == len(whole) - 10
        for got, want in zip(tail, whole[10:]):
            np.testing.assert_array_equal(got, want)


def test_drop_last_epochs_end_where_the_last_full_batch_does():
    loader = oocarr.batches(np.arange(100), batch_size=30, drop_last=True, shuffle=True, seed=0)
    epoch = iter(loader)
    for _ in range(3):
        next(epoch)
    assert loader.state()["epoch"] == 1 and loader.state()["batch"] == 0
    assert list(epoch) == []


def test_states_that_do_not_fit_are_refused_clearly():
    data = np.arange(1000.0).reshape(500, 2)
    with oocarr.memory_budget("1MB"):
        loader = oocarr.batches(data, batch_size=10, shuffle=True, seed=4)
        next(iter(loader))
        state = loader.state()
    with pytest.raises(errors.InvalidArgumentError, match="batch_size=10 there, 20 here"):
        oocarr.batches(data, batch_size=20, shuffle=True, state=state)
    with pytest.raises(errors.InvalidArgumentError, match="seed=4 there, 5 here"):
        oocarr.batches(data, batch_size=10, shuffle=True, seed=5, state=state)
    with pytest.raises(errors.InvalidArgumentError, match="rows=500 there, 400 here"):
        oocarr.batches(data[:400], batch_size=10, shuffle=True, state=state)
    with pytest.raises(errors.InvalidArgumentError, match="Batches.state"):
        oocarr.batches(data, batch_size=10, state={"epoch": 1})
    with pytest.raises(errors.InvalidArgumentError, match="an epoch has 50 batches"):
        oocarr.batches(data, batch_size=10, shuffle=True, state={**state, "batch": 50})
    big = {**state, "buffer_rows": 400_000, "block_rows": 1000}
    loader = oocarr.batches(data, batch_size=10, shuffle=True, state=big)
    with oocarr.memory_budget("1MB"):
        with pytest.raises(errors.BudgetTooSmallError, match="shuffle buffer of 400000 rows"):
            iter(loader)


def test_set_epoch_starts_an_epoch_afresh_after_a_resume():
    data = np.arange(64)
    first = [np.asarray(b).tolist() for (b,) in oocarr.batches(data, batch_size=8, seed=1)]
    loader = oocarr.batches(data, batch_size=8, seed=1)
    epoch = iter(loader)
    next(epoch), next(epoch)
    resumed = oocarr.batches(data, batch_size=8, state=loader.state())
    resumed.set_epoch(0)
    assert [np.asarray(b).tolist() for (b,) in resumed] == first


# ----------------------------------------------------------------------
# Shards
# ----------------------------------------------------------------------


@pytest.mark.parametrize("shuffle", [True, False], ids=["shuffled", "in-order"])
def test_the_shards_of_an_epoch_are_disjoint_and_hold_every_row_once(backend, shuffle):
    _skip_s3(backend)
    x, xs, ys = _dataset(backend)
    with oocarr.memory_budget("1MB"):
        for epoch in range(2):
            shards = []
            for index in range(3):
                loader = oocarr.batches(
                    xs, ys, batch_size=BATCH, shuffle=shuffle, seed=5, shard=(index, 3)
                )
                loader.set_epoch(epoch)
                got = [_ids(b, x) for b in loader]
                assert len(got) == len(loader)
                shards.append(np.concatenate(got))
            together = np.concatenate(shards)
            np.testing.assert_array_equal(np.sort(together), np.arange(ROWS))
            chunked = [a.store.chunks[0] for a in (xs, ys) if a.store.chunks]
            align = math.lcm(*chunked) if chunked else 1  # unchunked: any row
            for rows in shards:  # contiguous ranges, cut at multiples of both arrays' chunks
                assert rows.min() % align == 0 and np.ptp(rows) == len(rows) - 1
            assert max(map(len, shards)) - min(map(len, shards)) <= align
            if shuffle:
                assert not np.array_equal(shards[0], np.sort(shards[0]))


def test_each_shard_reads_only_its_own_rows(tmp_path, monkeypatch):
    from oocarr.train import minibatches

    x = np.arange(4000 * 3, dtype=np.float32).reshape(4000, 3)
    url = f"{tmp_path / 's.h5'}#/x"
    oocarr.save(oocarr.from_numpy(x), url, chunks=(100, 3))
    reads = []
    read = minibatches._Source.read

    def recording(self, start, stop, out, counts):
        reads.append((start, stop))
        return read(self, start, stop, out, counts)

    monkeypatch.setattr(minibatches._Source, "read", recording)
    for index in range(4):
        reads.clear()
        loader = oocarr.batches(oocarr.open(url), batch_size=64, shuffle=True, shard=(index, 4))
        rows = np.concatenate([np.asarray(b)[:, 0] // 3 for (b,) in loader])
        assert (min(a for a, _ in reads), max(b for _, b in reads)) == (rows.min(), rows.max() + 1)
        assert (rows.min(), rows.max() + 1) == (index * 1000, index * 1000 + 1000)


def test_drop_last_gives_every_shard_the_same_number_of_full_batches():
    data = np.arange(1000)
    lengths, rows = [], []
    for index in range(3):
        loader = oocarr.batches(
            data, batch_size=64, shuffle=True, seed=0, drop_last=True, shard=(index, 3)
        )
        got = [np.asarray(b) for (b,) in loader]
        assert len(got) == len(loader) and all(len(b) == 64 for b in got)
        lengths.append(len(got))
        rows.append(np.concatenate(got))
    assert lengths == [333 // 64] * 3  # the smallest shard holds 333 rows
    assert len(np.unique(np.concatenate(rows))) == sum(map(len, rows))


def test_a_sharded_loader_resumes_exactly_and_keeps_its_shard():
    data = np.arange(5000)
    kwargs = dict(batch_size=50, shuffle=True, shuffle_buffer=600, shard=(1, 2))
    with oocarr.memory_budget("1MB"):
        whole = [np.asarray(b) for (b,) in oocarr.batches(data, seed=9, **kwargs)]
        loader = oocarr.batches(data, seed=9, **kwargs)
        epoch = iter(loader)
        for _ in range(17):
            next(epoch)
        state = json.loads(json.dumps(loader.state()))
        assert state["shard"] == [1, 2]
        tail = [np.asarray(b) for (b,) in oocarr.batches(data, state=state, **kwargs)]
    for got, want in zip(tail, whole[17:], strict=True):
        np.testing.assert_array_equal(got, want)
    other = {**kwargs, "shard": (0, 2)}
    with pytest.raises(errors.InvalidArgumentError, match=r"shard=\[1, 2\] there, \[0, 2\] here"):
        oocarr.batches(data, state=state, **other)


def test_shard_jax_is_this_process_and_bad_shards_are_refused():
    import jax

    loader = oocarr.batches(np.arange(10), batch_size=4, shard="jax")
    assert loader.shard == (jax.process_index(), jax.process_count()) == (0, 1)
    for bad in [(2, 2), (-1, 2), (0, 0), "all", (0.5, 2), (True, 2)]:
        with pytest.raises(errors.InvalidArgumentError, match="shard="):
            oocarr.batches(np.arange(10), batch_size=4, shard=bad)


# ----------------------------------------------------------------------
# Placement on devices (two host devices, in a subprocess)
# ----------------------------------------------------------------------

PLACEMENT_SCRIPT = """
import json, sys
import jax, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
import oocarr

path = sys.argv[1]
x = np.arange(1000 * 6, dtype=np.float32).reshape(1000, 6)
np.save(path, x)
xs, ids = oocarr.open(path), np.arange(1000)
devices = jax.devices()
mesh = Mesh(np.array(devices), ("data",))
sharding = NamedSharding(mesh, PartitionSpec("data"))
out = {"devices": len(devices), "batches": 0, "sharded": True, "equal": True}
loader = oocarr.batches(xs, ids, batch_size=64, shuffle=True, seed=1, drop_last=True,
                        sharding=sharding)
seen = []
for xb, yb in loader:
    out["batches"] += 1
    out["sharded"] &= xb.sharding == sharding and yb.sharding == sharding
    out["sharded"] &= {s.data.shape[0] for s in xb.addressable_shards} == {32}
    out["equal"] &= bool((np.asarray(xb) == x[np.asarray(yb)]).all())
    seen.extend(np.asarray(yb).tolist())
out["distinct"] = len(set(seen)) == len(seen) == 1000 // 64 * 64
second = devices[1]
on_one = [xb for xb, _ in oocarr.batches(xs, ids, batch_size=100, device=second)]
out["device"] = all(xb.devices() == {second} for xb in on_one)
try:
    oocarr.batches(x[:999], ids[:999], batch_size=64, sharding=sharding)  # last: 39 rows
    out["uneven"] = "accepted"
except oocarr.errors.InvalidArgumentError as err:
    out["uneven"] = str(err)
print(json.dumps(out))
"""


def test_batches_arrive_placed_on_devices_and_split_over_a_mesh(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    done = subprocess.run(
        [sys.executable, "-c", PLACEMENT_SCRIPT, str(tmp_path / "x.npy")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["devices"] == 2 and out["batches"] == 1000 // 64
    assert out["sharded"] and out["equal"] and out["distinct"] and out["device"]
    assert "39 rows" in out["uneven"] and "drop_last=True" in out["uneven"]
