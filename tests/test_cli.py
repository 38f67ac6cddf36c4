"""The ``oocarr`` command: inspect, ls and convert, through click's test runner and as real
subprocesses of the installed console script.  Inputs are made by h5py, zarr-python and NumPy
directly, and outputs are checked with them, never with oocarr's own readers."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest
import zarr
from click.testing import CliRunner

import oocarr
from oocarr.cli.errors import EXIT_INTERRUPTED, EXIT_NOT_FOUND, EXIT_USAGE, EXIT_WRITE
from oocarr.cli.main import main

CONSOLE_SCRIPT = pathlib.Path(sys.executable).parent / "oocarr"


def cli(*args, code: int = 0):
    """Run the command in this process; check its exit code; return click's result."""
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == code, (result.output, result.exception)
    if code not in (0, EXIT_INTERRUPTED):
        lines = result.stderr.strip().splitlines()
        assert lines and lines[-1].startswith("Error: "), result.output
        assert "Traceback" not in result.output
    return result


def cli_json(*args):
    return json.loads(cli(*args, "--json").stdout)


def script(*args, **kwargs) -> subprocess.CompletedProcess:
    """Run the installed console script."""
    assert CONSOLE_SCRIPT.exists(), f"install oocarr (pip install -e .) to get {CONSOLE_SCRIPT}"
    return subprocess.run(
        [str(CONSOLE_SCRIPT), *map(str, args)], capture_output=True, text=True, **kwargs
    )


def native(a: np.ndarray) -> np.ndarray:
    return a.astype(a.dtype.newbyteorder("="))


