"""``x[key] = value`` on DiskArrays (issue 37, part 3) against NumPy doing the same on a copy:
results of ops are writable outside a trace and the write goes to their own scratch storage,
never to the user's source (its bytes are checked independently of oocarr); storage opened
with mode='r+' is written in place; a read-only source raises ReadOnlyError; under jax.jit
arrays stay immutable; a masked write streams under the memory budget."""

from __future__ import annotations

import hashlib
import pathlib

import h5py
import jax
import numpy as np
import pytest

import oocarr
from oocarr import errors
from oocarr.api import assignment
from subprocess_rss import run_script

xp = oocarr.array_api

A = np.arange(6 * 8, dtype=np.float32).reshape(6, 8) - 20.0

#: (key, value) pairs: every key kind with a scalar, a broadcast and a full value.
CASES = [
    (2, 5.0),
    (-1, np.arange(8, dtype=np.float32)),
    (slice(1, 5, 2), -3.0),
    (slice(None, None, -2), np.arange(8, dtype=np.float32)),
    ((Ellipsis, 1), 7.5),
    ((1, slice(None, None, -3)), np.array([1.0, 2.0, 3.0], np.float32)),
    ((slice(-3, None), -2), np.array([9.0, 8.0, 7.0], np.float64)),
    ((slice(0, 4), slice(1, 8, 3)), np.ones((1, 3), np.float32)),
    ((None, 0), np.arange(8, dtype=np.float32)[None]),
    (Ellipsis, 1.25),
    ((), 2),
    (np.int64(-2), 4),
    (np.array(3), 4),
    (A > 5, 0.0),
    (A % 3 == 0, "rows"),  # one value per true position
    (np.array([True, False, True, False, False, True]), np.arange(8, dtype=np.float32)),
    (True, -1.0),
    (False, 1.0),
]
IDS = [f"case{i}" for i in range(len(CASES))]


def _value(key, value):
    if isinstance(value, str):  # a row per true position
        return np.arange(int(np.count_nonzero(key)), dtype=np.float32) * 10
    return value


def _digest(path) -> str:
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


@pytest.fixture
def source(tmp_path):
    """A .npy source opened read-only, and its path."""
    path = tmp_path / "src.npy"
    np.save(path, A)
    return oocarr.open(str(path)), path


#: How each kind of result is made from the source, and NumPy's same value.
RESULTS = {
    "op": (lambda x: x * 2.0, lambda a: a * 2.0),
    "copy": (lambda x: xp.asarray(x, copy=True), lambda a: a.copy()),
    "from_numpy": (lambda x: oocarr.from_numpy(np.asarray(x)), lambda a: a.copy()),
    "view": (lambda x: x[1:], lambda a: a[1:].copy()),
}


@pytest.mark.parametrize("made", sorted(RESULTS))
@pytest.mark.parametrize(("key", "value"), CASES, ids=IDS)
def test_assignment_into_results_matches_numpy(source, made, key, value):
    x, path = source
    before = _digest(path)
    make, numpy_make = RESULTS[made]
    y = make(x)
    want = numpy_make(A)
    if isinstance(key, np.ndarray) and key.dtype == bool and key.shape[0] != want.shape[0]:
        key = key[-want.shape[0] :]
    value = _value(key, value)
    want[key] = value
    y[key] = value
    assert y.dtype == want.dtype and y.shape == want.shape
    np.testing.assert_array_equal(np.asarray(y), want)
    np.testing.assert_array_equal(np.asarray(x), A)  # the source is untouched
    assert _digest(path) == before
    np.testing.assert_array_equal(np.load(path), A)


@pytest.mark.parametrize(("key", "value"), CASES, ids=IDS)
def test_stored_values_and_stored_masks(source, key, value):
    """A DiskArray value (read tile by tile) and a DiskArray mask give NumPy's result."""
    x, _ = source
    y = x - 1.0
    want = A - 1.0
    value = _value(key, value)
    want[key] = value
    stored_key = key
    if isinstance(key, np.ndarray) and key.dtype == bool:
        stored_key = oocarr.from_numpy(key)
    if np.ndim(value):
        value = oocarr.from_numpy(np.asarray(value))
    with oocarr.memory_budget(4 * 4 * 16):  # tiles of a row or two
        y[stored_key] = value
    np.testing.assert_array_equal(np.asarray(y), want)


