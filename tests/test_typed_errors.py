"""Typed errors and bounded sizes (issue 14, item 10): absurd budgets, options, metadata,
codec levels, CLI numbers and shapes each end in an oocarr error naming the input and the fix."""

from __future__ import annotations

import contextlib
import json
import math
import os
import pathlib
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest
import zarr
from click.testing import CliRunner

import oocarr
from oocarr import errors
from oocarr.cli.main import main
from oocarr.config import parse_size
from oocarr.store import pages


def _mem_available() -> int:
    """The oracle for "fits in memory": the kernel's own estimate."""
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))


def cli(*args: object, code: int):
    """Run the command in this process; it must exit with ``code`` and print no traceback."""
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == code, (result.output, result.exception)
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, (TypeError, KeyError, RecursionError, MemoryError))
    return result


# ----------------------------------------------------------------------
# 1. memory budgets
# ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "size",
    [
        "9" * 400 + "MB",  # float("9" * 400) is inf: OverflowError before
        "99999999999999999999999TB",  # accepted before as 1e35 bytes
        10**400,  # accepted before
        float("inf"),
        float("-inf"),  # OverflowError before
        float("nan"),
        np.float64("nan"),
        -5,
        -0.5,
        "-1MB",
        "1e400MB",
        True,
        None,
        [64],
        b"64MB",
    ],
)
def test_absurd_budgets_are_invalid_arguments(size):
    with pytest.raises(errors.InvalidArgumentError, match="memory size"):
        oocarr.set_memory_budget(size) if size is not None else parse_size(size)
    with pytest.raises(errors.InvalidArgumentError):
        with oocarr.memory_budget(size):
            pass


def test_largest_budget_is_one_exbibyte():
    assert parse_size(2**60) == 2**60
    assert parse_size(1.5e6) == 1_500_000
    with pytest.raises(errors.InvalidArgumentError, match="over 1 EiB"):
        parse_size(2**60 + 1)


# ----------------------------------------------------------------------
# 2. storage_options
# ----------------------------------------------------------------------
@pytest.mark.parametrize("options", ["x", 5, ["anon", True], {1: "a"}])
def test_storage_options_must_be_a_mapping(tmp_path, options):
    path = str(tmp_path / "a.npy")
    np.save(path, np.arange(3))
    with pytest.raises(errors.InvalidArgumentError, match="storage_options"):
        oocarr.open(path, storage_options=options)
    with pytest.raises(errors.InvalidArgumentError, match="storage_options"):
        oocarr.open(str(tmp_path / "b.zarr"), storage_options=options)


def test_locator_refuses_options_that_are_not_mappings():
    from oocarr.store import Locator

    with pytest.raises(errors.InvalidArgumentError, match="driver_options"):
        Locator.make("memmap", "/a.npy", driver_options="shape")
    assert Locator.make("memmap", "/a.npy", storage_options=None).options == {}


# ----------------------------------------------------------------------
# 3. and 5. zarr.json
# ----------------------------------------------------------------------
@pytest.fixture
def zarr_path(tmp_path):
    path = tmp_path / "a.zarr"
    oocarr.save(np.arange(12, dtype="f4").reshape(4, 3), str(path), chunks=(2, 3))
    return path


def _rewrite(path: pathlib.Path, change) -> None:
    doc = json.loads((path / "zarr.json").read_text())
    change(doc)
    (path / "zarr.json").write_text(json.dumps(doc))


def test_deeply_nested_zarr_json_is_invalid_store(zarr_path):
    (zarr_path / "zarr.json").write_text("[" * 100_000)
    with pytest.raises(errors.InvalidStoreError, match="not JSON"):
        oocarr.open(str(zarr_path))
    result = cli("inspect", zarr_path, code=2)
    assert str(zarr_path) in result.output


def test_nesting_under_json_limit_but_absurd_is_refused(zarr_path):
    _rewrite(zarr_path, lambda d: d["attributes"].update(deep=json.loads("[" * 500 + "]" * 500)))
    with pytest.raises(errors.InvalidStoreError, match="nests"):
        oocarr.open(str(zarr_path))


