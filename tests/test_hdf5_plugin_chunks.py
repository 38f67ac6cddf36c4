"""HDF5 chunks compressed with hdf5plugin's filters, decoded by the driver outside HDF5's lock
(issue 15, item 4): every filter and option read bit for bit as h5py reads them, edge chunks
and never-written chunks included, and corrupt chunks a clear error naming the chunk that
costs no more memory than the chunk.
"""

from __future__ import annotations

import struct
import tracemalloc

import h5py
import hdf5plugin
import numcodecs.blosc
import numpy as np
import pytest

import oocarr
from oocarr import errors
from oocarr_drivers import hdf5_chunks

SHAPE, CHUNKS = (45, 70), (8, 16)
#: The corrupt-chunk tests' float32 layout: 64 KiB chunks, so that a chunk's size stands out
#: from the few KiB an error costs.
BIG, BIG_CHUNKS = (128, 512), (64, 256)
CHUNK_BYTES = 64 * 256 * 4

_BLOSC = {
    f"blosc-{cname}-{shuffle}": hdf5plugin.Blosc(
        cname=cname, clevel=5, shuffle=getattr(hdf5plugin.Blosc, shuffle.upper())
    )
    for cname in ("lz4", "zstd", "blosclz")
    for shuffle in ("shuffle", "bitshuffle", "noshuffle")
}
#: Filters the driver decodes itself.
DECODED = {
    **_BLOSC,
    "blosc-lz4hc": hdf5plugin.Blosc(cname="lz4hc"),
    "shuffle+blosc": {"shuffle": True, **hdf5plugin.Blosc(shuffle=hdf5plugin.Blosc.NOSHUFFLE)},
    "zstd": hdf5plugin.Zstd(clevel=3),
    "zstd-22": hdf5plugin.Zstd(clevel=22),
    "shuffle+zstd": {"shuffle": True, **hdf5plugin.Zstd()},
    "lz4": hdf5plugin.LZ4(),
    "lz4-small-blocks": hdf5plugin.LZ4(nbytes=100),  # several blocks, some stored raw
    "shuffle+lz4": {"shuffle": True, **hdf5plugin.LZ4()},
}
#: Filters HDF5 keeps decoding (Bitshuffle: see drivers/hdf5_chunks.py for why).
BY_HDF5 = {
    "bitshuffle-lz4": hdf5plugin.Bitshuffle(),
    "bitshuffle-zstd": hdf5plugin.Bitshuffle(cname="zstd"),
    "bitshuffle-none": hdf5plugin.Bitshuffle(cname="none"),
    "blosc2": hdf5plugin.Blosc2(),
}
REGIONS = [
    (slice(0, 45), slice(0, 70)),
    (slice(3, 44), slice(5, 69)),
    (slice(8, 16), slice(16, 32)),  # exactly one chunk
    (slice(0, 24), slice(16, 32)),  # whole chunks stacked: each decoded straight into it
    (slice(39, 45), slice(60, 70)),  # the edge chunks, partly never written
]


def _data(dtype: str) -> np.ndarray:
    rng = np.random.default_rng(7)
    smooth = np.add.outer(np.arange(SHAPE[0]), np.arange(SHAPE[1])) % 23
    noise = rng.integers(0, 1000, SHAPE)  # incompressible blocks exercise raw storage
    values = np.where(np.arange(SHAPE[1]) < 35, smooth, noise)
    return values.astype(dtype)


def _write(path, name: str, options: dict, dtype: str = "f4") -> np.ndarray:
    """A dataset with rows 40-44 never written (fill value 7); h5py's read of it."""
    with h5py.File(path, "a") as f:
        d = f.create_dataset(name, SHAPE, dtype, chunks=CHUNKS, fillvalue=7, **options)
        d[:40] = _data(dtype)[:40]
        return d[...]


@pytest.mark.parametrize("dtype", ["f4", "i2", "u8", ">f8"])
@pytest.mark.parametrize("name", [*DECODED, *BY_HDF5])
def test_plugin_filtered_chunks_read_as_h5py_reads_them(tmp_path, name, dtype):
    path = tmp_path / "p.h5"
    expected = _write(path, name, {**DECODED, **BY_HDF5}[name], dtype)
    with h5py.File(path) as f:
        decoder = hdf5_chunks.decoder_for(f[name], f[name].dtype)
    assert (decoder is not None) == (name in DECODED)
    store = oocarr.open(f"{path}#/{name}").store
    for region in REGIONS:
        got = store.read_region(region)
        assert got.dtype == expected.dtype
        assert got.tobytes() == expected[region].tobytes(), region
    store.close()


def test_plugin_chunks_are_decoded_by_the_driver(tmp_path, monkeypatch):
    path = tmp_path / "d.h5"
    expected = {
        "blosc": _write(path, "blosc", hdf5plugin.Blosc()),
        "zstd": _write(path, "zstd", hdf5plugin.Zstd()),
        "lz4": _write(path, "lz4", hdf5plugin.LZ4()),
    }
    calls: list[str] = []
    for fn in ("unblosc", "unzstd", "unlz4"):
        real = getattr(hdf5_chunks, fn)
        monkeypatch.setattr(
            hdf5_chunks, fn, lambda *a, _fn=fn, _real=real: calls.append(_fn) or _real(*a)
        )
    for name, want in expected.items():
        store = oocarr.open(f"{path}#/{name}").store
        np.testing.assert_array_equal(store.read_region(), want)
        store.close()
    written = 5 * 5  # chunk rows 0-4 hold written rows; row 5 (rows 40-44) is fill only
    assert calls.count("unblosc") == calls.count("unzstd") == calls.count("unlz4") == written


