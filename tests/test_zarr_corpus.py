"""The Zarr corpus: arrays written by the tools people use, read by oocarr (issue 15).

Each array is written by the real writer (zarr-python v2 and v3, TensorStore's ``zarr`` and
``zarr3`` drivers, xarray ``to_zarr``, anndata ``write_zarr``) and compared bit for bit with
that writer's own read: the whole array, a region across chunk edges, ``inspect --json
--stats`` against the writer's metadata and NumPy's statistics, and ``convert`` to ``.npy``.
Then the other way round: oocarr's own Zarr v2 and sharded v3 output read back by zarr-python
and TensorStore.  Every filesystem the suite uses (local, memory, zip, S3 on loopback) and the
bad input a reader meets (corrupt shard indexes, truncated shards, lying Blosc headers) too.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import struct
import uuid
import zipfile
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from click.testing import CliRunner

import oocarr
from oocarr.cli.main import main
from oocarr.errors import InvalidStoreError, UnsupportedCompressionError

zarr = pytest.importorskip("zarr")
numcodecs = pytest.importorskip("numcodecs")
ts = pytest.importorskip("tensorstore")

from zarr.codecs import (  # noqa: E402
    BloscCodec,
    BytesCodec,
    Crc32cCodec,
    GzipCodec,
    ShardingCodec,
    ZstdCodec,
)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")


# ----------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------
def sample(shape, dtype, seed=0) -> np.ndarray:
    """Values a codec has something to do with: small integers, or rounded normals."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        low = 0 if dtype.kind == "u" else -100
        return rng.integers(low, 100, shape).astype(dtype)
    return (np.round(rng.standard_normal(shape) * 8) / 8).astype(dtype)