def test_non_utf8_zarr_json_is_invalid_store(zarr_path):
    (zarr_path / "zarr.json").write_bytes(b'{"zarr_format": 3, "a": "\xff\xfe"}')
    with pytest.raises(errors.InvalidStoreError):
        oocarr.open(str(zarr_path))


def test_huge_zarr_json_is_refused_without_reading_it_whole(zarr_path):
    from oocarr_drivers.zarr_meta import MAX_DOCUMENT_BYTES, read_document

    doc = json.loads((zarr_path / "zarr.json").read_text())
    doc["attributes"]["pad"] = "x" * MAX_DOCUMENT_BYTES
    (zarr_path / "zarr.json").write_text(json.dumps(doc))
    with pytest.raises(errors.InvalidStoreError, match="larger than 16 MiB"):
        oocarr.open(str(zarr_path))

    class Counting:
        """A filesystem that records how many bytes were asked for."""

        asked: list = []

        def cat_file(self, key, start=None, end=None):
            self.asked.append((start, end))
            with open(key, "rb") as f:
                return f.read(end)

    fs = Counting()
    loc = oocarr.store.Locator.make("fsspec", str(zarr_path))
    with pytest.raises(errors.InvalidStoreError):
        read_document(fs, str(zarr_path / "zarr.json"), loc)
    assert fs.asked == [(0, MAX_DOCUMENT_BYTES + 1)]


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.update(shape="abc"),
        lambda d: d.update(shape=[4, "3"]),
        lambda d: d.update(shape=[-4, 3]),
        lambda d: d.update(shape=[4.0, 3]),
        lambda d: d.update(shape=None),
        lambda d: d.update(zarr_format=[3]),
        lambda d: d.update(node_type={"a": 1}),
        lambda d: d["chunk_grid"]["configuration"].update(chunk_shape=[0, 3]),
        lambda d: d["chunk_grid"]["configuration"].update(chunk_shape=[-2, 3]),
        lambda d: d["chunk_grid"]["configuration"].update(chunk_shape="2,3"),
        lambda d: d["chunk_grid"].update(configuration=[1]),
        lambda d: d.update(chunk_grid=7),
        lambda d: d.update(data_type=["float32"]),
        lambda d: d.update(data_type={"name": 5}),
        lambda d: d.update(fill_value="zero"),
        lambda d: d.update(fill_value=[1, 2]),
        lambda d: d.update(fill_value={"a": 1}),
        lambda d: d.update(fill_value=1e300),  # out of float32's range
        lambda d: d.update(fill_value=10**400),
        lambda d: d.update(fill_value="0xZZ"),
        lambda d: d.update(codecs={"name": "bytes"}),
        lambda d: d.update(codecs="bytes"),
        lambda d: d.update(codecs=[{"name": "bytes", "configuration": {"endian": ["little"]}}]),
        lambda d: d.update(codecs=[{"name": "transpose", "configuration": {"order": ["a", 1]}}]),
        lambda d: d.update(codecs=[{"name": "transpose", "configuration": {"order": [True, 0]}}]),
        lambda d: d["chunk_key_encoding"].update(configuration={"separator": ["/"]}),
        lambda d: d.update(chunk_key_encoding=[]),
        lambda d: d.update(attributes=[1]),
        lambda d: d.update(
            shape=[1] * 65,
            chunk_grid={"name": "regular", "configuration": {"chunk_shape": [1] * 65}},
        ),
    ],
)
def test_wrong_types_in_zarr_json_are_invalid_store(zarr_path, change):
    _rewrite(zarr_path, change)
    with pytest.raises(errors.InvalidStoreError):
        oocarr.to_numpy(oocarr.open(str(zarr_path)))
    cli("inspect", "--json", zarr_path, code=2)