BIG_DATA = (np.arange(128 * 512, dtype="f4").reshape(BIG) % 29) * 0.5


def _bad_chunk(path, options: dict, stored: bytes) -> None:
    """Dataset ``x`` of ``BIG_DATA`` with chunk (1, 1) replaced by ``stored``."""
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", data=BIG_DATA, chunks=BIG_CHUNKS, **options)
        d.id.write_direct_chunk((64, 256), stored)


def _real_chunk(options: dict) -> bytearray:
    with h5py.File("memory.h5", "w", driver="core", backing_store=False) as f:
        d = f.create_dataset("x", data=BIG_DATA, chunks=BIG_CHUNKS, **options)
        return bytearray(d.id.read_direct_chunk((64, 256))[1])


def _bad_body(options: dict) -> bytes:
    """A real chunk of ``options`` with its header kept and its body overwritten."""
    raw = _real_chunk(options)
    raw[32:] = b"\xa5" * (len(raw) - 32)
    return bytes(raw)


def _claims_more(options: dict) -> bytes:
    """A real chunk of ``options`` whose header claims 100 times the chunk's size."""
    raw = _real_chunk(options)
    if "compression" in options and options["compression"] == hdf5plugin.Blosc.filter_id:
        raw[4:8] = struct.pack("<I", 100 * CHUNK_BYTES)  # Blosc: nbytes, little-endian
    else:
        raw[0:8] = struct.pack(">Q", 100 * CHUNK_BYTES)  # LZ4 filter: total size, big-endian
    return bytes(raw)


CORRUPT = {
    "blosc-garbage": (hdf5plugin.Blosc(), b"\x02\x01\x21\x04" + b"\xff" * 60),
    "blosc-truncated": (hdf5plugin.Blosc(), b"\x02\x01\x21\x04" + bytes(8)),
    "zstd-garbage": (hdf5plugin.Zstd(), b"\x28\xb5\x2f\xfd" + b"\xff" * 60),
    "lz4-garbage": (hdf5plugin.LZ4(), struct.pack(">QII", CHUNK_BYTES, CHUNK_BYTES, 60)),
    "lz4-bad-block": (
        hdf5plugin.LZ4(),
        struct.pack(">QII", CHUNK_BYTES, CHUNK_BYTES, 20) + b"\xff" * 20,
    ),
    "blosc-bad-body": (hdf5plugin.Blosc(cname="lz4"), _bad_body),
    "blosc-zstd-bad-body": (hdf5plugin.Blosc(cname="zstd"), _bad_body),
    "zstd-bad-body": (hdf5plugin.Zstd(), _bad_body),
    "lz4-bad-body": (hdf5plugin.LZ4(), _bad_body),
    "blosc-claims-100x": (hdf5plugin.Blosc(), None),
    "lz4-claims-100x": (hdf5plugin.LZ4(), None),
}


@pytest.mark.parametrize("case", CORRUPT)
def test_a_corrupt_plugin_chunk_is_an_invalid_store_naming_the_chunk(tmp_path, case):
    options, stored = CORRUPT[case]
    path = tmp_path / "bad.h5"
    if stored is None:
        stored = _claims_more(options)
    elif callable(stored):
        stored = stored(options)
    _bad_chunk(path, options, stored)
    store = oocarr.open(f"{path}#/x").store
    good = (slice(0, 64), slice(0, 512))
    np.testing.assert_array_equal(store.read_region(good), BIG_DATA[good])
    tracemalloc.start()
    try:
        with pytest.raises(errors.InvalidStoreError, match=r"bad\.h5.*chunk \(1, 1\)"):
            store.read_region((slice(64, 128), slice(256, 512)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # the region's buffer and the stored chunk; a claimed 100x chunk is never allocated
    assert peak < 3 * CHUNK_BYTES
    store.close()


def test_the_decoders_refuse_sizes_past_the_chunk():
    frame = numcodecs.blosc.compress(bytes(1000), b"zstd", 5, 1, 4)
    assert hdf5_chunks.unblosc(frame, 1000).tobytes() == bytes(1000)
    with pytest.raises(ValueError, match="claims 1000 bytes"):
        hdf5_chunks.unblosc(frame, 999)
    with pytest.raises(ValueError, match="stored bytes"):
        hdf5_chunks.unblosc(frame[:-1], 1000)
    with pytest.raises(ValueError, match="less than the LZ4"):
        hdf5_chunks.unlz4(b"\x00" * 5, 1000)
    with pytest.raises(ValueError, match="block size of 0"):
        hdf5_chunks.unlz4(struct.pack(">QI", 10, 0), 1000)
    with pytest.raises(ValueError, match="ends before LZ4 block 1"):
        hdf5_chunks.unlz4(struct.pack(">QII", 20, 10, 10) + bytes(10), 1000)