def test_hdf5_source_is_never_written(tmp_path):
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=A, chunks=(2, 4), compression="gzip")
    before = _digest(path)
    x = oocarr.open(f"{path}#/x")
    with pytest.raises(errors.ReadOnlyError, match=r"mode='r\+'.*copy=True"):
        x[0] = 1.0
    with pytest.raises(errors.ReadOnlyError):
        x[A > 0] = 1.0
    y = xp.asarray(x, copy=True)
    y[y < 0] = 0.0
    v = x[2:, ::2]
    v[0] = 100.0
    want = A.copy()
    want[want < 0] = 0.0
    np.testing.assert_array_equal(np.asarray(y), want)
    np.testing.assert_array_equal(np.asarray(v)[0], np.full(4, 100.0, np.float32))
    np.testing.assert_array_equal(np.asarray(v)[1:], A[3:, ::2])
    del x, y, v
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["x"][...], A)
    assert _digest(path) == before


def test_read_only_source_raises_and_names_the_fix(source):
    x, path = source
    before = _digest(path)
    with pytest.raises(errors.ReadOnlyError, match=r"mode='r\+'") as err:
        x[0, 0] = 1.0
    assert "xp.asarray(x, copy=True)" in str(err.value)
    assert isinstance(err.value, PermissionError)
    assert _digest(path) == before


def test_storage_opened_for_writing_is_written_in_place(tmp_path):
    path = tmp_path / "w.npy"
    np.save(path, A)
    x = oocarr.open(str(path), mode="r+")
    want = A.copy()
    for key, value in [(slice(None, None, 2), -1.0), (A > 10, 0.0), ((1, slice(2, 6)), 3)]:
        x[key] = value
        want[key] = value
    x.update_(x + 1.0)  # update_ reopens the storage; assignment still writes it
    want += 1.0
    x[-1] = 50.0
    want[-1] = 50.0
    view = x[2:4]
    view[:, 0] = 8.0  # a view of writable storage writes through, as NumPy's
    want[2:4, 0] = 8.0
    np.testing.assert_array_equal(np.asarray(x), want)
    x.close()
    np.testing.assert_array_equal(np.load(path), want)


def test_created_arrays_are_written_in_place(tmp_path):
    path = str(tmp_path / "c.h5#/c")
    with oocarr.create(path, (6, 8), "f4", chunks=(4, 4)) as x:
        x[...] = A
        x[x.store[...] < 0] = 0.0
    want = np.maximum(A, 0.0)
    np.testing.assert_array_equal(np.asarray(oocarr.open(path)), want)


def test_under_jit_arrays_are_immutable(source):
    x, _ = source
    y = x * 1.0

    def assign(u):
        u[0] = 1.0
        return u

    with pytest.raises(errors.NotSupportedError, match=r"update_.*|where") as err:
        jax.jit(assign)(y)
    assert "oocarr.where" in str(err.value) and "update_" in str(err.value)
    with pytest.raises(errors.NotSupportedError, match="jax.jit"):
        jax.jit(lambda: assign(y))()  # a concrete array closed over: still inside a trace
    with pytest.raises(errors.NotSupportedError):
        jax.grad(lambda u: oocarr.sum(assign(u)))(y)
    np.testing.assert_array_equal(np.asarray(y), A)


def test_results_are_values_for_what_was_made_before(source):
    """Views and handles of y made before a write keep their values; later reads and ops see
    the write."""
    x, _ = source
    y = x + 0.0
    view = y[1:3]
    passed = jax.jit(lambda u: u)(y)  # the same storage, through jit
    assert passed.locator == y.locator
    y[1:3] = 0.0
    np.testing.assert_array_equal(np.asarray(view), A[1:3])
    np.testing.assert_array_equal(np.asarray(passed), A)
    want = A.copy()
    want[1:3] = 0.0
    np.testing.assert_array_equal(np.asarray(y), want)
    np.testing.assert_array_equal(np.asarray(y * 2.0), want * 2.0)
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda u: u - 1.0)(y)), want - 1.0)
    np.testing.assert_allclose(float(oocarr.sum(y)), want.sum())
    view[0] = 5.0  # the view is a value too: y keeps its data
    np.testing.assert_array_equal(np.asarray(y), want)


