"""Property-based fuzzing of every driver (issue 14): random bytes as chunk files (Zarr with no,
gzip and zstd compression; HDF5 deflate chunks written with ``write_direct_chunk``), random JSON
as ``zarr.json`` and random ``.npy`` headers, each opened with ``oocarr.open`` and read whole.

The property: a typed :class:`~oocarr.errors.OocarrError`, or the data an independent decoder
(``gzip``, ``zlib``, ``zstandard``, ``numpy.load``, zarr-python) finds in the same bytes; never
any other exception.  Memory stays bounded because every decoder stops at the chunk's size
(``tests/test_decompression_bombs.py`` measures that), and reads here are skipped for arrays
over :data:`READ_LIMIT` bytes, so a metadata document claiming terabytes costs nothing.
"""

from __future__ import annotations

import gzip
import json
import os
import pathlib
import shutil
import tempfile
import zlib

import h5py
import numpy as np
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import oocarr
from oocarr.errors import OocarrError

#: Arrays larger than this are opened and described but not read whole.
READ_LIMIT = 2**20
SHAPE, CHUNKS, DTYPE = (6, 4), (3, 4), np.dtype("<i4")
CHUNK_BYTES = int(np.prod(CHUNKS)) * DTYPE.itemsize
DATA = np.arange(24, dtype=DTYPE).reshape(SHAPE) * 7 - 50