def bit_identical(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = native(np.asarray(a)), native(np.asarray(b))
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return a.tobytes() == b.tobytes()


# ----------------------------------------------------------------------
# Inputs made by h5py and zarr-python
# ----------------------------------------------------------------------
BIG_ENDIAN = (np.arange(600).reshape(30, 20) / 7).astype(">f8")
BIG_ENDIAN[3, 4] = np.nan
BIG_ENDIAN[5, 6] = -np.inf
GZIPPED = np.arange(1000, dtype="i4").reshape(100, 10) - 300
CONTIGUOUS = np.linspace(-1, 1, 64, dtype="f4").reshape(8, 8)


@pytest.fixture
def h5file(tmp_path) -> pathlib.Path:
    """Nested groups; gzip, contiguous, big-endian and scalar datasets; string attrs."""
    path = tmp_path / "data.h5"
    with h5py.File(path, "w") as f:
        g = f.create_group("exp/run1")
        x = g.create_dataset("x", data=BIG_ENDIAN, chunks=(10, 20))
        x.attrs["units"] = "metres"
        x.attrs["note"] = np.bytes_(b"big-endian floats")
        x.attrs["scale"] = 0.5
        f.create_dataset("exp/gz", data=GZIPPED, chunks=(25, 10), compression="gzip")
        f.create_dataset("flat", data=CONTIGUOUS)
        f.create_dataset("scalar", data=np.float64(2.5))
        f.create_dataset("partial", shape=(40, 10), dtype="f4", chunks=(10, 10))[0:10] = 1
    return path


@pytest.fixture
def zarr_store(tmp_path) -> pathlib.Path:
    """A Zarr v3 hierarchy written by zarr-python."""
    path = tmp_path / "store.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    a = root.create_array("a", shape=(12, 5), chunks=(4, 5), dtype="i2")
    a[:] = np.arange(60, dtype="i2").reshape(12, 5)
    a.attrs["kind"] = "counts"
    b = root.create_group("g").create_array("b", shape=(7,), chunks=(3,), dtype="f8")
    b[:] = np.arange(7.0)
    return path


# ----------------------------------------------------------------------
# inspect
# ----------------------------------------------------------------------
@pytest.mark.parametrize("name", ["/exp/run1/x", "/exp/gz", "/flat", "/scalar", "/partial"])
def test_inspect_json_matches_h5py_field_by_field(h5file, name):
    info = cli_json("inspect", f"{h5file}#{name}")
    with h5py.File(h5file, "r") as f:
        d = f[name]
        assert info["driver"] == "hdf5"
        assert info["url"] == f"{h5file}#{name}"
        assert info["locator"] == {
            "driver": "hdf5",
            "url": str(h5file),
            "path": name,
            "storage_options": {},
            "driver_options": {},
        }
        assert info["shape"] == list(d.shape)
        assert info["dtype"] == d.dtype.name
        assert info["byte_order"] == {">": "big", "<": "little", "=": "little"}[d.dtype.byteorder]
        assert info["itemsize"] == d.dtype.itemsize
        assert info["chunks"] == (list(d.chunks) if d.chunks else None)
        expected = f"gzip:{d.compression_opts}" if d.compression == "gzip" else None
        assert info["compression"] == expected
        assert info["nbytes"] == d.size * d.dtype.itemsize
        assert info["stored_nbytes"] == d.id.get_storage_size()
        if d.chunks:
            grid = np.prod([-(-s // c) for s, c in zip(d.shape, d.chunks)])
            assert info["chunks_initialized"] == [d.id.get_num_chunks(), int(grid)]
        else:
            assert info["chunks_initialized"] is None
        attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in d.attrs.items()}
        assert info["attrs"] == {k: v.item() if hasattr(v, "item") else v for k, v in attrs.items()}
    assert len(info["page_shape"]) == len(info["shape"])
    assert info["memory_budget"] > 0 and len(info["tile_shape"]) == len(info["shape"])
    assert info["readonly"] is True


def test_inspect_text_and_partly_written_chunks(h5file):
    out = cli("inspect", f"{h5file}#/exp/run1/x").stdout
    assert "float64 (big-endian)" in out and "(30, 20)" in out and "metres" in out
    out = cli("inspect", f"{h5file}#/partial").stdout
    assert "1 of 4 initialised" in out
    assert "gzip:4" in cli("inspect", f"{h5file}#/exp/gz").stdout


def test_inspect_zarr_made_by_zarr_python(zarr_store):
    info = cli_json("inspect", f"{zarr_store}#/a")
    a = zarr.open_array(str(zarr_store / "a"), mode="r")
    assert info["shape"] == list(a.shape) and info["chunks"] == list(a.chunks)
    assert info["dtype"] == a.dtype.name and info["attrs"] == dict(a.attrs)
    assert info["chunks_initialized"] == [a.nchunks_initialized, a.nchunks]


@pytest.mark.parametrize(
    "data",
    [
        BIG_ENDIAN,
        GZIPPED.astype(">i8"),
        np.array([[np.nan, np.nan]], "f4"),
        (np.arange(12) % 3 == 0).reshape(3, 4),
        (np.arange(6) - 2.5j).astype("c8"),
    ],
    ids=["float-nan-inf", "int", "all-nan", "bool", "complex"],
)
def test_inspect_stats_match_numpy(tmp_path, data):
    path = tmp_path / "s.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=tuple(max(1, s // 3) for s in data.shape))
    with h5py.File(path, "r") as f:
        ref = f["x"][()]
    stats = cli_json("--memory", "2kB", "inspect", f"{path}#/x", "--stats")["stats"]
    values = ref.ravel()
    wide = values.astype(np.complex128 if values.dtype.kind == "c" else np.float64)
    finite = wide[np.isfinite(wide)]
    assert stats["nan_count"] == int(np.isnan(wide).sum())
    assert stats["inf_count"] == int(np.isinf(wide).sum())
    assert stats["count"] == finite.size
    if finite.size == 0:
        assert stats["mean"] is None and stats["min"] is None
        return
    if values.dtype.kind == "c":
        assert stats["min"] is None
        assert stats["mean"] == pytest.approx([finite.mean().real, finite.mean().imag])
    else:
        assert stats["min"] == finite.min() and stats["max"] == finite.max()
        assert stats["mean"] == pytest.approx(finite.mean(), rel=1e-12)
    assert stats["std"] == pytest.approx(np.std(finite), rel=1e-9)


# ----------------------------------------------------------------------
# ls
# ----------------------------------------------------------------------
def test_ls_hdf5_tree_matches_h5py(h5file):
    listing = cli_json("ls", h5file)
    expected = []
    with h5py.File(h5file, "r") as f:
        f.visititems(lambda name, obj: expected.append(("/" + name, obj)))
        got = {e["path"]: e for e in listing["entries"]}
        assert sorted(got) == sorted(n for n, _ in expected)
        for name, obj in expected:
            entry = got[name]
            assert entry["url"] == f"{h5file}#{name}"
            if isinstance(obj, h5py.Group):
                assert entry["kind"] == "group" and entry["shape"] is None
            else:
                assert entry["kind"] == "array"
                assert entry["shape"] == list(obj.shape)
                assert entry["dtype"] == obj.dtype.name
                assert entry["chunks"] == (list(obj.chunks) if obj.chunks else None)
    assert listing["driver"] == "hdf5"
    lines = cli("ls", h5file).stdout.splitlines()
    assert lines[0] == "exp/"
    assert (
        lines[1].startswith("  gz ") and "(100, 10)" in lines[1] and "chunks (25, 10)" in lines[1]
    )
    assert lines[2] == "  run1/"
    assert lines[3].startswith("    x ") and "float64 big-endian" in lines[3]
    sub = cli_json("ls", f"{h5file}#/exp/run1")["entries"]
    assert [e["path"] for e in sub] == ["/exp/run1/x"]


def test_ls_zarr_hierarchy_matches_zarr_python(zarr_store):
    entries = {e["path"]: e for e in cli_json("ls", zarr_store)["entries"]}
    root = zarr.open_group(str(zarr_store), mode="r")
    members = dict(root.members(max_depth=None))
    assert sorted(entries) == sorted("/" + name for name in members)
    for name, node in members.items():
        entry = entries["/" + name]
        if isinstance(node, zarr.Group):
            assert entry["kind"] == "group"
        else:
            assert entry["kind"] == "array"
            assert (entry["shape"], entry["chunks"]) == (list(node.shape), list(node.chunks))
            assert entry["dtype"] == node.dtype.name


def test_ls_directory_of_npy_files(tmp_path):
    np.save(tmp_path / "b.npy", np.zeros((3, 4), ">i2"))
    np.save(tmp_path / "a.npy", np.zeros(5, "f4"))
    (tmp_path / "notes.txt").write_text("not an array")
    entries = cli_json("ls", tmp_path)["entries"]
    assert [(e["path"], e["shape"], e["dtype"], e["byte_order"]) for e in entries] == [
        ("a.npy", [5], "float32", "little"),
        ("b.npy", [3, 4], "int16", "big"),
    ]
    assert entries[0]["url"] == str(tmp_path / "a.npy")


# ----------------------------------------------------------------------
# Every command on every driver
# ----------------------------------------------------------------------
def _source_args(backend, data) -> list[str]:
    """Global options that open the backend's arrays from the command line."""
    args = []
    options = backend.create_kwargs.get("storage_options")
    if options:
        args += ["-o", json.dumps(options)]
    if backend.id == "memmap-raw":
        args += ["--driver", "memmap", "-O", f"shape={list(data.shape)}", "-O", "dtype=float32"]
    return args


def test_every_command_on_every_driver(backend, tmp_path):
    data = np.arange(48, dtype="f4").reshape(12, 4)
    attrs = {} if backend.native_maker else {"source": backend.id}
    store = backend.store(data, chunks=(5, 4), attrs=attrs, mode="r")
    url = store.url
    store.close()
    args = _source_args(backend, data)

    info = cli_json(*args, "inspect", url)
    assert (info["shape"], info["dtype"], info["url"]) == ([12, 4], "float32", url)
    assert info["attrs"] == attrs
    stats = json.loads(cli(*args, "inspect", url, "--stats", "--json").stdout)["stats"]
    assert stats["mean"] == pytest.approx(data.mean()) and stats["max"] == 47.0

    npy = tmp_path / "out.npy"
    cli(*args, "convert", url, npy, "--verify")
    assert bit_identical(np.load(npy), data)
    zpath = tmp_path / "out.zarr"
    cli(*args, "convert", url, zpath, "--compression", "zstd")
    assert bit_identical(zarr.open_array(str(zpath), mode="r")[:], data)
    assert dict(zarr.open_array(str(zpath), mode="r").attrs) == attrs

    back = backend.url("back")
    dst_args = ["--dst-driver", "memmap"] if backend.id == "memmap-raw" else []
    if "storage_options" in backend.create_kwargs:
        dst_args += ["--dst-storage-options", json.dumps(backend.create_kwargs["storage_options"])]
    cli("convert", npy, back, *dst_args)
    reopened = oocarr.open(back, **backend.open_kwargs(data), **_raw_layout(backend, data))
    assert bit_identical(oocarr.to_numpy(reopened), data)

    if backend.id != "memmap-raw":
        container = url.partition("#")[0]
        if backend.id in ("memmap-npy", "testmem"):
            container = container.rsplit("/", 1)[0]
        listed = cli_json(*args, "ls", container)
        assert url in [e["url"] for e in listed["entries"]]


def _raw_layout(backend, data) -> dict:
    return {"shape": data.shape, "dtype": "float32"} if backend.id == "memmap-raw" else {}


# ----------------------------------------------------------------------
# convert
# ----------------------------------------------------------------------
def test_convert_round_trip_hdf5_zarr_npy_hdf5_is_bit_identical(h5file, tmp_path):
    z, npy, h5 = tmp_path / "x.zarr", tmp_path / "x.npy", tmp_path / "back.h5"
    cli("--memory", "4kB", "convert", f"{h5file}#/exp/run1/x", z, "--compression", "gzip:1")
    cli("convert", z, npy, "--memory", "4kB")
    cli("convert", npy, f"{h5}#/deep/x", "--compression", "lzf", "--chunks", "7,20")
    za = zarr.open_array(str(z), mode="r")
    assert bit_identical(za[:], BIG_ENDIAN) and za.chunks == (10, 20)
    assert dict(za.attrs) == {"units": "metres", "note": "big-endian floats", "scale": 0.5}
    assert bit_identical(np.load(npy), BIG_ENDIAN)
    with h5py.File(h5, "r") as f:
        d = f["deep/x"]
        assert bit_identical(d[()], BIG_ENDIAN)
        assert (d.chunks, d.compression) == ((7, 20), "lzf")
        assert d.attrs["units"] == "metres" and d.attrs["scale"] == 0.5


def test_convert_options_overwrite_no_attrs_and_verify(h5file, tmp_path):
    dst = tmp_path / "c.zarr"
    out = cli("convert", f"{h5file}#/exp/gz", dst, "--chunks", "50,5", "--no-attrs", "--verify")
    assert "verified: both sides have BLAKE2b" in out.stdout and "B/s)" in out.stdout
    a = zarr.open_array(str(dst), mode="r")
    assert a.chunks == (50, 5) and dict(a.attrs) == {} and bit_identical(a[:], GZIPPED)
    cli("convert", f"{h5file}#/flat", dst, "--overwrite", "--chunks", "auto", "-q")
    assert bit_identical(zarr.open_array(str(dst), mode="r")[:], CONTIGUOUS)
    scalar = tmp_path / "s.npy"
    cli("convert", f"{h5file}#/scalar", scalar)
    assert np.load(scalar).shape == () and np.load(scalar) == 2.5


# ----------------------------------------------------------------------
# Errors: one line naming the URL, distinct exit codes
# ----------------------------------------------------------------------
def test_user_errors_exit_with_their_codes(h5file, tmp_path):
    missing = tmp_path / "missing.h5"
    assert str(missing) in cli("inspect", f"{missing}#/x", code=EXIT_NOT_FOUND).stderr
    assert "/nope" in cli("inspect", f"{h5file}#/nope", code=EXIT_NOT_FOUND).stderr
    cli("ls", tmp_path / "missing.zarr", code=EXIT_NOT_FOUND)
    fake = tmp_path / "fake.h5"
    fake.write_text("not hdf5")
    assert str(fake) in cli("inspect", f"{fake}#/x", code=EXIT_USAGE).stderr
    bad = tmp_path / "bad.zarr"
    bad.mkdir()
    (bad / "zarr.json").write_text('{"zarr_format": 3, "node_type": ')
    assert "zarr.json" in cli("inspect", bad, code=EXIT_USAGE).stderr
    cli("ls", bad, code=EXIT_USAGE)
    cli("inspect", f"{h5file}#/x", "--driver", "nosuchdriver", code=EXIT_USAGE)
    cli("--memory", "lots", "inspect", f"{h5file}#/flat", code=EXIT_USAGE)
    cli("inspect", code=EXIT_USAGE)


def test_convert_refusals_leave_the_destination_alone(h5file, tmp_path):
    src = f"{h5file}#/flat"
    npy = tmp_path / "y.npy"
    err = cli("convert", src, npy, "--compression", "zstd", code=EXIT_USAGE).stderr
    assert str(npy) in err and "compression" in err and not npy.exists()
    cli("convert", src, tmp_path / "y.h5#/x", "--compression", "zstd", code=EXIT_USAGE)
    assert not (tmp_path / "y.h5").exists()
    cli("convert", src, tmp_path / "c.zarr", "--chunks", "2", code=EXIT_USAGE)
    cli("convert", src, tmp_path / "c.zarr", "--chunks", "x", code=EXIT_USAGE)
    assert not (tmp_path / "c.zarr").exists()
    cli("--memory", "100B", "convert", f"{h5file}#/exp/gz", tmp_path / "m.zarr", code=EXIT_USAGE)
    assert not (tmp_path / "m.zarr").exists()

    existing = tmp_path / "old.npy"
    np.save(existing, np.arange(3))
    before = existing.read_bytes()
    err = cli("convert", src, existing, code=EXIT_USAGE).stderr
    assert str(existing) in err and "--overwrite" in err
    assert existing.read_bytes() == before


@contextlib.contextmanager
def read_only_directory(path: pathlib.Path):
    """A directory nobody, root included, can create files in (chmod, plus chattr +i as root)."""
    path.mkdir()
    path.chmod(0o555)
    immutable = False
    if os.geteuid() == 0:
        immutable = subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode == 0
    try:
        try:
            (path / ".probe").touch()
        except OSError:
            yield path
        else:
            (path / ".probe").unlink()
            pytest.skip("cannot make a read-only directory here")
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        path.chmod(0o755)


@pytest.mark.parametrize("name", ["out.npy", "out.h5#/x", "out.zarr"])
def test_read_only_destination_directory_fails_while_writing(h5file, tmp_path, name):
    with read_only_directory(tmp_path / "ro") as ro:
        err = cli("convert", f"{h5file}#/flat", f"{ro}/{name}", code=EXIT_WRITE).stderr
        assert f"{ro}/{name}" in err and "nothing was left there" in err
        assert os.listdir(ro) == []


# ----------------------------------------------------------------------
# The installed console script
# ----------------------------------------------------------------------
def test_version_and_help_with_examples_and_exit_codes():
    assert cli("--version").stdout.strip() == f"oocarr {oocarr.__version__}"
    for command in ([], ["inspect"], ["ls"], ["convert"]):
        out = cli(*command, "--help").stdout
        assert "Example" in out and "Exit codes" in out and "130" in out


def test_console_script_inspect_and_error(h5file):
    result = script("inspect", "--json", f"{h5file}#/exp/gz")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    with h5py.File(h5file, "r") as f:
        assert info["shape"] == list(f["exp/gz"].shape) and info["compression"] == "gzip:4"
    result = script("inspect", f"{h5file}#/nothing")
    assert result.returncode == EXIT_NOT_FOUND
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def _interruptible() -> None:
    """In the child: Ctrl-C's default action, even when the suite runs in the background
    (``nohup``, ``cmd &``), whose children start with SIGINT ignored and so never see it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for(predicate, proc, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            pytest.fail(f"convert ended (rc {proc.returncode}) before {what}: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.005)


@pytest.fixture(scope="module")
def slow_source(tmp_path_factory) -> pathlib.Path:
    """32 MB of random floats: gzip level 9 takes seconds to compress them."""
    path = tmp_path_factory.mktemp("slow") / "random.npy"
    np.save(path, np.random.default_rng(1).random((4096, 2048), dtype=np.float32))
    return path


@pytest.mark.parametrize(
    "dst, sig",
    [("out.h5#/x", signal.SIGKILL), ("out.zarr", signal.SIGKILL), ("out.zarr", signal.SIGINT)],
    ids=["hdf5-sigkill", "zarr-sigkill", "zarr-sigint"],
)
def test_interrupted_convert_leaves_nothing_that_opens(slow_source, tmp_path, dst, sig):
    target = f"{tmp_path}/{dst}"
    proc = subprocess.Popen(
        [str(CONSOLE_SCRIPT), "--memory", "4MB", "convert", slow_source, target]
        + ["--compression", "gzip:9", "--chunks", "256,256"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_interruptible,
    )
    if dst.endswith(".zarr"):
        chunks = tmp_path / "out.zarr" / "c"
        _wait_for(lambda: chunks.is_dir() and len(list(chunks.rglob("*"))) > 8, proc, "chunks")
    else:
        temps = lambda: [p for p in tmp_path.iterdir() if p.name.startswith(".out.h5.tmp-")]  # noqa: E731
        _wait_for(lambda: temps() and temps()[0].stat().st_size > 2**20, proc, "a temp file")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    if sig == signal.SIGINT:
        assert proc.returncode == EXIT_INTERRUPTED, err
        assert "interrupted" in err and target in err and "Traceback" not in err
        assert not (tmp_path / "out.zarr").exists()
    else:
        assert proc.returncode == -signal.SIGKILL
    with pytest.raises(oocarr.errors.NotFoundError):
        oocarr.open(target)
    if dst.endswith(".zarr"):
        with pytest.raises(FileNotFoundError):
            zarr.open_array(str(tmp_path / "out.zarr"), mode="r")
    else:
        assert not (tmp_path / "out.h5").exists()


def test_interrupted_overwrite_keeps_the_old_array(slow_source, tmp_path):
    target = tmp_path / "old.zarr"
    old = zarr.create_array(str(target), shape=(3,), chunks=(3,), dtype="i4")
    old[:] = [7, 8, 9]
    proc = subprocess.Popen(
        [str(CONSOLE_SCRIPT), "-m", "4MB", "convert", slow_source, target, "--overwrite"]
        + ["--compression", "gzip:9", "--chunks", "256,256"],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_interruptible,
    )
    hidden = lambda: [p for p in tmp_path.iterdir() if p.name.startswith(".old.zarr.tmp-")]  # noqa: E731
    _wait_for(lambda: hidden() and (hidden()[0] / "c").is_dir(), proc, "the new copy's chunks")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_INTERRUPTED and "old array there is intact" in err
    assert zarr.open_array(str(target), mode="r")[:].tolist() == [7, 8, 9]
    assert hidden() == []