@pytest.mark.parametrize(
    "codec",
    [
        {"name": "gzip", "configuration": {"level": 99}},
        {"name": "gzip", "configuration": {"level": -1}},
        {"name": "gzip", "configuration": {"level": 10**30}},
        {"name": "zstd", "configuration": {"level": 10**30, "checksum": False}},
        {"name": "zstd", "configuration": {"level": 23, "checksum": False}},
        {"name": "zstd", "configuration": {"level": -(2**40), "checksum": False}},
        {"name": "zstd", "configuration": {"level": 3, "checksum": "yes"}},
        {"name": "gzip", "configuration": {"level": "5"}},
    ],
)
def test_absurd_codec_configuration_is_refused_when_read(zarr_path, codec):
    """Before: opened fine, then ``zlib.error`` / ``OverflowError`` on the first write."""
    _rewrite(zarr_path, lambda d: d.update(codecs=[d["codecs"][0], codec]))
    with pytest.raises(errors.InvalidStoreError, match="level|checksum"):
        x = oocarr.open(str(zarr_path), "r+")
        x.store[0:2] = np.ones((2, 3), "f4")


def test_codec_levels_in_range_still_open_and_match_zarr_python(tmp_path):
    path = str(tmp_path / "z.zarr")
    data = np.arange(100, dtype="i4")
    z = zarr.create_array(
        path,
        shape=data.shape,
        dtype=data.dtype,
        chunks=(10,),
        compressors=zarr.codecs.ZstdCodec(level=-5),
    )
    z[:] = data
    np.testing.assert_array_equal(oocarr.to_numpy(oocarr.open(path)), data)


# ----------------------------------------------------------------------
# 4. HDF5: truncated files, read-only filesystems
# ----------------------------------------------------------------------
def test_truncated_h5_is_invalid_store_not_busy(tmp_path):
    path = tmp_path / "a.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(1000.0))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(OSError, match="truncated"):
        h5py.File(path, "r")  # the oracle: h5py's own message mentions "sblock"
    with pytest.raises(errors.InvalidStoreError) as info:
        oocarr.open(f"{path}#/x")
    assert not isinstance(info.value, errors.StorageBusyError)
    assert str(path) in str(info.value)


def test_h5_locked_by_another_process_is_storage_busy(tmp_path):
    path = tmp_path / "a.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(10.0))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import h5py,sys; f=h5py.File(sys.argv[1],'r+'); "
            "print('ready', flush=True); sys.stdin.read()",
            str(path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(errors.StorageBusyError, match="another process"):
            oocarr.open(f"{path}#/x")
    finally:
        holder.communicate("")


@contextlib.contextmanager
def _tmpfs(root: pathlib.Path):
    """A 2 MiB tmpfs mounted at ``root`` (skip where mounting is not permitted)."""
    root.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(root)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.decode().strip()}")
    try:
        yield root
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)


def _read_only(root: pathlib.Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(root)], check=True)


def test_h5_on_read_only_filesystem(tmp_path):
    with _tmpfs(tmp_path / "fs") as root:
        path = root / "a.h5"
        data = np.arange(100.0)
        with h5py.File(path, "w") as f:
            f.create_dataset("x", data=data)
        _read_only(root)
        np.testing.assert_array_equal(oocarr.to_numpy(oocarr.open(f"{path}#/x")), data)
        for write in (
            lambda: oocarr.open(f"{path}#/x", "r+"),
            lambda: oocarr.save(data, f"{path}#/y"),
            lambda: oocarr.save(data, f"{root}/new.h5#/x"),
        ):
            with pytest.raises(errors.ReadOnlyError, match="read-only") as info:
                write()
            assert str(root) in str(info.value) and info.value.url.startswith(str(root))
        result = cli("convert", f"{path}#/x", f"{root}/c.h5#/x", code=4)
        assert "read-only" in result.output
        assert sorted(os.listdir(root)) == ["a.h5"]


# ----------------------------------------------------------------------
# 6. CLI numbers and shapes
# ----------------------------------------------------------------------
@pytest.fixture
def npy(tmp_path):
    path = tmp_path / "c.npy"
    np.save(path, np.arange(20.0).reshape(4, 5))
    return path