def test_an_array_alone_is_written_in_place(source):
    x, _ = source
    y = x * 2.0
    loc = y.locator
    y[3, 4] = -1.0
    y[1:2] = 2.0
    assert y.locator == loc  # one tile rewritten, no copy
    y[y > 0] = 0.0  # masked: a new array, written whole, then y's
    assert y.locator != loc
    want = A * 2.0
    want[3, 4] = -1.0
    want[1:2] = 2.0
    want[want > 0] = 0.0
    np.testing.assert_array_equal(np.asarray(y), want)


def test_overlapping_values_read_before_written(source):
    x, _ = source
    y = x * 1.0
    want = A.copy()
    y[1:] = y[:-1]
    want[1:] = want[:-1]
    np.testing.assert_array_equal(np.asarray(y), want)
    with oocarr.memory_budget(4 * 4 * 16):
        y[:, 1:] = y[:, ::-1][:, 1:]
    want[:, 1:] = want[:, ::-1][:, 1:]
    np.testing.assert_array_equal(np.asarray(y), want)


def test_a_jitted_output_reused_by_the_next_call_is_copied_first(source):
    x, _ = source
    f = jax.jit(lambda u: oocarr.sum(u, axis=0))
    first = f(x)
    first[0] = 5.0
    second = f(x)
    np.testing.assert_allclose(np.asarray(first)[1:], A.sum(axis=0)[1:])
    assert float(np.asarray(first)[0]) == 5.0
    np.testing.assert_allclose(np.asarray(second), A.sum(axis=0))


def test_scikit_learn_scale_sequence(source):
    x, _ = source
    data = np.asarray(A).copy()
    data[:, 3] = 2.0  # a constant column: its scale is 0
    z = xp.asarray(data)
    scale = xp.std(z, axis=0)
    assert isinstance(scale, oocarr.DiskArray)
    scale[scale == 0] = 1.0
    want = np.std(data, axis=0)
    want[want == 0] = 1.0
    np.testing.assert_allclose(np.asarray(scale), want, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(z / scale), data / want, rtol=1e-5)


#: 0-d sources of ``asarray(obj, copy=True)``, by name, and NumPy's same value.
ZERO_D = {
    "python float": (lambda: 2.5, lambda: np.array(2.5, np.float32)),
    "numpy scalar": (lambda: np.float32(2.5), lambda: np.array(2.5, np.float32)),
    "stored 0-d": (lambda: oocarr.from_numpy(np.array(2.5)), lambda: np.array(2.5)),
    "reduction": (
        lambda: xp.mean(oocarr.from_numpy(np.array([2.0, 3.0], np.float32))),
        lambda: np.array(2.5, np.float32),
    ),
    "element": (lambda: oocarr.from_numpy(A)[1, 2], lambda: np.array(A[1, 2])),
}


@pytest.mark.parametrize("made", sorted(ZERO_D))
@pytest.mark.parametrize("key", [(), Ellipsis, True, False, np.array(True)], ids=repr)
@pytest.mark.parametrize("value", [7, np.float32(-1.5), "stored"])
def test_a_0d_copy_is_written_as_numpys(made, key, value):
    make, numpy_source = ZERO_D[made]
    source = make()
    value = oocarr.from_numpy(np.array(4.25, np.float32)) if value == "stored" else value
    y = xp.asarray(source, copy=True)
    y[key] = value
    want = numpy_source()
    want[key] = np.asarray(value)
    got = np.asarray(y)
    assert isinstance(y, oocarr.DiskArray) and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.asarray(source), numpy_source())  # the source is unchanged


def test_values_are_cast_to_the_array_dtype():
    y = oocarr.from_numpy(np.zeros(5, np.int32))
    y[1] = 2.7  # as np.asarray(2.7, dtype=int32)
    y[2:4] = np.array([1.9, -1.9])
    y[np.array([False, False, False, False, True])] = True
    assert y.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(y), [0, 2, 1, -1, 1])
    with pytest.raises(errors.DtypeMismatchError, match="complex"):
        y[0] = 1 + 2j
    u8 = oocarr.from_numpy(np.zeros(3, np.uint8))
    with pytest.raises(errors.InvalidArgumentError, match="uint8"):
        u8[0] = 300
    np.testing.assert_array_equal(np.asarray(y), [0, 2, 1, -1, 1])


