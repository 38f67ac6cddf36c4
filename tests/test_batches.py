"""``oocarr.batches`` on every driver, checked against NumPy: every row once per epoch, the
shuffle reproducible by seed and new each epoch, rows of several arrays kept together, the
reader thread running ahead, stopping on ``break`` and passing its errors on, I/O counted,
and (``-m memory``) one shuffled epoch over 8x the budget staying within it."""

from __future__ import annotations

import sys
import textwrap
import threading

import jax
import numpy as np
import pytest

import oocarr
from oocarr import errors
from subprocess_rss import run_script, write_features_and_labels

ROWS, COLS, BATCH = 203, 5, 32
ROW_BYTES = COLS * 4 + 8
# Room for the queued batches plus about 100 rows: the shuffle buffer holds part of the data,
# so the chunk-aligned block order and the buffer both shape the order.  Zarr on memory:// also
# holds one fetched and one decoded chunk of each array while reading (chunks of 16 and 32 rows).
SMALL_BUDGET = (2 + 3) * BATCH * ROW_BYTES + 130 * ROW_BYTES + 2 * (16 * COLS * 4 + 32 * 8)


def skip_s3(backend):
    if backend.id == "fsspec-s3":
        pytest.skip("the fsspec driver is covered on memory:// and local disk; S3 is slow here")


def dataset(backend, rows=ROWS):
    """Features on ``backend`` in row chunks of 16, and row ids on it in chunks of 32."""
    x = np.random.default_rng(0).standard_normal((rows, COLS)).astype(np.float32)
    y = np.arange(rows, dtype=np.int64)
    xs = oocarr.DiskArray(backend.store(x, chunks=(16, COLS), mode="r"))
    ys = oocarr.DiskArray(backend.store(y, chunks=(32,), mode="r"))
    return x, y, xs, ys


def epoch_rows(loader, x):
    """The row ids of one epoch in order, checking each batch's features against ``x``."""
    ids, sizes = [], []
    for batch in loader:
        assert isinstance(batch, tuple) and len(batch) == 2
        xb, yb = batch
        assert isinstance(xb, jax.Array) and isinstance(yb, jax.Array)
        xb, yb = np.asarray(xb), np.asarray(yb)
        np.testing.assert_array_equal(xb, x[yb])
        ids.append(yb)
        sizes.append(len(yb))
    return np.concatenate(ids) if ids else np.zeros(0, np.int64), sizes