@pytest.mark.parametrize(
    "chunks", ["99999999999999999999,5", "0,5", "-1,5", "abc", "9223372036854775807,5", ",", "1.5"]
)
def test_cli_chunks_are_usage_errors(npy, tmp_path, chunks):
    out = tmp_path / "out.zarr"
    result = cli("convert", npy, out, "--chunks", chunks, code=2)
    assert "chunk" in result.output
    assert not out.exists()


@pytest.mark.parametrize(
    "memory",
    ["1e400MB", "9" * 400 + "MB", "99999999999999999999999999TB", "-5", "0", "lots", "nan"],
)
def test_cli_memory_is_a_usage_error(npy, memory):
    result = cli("--memory", memory, "inspect", npy, code=2)
    assert "--memory" in result.output
    cli("inspect", npy, "--memory", memory, code=2)


@pytest.mark.parametrize("name", ["driver", "storage_options", "url", "mode"])
def test_cli_driver_options_that_are_open_arguments_are_usage_errors(npy, name):
    """Before: TypeError tracebacks (``driver``...) or an array opened r+ (``mode``)."""
    result = cli("inspect", npy, "-O", f"{name}=r+", code=2)
    assert "--driver-option" in result.output and name in result.output


@pytest.mark.parametrize("option", ["-o", "-O"])
@pytest.mark.parametrize("text", ['{"a":[[[', "novalue", "=1", "[1, 2]"])
def test_cli_key_value_options_are_usage_errors(npy, option, text):
    cli("inspect", npy, option, text, code=2)


@pytest.mark.parametrize("compression", ["gzip:99", "zstd:99999999999999999999", "gzip:x", "zz"])
def test_cli_compression_levels_are_usage_errors(npy, tmp_path, compression):
    cli("convert", npy, tmp_path / "o.zarr", "--compression", compression, code=2)


# ----------------------------------------------------------------------
# 7. sizes that cannot exist or cannot fit
# ----------------------------------------------------------------------
def _huge_zarr(path: pathlib.Path, dtype: str, rows: int, chunk: int) -> str:
    oocarr.save(np.zeros(10, dtype), str(path), chunks=(5,))

    def change(doc):
        doc["shape"] = [rows]
        doc["chunk_grid"]["configuration"]["chunk_shape"] = [chunk]

    _rewrite(path, change)
    shutil.rmtree(path / "c")  # every chunk missing: all fill value
    return str(path)


def test_metadata_whose_nbytes_overflow_int64_is_refused_at_open(tmp_path):
    url = _huge_zarr(tmp_path / "a.zarr", "f4", 2**62, 2**20)
    with pytest.raises(errors.InvalidStoreError, match="bytes"):
        oocarr.open(url)
    cli("inspect", "--stats", url, code=2)
    url = _huge_zarr(tmp_path / "b.zarr", "u1", 2**20, 2**62)  # one chunk of 2**62 ... fine
    assert oocarr.open(url).shape == (2**20,)
    url = _huge_zarr(tmp_path / "c.zarr", "f8", 2**20, 2**61)  # a chunk over int64
    with pytest.raises(errors.InvalidStoreError, match="chunk shape"):
        oocarr.open(url)


def test_to_numpy_of_an_array_larger_than_memory_names_its_size(tmp_path):
    """Before: ``ValueError: Maximum allowed dimension exceeded`` (or a MemoryError)."""
    url = _huge_zarr(tmp_path / "a.zarr", "i1", 2**62, 2**20)
    x = oocarr.open(url)
    assert x.store.nbytes == 2**62 > _mem_available()
    with pytest.raises(errors.BudgetTooSmallError, match=str(2**62)) as info:
        oocarr.to_numpy(x)
    assert info.value.url == url
    small = oocarr.open(_huge_zarr(tmp_path / "s.zarr", "i1", 7, 5))
    np.testing.assert_array_equal(oocarr.to_numpy(small), np.zeros(7, "i1"))