def native(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    return a.astype(a.dtype.newbyteorder("="))


def assert_bit_identical(got, want) -> None:
    got, want = native(got), native(want)
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    assert got.tobytes() == want.tobytes(), "values differ"


def cli(*args, code: int = 0):
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == code, (result.output, result.exception)
    return result


def cross_chunks(shape) -> tuple[slice, ...]:
    """A region that starts and ends inside chunks for any chunking of ``shape``."""
    return tuple(slice(n // 3, max(n // 3 + 1, n - n // 4)) for n in shape)


def file_kvstore(path) -> dict:
    return {"driver": "file", "path": str(path)}


@dataclass(frozen=True)
class Made:
    """One corpus entry: where it is, the writer's read and the writer's metadata."""

    root: str
    member: str
    expected: np.ndarray
    chunks: tuple[int, ...]
    dimension_names: tuple[str | None, ...] | None

    @property
    def url(self) -> str:
        return f"{self.root}#/{self.member}" if self.member else self.root

    def url_at(self, root: str) -> str:
        return f"{root}#/{self.member}" if self.member else root


def zarr_facts(path: str) -> tuple[tuple[int, ...], tuple[str | None, ...] | None]:
    """The storage chunks (the inner chunks of a sharded array) and dimension names, as
    zarr-python reads them from the array's metadata."""
    z = zarr.open_array(path, mode="r")
    m = z.metadata
    if m.zarr_format == 2:
        names = z.attrs.get("_ARRAY_DIMENSIONS")
        return tuple(m.chunks), None if names is None else tuple(names)
    first = m.codecs[0]
    chunks = first.chunk_shape if isinstance(first, ShardingCodec) else z.chunks
    names = m.dimension_names
    return tuple(chunks), None if names is None else tuple(names)


def made_by_zarr(root: pathlib.Path, name: str, member: str = "") -> Made:
    path = str(root / name)
    full = os.path.join(path, member) if member else path
    chunks, names = zarr_facts(full)
    return Made(path, member, zarr.open_array(full, mode="r")[...], chunks, names)


# ----------------------------------------------------------------------
# Writers
# ----------------------------------------------------------------------
SHAPE_2D = (37, 29)
CHUNKS_2D = (10, 8)
SHAPE_3D, SHARDS_3D, INNER_3D = (12, 20, 18), (6, 10, 8), (3, 5, 4)


def write_all(z, data) -> None:
    z[...] = data


def write_part(z, data) -> None:
    """Two regions only: whole chunks and parts of chunks stay unwritten (fill)."""
    first = tuple(slice(0, max(1, n // 3)) for n in data.shape)
    last = tuple(slice(n - max(1, n // 5), n) for n in data.shape)
    z[first] = data[first]
    z[last] = data[last]


def zarr_python(
    dtype="f4",
    shape=SHAPE_2D,
    chunks=CHUNKS_2D,
    write: Callable = write_all,
    **kwargs,
) -> Callable[[pathlib.Path], Made]:
    """A writer of one zarr-python array (``zarr.create_array(**kwargs)``)."""

    def make(root: pathlib.Path) -> Made:
        data = sample(shape, dtype)
        z = zarr.create_array(
            store=str(root / "a.zarr"), shape=shape, chunks=chunks, dtype=dtype, **kwargs
        )
        write(z, data)
        return made_by_zarr(root, "a.zarr")

    return make


def blosc2(cname: str, shuffle: int, clevel: int = 5) -> dict:
    return {"compressors": numcodecs.Blosc(cname=cname, clevel=clevel, shuffle=shuffle)}


V2 = {"zarr_format": 2}
NC = numcodecs
ZNC = pytest.importorskip("zarr.codecs.numcodecs")

ZARR_PYTHON_V2 = {
    "default": zarr_python("f4", **V2),
    "none": zarr_python("i8", compressors=None, **V2),
    "zstd": zarr_python("i2", compressors=NC.Zstd(level=3), **V2),
    "gzip": zarr_python("f8", compressors=NC.GZip(level=5), **V2),
    "zlib": zarr_python("u4", compressors=NC.Zlib(level=1), **V2),
    "bz2": zarr_python("i8", compressors=NC.BZ2(level=9), **V2),
    "lz4": zarr_python("u1", compressors=NC.LZ4(), **V2),
    "blosc-default": zarr_python("f4", compressors=NC.Blosc(), **V2),
    "blosc-lz4-shuffle": zarr_python("f4", **blosc2("lz4", NC.Blosc.SHUFFLE), **V2),
    "blosc-lz4hc-noshuffle": zarr_python("i4", **blosc2("lz4hc", NC.Blosc.NOSHUFFLE), **V2),
    "blosc-zstd-bitshuffle": zarr_python("u2", **blosc2("zstd", NC.Blosc.BITSHUFFLE, 3), **V2),
    "blosc-blosclz-shuffle": zarr_python("f8", **blosc2("blosclz", NC.Blosc.SHUFFLE), **V2),
    "blosc-zlib-bitshuffle": zarr_python("i2", **blosc2("zlib", NC.Blosc.BITSHUFFLE), **V2),
    "delta": zarr_python("i4", filters=[NC.Delta(dtype="i4")], compressors=NC.Zstd(), **V2),
    "fixedscaleoffset": zarr_python(
        "f8",
        filters=[NC.FixedScaleOffset(offset=3, scale=100, dtype="f8", astype="i4")],
        compressors=NC.Zlib(),
        **V2,
    ),
    "quantize": zarr_python("f4", filters=[NC.Quantize(digits=2, dtype="f4")], **V2),
    "bitround": zarr_python("f4", filters=[NC.BitRound(keepbits=6)], **V2),
    "astype": zarr_python(
        "f8", filters=[NC.AsType(encode_dtype="f4", decode_dtype="f8")], compressors=None, **V2
    ),
    "shuffle": zarr_python("f8", filters=[NC.Shuffle(elementsize=8)], compressors=NC.GZip(), **V2),
    "order-f": zarr_python("f8", order="F", compressors=NC.Zstd(), **V2),
    "order-f-3d": zarr_python(
        "i2", SHAPE_3D, INNER_3D, order="F", compressors=NC.Blosc("lz4"), **V2
    ),
    "separator-slash": zarr_python("u2", chunk_key_encoding={"name": "v2", "separator": "/"}, **V2),
    "separator-dot": zarr_python("u2", chunk_key_encoding={"name": "v2", "separator": "."}, **V2),
    "fill-nan-partial": zarr_python("f4", fill_value=np.nan, write=write_part, **V2),
    "fill-inf-partial": zarr_python("f8", fill_value=np.inf, write=write_part, **V2),
    "fill-neg-inf-partial": zarr_python("f4", fill_value=-np.inf, write=write_part, **V2),
    "fill-int-partial": zarr_python("i4", fill_value=-7, write=write_part, **V2),
    "nothing-written": zarr_python("f8", fill_value=2.5, write=lambda z, d: None, **V2),
    "big-endian": zarr_python(">f8", compressors=NC.Zstd(), **V2),
    "dimension-names": zarr_python(
        "f4", attributes={"_ARRAY_DIMENSIONS": ["y", "x"]}, compressors=NC.Zstd(), **V2
    ),
    "one-dimensional": zarr_python("i8", (1000,), (64,), compressors=NC.Blosc("zstd"), **V2),
}


def sharded_at(location: str, codecs=None, index_codecs=None) -> dict:
    """``zarr.create_array`` arguments of a shard of ``SHARDS_3D`` with ``INNER_3D`` inner
    chunks and its index at ``location`` (the sharding codec passed as the serializer)."""
    codec = ShardingCodec(
        chunk_shape=INNER_3D,
        codecs=codecs or [BytesCodec(), ZstdCodec()],
        index_codecs=index_codecs or [BytesCodec(), Crc32cCodec()],
        index_location=location,
    )
    return {"chunks": SHARDS_3D, "serializer": codec, "compressors": None}


def sharded(dtype="u2", **kwargs) -> Callable[[pathlib.Path], Made]:
    return zarr_python(dtype, SHAPE_3D, INNER_3D, shards=SHARDS_3D, **kwargs)


ZARR_PYTHON_V3 = {
    "default": zarr_python("f4"),
    "none": zarr_python("i8", compressors=None),
    "zstd-level": zarr_python("u2", compressors=ZstdCodec(level=9, checksum=True)),
    "gzip": zarr_python("f8", compressors=GzipCodec(level=6)),
    "blosc-lz4-bitshuffle": zarr_python(
        "u2", compressors=BloscCodec(cname="lz4", shuffle="bitshuffle")
    ),
    "blosc-zstd-shuffle": zarr_python(
        "f4", compressors=BloscCodec(cname="zstd", clevel=3, shuffle="shuffle", typesize=4)
    ),
    "blosc-blosclz-noshuffle": zarr_python(
        "i4", compressors=BloscCodec(cname="blosclz", shuffle="noshuffle")
    ),
    "crc32c": zarr_python("i4", compressors=[ZstdCodec(), Crc32cCodec()]),
    "numcodecs-lz4": zarr_python("u1", compressors=[ZNC.LZ4()]),
    "numcodecs-zlib": zarr_python("f4", compressors=[ZNC.Zlib(level=3)]),
    "numcodecs-bz2": zarr_python("i2", compressors=[ZNC.BZ2()]),
    "numcodecs-delta": zarr_python("i4", filters=[ZNC.Delta(dtype="i4")]),
    "numcodecs-shuffle": zarr_python("f8", compressors=[ZNC.Shuffle(elementsize=8), ZNC.Zlib()]),
    "fill-partial": zarr_python("f4", fill_value=np.nan, write=write_part),
    "separator-dot": zarr_python("u2", chunk_key_encoding={"name": "default", "separator": "."}),
    "v2-keys-dot": zarr_python("i2", chunk_key_encoding={"name": "v2", "separator": "."}),
    "v2-keys-slash": zarr_python("i2", chunk_key_encoding={"name": "v2", "separator": "/"}),
    "big-endian": zarr_python(">i4", serializer=BytesCodec(endian="big")),
    "dimension-names": zarr_python("f4", dimension_names=("lat", "lon")),
    "sharded": sharded(),
    "sharded-blosc": sharded("f4", compressors=BloscCodec(cname="lz4", shuffle="shuffle")),
    "sharded-uncompressed": sharded("i4", compressors=None),
    "sharded-partial": sharded("u2", fill_value=9, write=write_part),
    "sharded-index-start": zarr_python("u2", SHAPE_3D, **sharded_at("start")),
    "sharded-index-start-partial": zarr_python(
        "f4", SHAPE_3D, fill_value=np.nan, write=write_part, **sharded_at("start")
    ),
    "sharded-index-no-crc": zarr_python(
        "i2", SHAPE_3D, **sharded_at("end", index_codecs=[BytesCodec()])
    ),
    "sharded-big-endian": zarr_python(
        ">u2", SHAPE_3D, **sharded_at("end", codecs=[BytesCodec(endian="big"), GzipCodec()])
    ),
    "sharded-dot-keys": sharded(
        "u2",
        chunk_key_encoding={"name": "default", "separator": "."},
        dimension_names=("z", "y", "x"),
    ),
}


def tensorstore(
    driver: str, metadata: dict, dtype="u2", shape=SHAPE_3D, write: Callable | None = None
) -> Callable[[pathlib.Path], Made]:
    """A writer of one TensorStore array; the expected values are TensorStore's read."""

    def make(root: pathlib.Path) -> Made:
        path = root / "t.zarr"
        data = sample(shape, dtype)
        if driver == "zarr":
            meta = {"shape": list(shape), "dtype": np.dtype(dtype).str}
        else:
            meta = {"shape": list(shape), "data_type": np.dtype(dtype).name}
        spec = {"driver": driver, "kvstore": file_kvstore(path), "metadata": meta | metadata}
        t = ts.open(spec, create=True).result()
        (write or ts_write_all)(t, data)
        t = ts.open({"driver": driver, "kvstore": file_kvstore(path)}).result()
        expected = t.read().result()
        chunks, names = zarr_facts(str(path))
        return Made(str(path), "", expected, chunks, names)

    return make


def ts_write_all(t, data) -> None:
    t.write(data).result()


def ts_write_part(t, data) -> None:
    t[:4, :7].write(data[:4, :7]).result()


def ts_sharding(location: str = "end", inner=INNER_3D) -> list[dict]:
    config = {
        "chunk_shape": list(inner),
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd"}],
        "index_codecs": [
            {"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "crc32c"},
        ],
        "index_location": location,
    }
    return [{"name": "sharding_indexed", "configuration": config}]


def ts_grid(chunks) -> dict:
    return {"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}}}


TS_BLOSC = {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1}
TENSORSTORE = {
    "zarr2-blosc": tensorstore("zarr", {"chunks": list(INNER_3D), "compressor": TS_BLOSC}),
    "zarr2-zstd-order-f": tensorstore(
        "zarr", {"chunks": [5, 7, 4], "compressor": {"id": "zstd", "level": 1}, "order": "F"}
    ),
    "zarr2-zlib-slash": tensorstore(
        "zarr",
        {"chunks": [4, 8, 8], "compressor": {"id": "zlib"}, "dimension_separator": "/"},
        "f8",
    ),
    "zarr2-bz2": tensorstore("zarr", {"chunks": [6, 6, 6], "compressor": {"id": "bz2"}}, "i4"),
    "zarr2-none-partial": tensorstore(
        "zarr",
        {"chunks": [4, 4, 4], "compressor": None, "fill_value": 3},
        "i2",
        write=ts_write_part,
    ),
    "zarr3": tensorstore("zarr3", ts_grid(INNER_3D) | {"dimension_names": ["z", "y", "x"]}, "f4"),
    "zarr3-sharded": tensorstore("zarr3", ts_grid(SHARDS_3D) | {"codecs": ts_sharding("end")}),
    "zarr3-sharded-start-partial": tensorstore(
        "zarr3",
        ts_grid(SHARDS_3D) | {"codecs": ts_sharding("start"), "fill_value": 5},
        "int32",
        write=ts_write_part,
    ),
}


def xarray_to_zarr(zarr_format: int) -> Callable[[pathlib.Path], Made]:
    def make(root: pathlib.Path) -> Made:
        xr = pytest.importorskip("xarray")
        path = str(root / "x.zarr")
        temperature = sample((6, 20, 14), "f4")
        ds = xr.Dataset(
            {"temperature": (("time", "y", "x"), temperature)},
            coords={"x": np.arange(14, dtype="i8") * 10},
        )
        encoding = {"temperature": {"chunks": (2, 8, 8)}}
        consolidated = zarr_format == 2
        ds.to_zarr(path, zarr_format=zarr_format, encoding=encoding, consolidated=consolidated)
        back = xr.open_zarr(path, decode_cf=False, consolidated=consolidated)
        expected = back["temperature"].values
        assert back["temperature"].dims == ("time", "y", "x")
        chunks, names = zarr_facts(os.path.join(path, "temperature"))
        assert names == ("time", "y", "x")
        return Made(path, "temperature", expected, chunks, names)

    return make


def anndata_member(member: str) -> Callable[[pathlib.Path], Made]:
    def make(root: pathlib.Path) -> Made:
        ad = pytest.importorskip("anndata")
        import pandas as pd

        path = str(root / "cells.zarr")
        obs = pd.DataFrame(index=[f"cell{i}" for i in range(40)])
        adata = ad.AnnData(
            X=sample((40, 12), "f4"),
            obs=obs,
            obsm={"X_pca": sample((40, 3), "f8", seed=1)},
            layers={"counts": sample((40, 12), "i4", seed=2)},
        )
        adata.write_zarr(path)
        back = ad.read_zarr(path)
        expected = {"X": back.X, "obsm/X_pca": back.obsm["X_pca"]}
        expected["layers/counts"] = back.layers["counts"]
        chunks, names = zarr_facts(os.path.join(path, member))
        return Made(path, member, np.asarray(expected[member]), chunks, names)

    return make


CORPUS: dict[str, Callable[[pathlib.Path], Made]] = {
    **{f"zarr-python-v2-{k}": v for k, v in ZARR_PYTHON_V2.items()},
    **{f"zarr-python-v3-{k}": v for k, v in ZARR_PYTHON_V3.items()},
    **{f"tensorstore-{k}": v for k, v in TENSORSTORE.items()},
    "xarray-v2-consolidated": xarray_to_zarr(2),
    "xarray-v3": xarray_to_zarr(3),
    "anndata-X": anndata_member("X"),
    "anndata-obsm": anndata_member("obsm/X_pca"),
    "anndata-layers": anndata_member("layers/counts"),
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Callable[[str], Made]:
    """Each entry written once per module, on first use."""
    cache: dict[str, Made] = {}

    def get(name: str) -> Made:
        if name not in cache:
            cache[name] = CORPUS[name](tmp_path_factory.mktemp(name))
        return cache[name]

    return get


# ----------------------------------------------------------------------
# The corpus read through oocarr
# ----------------------------------------------------------------------
@pytest.mark.parametrize("name", list(CORPUS))
def test_reads_match_the_writer(corpus, name):
    made = corpus(name)
    x = oocarr.open(made.url)
    assert_bit_identical(oocarr.to_numpy(x), made.expected)
    region = cross_chunks(made.expected.shape)
    assert_bit_identical(x.store[region], made.expected[region])
    assert x.store.chunks == made.chunks
    assert x.store.dimension_names == made.dimension_names


@pytest.mark.parametrize("name", list(CORPUS))
def test_inspect_json_stats_match_the_writer(corpus, name):
    made = corpus(name)
    info = json.loads(cli("inspect", "--json", "--stats", made.url).stdout)
    expected = made.expected
    assert info["shape"] == list(expected.shape)
    assert info["dtype"] == expected.dtype.name
    assert info["chunks"] == list(made.chunks)
    names = made.dimension_names
    assert info["dimension_names"] == (None if names is None else list(names))
    wide = expected.astype(np.float64).ravel()
    finite = wide[np.isfinite(wide)]
    stats = info["stats"]
    assert stats["count"] == finite.size
    assert stats["nan_count"] == int(np.isnan(wide).sum())
    assert stats["inf_count"] == int(np.isinf(wide).sum())
    if finite.size:
        assert (stats["min"], stats["max"]) == (finite.min(), finite.max())
        assert stats["mean"] == pytest.approx(finite.mean(), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("name", list(CORPUS))
def test_convert_to_npy_matches_the_writer(corpus, name, tmp_path):
    made = corpus(name)
    out = tmp_path / "out.npy"
    cli("convert", "-q", made.url, out)
    assert_bit_identical(np.load(out), made.expected)


def test_ls_lists_a_v2_hierarchy_with_consolidated_metadata(tmp_path):
    path = str(tmp_path / "tree.zarr")
    root = zarr.open_group(path, mode="w", zarr_format=2)
    root.create_array("a", shape=(10, 4), chunks=(5, 2), dtype="f4")[...] = 1.5
    sub = root.create_group("sub")
    sub.create_array("b", shape=(6,), chunks=(4,), dtype="i2", compressors=NC.Blosc())
    sub.create_group("empty")
    zarr.consolidate_metadata(path)
    assert os.path.exists(os.path.join(path, ".zmetadata"))
    entries = {e["path"]: e for e in json.loads(cli("ls", "--json", path).stdout)["entries"]}
    members = dict(zarr.open_group(path, mode="r").members(max_depth=None))
    assert sorted(entries) == sorted("/" + name for name in members)
    for name, node in members.items():
        entry = entries["/" + name]
        if isinstance(node, zarr.Group):
            assert entry["kind"] == "group"
        else:
            assert entry["kind"] == "array"
            assert (entry["shape"], entry["chunks"]) == (list(node.shape), list(node.chunks))
            assert entry["dtype"] == node.dtype.name
            assert entry["url"] == f"{path}#/{name}"
    assert_bit_identical(oocarr.to_numpy(oocarr.open(f"{path}#/a")), np.full((10, 4), 1.5, "f4"))


def test_ls_lists_an_xarray_store(corpus):
    made = corpus("xarray-v2-consolidated")
    listed = json.loads(cli("ls", "--json", made.root).stdout)["entries"]
    paths = {e["path"] for e in listed}
    assert {"/temperature", "/x"} <= paths


# ----------------------------------------------------------------------
# Every filesystem
# ----------------------------------------------------------------------
ON_EVERY_FILESYSTEM = [
    "zarr-python-v2-blosc-lz4-shuffle",
    "zarr-python-v2-fill-nan-partial",
    "zarr-python-v3-sharded-partial",
    "zarr-python-v3-sharded-index-start",
    "tensorstore-zarr3-sharded",
    "xarray-v2-consolidated",
]


def to_memory(local: str) -> str:
    import fsspec

    fs = fsspec.filesystem("memory")
    target = f"/corpus-{uuid.uuid4().hex}/{os.path.basename(local)}"
    fs.put(local, target, recursive=True)
    assert fs.exists(target + "/" + sorted(os.listdir(local))[0])
    return f"memory://{target.lstrip('/')}"


def to_zip(local: str) -> str:
    name = os.path.basename(local)
    archive = os.path.join(os.path.dirname(local), f"{name}-{uuid.uuid4().hex[:8]}.zip")
    with zipfile.ZipFile(archive, "w") as zf:
        for dirpath, _, files in os.walk(local):
            for f in files:
                full = os.path.join(dirpath, f)
                zf.write(full, os.path.relpath(full, os.path.dirname(local)))
    return f"zip://{name}::{archive}"


def to_s3(local: str, options: dict) -> str:
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
    target = f"oocarr-test/corpus-{uuid.uuid4().hex}/{os.path.basename(local)}"
    fs.put(local, target, recursive=True)
    return f"s3://{target}"


@pytest.mark.parametrize("filesystem", ["memory", "zip", "s3"])
@pytest.mark.parametrize("name", ON_EVERY_FILESYSTEM)
def test_every_filesystem_reads_the_corpus(corpus, name, filesystem, request):
    made = corpus(name)
    options = {}
    if filesystem == "memory":
        root = to_memory(made.root)
    elif filesystem == "zip":
        root = to_zip(made.root)
    else:
        options = request.getfixturevalue("s3_server")
        root = to_s3(made.root, options)
    x = oocarr.open(made.url_at(root), storage_options=options or None)
    assert_bit_identical(oocarr.to_numpy(x), made.expected)
    region = cross_chunks(made.expected.shape)
    assert_bit_identical(x.store[region], made.expected[region])
    assert x.store.chunks == made.chunks


# ----------------------------------------------------------------------
# oocarr writes, zarr-python and TensorStore read
# ----------------------------------------------------------------------
#: compression -> (v2 compressor id, TensorStore reads it).
V2_COMPRESSIONS = {
    None: (None, True),
    "zstd": ("zstd", True),
    "gzip": ("gzip", True),
    "blosc": ("blosc", True),
    "blosc:5": ("blosc", True),
    "lz4": ("lz4", False),
    "zlib": ("zlib", True),
    "bz2": ("bz2", True),
}


def ts_read(driver: str, path) -> np.ndarray:
    return ts.open({"driver": driver, "kvstore": file_kvstore(path)}).result().read().result()


@pytest.mark.parametrize("compression", list(V2_COMPRESSIONS))
@pytest.mark.parametrize("dtype", ["f4", "u2", ">i8"])
def test_oocarr_v2_output_reads_in_zarr_python_and_tensorstore(tmp_path, compression, dtype):
    data = sample(SHAPE_2D, dtype)
    path = str(tmp_path / "v2.zarr")
    oocarr.save(data, path, chunks=CHUNKS_2D, compression=compression, zarr_format=2)
    with open(os.path.join(path, ".zarray")) as f:
        meta = json.load(f)
    assert meta["zarr_format"] == 2 and meta["chunks"] == list(CHUNKS_2D)
    codec_id, ts_reads = V2_COMPRESSIONS[compression]
    assert (meta["compressor"] or {}).get("id") == codec_id
    assert not os.path.exists(os.path.join(path, "zarr.json"))
    z = zarr.open_array(path, mode="r")
    assert z.metadata.zarr_format == 2
    assert_bit_identical(z[...], data)
    if ts_reads:
        assert_bit_identical(ts_read("zarr", path), data)


@pytest.mark.parametrize("compression", [None, "zstd", "gzip", "blosc", "blosc:5"])
def test_oocarr_sharded_output_reads_in_zarr_python_and_tensorstore(tmp_path, compression):
    data = sample(SHAPE_3D, "u2")
    path = str(tmp_path / "sharded.zarr")
    oocarr.save(data, path, chunks=INNER_3D, shards=SHARDS_3D, compression=compression)
    z = zarr.open_array(path, mode="r")
    assert (z.chunks, z.shards) == (INNER_3D, SHARDS_3D)
    assert_bit_identical(z[...], data)
    assert_bit_identical(ts_read("zarr3", path), data)
    assert oocarr.open(path).store.chunks == INNER_3D


def test_oocarr_create_v2_and_sharded_leave_unwritten_chunks_to_the_fill(tmp_path):
    data = sample(SHAPE_3D, "f4")
    region = (slice(0, 4), slice(3, 11), slice(0, 18))
    for name, kwargs in [("v2", {"zarr_format": 2}), ("sharded", {"shards": SHARDS_3D})]:
        path = str(tmp_path / f"{name}.zarr")
        with oocarr.create(path, SHAPE_3D, "f4", chunks=INNER_3D, **kwargs) as x:
            x.store[region] = data[region]
        z = zarr.open_array(path, mode="r")
        want = np.full(SHAPE_3D, z.fill_value, "f4")
        want[region] = data[region]
        assert_bit_identical(z[...], want)
        assert_bit_identical(ts_read("zarr" if name == "v2" else "zarr3", path), want)


def test_convert_writes_v2_and_sharded_zarr(tmp_path):
    data = sample(SHAPE_3D, "i2")
    src = tmp_path / "src.npy"
    np.save(src, data)
    v2 = tmp_path / "v2.zarr"
    cli("convert", "-q", src, v2, "--zarr-format", "2", "--compression", "zstd")
    z = zarr.open_array(str(v2), mode="r")
    assert z.metadata.zarr_format == 2 and z.metadata.compressor.codec_id == "zstd"
    assert_bit_identical(z[...], data)
    sharded_path = tmp_path / "sharded.zarr"
    shards = ",".join(map(str, SHARDS_3D))
    chunks = ",".join(map(str, INNER_3D))
    args = ["--shards", shards, "--chunks", chunks, "--compression", "zstd"]
    cli("convert", "-q", src, sharded_path, *args)
    z = zarr.open_array(str(sharded_path), mode="r")
    assert (z.chunks, z.shards) == (INNER_3D, SHARDS_3D)
    assert_bit_identical(z[...], data)
    assert_bit_identical(ts_read("zarr3", sharded_path), data)


@pytest.mark.parametrize("filesystem", ["memory", "s3"])
def test_oocarr_v2_and_sharded_output_on_remote_filesystems(tmp_path, filesystem, request):
    import fsspec

    data = sample(SHAPE_3D, "u2")
    if filesystem == "memory":
        options, base = {}, f"memory://out-{uuid.uuid4().hex}"
        fs = fsspec.filesystem("memory")
    else:
        options = request.getfixturevalue("s3_server")
        base = f"s3://oocarr-test/out-{uuid.uuid4().hex}"
        fs = fsspec.filesystem("s3", skip_instance_cache=True, **options)
    for name, kwargs in [("v2", {"zarr_format": 2}), ("sharded", {"shards": SHARDS_3D})]:
        url = f"{base}/{name}.zarr"
        oocarr.save(
            data, url, chunks=INNER_3D, compression="zstd", storage_options=options, **kwargs
        )
        local = tmp_path / f"{name}.zarr"
        fs.get(url.split("://", 1)[1], str(local), recursive=True)
        assert_bit_identical(zarr.open_array(str(local), mode="r")[...], data)
        assert_bit_identical(ts_read("zarr" if name == "v2" else "zarr3", local), data)


# ----------------------------------------------------------------------
# Bad input
# ----------------------------------------------------------------------
INDEX_ENTRY = struct.Struct("<QQ")


def shard_of(path: str) -> pathlib.Path:
    return pathlib.Path(path, "c", "0", "0", "0")


def n_inner() -> int:
    return int(np.prod([s // c for s, c in zip(SHARDS_3D, INNER_3D)]))


def write_sharded(tmp_path, location="end", crc=True, codecs=None) -> tuple[str, np.ndarray]:
    path = str(tmp_path / "bad.zarr")
    index_codecs = [BytesCodec(), Crc32cCodec()] if crc else [BytesCodec()]
    z = zarr.create_array(
        store=path,
        shape=SHAPE_3D,
        dtype="u2",
        **sharded_at(location, codecs=codecs, index_codecs=index_codecs),
    )
    data = sample(SHAPE_3D, "u2")
    z[...] = data
    return path, data


def split_shard(blob: bytes, location: str, crc: bool) -> tuple[list[tuple[int, int]], bytes]:
    """The ``(offset, nbytes)`` pairs of a shard and the shard's bytes."""
    size = n_inner() * INDEX_ENTRY.size
    raw = blob[:size] if location == "start" else blob[len(blob) - size - 4 * crc :]
    pairs = [INDEX_ENTRY.unpack_from(raw, i * INDEX_ENTRY.size) for i in range(n_inner())]
    return pairs, blob


def rebuild_shard(chunks: list[bytes]) -> bytes:
    """A shard of ``chunks`` with its index (no checksum) at the end."""
    body, index, offset = b"", b"", 0
    for c in chunks:
        index += INDEX_ENTRY.pack(offset, len(c))
        body += c
        offset += len(c)
    return body + index


def open_and_read(url: str):
    return oocarr.to_numpy(oocarr.open(url))


def assert_names_key(error: pytest.ExceptionInfo, key: str) -> None:
    assert re.search(re.escape(key), str(error.value)), str(error.value)


def test_corrupt_shard_index(tmp_path):
    path, _ = write_sharded(tmp_path, crc=False)
    shard = shard_of(path)
    blob = shard.read_bytes()
    pairs, _ = split_shard(blob, "end", crc=False)
    bad = [(len(blob) * 1000, nbytes) for _, nbytes in pairs]  # offsets beyond the shard
    index = b"".join(INDEX_ENTRY.pack(*p) for p in bad)
    shard.write_bytes(blob[: len(blob) - len(index)] + index)
    with pytest.raises(InvalidStoreError) as error:
        open_and_read(path)
    assert_names_key(error, "c/0/0/0")


def test_shard_index_checksum_mismatch(tmp_path):
    path, _ = write_sharded(tmp_path, crc=True)
    shard = shard_of(path)
    blob = bytearray(shard.read_bytes())
    blob[-8] ^= 0xFF  # inside the index, before its four checksum bytes
    shard.write_bytes(bytes(blob))
    with pytest.raises(InvalidStoreError) as error:
        open_and_read(path)
    assert_names_key(error, "c/0/0/0")


@pytest.mark.parametrize("location", ["start", "end"])
def test_truncated_shard(tmp_path, location):
    path, _ = write_sharded(tmp_path, location=location)
    shard = shard_of(path)
    blob = shard.read_bytes()
    shard.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(InvalidStoreError) as error:
        open_and_read(path)
    assert_names_key(error, "c/0/0/0")


@pytest.mark.parametrize("codec", ["uncompressed", "zstd"])
def test_inner_chunk_of_the_wrong_size(tmp_path, codec):
    codecs = [BytesCodec()] if codec == "uncompressed" else [BytesCodec(), ZstdCodec()]
    path, _ = write_sharded(tmp_path, crc=False, codecs=codecs)
    shard = shard_of(path)
    blob = shard.read_bytes()
    pairs, _ = split_shard(blob, "end", crc=False)
    chunks = [blob[o : o + n] for o, n in pairs]
    short = np.zeros(int(np.prod(INNER_3D)) - 3, "u2").tobytes()
    chunks[1] = short if codec == "uncompressed" else numcodecs.Zstd().encode(short)
    shard.write_bytes(rebuild_shard(chunks))
    with pytest.raises(InvalidStoreError) as error:
        open_and_read(path)
    assert_names_key(error, "c/0/0/0")


def test_blosc_header_claiming_more_bytes_than_the_chunk(tmp_path):
    path = str(tmp_path / "blosc.zarr")
    z = zarr.create_array(
        store=path, shape=SHAPE_2D, chunks=CHUNKS_2D, dtype="f4", compressors=NC.Blosc(), **V2
    )
    z[...] = sample(SHAPE_2D, "f4")
    chunk = pathlib.Path(path, "1.0")
    blob = bytearray(chunk.read_bytes())
    blob[4:8] = struct.pack("<I", 2**31 - 1)  # the uncompressed size the header claims
    chunk.write_bytes(bytes(blob))
    x = oocarr.open(path)
    assert_bit_identical(x.store[:10, :8], z[:10, :8])  # chunk 0.0 is fine
    with pytest.raises(InvalidStoreError) as error:
        oocarr.to_numpy(x)
    assert_names_key(error, "1.0")


def _edit_json(path: str, name: str, edit: Callable[[dict], None]) -> None:
    full = os.path.join(path, name)
    with open(full) as f:
        doc = json.load(f)
    edit(doc)
    with open(full, "w") as f:
        json.dump(doc, f)


def _unknown_v3(doc: dict) -> None:
    doc["codecs"].append({"name": "nosuchcodec", "configuration": {}})


def _unknown_v3_inner(doc: dict) -> None:
    doc["codecs"][0]["configuration"]["codecs"].append({"name": "nosuchcodec"})


def _unknown_v2_compressor(doc: dict) -> None:
    doc["compressor"] = {"id": "nosuchcodec", "level": 1}


def _unknown_v2_filter(doc: dict) -> None:
    doc["filters"] = [{"id": "nosuchcodec"}]


@pytest.mark.parametrize(
    "kwargs, meta, edit",
    [
        ({}, "zarr.json", _unknown_v3),
        ({"shards": (20, 16)}, "zarr.json", _unknown_v3_inner),
        (V2, ".zarray", _unknown_v2_compressor),
        (V2, ".zarray", _unknown_v2_filter),
    ],
    ids=["v3", "v3-inside-shard", "v2-compressor", "v2-filter"],
)
def test_unknown_codec_is_named(tmp_path, kwargs, meta, edit):
    path = str(tmp_path / "unknown.zarr")
    z = zarr.create_array(store=path, shape=SHAPE_2D, chunks=(10, 8), dtype="f4", **kwargs)
    z[...] = 1.0
    _edit_json(path, meta, edit)
    with pytest.raises(UnsupportedCompressionError, match="nosuchcodec"):
        open_and_read(path)


def test_sparse_anndata_matrix_is_a_group_whose_arrays_are_named(tmp_path):
    """A CSR ``X`` is a group: opening it says so and names its arrays, which open."""
    ad = pytest.importorskip("anndata")
    sparse = pytest.importorskip("scipy.sparse")
    matrix = sparse.random(40, 12, density=0.2, format="csr", dtype="f4", random_state=0)
    path = str(tmp_path / "sparse.zarr")
    ad.AnnData(X=matrix).write_zarr(path)
    with pytest.raises(InvalidStoreError, match="data, indices, indptr") as info:
        oocarr.open(f"{path}#/X")
    assert f"{path}#/X/data" in str(info.value)
    assert_bit_identical(oocarr.to_numpy(oocarr.open(f"{path}#/X/indptr")), matrix.indptr)
    assert_bit_identical(oocarr.to_numpy(oocarr.open(f"{path}#/X/data")), matrix.data)