def test_shuffled_epochs_hold_every_row_once_reproducibly(backend):
    x, y, xs, ys = dataset(backend)
    with oocarr.memory_budget(SMALL_BUDGET):
        loader = oocarr.batches(xs, ys, batch_size=BATCH, shuffle=True, seed=3)
        assert len(loader) == -(-ROWS // BATCH)
        assert loader.plan()["buffer_rows"] < ROWS
        first, sizes = epoch_rows(loader, x)
        second, _ = epoch_rows(loader, x)
        again = oocarr.batches(xs, ys, batch_size=BATCH, shuffle=True, seed=3)
        replay = [epoch_rows(again, x)[0] for _ in range(2)]
        other, _ = epoch_rows(oocarr.batches(xs, ys, batch_size=BATCH, shuffle=True, seed=4), x)
    assert sizes == [BATCH] * (ROWS // BATCH) + [ROWS % BATCH]
    for order in (first, second, other):
        np.testing.assert_array_equal(np.sort(order), y)
    assert not np.array_equal(first, y), "not shuffled"
    assert not np.array_equal(first, second), "epochs share one order"
    assert not np.array_equal(first, other), "the seed does not change the order"
    np.testing.assert_array_equal(replay[0], first)
    np.testing.assert_array_equal(replay[1], second)


def test_a_buffer_of_many_blocks_refills_from_a_staging_block(backend, monkeypatch):
    """A shuffle buffer of several blocks replaces the rows each batch draws with the next
    block's (read into a staging block): still every row once, reproducibly, and the rows of
    each block spread over the epoch."""
    from oocarr.train import minibatches

    skip_s3(backend)
    x, y, xs, ys = dataset(backend, rows=1500)
    drawn_from = []
    fill_holes = minibatches._fill_holes

    def recording(buffers, picked, count):
        drawn_from.append((count, len(picked)))
        return fill_holes(buffers, picked, count)

    with oocarr.memory_budget("1MB"):
        loader = oocarr.batches(xs, ys, batch_size=BATCH, shuffle=True, seed=5, shuffle_buffer=400)
        plan = loader.plan()
        assert plan["buffer_rows"] >= 4 * plan["block_rows"] + BATCH  # the staging path
        monkeypatch.setattr(minibatches, "_fill_holes", recording)
        first, sizes = epoch_rows(loader, x)
        monkeypatch.undo()
        again, _ = epoch_rows(
            oocarr.batches(xs, ys, batch_size=BATCH, shuffle=True, seed=5, shuffle_buffer=400), x
        )
    np.testing.assert_array_equal(np.sort(first), y)
    np.testing.assert_array_equal(again, first)
    assert sizes == [BATCH] * (1500 // BATCH) + [1500 % BATCH]
    # while blocks remain, each batch draws from a buffer that stays full (of the whole blocks
    # that fit beside the staging block) and moves no row into a hole
    steady = (1500 - plan["buffer_rows"]) // BATCH
    held = drawn_from[0][0]
    assert held > plan["buffer_rows"] - 3 * plan["block_rows"]
    assert drawn_from[:steady] == [(held, 0)] * steady
    # each block's rows leave over many batches: mixed across blocks, not block by block
    block = plan["block_rows"]
    spread = [np.ptp(np.flatnonzero(first // block == b)) for b in range(1500 // block)]
    assert np.median(spread) > 4 * block


def test_in_order_and_drop_last(backend):
    skip_s3(backend)
    x, y, xs, ys = dataset(backend)
    with oocarr.memory_budget(SMALL_BUDGET):
        ordered, sizes = epoch_rows(oocarr.batches(xs, ys, batch_size=BATCH), x)
        np.testing.assert_array_equal(ordered, y)
        assert sizes[-1] == ROWS % BATCH
        loader = oocarr.batches(xs, ys, batch_size=BATCH, drop_last=True)
        assert len(loader) == ROWS // BATCH
        kept, sizes = epoch_rows(loader, x)
        np.testing.assert_array_equal(kept, y[: ROWS // BATCH * BATCH])
        assert sizes == [BATCH] * (ROWS // BATCH)
        loader = oocarr.batches(xs, ys, batch_size=BATCH, drop_last=True, shuffle=True, seed=1)
        kept, sizes = epoch_rows(loader, x)
    assert sizes == [BATCH] * (ROWS // BATCH)
    assert len(np.unique(kept)) == len(kept) == ROWS // BATCH * BATCH


def test_one_array_and_in_memory_inputs():
    x = np.arange(30.0).reshape(10, 3)
    (single,) = next(iter(oocarr.batches(x, batch_size=4)))
    np.testing.assert_array_equal(np.asarray(single), x[:4])
    labels = jax.numpy.arange(10)
    loader = oocarr.batches(oocarr.from_numpy(x), labels, batch_size=3, shuffle=True, seed=0)
    got = [(np.asarray(a), np.asarray(b)) for a, b in loader]
    np.testing.assert_array_equal(np.sort(np.concatenate([b for _, b in got])), np.arange(10))
    for a, b in got:
        np.testing.assert_array_equal(a, x[b])
    assert list(oocarr.batches(np.zeros((0, 2)), batch_size=4)) == []


def test_leading_axes_must_match(backend):
    skip_s3(backend)
    _, _, xs, _ = dataset(backend)
    short = np.zeros(ROWS - 1)
    with pytest.raises(errors.ShapeMismatchError, match="array 1") as info:
        oocarr.batches(xs, short, batch_size=4)
    assert xs.url in str(info.value) and f"{ROWS - 1}" in str(info.value)
    with pytest.raises(errors.InvalidArgumentError, match="0-d"):
        oocarr.batches(xs, np.float32(1), batch_size=4)
    with pytest.raises(errors.InvalidArgumentError, match="batch_size"):
        oocarr.batches(xs, batch_size=0)


def test_budget_too_small_for_one_batch():
    loader = oocarr.batches(np.zeros((100, 1000), "f4"), batch_size=50)
    with oocarr.memory_budget(100_000), pytest.raises(errors.BudgetTooSmallError, match="batch"):
        iter(loader)


def test_reads_are_counted_in_io_stats(backend):
    skip_s3(backend)
    x, y, xs, ys = dataset(backend)
    with oocarr.memory_budget(SMALL_BUDGET):
        loader = oocarr.batches(xs, ys, batch_size=BATCH, shuffle=True, seed=0)
        blocks = -(-ROWS // loader.plan()["block_rows"])
        with oocarr.io_stats() as stats:
            for _ in loader:
                pass
    assert stats.total.bytes_read == x.nbytes + y.nbytes
    assert stats.total.pages_read == 2 * blocks
    assert stats.total.tiles == len(loader)
    assert loader.stats.bytes_read == x.nbytes + y.nbytes
    assert any(site.startswith("batches @ test_batches.py") for site in stats.by_site)


def test_reader_runs_ahead_of_a_slow_step(backend):
    skip_s3(backend)
    x, _, xs, ys = dataset(backend)
    loader = oocarr.batches(xs, ys, batch_size=16, shuffle=True, seed=0, prefetch=2)
    epoch = iter(loader)
    expected, seen = [], []
    for i, (xb, _) in enumerate(epoch):
        xb.block_until_ready()
        # A step that lasts until the reader has filled the queue (at most 5 s): the
        # batches it holds were read while the step ran, not when the loop asked for them.
        want = min(2, len(loader) - i - 1)
        deadline = threading.Event()
        for _ in range(500):
            if epoch.ready >= want or deadline.wait(0.01):
                break
        expected.append(want)
        seen.append(epoch.ready)
    assert epoch.stats.batches == len(loader)
    assert seen == expected  # the queue filled up to `prefetch` batches during each step
    assert epoch.stats.waits == 0, epoch.stats  # so the loop never waited for data


def test_a_slow_reader_is_counted_as_waits(monkeypatch):
    x = oocarr.from_numpy(np.arange(64.0).reshape(32, 2))
    read = type(x.store).read_region

    def slow(self, *args, **kwargs):
        threading.Event().wait(0.01)
        return read(self, *args, **kwargs)

    monkeypatch.setattr(type(x.store), "read_region", slow)
    with oocarr.memory_budget(5 * 4 * 16 + 16 * 16):
        loader = oocarr.batches(x, batch_size=4)
        assert loader.plan()["block_rows"] <= 16
        for _ in loader:
            pass
    assert loader.stats.waits > 0


def _reader_threads():
    return [t for t in threading.enumerate() if t.name == "oocarr-batches"]


def test_breaking_out_stops_the_reader_thread(backend):
    skip_s3(backend)
    _, _, xs, ys = dataset(backend)
    loader = oocarr.batches(xs, ys, batch_size=8, shuffle=True, seed=0, prefetch=2)
    for _ in loader:
        assert len(_reader_threads()) == 1
        break
    assert _reader_threads() == []
    with iter(loader) as epoch:
        next(epoch)
        next(epoch)
    assert _reader_threads() == []
    assert epoch.stats.batches == 2
    with pytest.raises(StopIteration):
        next(epoch)


def test_reader_errors_reach_the_loop(backend, monkeypatch):
    skip_s3(backend)
    _, _, xs, ys = dataset(backend)
    driver = type(xs.store)
    original, calls = driver._read, []

    def failing(self, region, out):
        calls.append(region)
        if len(calls) == 3:
            raise OSError("disk on fire")
        return original(self, region, out)

    monkeypatch.setattr(driver, "_read", failing)
    with oocarr.memory_budget((5 * 8 + 60) * COLS * 4):  # blocks of at most 52 rows
        loader = oocarr.batches(xs, batch_size=8)
        seen = 0
        with pytest.raises(OSError, match="disk on fire"):
            for _ in loader:
                seen += 1
    assert seen >= 1
    assert _reader_threads() == []


def test_synchronous_reading_without_prefetch():
    x = np.arange(40).reshape(20, 2)
    loader = oocarr.batches(x, batch_size=6, shuffle=True, seed=2, prefetch=0)
    rows = np.concatenate([np.asarray(b) for (b,) in loader])
    assert _reader_threads() == []
    np.testing.assert_array_equal(np.sort(rows[:, 0]), x[:, 0])
    threaded = oocarr.batches(x, batch_size=6, shuffle=True, seed=2)
    np.testing.assert_array_equal(np.concatenate([np.asarray(b) for (b,) in threaded]), rows)


# ----------------------------------------------------------------------
# Peak memory of one shuffled epoch over 8x the budget
# ----------------------------------------------------------------------
BUDGET = 32 * 10**6
BIG_ROWS, BIG_COLS = 256 * 2**20 // 4 // 256, 256

SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    import oocarr

    x_url, y_url, budget = sys.argv[1], sys.argv[2], int(sys.argv[3])
    x, y = oocarr.open(x_url), oocarr.open(y_url)
    for _ in oocarr.batches(np.ones((64, 4), "f4"), np.arange(64), batch_size=8, shuffle=True):
        pass
    baseline = peak_rss()
    total, rows = 0, 0
    start = time.perf_counter()
    with oocarr.memory_budget(budget):
        loader = oocarr.batches(x, y, batch_size=512, shuffle=True, seed=0)
        plan = loader.plan()
        if len(sys.argv) > 4:  # resume at that batch: replay the draws, then read the buffer
            state = {**loader.state(), "batch": int(sys.argv[4])}
            loader = oocarr.batches(x, y, batch_size=512, shuffle=True, state=state)
        for xb, yb in loader:
            total += int(np.asarray(yb).sum())
            rows += len(yb)
    seconds = time.perf_counter() - start
    print(json.dumps({"growth": peak_rss() - baseline, "total": total, "rows": rows,
                      "seconds": seconds, "plan": plan}))
    """
)


@pytest.fixture(scope="module", params=["memmap", "hdf5"])
def big(request, tmp_path_factory):
    """256 MiB of float32 features plus int64 row ids, written a slab at a time."""
    root = tmp_path_factory.mktemp(f"batches-{request.param}")
    ids = np.arange(BIG_ROWS, dtype=np.int64)
    return write_features_and_labels(request.param, root, BIG_ROWS, BIG_COLS, ids)


@pytest.mark.memory
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_a_shuffled_epoch_stays_within_the_budget(big):
    report = run_script(SCRIPT, *big, str(BUDGET))
    assert report["rows"] == BIG_ROWS
    assert report["total"] == BIG_ROWS * (BIG_ROWS - 1) // 2  # every row exactly once
    growth = report["growth"]
    mb_s = BIG_ROWS * (BIG_COLS * 4 + 8) / report["seconds"] / 1e6
    print(
        f"shuffled epoch: peak RSS {growth / 1e6:.1f} MB above baseline (budget "
        f"{BUDGET / 1e6:.0f} MB), {mb_s:.0f} MB/s, plan {report['plan']}"
    )
    assert growth <= 1.25 * BUDGET, f"peaked {growth / 1e6:.1f} MB above its baseline"


@pytest.mark.memory
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_a_resumed_shuffled_epoch_stays_within_the_budget(big):
    skip = BIG_ROWS // 512 // 2
    report = run_script(SCRIPT, *big, str(BUDGET), str(skip))
    assert report["rows"] == BIG_ROWS - skip * 512
    growth = report["growth"]
    print(f"resumed epoch: peak RSS {growth / 1e6:.1f} MB above baseline")
    assert growth <= 1.25 * BUDGET, f"peaked {growth / 1e6:.1f} MB above its baseline"


PLACED_SCRIPT = textwrap.dedent(
    """
    import os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    import json, sys
    import jax
    import numpy as np
    import oocarr
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    x_url, y_url, budget = sys.argv[1], sys.argv[2], int(sys.argv[3])
    x, y = oocarr.open(x_url), oocarr.open(y_url)
    sharding = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), PartitionSpec("data"))
    for _ in oocarr.batches(np.ones((64, 4), "f4"), np.arange(64), batch_size=8,
                            sharding=sharding):
        pass
    baseline = peak_rss()
    totals, rows = [], 0
    with oocarr.memory_budget(budget):
        for shuffle in (False, True):
            for index in (0, 1):
                loader = oocarr.batches(x, y, batch_size=512, shuffle=shuffle, seed=0,
                                        shard=(index, 2), sharding=sharding, prefetch=4)
                for xb, yb in loader:
                    assert xb.sharding == sharding and len(xb.addressable_shards) == 2
                    totals.append(int(np.asarray(yb).sum()))
                    rows += len(yb)
    print(json.dumps({"growth": peak_rss() - baseline, "total": sum(totals), "rows": rows}))
    """
)


@pytest.mark.memory
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_sharded_epochs_split_over_two_devices_stay_within_the_budget(big):
    report = run_script(PLACED_SCRIPT, *big, str(BUDGET))
    # both shards, in order and shuffled: every row twice in all
    assert report["rows"] == 2 * BIG_ROWS
    assert report["total"] == 2 * (BIG_ROWS * (BIG_ROWS - 1) // 2)
    growth = report["growth"]
    print(f"sharded epochs on two devices: peak RSS {growth / 1e6:.1f} MB above baseline")
    assert growth <= 1.25 * BUDGET, f"peaked {growth / 1e6:.1f} MB above its baseline"
