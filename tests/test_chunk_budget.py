"""A storage chunk larger than the memory budget (issue 14, item 3).

A compressed chunk is fetched and decoded whole however small the tile read from it, so every
streamer refuses one that does not fit the budget with ``BudgetTooSmallError`` before any I/O
(the API and the CLI alike); formats read in sub-chunk regions (``.npy``) stream it within the
budget.  Written with h5py and zarr-python, so the layout is the other tools' own.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import oocarr
from oocarr import errors
from oocarr.cli.main import main
from oocarr_drivers.chunk_runs import read_chunk_region
from subprocess_rss import run_script

N = 4 << 20  # one 16 MiB float32 chunk
BUDGET = "4MB"


def _values() -> np.ndarray:
    return (np.arange(N, dtype="f4") % 7).astype("f4")


@pytest.fixture(scope="module")
def big_chunks(tmp_path_factory):
    """URLs of one-chunk arrays of 16 MiB: Zarr zstd and gzip (zarr-python), HDF5 gzip (h5py)."""
    zarr = pytest.importorskip("zarr")
    root = tmp_path_factory.mktemp("big")
    data = _values()
    urls = {}
    for name, codec in (("zstd", zarr.codecs.ZstdCodec()), ("gzip", zarr.codecs.GzipCodec())):
        path = str(root / f"{name}.zarr")
        arr = zarr.create_array(path, shape=(N,), chunks=(N,), dtype="f4", compressors=[codec])
        arr[:] = data
        urls[f"zarr-{name}"] = path
    path = str(root / "g.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=(N,), compression="gzip")
    urls["hdf5-gzip"] = path + "#/x"
    return urls


@pytest.mark.parametrize("kind", ["zarr-zstd", "zarr-gzip", "hdf5-gzip"])
def test_every_streamer_refuses_a_chunk_larger_than_the_budget(big_chunks, kind, tmp_path):
    x = oocarr.open(big_chunks[kind])
    with oocarr.memory_budget(BUDGET):
        with pytest.raises(errors.BudgetTooSmallError, match="chunk") as caught:
            oocarr.sum(x)
        assert big_chunks[kind].split("#")[0] in str(caught.value)
        with pytest.raises(errors.BudgetTooSmallError):
            oocarr.save(x, str(tmp_path / "copy.zarr"))
        with pytest.raises(errors.BudgetTooSmallError):
            next(iter(oocarr.batches(x, batch_size=4)))
    assert not (tmp_path / "copy.zarr").exists()


@pytest.mark.parametrize("kind", ["zarr-zstd", "hdf5-gzip"])
def test_the_cli_refuses_it_the_same_way(big_chunks, kind, tmp_path):
    runner = CliRunner()
    out = str(tmp_path / "out.zarr")
    result = runner.invoke(main, ["convert", big_chunks[kind], out, "--memory", BUDGET])
    assert result.exit_code != 0
    assert "budget" in result.output and "--memory" in result.output
    result = runner.invoke(main, ["inspect", "--stats", big_chunks[kind], "--memory", BUDGET])
    assert result.exit_code != 0 and "budget" in result.output
    assert "Traceback" not in result.output


def test_the_refusal_comes_before_reading_the_chunk(big_chunks):
    """Peak RSS of a refused sum stays far below one decoded chunk (16 MiB)."""
    script = """
        import json, sys, gc, numpy as np, oocarr
        x = oocarr.open(sys.argv[1])
        with oocarr.memory_budget("4MB"):
            oocarr.sum(oocarr.from_numpy(np.ones(10, "f4")))  # compile outside the measure
        gc.collect()
        open("/proc/self/clear_refs", "w").write("5")
        base = peak_rss()
        try:
            with oocarr.memory_budget("4MB"):
                oocarr.sum(x)
            error = None
        except oocarr.errors.BudgetTooSmallError as e:
            error = type(e).__name__
        print(json.dumps({"error": error, "growth": peak_rss() - base}))
    """
    result = run_script(script, big_chunks["zarr-zstd"])
    assert result["error"] == "BudgetTooSmallError"
    assert result["growth"] < 8 << 20


@pytest.mark.parametrize("kind", ["npy", "zarr-uncompressed"])
def test_uncompressed_storage_streams_within_the_budget_whatever_its_chunk(kind, tmp_path):
    """``.npy`` and uncompressed local Zarr chunks are read in sub-chunk regions: a 64 MiB
    array (one chunk, written by zarr-python) sums under a 4 MB budget."""
    if kind == "npy":
        path = str(tmp_path / "a.npy")
        np.save(path, np.ones(N * 4, "f4"))
    else:
        zarr = pytest.importorskip("zarr")
        path = str(tmp_path / "a.zarr")
        arr = zarr.create_array(path, shape=(N * 4,), chunks=(N * 4,), dtype="f4", compressors=None)
        arr[:] = np.ones(N * 4, "f4")
    script = """
        import json, sys, gc, numpy as np, oocarr
        x = oocarr.open(sys.argv[1])
        with oocarr.memory_budget("4MB"):
            oocarr.sum(x[:100])
        gc.collect()
        open("/proc/self/clear_refs", "w").write("5")
        base = peak_rss()
        with oocarr.memory_budget("4MB"):
            total = float(oocarr.sum(x))
        print(json.dumps({"total": total, "growth": peak_rss() - base}))
    """
    result = run_script(script, path)
    assert result["total"] == float(N * 4)
    assert result["growth"] < 8 << 20


def test_a_budget_that_holds_the_chunk_reads_it_correctly(big_chunks):
    x = oocarr.open(big_chunks["zarr-zstd"])
    with oocarr.memory_budget("128MB"):
        total = float(oocarr.sum(x))
    assert total == float(_values().astype(np.float64).sum())


def test_the_error_names_the_array_and_the_fix(big_chunks):
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys, oocarr\n"
            "x = oocarr.open(sys.argv[1])\n"
            "try:\n"
            "    with oocarr.memory_budget('4MB'):\n"
            "        oocarr.sum(x)\n"
            "except oocarr.errors.BudgetTooSmallError as e:\n"
            "    print(json.dumps({'url': e.url, 'msg': str(e)}))\n",
            big_chunks["hdf5-gzip"],
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["url"] and out["url"].startswith(big_chunks["hdf5-gzip"].split("#")[0])
    assert "set_memory_budget" in out["msg"]


@st.composite
def _chunk_reads(draw):
    chunk = tuple(draw(st.lists(st.integers(1, 5), max_size=3)))
    region = []
    for c in chunk:
        a = draw(st.integers(0, c))
        region.append(slice(a, draw(st.integers(a, c))))
    return chunk, tuple(region), draw(st.sampled_from(["<i4", ">f8", "u1"])), draw(st.booleans())


@settings(max_examples=200, deadline=None)
@given(_chunk_reads())
def test_a_sub_chunk_read_gives_numpys_values(case):
    """``read_chunk_region`` against NumPy's indexing of the same chunk, into strided targets."""
    chunk, region, dtype, strided = case
    data = np.arange(math.prod(chunk), dtype=dtype).reshape(chunk)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "c")
        data.tofile(path)
        want = data[region]
        if strided:
            big = np.zeros(tuple(s + 2 for s in want.shape), data.dtype.newbyteorder("="))
            target = big[(*(slice(1, 1 + s) for s in want.shape), ...)]
        else:
            target = np.zeros(want.shape, data.dtype)
        assert read_chunk_region(path, chunk, data.dtype, region, target)
        np.testing.assert_array_equal(target, want)
        assert not read_chunk_region(path + "-missing", chunk, data.dtype, region, target)
