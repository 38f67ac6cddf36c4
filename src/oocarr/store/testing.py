"""The driver conformance suite: the page-store contract as tests a driver package subclasses.

:class:`DriverTests` is a pytest class of tests that use only the public
interface of :class:`~oocarr.store.BlockedArray` and the ``oocarr``
functions, never a driver's internals, with NumPy as the oracle: every value
read back is compared with the array it was made from.  A driver package
runs it by subclassing it in one of its test modules (a module pytest
collects, ``test_*.py``); this module itself holds no test pytest collects.
It needs pytest and hypothesis, and imports no storage library.

Examples
--------
A driver registered as ``"mydriver"`` whose files end in its first suffix
needs nothing more than the driver's name::

    from oocarr.store.testing import DriverTests

    class TestMyDriver(DriverTests):
        driver = "mydriver"

The hooks say where arrays live and what the configuration cannot do:

>>> import pathlib
>>> class TestRawFiles(DriverTests):
...     driver = "memmap"
...     create_kwargs = {"driver": "memmap"}
...
...     def make_url(self, directory, name):
...         return str(directory / f"{name}.bin")
...
...     def open_kwargs(self, shape=None, dtype=None):
...         return {**super().open_kwargs(), "shape": shape, "dtype": dtype}
>>> suite = TestRawFiles()
>>> suite.make_url(pathlib.Path("/data"), "a0"), suite.open_kwargs(3, "f4")
('/data/a0.bin', {'driver': 'memmap', 'shape': 3, 'dtype': 'f4'})
>>> suite.supports("bfloat16"), suite.driver_class.name
(True, 'memmap')
"""

from __future__ import annotations

import itertools
import json
import math
import multiprocessing
import pathlib
import pickle
import threading
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import oocarr
from oocarr import errors

from .blocked import BlockedArray, jsonable_attrs
from .dtypes import as_dtype
from .locator import Locator
from .registry import get_driver

__all__ = ["DriverTests"]

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
KEYS = [
    (slice(None),),
    (3,),
    (-1, slice(1, 4)),
    (slice(2, 9, 3), slice(None, None, -2)),
    (Ellipsis, 2),
    (slice(5, 5),),
    (slice(None, None, -1), 0),
]

#: Where ``test_save_copies_between_drivers`` copies to: the drivers installed with oocarr.
BUILT_IN_TARGETS: dict[str, Callable[[pathlib.Path, str], str]] = {
    "memmap-npy": lambda directory, name: str(directory / f"{name}.npy"),
    "hdf5-chunked": lambda directory, name: str(directory / f"{name}.h5") + "#/group/data",
    "fsspec-local": lambda directory, name: str(directory / f"{name}.zarr"),
}

_NAMES = itertools.count()


def _sample(shape: tuple[int, ...], dtype: Any = "float32", seed: int = 0) -> np.ndarray:
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