def test_grid_indices_is_lazy_and_in_c_order():
    import itertools

    for grid in [(3, 4), (2, 0), (), (5,), (2, 1, 3)]:
        assert list(pages.grid_indices(grid)) == list(itertools.product(*(range(n) for n in grid)))
    huge = pages.grid_indices((2**62, 2**40, 3))
    assert [next(huge) for _ in range(4)] == [(0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 0)]


def test_block_grid_of_a_huge_array_starts_at_once(tmp_path):
    """Before: ``MemoryError`` from ``itertools.product`` turning the range into a tuple."""
    x = oocarr.open(_huge_zarr(tmp_path / "a.zarr", "i1", 2**62, 2**20)).store
    tiled = x.with_pages((2**20,))
    assert next(iter(tiled.block_grid())) == (0,)
    region, values = next(oocarr.api.storage.read_tiles(x, (2**20,)))
    assert region == (slice(0, 2**20),) and not values.any()


def test_inspect_stats_of_a_huge_array_starts_streaming(tmp_path, monkeypatch):
    """Streaming 4 EiB runs for years: it must at least start (with its progress bar) and stop
    on Ctrl-C, not crash (before: ``MemoryError`` traceback).  Ctrl-C comes after one tile."""
    import oocarr.cli.inspect as command

    tiles = []

    class Interrupted(command.Summary):
        def add(self, values):
            tiles.append(values.shape)
            raise KeyboardInterrupt

    monkeypatch.setattr(command, "Summary", Interrupted)
    url = _huge_zarr(tmp_path / "a.zarr", "i1", 2**62, 2**20)
    result = cli("--memory", "64MB", "inspect", "--stats", url, code=130)
    assert "interrupted" in result.output
    assert len(tiles) == 1 and tiles[0][0] % 2**20 == 0


@pytest.mark.parametrize(
    "shape, chunks",
    [((-5, 3), None), ((2**62, 4), None), ((4,), (0,)), ((4,), (4, 4)), ((1,) * 65, None)],
)
def test_check_layout_refuses_impossible_layouts(shape, chunks):
    with pytest.raises(errors.InvalidStoreError, match="a.zarr"):
        pages.check_layout(shape, 4, chunks, "a.zarr")
    with pytest.raises(errors.InvalidArgumentError):
        pages.check_layout(shape, 4, chunks, "a.zarr", error=errors.InvalidArgumentError)


def test_check_layout_accepts_the_largest_possible_layout():
    pages.check_layout((2**61 - 1,), 4, (2**20,), "a.zarr")
    pages.check_layout((0, 2**62), 8, None, "a.zarr")
    assert math.prod((2**61 - 1,)) * 4 <= 2**63 - 1


def test_chunk_larger_than_memory_is_refused_before_allocating(tmp_path):
    """A 12-element array whose zarr.json claims chunks of 2**40 rows: reading it allocated a
    1 TiB chunk buffer first (``MemoryError`` from NumPy).  Metadata this size is legal (the
    chunk fits in int64): a missing chunk reads as the fill value, a chunk file that is there
    is refused as corrupt (it cannot hold 2**40 bytes), and neither allocates the chunk."""
    url = _huge_zarr(tmp_path / "a.zarr", "u1", 12, 2**40)
    x = oocarr.open(url)
    assert x.shape == (12,)
    try:
        got = oocarr.to_numpy(x)
    except errors.OocarrError as err:
        assert str(2**40) in str(err)
    else:
        np.testing.assert_array_equal(got, np.zeros(12, "u1"))
    (tmp_path / "a.zarr" / "c").mkdir()
    (tmp_path / "a.zarr" / "c" / "0").write_bytes(bytes(12))
    with pytest.raises(errors.OocarrError):
        oocarr.to_numpy(oocarr.open(url))


@pytest.mark.parametrize(
    "dtype",
    [("i4", -1), ("i4", 10**20), {"names": ["a"], "formats": ["q"], "offsets": [-1]}],
)
def test_dtypes_numpy_rejects_with_value_error_are_unsupported_dtypes(tmp_path, dtype):
    with pytest.raises(ValueError):
        np.dtype(dtype)  # the oracle: NumPy refuses each with ValueError, not TypeError
    with pytest.raises(errors.UnsupportedDtypeError):
        oocarr.create(str(tmp_path / "a.zarr"), (3,), dtype)