def test_bad_keys_and_values_raise_before_anything_is_written(source):
    x, _ = source
    y = x * 1.0
    loc = y.locator
    with pytest.raises(errors.ShapeMismatchError, match="broadcast"):
        y[0] = np.ones(3)
    with pytest.raises(errors.ShapeMismatchError, match="broadcast"):
        y[1:3] = np.ones((3, 8))
    with pytest.raises(errors.ShapeMismatchError, match="mask"):
        y[np.ones(5, bool)] = 1.0
    with pytest.raises(errors.ShapeMismatchError, match="true positions"):
        y[A > 0] = np.arange(3.0)
    with pytest.raises(errors.NotSupportedError, match="integer-array"):
        y[[0, 2]] = 1.0
    with pytest.raises(errors.NotSupportedError, match="alone"):
        y[A[:, 0] > 0, 1] = 1.0
    with pytest.raises(IndexError):
        y[6] = 1.0
    with pytest.raises(IndexError):
        y[0, 0, 0] = 1.0
    with pytest.raises(errors.InvalidArgumentError):
        y[1.5] = 1.0
    assert y.locator == loc
    np.testing.assert_array_equal(np.asarray(y), A)


def test_a_failed_write_leaves_the_data(source, monkeypatch):
    x, _ = source
    y = x * 1.0
    loc = y.locator
    calls = []
    patch = assignment._patch

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("disk gone")
        return patch(*args, **kwargs)

    monkeypatch.setattr(assignment, "_patch", failing)
    with oocarr.memory_budget(4 * 4 * 16), pytest.raises(OSError, match="disk gone"):
        y[y > -100] = 0.0  # every tile assigned; the second fails
    assert y.locator == loc
    np.testing.assert_array_equal(np.asarray(y), A)


def test_masked_write_streams_under_a_small_budget():
    rng = np.random.default_rng(1)
    data = rng.standard_normal((512, 96)).astype(np.float32)
    budget = 16 * 1024  # the array is 12 times the budget
    y = oocarr.from_numpy(data) * 1.0
    mask = oocarr.from_numpy(data > 0.5)
    rows = int((data > 0.5).sum())
    want = data.copy()
    want[data < -1] = -1.0
    want[data > 0.5] = np.arange(rows, dtype=np.float32)
    with oocarr.memory_budget(budget), oocarr.io_stats() as stats:
        y[y < -1] = -1.0
        y[mask] = oocarr.from_numpy(np.arange(rows, dtype=np.float32))
    np.testing.assert_array_equal(np.asarray(y), want)
    sites = [c for site, c in stats.by_site.items() if site.startswith("setitem")]
    assert sites and all(0 < c.projected_bytes <= budget for c in sites)


def test_peak_memory_of_a_masked_write_is_bounded(tmp_path):
    path = str(tmp_path / "big.npy")
    big = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(2048, 4096))
    big[:] = np.arange(4096, dtype=np.float32) % 5
    big.flush()
    del big
    report = run_script(RSS_SCRIPT, path, str(RSS_BUDGET))
    row = np.arange(4096) % 5
    assert report["source"] == pytest.approx(2048 * row.sum())
    assert report["sum"] == pytest.approx(2048 * np.where(row == 3, -1, row).sum())
    assert report["growth"] <= 1.25 * RSS_BUDGET, report


RSS_BUDGET = 8 * 10**6
RSS_SCRIPT = """
import json, sys
import numpy as np
import oocarr

xp = oocarr.array_api
x = oocarr.open(sys.argv[1])  # 32 MiB, read-only
budget = int(sys.argv[2])
with oocarr.memory_budget(budget):
    warm = oocarr.zeros(x.shape, dtype=x.dtype)  # compile what the measured run uses
    warm[warm == 3] = -1.0
    del warm
    y = xp.asarray(x, copy=True)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    baseline = peak_rss()
    y[y == 3] = -1.0
    growth = peak_rss() - baseline
    total = float(oocarr.sum(y))
print(json.dumps({"growth": growth, "sum": total, "source": float(oocarr.sum(x))}))
"""


def test_reopened_read_only_after_writing_stays_read_only(tmp_path):
    path = str(tmp_path / "c.npy")
    with oocarr.create(path, (6, 8), "f4") as x:
        x[...] = A
    before = _digest(path)
    reader = oocarr.open(path)
    with pytest.raises(errors.ReadOnlyError):
        reader[0] = 1.0
    with pytest.raises(errors.ReadOnlyError):
        reader[A > 0] = 1.0
    assert _digest(path) == before
