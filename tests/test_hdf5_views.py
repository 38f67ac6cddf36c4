"""Zero-copy views of HDF5 data: h5py's own reads as the oracle, and when a view must not be."""

from __future__ import annotations

import mmap

import h5py
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import oocarr
from oocarr import errors

ALIGNED = {"alignment_threshold": 1, "alignment_interval": 4096}


def _is_mapping(block: np.ndarray) -> bool:
    """Whether ``block`` shares a mapping of the file (``np.frombuffer`` of an ``mmap``)."""
    base = block
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)


def _rows(n: int, cols: int, dtype="f4") -> np.ndarray:
    return (np.arange(n * cols) % 1009).astype(dtype).reshape(n, cols)


def test_oocarr_writes_hdf5_data_page_aligned(tmp_path):
    data = _rows(4096, 64)
    url = f"{tmp_path / 'a.h5'}#/x"
    oocarr.save(oocarr.from_numpy(data), url, chunks=(1024, 64))
    with h5py.File(tmp_path / "a.h5", "r") as f:
        offsets = [f["x"].id.get_chunk_info(i).byte_offset for i in range(4)]
        np.testing.assert_array_equal(f["x"][...], data)
    assert [o % 4096 for o in offsets] == [0, 0, 0, 0]


def test_rows_of_row_band_chunks_are_mapped_not_copied(tmp_path):
    data = _rows(4096, 64)
    url = f"{tmp_path / 'a.h5'}#/x"
    oocarr.save(oocarr.from_numpy(data), url, chunks=(1024, 64))
    store = oocarr.open(url).store
    for rows in [slice(0, 4096), slice(100, 3000), slice(1024, 2048), slice(4000, 4096)]:
        block = store.read_view((rows, slice(0, 64)))
        np.testing.assert_array_equal(block, data[rows])
        assert _is_mapping(block) and not block.flags.writeable
        assert block.ctypes.data % 64 == 0
    columns = store.read_view((slice(0, 4096), slice(3, 9)))  # not one run: a copy
    np.testing.assert_array_equal(columns, data[:, 3:9])
    assert not _is_mapping(columns) and not columns.flags.writeable
    store.close()


def test_contiguous_datasets_are_mapped_where_the_region_is_one_run(tmp_path):
    data = _rows(512, 32, "f8")
    with h5py.File(tmp_path / "c.h5", "w", **ALIGNED) as f:
        f.create_dataset("x", data=data)
    store = oocarr.open(f"{tmp_path / 'c.h5'}#/x").store
    block = store.read_view((slice(8, 500), slice(0, 32)))
    np.testing.assert_array_equal(block, data[8:500])
    assert _is_mapping(block)
    part = store.read_view((slice(8, 500), slice(1, 32)))
    np.testing.assert_array_equal(part, data[8:500, 1:])
    assert not _is_mapping(part)
    store.close()


@pytest.mark.parametrize(
    "layout",
    ["h5py-default", "gzip", "big-endian", "grid-chunks", "chunks-out-of-order", "unwritten"],
)
def test_data_that_cannot_be_mapped_reads_what_h5py_reads(tmp_path, layout):
    data = _rows(2048, 48)
    path = tmp_path / "d.h5"
    kwargs = {} if layout == "h5py-default" else ALIGNED
    with h5py.File(path, "w", **kwargs) as f:
        if layout == "gzip":
            f.create_dataset("x", data=data, chunks=(256, 48), compression="gzip")
        elif layout == "big-endian":
            f.create_dataset("x", data=data.astype(">f4"), chunks=(256, 48))
        elif layout == "grid-chunks":
            f.create_dataset("x", data=data, chunks=(256, 16))
        elif layout == "chunks-out-of-order":
            d = f.create_dataset("x", data.shape, "f4", chunks=(256, 48))
            for start in range(1792, -1, -256):
                d[start : start + 256] = data[start : start + 256]
        elif layout == "unwritten":
            d = f.create_dataset("x", data.shape, "f4", chunks=(256, 48), fillvalue=7.0)
            d[:1024] = data[:1024]
        else:
            f.create_dataset("x", data=data, chunks=(256, 48))
        want = f["x"][...]
    store = oocarr.open(f"{path}#/x").store
    for rows in [slice(0, 2048), slice(300, 700), slice(512, 768)]:
        block = store.read_view((rows, slice(0, 48)))
        np.testing.assert_array_equal(block, want[rows])
        assert not block.flags.writeable
    store.close()


def test_no_view_while_the_file_is_open_for_writing(tmp_path):
    data = _rows(2048, 32)
    url = f"{tmp_path / 'w.h5'}#/x"
    oocarr.save(oocarr.from_numpy(data), url, chunks=(512, 32))
    writer = oocarr.open(url, mode="r+")
    writer.store[0:512] = -data[0:512]  # may sit in HDF5's cache, not yet in the file
    reader = oocarr.open(url).store
    block = reader.read_view((slice(0, 1024), slice(0, 32)))
    assert not _is_mapping(block)
    np.testing.assert_array_equal(block[:512], -data[:512])
    writer.store.close()
    reader.close()


def test_a_file_truncated_after_opening_is_an_error_not_a_crash(tmp_path):
    data = _rows(4096, 64)
    path = tmp_path / "t.h5"
    oocarr.save(oocarr.from_numpy(data), f"{path}#/x", chunks=(1024, 64))
    store = oocarr.open(f"{path}#/x").store
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 300_000)
    with pytest.raises(errors.OocarrError):
        store.read_view((slice(3072, 4096), slice(0, 64)))
    store.close()


def test_stream_sum_over_mapped_hdf5_matches_jax_in_memory(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((20_000, 16)).astype("f4")
    y = rng.standard_normal((20_000, 1)).astype("f4")
    oocarr.save(oocarr.from_numpy(x), f"{tmp_path / 'l.h5'}#/X", chunks=(4096, 16))
    oocarr.save(oocarr.from_numpy(y), f"{tmp_path / 'l.h5'}#/y", chunks=(4096, 1))
    w = jnp.asarray(rng.standard_normal((16, 1)).astype("f4"))
    loss = oocarr.stream_sum(lambda w, xb, yb: jnp.sum((xb @ w - yb) ** 2))
    with oocarr.memory_budget("2MB"):
        value, grad = jax.jit(jax.value_and_grad(loss))(
            w, oocarr.open(f"{tmp_path / 'l.h5'}#/X"), oocarr.open(f"{tmp_path / 'l.h5'}#/y")
        )
    want_value, want_grad = jax.value_and_grad(lambda w: jnp.sum((x @ w - y) ** 2))(w)
    np.testing.assert_allclose(value, want_value, rtol=1e-4)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-4, atol=1e-2)