def test_h5_dataset_whose_nbytes_overflow_int64_is_refused_at_open(tmp_path):
    """HDF5 stores a (2**62,) float32 dataset lazily; its 2**64 bytes fit no int64 count."""
    path = tmp_path / "big.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", shape=(2**62,), dtype="f4", chunks=(2**20,))
        f.create_dataset("y", shape=(2**62,), dtype="i1", chunks=(2**20,))
        assert f["x"].shape[0] * 4 > np.iinfo(np.int64).max  # the oracle: h5py's own shape
    with pytest.raises(errors.InvalidStoreError, match="bytes"):
        oocarr.open(f"{path}#/x")
    y = oocarr.open(f"{path}#/y")
    assert y.store.nbytes == 2**62
    with pytest.raises(errors.BudgetTooSmallError):
        oocarr.to_numpy(y)


def test_zstd_frame_of_unstated_size_is_decoded_without_allocating_the_limit():
    """``ZstdDecompressor.decompress(max_output_size=N)`` allocates N bytes up front for a
    frame that does not state its size: a chunk claiming 2**40 bytes was a ``MemoryError``.
    Checked in a child process limited to 1 GiB of address space."""
    script = (
        "import resource, zstandard\n"
        "resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))\n"
        "from oocarr_drivers.bounded import unzstd\n"
        "frame = zstandard.ZstdCompressor(write_content_size=False).compress(b'a' * 100)\n"
        "assert zstandard.frame_content_size(frame) == -1\n"
        "print(len(unzstd(frame, 2**40)))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["100"]


@pytest.mark.parametrize(
    "shape", ["abc", "-1", "1e400", "NaN", "[[1]]", "[2.5,8]", "true", "[99999999999999999999]"]
)
def test_cli_raw_shape_driver_option_is_a_usage_error(tmp_path, shape):
    """``-O shape=abc`` was a ``ValueError`` traceback; ``1e400`` (JSON for infinity) an
    ``OverflowError``."""
    raw = tmp_path / "raw.bin"
    np.arange(20.0).tofile(raw)
    result = cli(
        "inspect", raw, "--driver", "memmap", "-O", f"shape={shape}", "-O", "dtype=f8", code=2
    )
    assert "shape" in result.output


@pytest.mark.parametrize("dst", ["o.zarr", "o.h5#/x"])
def test_cli_chunks_far_larger_than_the_array_do_not_traceback(npy, tmp_path, dst):
    """``--chunks 9223372036854775,5`` on a (4, 5) array: a 328 PiB chunk buffer was allocated
    for the edge chunk (NumPy ``_ArrayMemoryError`` traceback; HDF5 exit 4 "failed while
    writing").  Either chunks clipped to the array (and the data copied) or a usage error."""
    result = CliRunner().invoke(
        main, ["convert", str(npy), str(tmp_path / dst), "--chunks", "9223372036854775,5"]
    )
    assert result.exit_code in (0, 2), result.output
    assert "Traceback" not in result.output
    if result.exit_code == 0:
        got = oocarr.to_numpy(oocarr.open(str(tmp_path / dst)))
        np.testing.assert_array_equal(got, np.load(npy))


def test_a_reduction_over_a_huge_axis_starts_at_once():
    """A sum's input tiles are walked lazily, in NumPy's C order (metadata claiming 2**62 rows
    made the old index map build every tile of the axis before the first read)."""
    import itertools

    from oocarr.ops.reductions import _tiles

    first = next(_tiles([(2**62, 1000), (slice(0, 5),)]))
    assert first == (slice(0, 1000), slice(0, 5))
    small = [(7, 3), (slice(1, 2),), (5, 2)]
    want = itertools.product(
        [slice(0, 3), slice(3, 6), slice(6, 7)],
        [slice(1, 2)],
        [slice(0, 2), slice(2, 4), slice(4, 5)],
    )
    assert list(_tiles(small)) == list(want)
