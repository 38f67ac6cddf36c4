"""oocarr arrays as a Grain data source, read by Grain's own sampler and DataLoader (in the
loop's process and in a worker process): every record once, each row the stored row
(NumPy's array as the oracle)."""

from __future__ import annotations

import numpy as np
import pytest

import oocarr
from oocarr import errors

grain = pytest.importorskip("grain.python")

ROWS = 700


def _source(backend):
    x = np.random.default_rng(0).standard_normal((ROWS, 3)).astype(np.float32)
    y = np.arange(ROWS, dtype=np.int64)
    xs = oocarr.DiskArray(backend.store(x, chunks=(64, 3), mode="r"))
    ys = oocarr.DiskArray(backend.store(y, chunks=(128,), mode="r"))
    return x, oocarr.GrainSource(xs, ys)


def _epoch(source, workers: int) -> list[tuple[np.ndarray, np.ndarray]]:
    from absl import flags

    if not flags.FLAGS.is_parsed():  # Grain's worker processes read its absl flags
        flags.FLAGS.mark_as_parsed()
    sampler = grain.IndexSampler(
        num_records=len(source),
        shuffle=True,
        seed=3,
        num_epochs=1,
        shard_options=grain.NoSharding(),
    )
    loader = grain.DataLoader(
        data_source=source,
        sampler=sampler,
        operations=[grain.Batch(batch_size=50)],
        worker_count=workers,
    )
    return [(np.asarray(xb), np.asarray(yb)) for xb, yb in loader]


def test_grain_reads_every_stored_row_once(backend):
    if backend.id.startswith("fsspec-s3"):
        pytest.skip("the fsspec driver is covered on memory:// and local disk; S3 is slow here")
    _check_epoch(backend, workers=0)


@pytest.mark.parametrize("backend", ["hdf5-chunked", "fsspec-local"], indirect=True)
def test_grain_worker_processes_open_the_arrays_themselves(backend):
    _check_epoch(backend, workers=1)


def _check_epoch(backend, workers: int) -> None:
    x, source = _source(backend)
    batches = _epoch(source, workers)
    ids = np.concatenate([yb for _, yb in batches])
    np.testing.assert_array_equal(np.sort(ids), np.arange(ROWS))
    assert not np.array_equal(ids, np.arange(ROWS))  # Grain's shuffle, not ours
    for xb, yb in batches:
        np.testing.assert_array_equal(xb, x[yb])


def test_records_index_like_a_sequence_and_bad_arrays_are_refused():
    source = oocarr.GrainSource(np.arange(10.0), np.arange(10) * 2)
    assert len(source) == 10 and source[-1] == (9.0, 18)
    with pytest.raises(IndexError):
        source[10]
    with pytest.raises(errors.ShapeMismatchError, match="leading axis"):
        oocarr.GrainSource(np.zeros(3), np.zeros(4))
    with pytest.raises(errors.InvalidArgumentError, match="at least one"):
        oocarr.GrainSource()