def _chunks_for(shape: tuple[int, ...]) -> tuple[int, ...] | None:
    return tuple(max(1, -(-s // 2)) for s in shape) if shape else None


def _misaligned_pages(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(max(1, s // 3 + 1) for s in shape)


def _same(a: np.ndarray, b: np.ndarray) -> None:
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
    assert a.tobytes() == b.tobytes()


def _tree_digest(root: pathlib.Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _child_read(store: BlockedArray) -> tuple[np.ndarray, tuple[int, ...]]:
    return store.read_region(), store.page_shape


class DriverTests:
    """The page-store contract as tests, run against one driver configuration per subclass.

    Hooks (class attributes and methods a subclass sets):

    ``driver``
        The name the driver is registered under (entry point or
        ``register_driver``); its capability flags decide what is tested.
    ``make_url(directory, name)``
        The URL of a new array called ``name`` (unique within the test);
        ``directory`` is the test's empty temporary directory.  Default: a file
        ``name`` plus the driver's first suffix in ``directory``.
    ``create_kwargs``
        Keywords for ``oocarr.save`` / ``oocarr.create`` besides the URL
        (``driver``, ``storage_options``, ``compression`` ...); ``driver`` and
        ``storage_options`` are given to ``oocarr.open`` too.
    ``open_kwargs(shape, dtype)``
        All keywords ``oocarr.open`` needs besides the URL and mode, for an
        array of that shape and dtype (a raw file adds ``shape`` and ``dtype``).
    ``unsupported_dtypes``
        Dtype names this configuration refuses although the driver's
        ``supports_dtype`` accepts them (a ``.npy`` file and ``bfloat16``).
    ``native_writer``
        ``(url, data) -> None`` writing ``data`` with the format's own library,
        for a configuration oocarr reads but does not create (``None``: arrays
        are made by ``oocarr.save``).  Skips the tests of ``oocarr.create``.
    ``cross_process``
        ``False`` for storage that lives in one process's memory: skips the
        test that reopens a pickled array in a child process.
    ``slow_storage``
        ``True`` for a network service: skips the many-example property test.
    ``copy_targets``
        ``{id: make_url}`` of the drivers ``oocarr.save`` copies to in
        ``test_save_copies_between_drivers`` (default: the built-in drivers).

    Capability flags of the driver class: ``supports_dtype`` (a refused dtype
    must raise ``UnsupportedDtypeError``), ``supports_chunks`` (``chunks=`` is
    passed only when true), ``supports_attrs`` (skips the attrs tests) and
    ``atomic_create`` (skips the tests that a failed or unfinished create
    leaves nothing behind).

    Examples
    --------
    >>> class TestNpy(DriverTests):
    ...     driver = "memmap"
    ...     unsupported_dtypes = ("bfloat16",)
    >>> TestNpy().make_url(pathlib.Path("/data"), "a0")
    '/data/a0.npy'
    >>> TestNpy().supports("bfloat16"), TestNpy().supports("int8")
    (False, True)
    """

    driver: ClassVar[str]
    create_kwargs: ClassVar[Mapping[str, Any]] = {}
    unsupported_dtypes: ClassVar[tuple[str, ...]] = ()
    native_writer: ClassVar[Callable[[str, np.ndarray], None] | None] = None
    cross_process: ClassVar[bool] = True
    slow_storage: ClassVar[bool] = False
    copy_targets: ClassVar[Mapping[str, Callable[[pathlib.Path, str], str]]] = BUILT_IN_TARGETS

    directory: pathlib.Path

    # -- hooks ---------------------------------------------------------------
    def make_url(self, directory: pathlib.Path, name: str) -> str:
        """The URL of a new array called ``name`` in the test's directory.

        Examples
        --------
        >>> class TestZarr(DriverTests):
        ...     driver = "fsspec"
        >>> TestZarr().make_url(pathlib.Path("/data"), "a0")
        '/data/a0.zarr'
        """
        suffixes = self.driver_class.suffixes
        if not suffixes:
            raise TypeError(
                f"driver {self.driver!r} claims no suffix; override make_url in "
                f"{type(self).__name__} to say where its arrays live"
            )
        return str(directory / f"{name}{suffixes[0]}")

    def open_kwargs(self, shape: Any = None, dtype: Any = None) -> dict[str, Any]:
        """Keywords ``oocarr.open`` needs besides the URL for an array of ``shape`` and ``dtype``.

        Examples
        --------
        >>> class TestS3(DriverTests):
        ...     driver = "fsspec"
        ...     create_kwargs = {"storage_options": {"anon": True}, "compression": "zstd"}
        >>> TestS3().open_kwargs((3,), "f4")
        {'storage_options': {'anon': True}}
        """
        return {k: v for k, v in self.create_kwargs.items() if k in ("driver", "storage_options")}

    # -- helpers for the tests -------------------------------------------------
    @property
    def driver_class(self) -> type[BlockedArray]:
        """The registered driver class named by :attr:`driver`."""
        return get_driver(self.driver)

    def supports(self, dtype: Any) -> bool:
        """Whether this configuration stores ``dtype``."""
        dtype = as_dtype(dtype)
        return self.driver_class.supports_dtype(dtype) and dtype.name not in self.unsupported_dtypes

    def url(self, name: str = "a") -> str:
        """A URL no other array of the test session has."""
        return self.make_url(self.directory, f"{name}{next(_NAMES)}")

    def store(
        self,
        data: np.ndarray,
        *,
        chunks: tuple[int, ...] | None = None,
        attrs: dict[str, Any] | None = None,
        mode: str = "r+",
    ) -> BlockedArray:
        """Store ``data`` in this configuration and return it open in ``mode``."""
        url = self.url()
        writer = type(self).native_writer
        if writer is not None:
            writer(url, data)
            return oocarr.open(url, mode, **self.open_kwargs(data.shape, data.dtype)).store
        kwargs = dict(self.create_kwargs)
        if chunks is not None and self.driver_class.supports_chunks:
            kwargs["chunks"] = chunks
        return oocarr.save(data, url, attrs=attrs, mode=mode, **kwargs).store

    def _require_create(self) -> None:
        if type(self).native_writer is not None:
            pytest.skip("arrays of this configuration are not made by oocarr.create")
        if not self.driver_class.atomic_create:
            pytest.skip(f"{self.driver} does not create atomically (atomic_create)")

    def _require_attrs(self) -> None:
        if not self.driver_class.supports_attrs:
            pytest.skip(f"{self.driver} stores no attrs (supports_attrs)")

    @pytest.fixture(autouse=True)
    def _fresh_directory(self, tmp_path: pathlib.Path) -> None:
        self.directory = tmp_path

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Run the copy test once per entry of :attr:`copy_targets`."""
        if "copy_target" in metafunc.fixturenames:
            metafunc.parametrize("copy_target", list(self.copy_targets))

    # -- the tests -----------------------------------------------------------
    @pytest.mark.parametrize("shape", SHAPES, ids=str)
    def test_every_block_round_trips(self, shape: tuple[int, ...]) -> None:
        data = _sample(shape)
        store = self.store(data, chunks=_chunks_for(shape))
        assert store.shape == shape and store.dtype == np.float32
        paged = store.with_pages(_misaligned_pages(shape))
        seen = np.zeros(shape, dtype=int)
        for idx in paged.block_grid():
            region = paged.block_region(idx)
            _same(paged.read_block(idx), data[region])
            seen[region] += 1
        assert (seen == 1).all()
        assert paged.num_blocks == math.prod(paged.grid_shape)

        new = _sample(shape, seed=1)
        for idx in paged.block_grid():
            paged.write_block(idx, new[paged.block_region(idx)])
        store.flush()
        reopened = oocarr.open(store.locator)
        _same(reopened.store.read_region(), new)
        _same(oocarr.to_numpy(reopened), new)

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_dtypes_round_trip_bit_exact(self, dtype: str) -> None:
        data = _sample((6, 5), dtype)
        if not self.supports(dtype):
            with pytest.raises(errors.UnsupportedDtypeError, match=dtype):
                self.store(data, chunks=(4, 3))
            return
        store = self.store(data, chunks=(4, 3))
        assert store.dtype == data.dtype
        _same(store[:], data)
        reopened = oocarr.open(store.locator).store
        _same(reopened.with_pages((5, 2)).read_block((1, 2)), data[5:, 4:])

    def test_attrs_round_trip(self) -> None:
        self._require_attrs()
        attrs = {
            "units": "m/s",
            "scale": 0.5,
            "n": 3,
            "flag": True,
            "axes": [1, 2, 3],
            "nested": {"a": [1.5, "x"]},
        }
        store = self.store(np.arange(4.0))
        store.set_attrs(attrs)
        store.flush()
        assert oocarr.open(store.locator).attrs == attrs
        store.update_attrs({"n": 4})
        assert oocarr.open(store.locator).store.attrs == {**attrs, "n": 4}
        json.dumps(store.info())

    def test_native_attrs_hold_what_attrs_hold(self) -> None:
        """``native_attrs`` are the same attributes in the format's own types."""
        self._require_attrs()
        attrs = {"units": "K", "scale_factor": 0.5, "valid_range": [0, 9], "meta": {"a": 1}}
        store = self.store(np.arange(4.0))
        store.set_attrs(attrs)
        store.flush()
        native = oocarr.open(store.locator).store.native_attrs
        assert jsonable_attrs(native) == attrs
        assert store.masked_fill_value is None or np.ndim(store.masked_fill_value) == 0

    @pytest.mark.parametrize("method", ["spawn", "fork"])
    def test_pickles_by_locator_into_a_child_process(self, method: str) -> None:
        if not self.cross_process:
            pytest.skip(f"{type(self).__name__}'s arrays live in one process's memory")
        data = _sample((9, 4))
        store = self.store(data, chunks=(4, 4), mode="r").with_pages((2, 3))
        store.read_block((0, 0))  # the parent holds an open handle when it forks
        assert pickle.loads(pickle.dumps(store)).locator == store.locator
        with multiprocessing.get_context(method).Pool(1) as pool:
            values, pages = pool.apply(_child_read, (store,))
        _same(values, data)
        assert pages == (2, 3)

    def test_concurrent_reads_from_two_threads(self) -> None:
        data = _sample((40, 6))
        store = self.store(data, chunks=(7, 6), mode="r").with_pages((5, 6))
        failures: list[Any] = []

        def reader(order: list[tuple[int, ...]]) -> None:
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

    @pytest.mark.parametrize("key", KEYS, ids=str)
    def test_numpy_indexing_matches_numpy(self, key: Any) -> None:
        data = _sample((10, 6))
        store = self.store(data, chunks=(4, 4))
        _same(store[key], data[key])
        expected = data.copy()
        value = np.asarray(data[key]) * 0 + 7
        expected[key] = value
        store[key] = value
        _same(store[:], expected)

    def test_read_into_a_caller_buffer(self) -> None:
        data = _sample((8, 5))
        store = self.store(data, chunks=(3, 5))
        out = np.full((4, 3), -1, dtype=np.float32)
        assert store.read_region((slice(2, 6), slice(1, 4)), out=out) is out
        _same(out, data[2:6, 1:4])
        with pytest.raises(errors.ShapeMismatchError):
            store.read_region((slice(0, 1), slice(0, 1)), out=out)
        with pytest.raises(errors.DtypeMismatchError):
            store.read_region((slice(0, 4), slice(0, 3)), out=out.astype(np.float64))

    def test_bad_writes_are_refused_and_change_nothing(self) -> None:
        data = _sample((6, 4))
        store = self.store(data, chunks=(3, 4)).with_pages((3, 4))
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
        _same(store[:], data)

    def test_read_only_refuses_writes(self) -> None:
        data = _sample((5, 3))
        store = self.store(data, mode="r")
        before = _tree_digest(self.directory)
        assert store.readonly
        with pytest.raises(errors.ReadOnlyError, match="r\\+"):
            store[0] = 1.0
        with pytest.raises(errors.ReadOnlyError):
            store.write_block((0, 0), data)
        with pytest.raises(errors.ReadOnlyError):
            store.update_attrs({"a": 1})
        _same(oocarr.open(store.locator).store[:], data)
        store.close()
        assert _tree_digest(self.directory) == before

    def test_create_over_existing_needs_overwrite(self) -> None:
        self._require_create()
        url = self.url()
        data = _sample((4, 4))
        kwargs = dict(self.create_kwargs)
        open_kwargs = self.open_kwargs(data.shape, data.dtype)
        oocarr.save(data, url, **kwargs)
        with pytest.raises(errors.AlreadyExistsError, match="overwrite=True"):
            oocarr.save(np.zeros((4, 4), np.float32), url, **kwargs)
        _same(oocarr.open(url, **open_kwargs).store[:], data)

        with pytest.raises(RuntimeError):
            with oocarr.create(url, (4, 4), "float32", overwrite=True, **kwargs) as x:
                x.store[:] = 0
                raise RuntimeError("interrupted")
        _same(oocarr.open(url, **open_kwargs).store[:], data)

        replaced = oocarr.save(-data, url, overwrite=True, **kwargs)
        _same(oocarr.to_numpy(replaced), -data)

    def test_a_failed_create_leaves_nothing(self) -> None:
        self._require_create()
        url = self.url()
        kwargs = dict(self.create_kwargs)
        with pytest.raises(KeyboardInterrupt), oocarr.create(url, (3,), "int16", **kwargs) as x:
            x.store[:] = [1, 2, 3]
            x.store.flush()
            raise KeyboardInterrupt
        with pytest.raises(errors.NotFoundError):
            oocarr.open(url, **self.open_kwargs(3, "i2"))
        pending = oocarr.create(url, (3,), "int16", **kwargs)
        with pytest.raises(errors.NotFoundError):
            oocarr.open(pending.store.locator)
        pending.store[:] = [4, 5, 6]
        pending.close()
        _same(oocarr.open(pending.store.locator).store[:], np.array([4, 5, 6], np.int16))

    def test_missing_array_is_not_found(self) -> None:
        with pytest.raises(errors.NotFoundError) as info:
            oocarr.open(self.url("missing"), **self.open_kwargs(3, "f4"))
        assert "missing" in str(info.value)

    def test_info_is_json_and_describes_the_array(self) -> None:
        data = _sample((9, 4), "int16")
        store = self.store(data, chunks=(4, 4))
        info = json.loads(json.dumps(store.info()))
        assert info["driver"] == store.name == self.driver
        assert info["shape"] == [9, 4] and info["dtype"] == "int16" and info["nbytes"] == 72
        assert info["chunks"] == (list(store.chunks) if store.chunks else None)
        assert Locator.from_dict(info["locator"]).driver == store.name
        assert info["stored_nbytes"] is None or info["stored_nbytes"] > 0

    def test_save_copies_between_drivers(self, copy_target: str) -> None:
        target_dir = self.directory / "dst"
        target_dir.mkdir(exist_ok=True)
        target = self.copy_targets[copy_target](target_dir, f"a{next(_NAMES)}")
        data = _sample((11, 7), "float64")
        src = self.store(data, chunks=(4, 3), attrs=None)
        attrs = {"origin": type(self).__name__} if self.driver_class.supports_attrs else {}
        if attrs:
            src.update_attrs(attrs)
        out = oocarr.save(src, target, tile_bytes=64)
        _same(oocarr.to_numpy(out), data)
        assert out.attrs == attrs

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def test_property_regions_match_numpy(self, data: st.DataObject) -> None:
        if self.slow_storage:
            pytest.skip("slow storage: covered by the fixed-shape tests")
        ndim = data.draw(st.integers(1, 3), label="ndim")
        shape = tuple(data.draw(st.lists(st.integers(0, 9), min_size=ndim, max_size=ndim)))
        chunks = tuple(data.draw(st.integers(1, 10)) for _ in shape)
        pages = tuple(data.draw(st.integers(1, 10)) for _ in shape)
        array = _sample(shape, "int32", seed=data.draw(st.integers(0, 100)))
        store = self.store(array, chunks=chunks).with_pages(pages)
        for idx in store.block_grid():
            _same(store.read_block(idx), array[store.block_region(idx)])
        bounds = [
            sorted(data.draw(st.lists(st.integers(0, s), min_size=2, max_size=2))) for s in shape
        ]
        region = tuple(slice(a, b) for a, b in bounds)
        _same(store.read_region(region), array[region])
        patch = _sample(array[region].shape, "int32", seed=7)
        store.write_region(region, patch)
        array[region] = patch
        _same(store.read_region(), array)