#: The same examples every run (set ``OOCARR_FUZZ_RANDOM=1`` to explore new ones).
FUZZ = settings(
    max_examples=60,
    deadline=None,
    database=None,
    derandomize=os.environ.get("OOCARR_FUZZ_RANDOM") is None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def workdir():
    path = pathlib.Path(tempfile.mkdtemp(prefix="oocarr-fuzz-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _read(url: str) -> np.ndarray | OocarrError:
    """``url`` read whole through oocarr, or the typed error it raised (any other escapes)."""
    try:
        x = oocarr.open(url)
    except OocarrError as err:
        return err
    try:
        x.store.info()
        if x.store.nbytes > READ_LIMIT:
            return OocarrError("not read: too large for the fuzz test")
        return oocarr.to_numpy(x)
    except OocarrError as err:
        return err
    finally:
        x.store.close()


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


# ----------------------------------------------------------------------
# Chunk bytes
# ----------------------------------------------------------------------
def _mutations(valid: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """Truncated, extended, bit-flipped and spliced versions of valid encodings, and noise."""

    @st.composite
    def mutate(draw):
        data = bytearray(draw(valid))
        how = draw(st.sampled_from(["truncate", "append", "flip", "splice"]))
        if how == "truncate":
            return bytes(data[: draw(st.integers(0, max(0, len(data) - 1)))])
        if how == "append":
            return bytes(data) + draw(st.binary(min_size=1, max_size=64))
        if how == "flip" and data:
            for _ in range(draw(st.integers(1, 4))):
                i = draw(st.integers(0, len(data) - 1))
                data[i] ^= 1 << draw(st.integers(0, 7))
            return bytes(data)
        cut = draw(st.integers(0, len(data)))
        return bytes(data[:cut]) + draw(st.binary(max_size=32)) + bytes(data[cut:])

    return st.one_of(st.binary(max_size=200), mutate())


PAYLOADS = st.one_of(
    st.binary(min_size=CHUNK_BYTES, max_size=CHUNK_BYTES),
    st.binary(max_size=2 * CHUNK_BYTES),
)


def _gzip(payload: bytes) -> bytes:
    return gzip.compress(payload, mtime=0)


def _zstd(payload: bytes, size: bool) -> bytes:
    return zstandard.ZstdCompressor(write_content_size=size).compress(payload)


ENCODERS = {
    None: (lambda p: p, lambda d: d),
    "gzip": (_gzip, gzip.decompress),
    "zstd": (
        lambda p: _zstd(p, len(p) % 2 == 0),
        lambda d: zstandard.ZstdDecompressor().decompressobj().decompress(d),
    ),
}


def _oracle(decode, stored: bytes) -> np.ndarray | None:
    """The chunk an independent decoder finds in ``stored``, or ``None`` when it finds none."""
    try:
        raw = decode(stored)
    except Exception:
        return None
    if len(raw) != CHUNK_BYTES:
        return None
    return np.frombuffer(raw, DTYPE).reshape(CHUNKS)


@pytest.fixture(scope="module", params=[None, "gzip", "zstd"])
def zarr_array(request, workdir):
    path = workdir / f"chunks-{request.param}.zarr"
    oocarr.save(DATA, str(path), chunks=CHUNKS, compression=request.param)
    return path, request.param


def _check_chunk(url: str, stored: bytes, decode, *, valid: bool) -> None:
    got = _read(url)
    expected = _oracle(decode, stored)
    if isinstance(got, OocarrError):
        assert not valid, f"a valid chunk was refused: {got}"
        return
    assert expected is not None, "oocarr returned data where the reference decoder finds none"
    assert _bits(got[:3]) == _bits(expected)
    assert _bits(got[3:]) == _bits(DATA[3:])


@FUZZ
@given(data=st.data())
def test_zarr_chunk_bytes(zarr_array, data):
    path, codec = zarr_array
    encode, decode = ENCODERS[codec]
    valid = data.draw(st.booleans())
    if valid:
        stored = encode(data.draw(st.binary(min_size=CHUNK_BYTES, max_size=CHUNK_BYTES)))
    else:
        stored = data.draw(_mutations(PAYLOADS.map(encode)))
    (path / "c" / "0" / "0").write_bytes(stored)
    _check_chunk(str(path), stored, decode, valid=valid)


@pytest.fixture(scope="module", params=[False, True], ids=["gzip", "shuffle+gzip"])
def hdf5_file(request, workdir):
    path = workdir / f"chunks-{request.param}.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=DATA, chunks=CHUNKS, compression="gzip", shuffle=request.param)
    return path, request.param


def _shuffle(raw: bytes) -> bytes:
    return np.frombuffer(raw, np.uint8).reshape(-1, DTYPE.itemsize).T.tobytes()


def _unshuffle(raw: bytes) -> bytes:
    return np.frombuffer(raw, np.uint8).reshape(DTYPE.itemsize, -1).T.tobytes()


@FUZZ
@given(data=st.data())
def test_hdf5_deflate_chunk_bytes(hdf5_file, data):
    path, shuffled = hdf5_file
    valid = data.draw(st.booleans())

    def encode(payload: bytes) -> bytes:
        if shuffled and len(payload) % DTYPE.itemsize == 0:
            payload = _shuffle(payload)
        return zlib.compress(payload)

    def decode(stored: bytes) -> bytes:
        raw = zlib.decompress(stored)
        return _unshuffle(raw) if shuffled and len(raw) == CHUNK_BYTES else raw

    if valid:
        stored = encode(data.draw(st.binary(min_size=CHUNK_BYTES, max_size=CHUNK_BYTES)))
    else:
        stored = data.draw(_mutations(PAYLOADS.map(encode)))
    stored = stored or b"\0"  # HDF5 stores no empty chunk
    with h5py.File(path, "r+") as f:
        f["x"].id.write_direct_chunk((0, 0), stored, filter_mask=0)
    _check_chunk(f"{path}#/x", stored, decode, valid=valid)


# ----------------------------------------------------------------------
# zarr.json
# ----------------------------------------------------------------------
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.sampled_from(["NaN", "Infinity", "0x7fc00000", "C", "F", "little", "big", "bytes"]),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
SMALL_INTS = st.lists(st.integers(-3, 10), max_size=3)
#: Paths into a valid document, and what may be put there.
FIELDS = [
    ("shape",),
    ("data_type",),
    ("chunk_grid",),
    ("chunk_grid", "configuration", "chunk_shape"),
    ("chunk_key_encoding",),
    ("chunk_key_encoding", "configuration", "separator"),
    ("fill_value",),
    ("codecs",),
    ("codecs", 0),
    ("codecs", 0, "configuration"),
    ("codecs", 0, "configuration", "endian"),
    ("codecs", 1, "configuration", "level"),
    ("codecs", 1, "configuration", "checksum"),
    ("attributes",),
    ("zarr_format",),
    ("node_type",),
    ("storage_transformers",),
]


@pytest.fixture(scope="module")
def zarr_doc(workdir):
    path = workdir / "meta.zarr"
    oocarr.save(DATA, str(path), chunks=CHUNKS, compression="zstd")
    return path, (path / "zarr.json").read_text()


def _put(doc, where, value) -> bool:
    """Set ``doc[where...] = value``; False when the path does not exist."""
    node = doc
    for key in where[:-1]:
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            return False
    if isinstance(node, list) and not (isinstance(where[-1], int) and where[-1] < len(node)):
        return False
    if not isinstance(node, (dict, list)):
        return False
    node[where[-1]] = value
    return True


def _zarr_python(path: pathlib.Path) -> np.ndarray | None:
    import zarr

    try:
        return np.asarray(zarr.open_array(str(path), mode="r")[...])
    except Exception:
        return None


@FUZZ
@given(data=st.data())
def test_random_zarr_json(zarr_doc, data):
    path, original = zarr_doc
    kind = data.draw(st.sampled_from(["mutate", "mutate", "mutate", "random", "bytes"]))
    if kind == "bytes":
        raw = data.draw(st.binary(max_size=300))
    elif kind == "random":
        raw = json.dumps(data.draw(JSON)).encode()
    else:
        doc = json.loads(original)
        for _ in range(data.draw(st.integers(1, 3))):
            where = data.draw(st.sampled_from(FIELDS))
            value = data.draw(
                st.one_of(JSON, SMALL_INTS) if where[-1] in ("shape", "chunk_shape") else JSON
            )
            _put(doc, where, value)
        raw = json.dumps(doc).encode()
    (path / "zarr.json").write_bytes(raw)
    got = _read(str(path))
    if isinstance(got, OocarrError):
        return
    doc = json.loads(raw)
    assert got.shape == tuple(doc["shape"])
    if got.size and got.shape == SHAPE:
        reference = _zarr_python(path)
        if reference is not None and reference.dtype == got.dtype:
            assert _bits(got) == _bits(reference)


# ----------------------------------------------------------------------
# .npy headers
# ----------------------------------------------------------------------
DESCRS = st.sampled_from(
    [
        "'<i4'",
        "'>f8'",
        "'|b1'",
        "'<c16'",
        "'|O'",
        "'<U3'",
        "[('a', '<i4')]",
        "'x'",
        "5",
        "None",
        "'<M8[s]'",
        "'V4'",
        "{}",
        "'<i4' + 1",
        "__import__('os')",
    ]
)
SHAPES = st.one_of(
    st.tuples(st.integers(-5, 8), st.integers(-5, 8)).map(str),
    st.sampled_from(
        [
            "()",
            "(6,)",
            "(-5, 3)",
            "(2**62,)",
            "(99999999999999999999,)",
            "(1.5,)",
            "('a',)",
            "[6, 4]",
            "None",
            "(6, 4, 0)",
            "(" + "1, " * 70 + ")",
        ]
    ),
)
ORDERS = st.sampled_from(["False", "True", "0", "'no'", "None"])


@st.composite
def npy_headers(draw) -> bytes:
    if draw(st.integers(0, 4)) == 0:
        return b"\x93NUMPY" + draw(st.binary(max_size=120))
    keys = {
        "descr": draw(DESCRS),
        "fortran_order": draw(ORDERS),
        "shape": draw(SHAPES),
    }
    if draw(st.booleans()):
        keys.pop(draw(st.sampled_from(sorted(keys))))
    body = "{" + "".join(f"'{k}': {v}, " for k, v in keys.items()) + "}"
    if draw(st.integers(0, 6)) == 0:
        body = draw(st.text(max_size=60))
    major = draw(st.sampled_from([1, 1, 2, 3, 9]))
    header = body.encode("utf-8", "replace")
    size_bytes = 2 if major == 1 else 4
    total = 6 + 2 + size_bytes + len(header) + 1
    header += b" " * ((-total) % 64) + b"\n"
    declared = len(header) + draw(st.sampled_from([0, 0, 0, -3, 5, 10**4]))
    declared = max(0, min(declared, 2 ** (8 * size_bytes) - 1))
    return b"\x93NUMPY" + bytes([major, 0]) + declared.to_bytes(size_bytes, "little") + header


def _numpy_load(path: pathlib.Path) -> np.ndarray | None:
    try:
        a = np.load(path, mmap_mode="r", allow_pickle=False)
    except Exception:
        return None
    if a.dtype.kind not in "biufc" or a.nbytes > READ_LIMIT:
        return None
    return np.array(a)


@FUZZ
@given(header=npy_headers(), body=st.binary(max_size=128))
def test_random_npy_headers(workdir, header, body):
    path = workdir / "fuzz.npy"
    path.write_bytes(header + body)
    got = _read(str(path))
    if isinstance(got, OocarrError):
        return
    reference = _numpy_load(path)
    assert reference is not None, "oocarr read an .npy file numpy cannot load"
    assert got.shape == reference.shape and got.dtype == reference.dtype
    assert _bits(got) == _bits(reference)


# ----------------------------------------------------------------------
# What the fuzzing found, kept as fixed examples
# ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "stored",
    [b"\0" * 10, b"\x1f\x8b" + b"\0" * 20, b"", b"\x28\xb5\x2f\xfd" + b"\xff" * 10],
    ids=["zeros", "gzip-magic", "empty", "zstd-magic"],
)
def test_corrupt_chunks_found_by_fuzzing(zarr_array, stored):
    """isal's ``IsalError`` (not a ``zlib.error``) escaped the gzip decoder as itself."""
    path, codec = zarr_array
    (path / "c" / "0" / "0").write_bytes(stored)
    _check_chunk(str(path), stored, ENCODERS[codec][1], valid=False)


@pytest.mark.parametrize(
    "header",
    [
        b"{'descr': '<i4', 'fortran_order': False, 'shape': (-5, 3), }",
        b"{'descr': '|b1', 'fortran_order': True, 'shape': (1, -2), }",
        b"[",
        b"{'descr': '<i4', 'fortran_order': False, 'shape': (6,), ",
    ],
    ids=["negative", "negative-fortran", "open-bracket", "unclosed-dict"],
)
def test_npy_headers_found_by_fuzzing(workdir, header):
    """Negative shapes were accepted (``nbytes == -60``); unclosed brackets raised
    ``tokenize.TokenError`` from numpy's header parser."""
    header += b" " * ((-(len(header) + 11)) % 64) + b"\n"
    path = workdir / "found.npy"
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + bytes(96))
    assert _numpy_load(path) is None  # numpy refuses each of them too
    assert isinstance(_read(str(path)), OocarrError)


def test_zero_dimensional_zarr_chunk_that_is_a_directory(workdir):
    """A 0-d array's only chunk key is ``c``: when ``c`` is a directory (left by a 2-d array),
    reading raised ``IsADirectoryError``."""
    path = workdir / "zero-d.zarr"
    oocarr.save(DATA, str(path), chunks=CHUNKS)
    doc = json.loads((path / "zarr.json").read_text())
    doc["shape"], doc["chunk_grid"]["configuration"]["chunk_shape"] = [], []
    (path / "zarr.json").write_text(json.dumps(doc))
    assert isinstance(_read(str(path)), OocarrError)
