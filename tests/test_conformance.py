"""The page-store contract as tests, run once against every registered driver configuration.

The oracle is NumPy: every value read back is compared with the array it was made from.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import pickle
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import oocarr
from oocarr import errors
from oocarr.dtypes import as_dtype

SHAPES = [(), (7,), (0,), (5, 3), (13, 7), (4, 0, 3), (3, 4, 5), (2, 3, 4, 5), (5, 1, 3, 2)]
DTYPES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "bfloat16",
]


def sample(shape, dtype="float32", seed=0) -> np.ndarray:
    """Distinct, reproducible values of any supported dtype."""
    rng = np.random.default_rng(seed)
    dtype = as_dtype(dtype)
    n = math.prod(shape)
    if dtype == np.bool_:
        return rng.integers(0, 2, n).astype(bool).reshape(shape)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return (
            rng.integers(max(info.min, -1000), min(info.max, 1000), n).astype(dtype).reshape(shape)
        )
    values = rng.standard_normal(n) * 100
    if dtype.kind == "c":
        values = values + 1j * rng.standard_normal(n)
    return values.astype(dtype).reshape(shape)


def chunks_for(shape):
    return tuple(max(1, -(-s // 2)) for s in shape) if shape else None


def misaligned_pages(shape):
    return tuple(max(1, s // 3 + 1) for s in shape)


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
    assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_every_block_round_trips(backend, shape):
    data = sample(shape)
    store = backend.store(data, chunks=chunks_for(shape))
    assert store.shape == shape and store.dtype == np.float32
    paged = store.with_pages(misaligned_pages(shape))
    seen = np.zeros(shape, dtype=int)
    for idx in paged.block_grid():
        region = paged.block_region(idx)
        same(paged.read_block(idx), data[region])
        seen[region] += 1
    assert (seen == 1).all()
    assert paged.num_blocks == math.prod(paged.grid_shape)

    new = sample(shape, seed=1)
    for idx in paged.block_grid():
        paged.write_block(idx, new[paged.block_region(idx)])
    store.flush()
    reopened = oocarr.open(store.locator)
    same(reopened.store.read_region(), new)
    same(oocarr.to_numpy(reopened), new)


@pytest.mark.parametrize("dtype", DTYPES)
def test_dtypes_round_trip_bit_exact(backend, dtype):
    data = sample((6, 5), dtype)
    if not backend.supports(dtype):
        with pytest.raises(errors.UnsupportedDtypeError, match="bfloat16"):
            backend.store(data, chunks=(4, 3))
        return
    store = backend.store(data, chunks=(4, 3))
    assert store.dtype == data.dtype
    same(store[:], data)
    same(oocarr.open(store.locator).store.with_pages((5, 2)).read_block((1, 2)), data[5:, 4:])


def test_attrs_round_trip(backend):
    attrs = {
        "units": "m/s",
        "scale": 0.5,
        "n": 3,
        "flag": True,
        "axes": [1, 2, 3],
        "nested": {"a": [1.5, "x"]},
    }
    store = backend.store(np.arange(4.0))
    store.set_attrs(attrs)
    store.flush()
    assert oocarr.open(store.locator).attrs == attrs
    store.update_attrs({"n": 4})
    assert oocarr.open(store.locator).store.attrs == {**attrs, "n": 4}
    json.dumps(store.info())


def _child_read(store):
    return store.read_region(), store.page_shape


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_pickles_by_locator_into_a_child_process(backend, method):
    if not backend.cross_process:
        pytest.skip(f"{backend.id} lives in one process's memory")
    data = sample((9, 4))
    store = backend.store(data, chunks=(4, 4), mode="r").with_pages((2, 3))
    store.read_block((0, 0))  # the parent holds an open handle when it forks
    assert pickle.loads(pickle.dumps(store)).locator == store.locator
    with multiprocessing.get_context(method).Pool(1) as pool:
        values, pages = pool.apply(_child_read, (store,))
    same(values, data)
    assert pages == (2, 3)


def test_concurrent_reads_from_two_threads(backend):
    data = sample((40, 6))
    store = backend.store(data, chunks=(7, 6), mode="r").with_pages((5, 6))
    failures = []

    def reader(order):
        try:
            for _ in range(3):
                for idx in order:
                    if not np.array_equal(store.read_block(idx), data[store.block_region(idx)]):
                        failures.append(idx)
        except Exception as err:  # surfaced below
            failures.append(err)

    blocks = list(store.block_grid())
    threads = [threading.Thread(target=reader, args=(o,)) for o in (blocks, blocks[::-1])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


KEYS = [
    (slice(None),),
    (3,),
    (-1, slice(1, 4)),
    (slice(2, 9, 3), slice(None, None, -2)),
    (Ellipsis, 2),
    (slice(5, 5),),
    (slice(None, None, -1), 0),
]


@pytest.mark.parametrize("key", KEYS, ids=str)
def test_numpy_indexing_matches_numpy(backend, key):
    data = sample((10, 6))
    store = backend.store(data, chunks=(4, 4))
    same(store[key], data[key])
    expected = data.copy()
    value = np.asarray(data[key]) * 0 + 7
    expected[key] = value
    store[key] = value
    same(store[:], expected)


def test_read_into_a_caller_buffer(backend):
    data = sample((8, 5))
    store = backend.store(data, chunks=(3, 5))
    out = np.full((4, 3), -1, dtype=np.float32)
    assert store.read_region((slice(2, 6), slice(1, 4)), out=out) is out
    same(out, data[2:6, 1:4])
    with pytest.raises(errors.ShapeMismatchError):
        store.read_region((slice(0, 1), slice(0, 1)), out=out)
    with pytest.raises(errors.DtypeMismatchError):
        store.read_region((slice(0, 4), slice(0, 3)), out=out.astype(np.float64))


def test_bad_writes_are_refused_and_change_nothing(backend):
    data = sample((6, 4))
    store = backend.store(data, chunks=(3, 4)).with_pages((3, 4))
    with pytest.raises(errors.ShapeMismatchError, match="shape"):
        store.write_block((0, 0), np.zeros((2, 4), np.float32))
    with pytest.raises(errors.DtypeMismatchError, match="float64"):
        store.write_block((0, 0), np.zeros((3, 4), np.float64))
    with pytest.raises(errors.DtypeMismatchError):
        store[0] = np.array([1 + 2j] * 4)
    with pytest.raises(errors.ShapeMismatchError):
        store[0:2] = np.zeros((3, 4))
    with pytest.raises(errors.InvalidArgumentError):
        store.with_pages((0, 4))
    with pytest.raises(IndexError):
        store.read_block((2, 0))
    same(store[:], data)


def _tree_digest(root) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_read_only_refuses_writes(backend, tmp_path):
    data = sample((5, 3))
    store = backend.store(data, mode="r")
    before = _tree_digest(tmp_path)
    assert store.readonly
    with pytest.raises(errors.ReadOnlyError, match="r\\+"):
        store[0] = 1.0
    with pytest.raises(errors.ReadOnlyError):
        store.write_block((0, 0), data)
    with pytest.raises(errors.ReadOnlyError):
        store.update_attrs({"a": 1})
    same(oocarr.open(store.locator).store[:], data)
    store.close()
    assert _tree_digest(tmp_path) == before


def test_create_over_existing_needs_overwrite(backend):
    if backend.native_maker is not None:
        pytest.skip("arrays of this backend are made by h5py, not oocarr.create")
    url = backend.url()
    data = sample((4, 4))
    kwargs = dict(backend.create_kwargs)
    oocarr.save(data, url, **kwargs)
    with pytest.raises(errors.AlreadyExistsError, match="overwrite=True"):
        oocarr.save(np.zeros((4, 4), np.float32), url, **kwargs)
    same(oocarr.open(url, **backend.open_kwargs(data), **_raw(backend, data)).store[:], data)

    with pytest.raises(RuntimeError):
        with oocarr.create(url, (4, 4), "float32", overwrite=True, **kwargs) as x:
            x.store[:] = 0
            raise RuntimeError("interrupted")
    same(oocarr.open(url, **backend.open_kwargs(data), **_raw(backend, data)).store[:], data)

    replaced = oocarr.save(-data, url, overwrite=True, **kwargs)
    same(oocarr.to_numpy(replaced), -data)


def _raw(backend, data):
    return {"shape": data.shape, "dtype": data.dtype} if backend.id == "memmap-raw" else {}


def test_a_failed_create_leaves_nothing(backend):
    if backend.native_maker is not None:
        pytest.skip("arrays of this backend are made by h5py, not oocarr.create")
    url = backend.url()
    kwargs = dict(backend.create_kwargs)
    with pytest.raises(KeyboardInterrupt), oocarr.create(url, (3,), "int16", **kwargs) as x:
        x.store[:] = [1, 2, 3]
        x.store.flush()
        raise KeyboardInterrupt
    with pytest.raises(errors.NotFoundError):
        oocarr.open(
            url,
            **backend.open_kwargs(None),
            **({"shape": 3, "dtype": "i2"} if backend.id == "memmap-raw" else {}),
        )
    pending = oocarr.create(url, (3,), "int16", **kwargs)
    with pytest.raises(errors.NotFoundError):
        oocarr.open(pending.store.locator)
    pending.store[:] = [4, 5, 6]
    pending.close()
    same(oocarr.open(pending.store.locator).store[:], np.array([4, 5, 6], np.int16))


def test_missing_array_is_not_found(backend):
    with pytest.raises(errors.NotFoundError) as info:
        oocarr.open(
            backend.url("missing"),
            **backend.open_kwargs(None),
            **({"shape": 3, "dtype": "f4"} if backend.id == "memmap-raw" else {}),
        )
    assert "missing" in str(info.value)


def test_info_is_json_and_describes_the_array(backend):
    data = sample((9, 4), "int16")
    store = backend.store(data, chunks=(4, 4))
    info = json.loads(json.dumps(store.info()))
    assert info["driver"] == store.name
    assert info["shape"] == [9, 4] and info["dtype"] == "int16" and info["nbytes"] == 72
    assert info["chunks"] == (list(store.chunks) if store.chunks else None)
    assert oocarr.Locator.from_dict(info["locator"]).driver == store.name
    assert info["stored_nbytes"] is None or info["stored_nbytes"] > 0


@pytest.mark.parametrize("dst_id", ["memmap-npy", "hdf5-chunked", "fsspec-local", "testmem"])
def test_save_copies_between_drivers(backend, dst_id, tmp_path):
    from conftest import make_backends

    dst = next(b for b in make_backends(tmp_path / "dst", None) if b.id == dst_id)
    (tmp_path / "dst").mkdir(exist_ok=True)
    data = sample((11, 7), "float64")
    src = backend.store(data, chunks=(4, 3), attrs=None)
    src.update_attrs({"origin": backend.id})
    out = oocarr.save(src, dst.url(), tile_bytes=64, **dst.create_kwargs)
    same(oocarr.to_numpy(out), data)
    assert out.attrs == {"origin": backend.id}


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_property_regions_match_numpy(backend, data):
    if backend.id == "fsspec-s3":
        pytest.skip("covered by the fixed-shape tests; too slow for many examples")
    ndim = data.draw(st.integers(1, 3), label="ndim")
    shape = tuple(data.draw(st.lists(st.integers(0, 9), min_size=ndim, max_size=ndim)))
    chunks = tuple(data.draw(st.integers(1, 10)) for _ in shape)
    pages = tuple(data.draw(st.integers(1, 10)) for _ in shape)
    array = sample(shape, "int32", seed=data.draw(st.integers(0, 100)))
    store = backend.store(array, chunks=chunks).with_pages(pages)
    for idx in store.block_grid():
        same(store.read_block(idx), array[store.block_region(idx)])
    bounds = [sorted(data.draw(st.lists(st.integers(0, s), min_size=2, max_size=2))) for s in shape]
    region = tuple(slice(a, b) for a, b in bounds)
    same(store.read_region(region), array[region])
    patch = sample(array[region].shape, "int32", seed=7)
    store.write_region(region, patch)
    array[region] = patch
    same(store.read_region(), array)
