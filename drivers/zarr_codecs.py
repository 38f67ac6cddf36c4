"""The Zarr v3 codec pipeline the fsspec driver reads and writes.

Read: ``transpose`` (array to array), ``bytes`` in either byte order
(array to bytes), then ``gzip``, ``zstd`` and ``crc32c`` (bytes to
bytes; ``crc32c`` needs the ``google-crc32c`` package).  Write: ``bytes``
little endian, optionally followed by ``gzip`` or ``zstd``.  Any other
codec (``sharding_indexed``, ``blosc`` ...) raises
:class:`~oocarr.errors.UnsupportedCompressionError` naming it.
"""

from __future__ import annotations

import gzip
import math
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import zstandard

from oocarr.errors import (
    InvalidStoreError,
    MissingDependencyError,
    UnsupportedCompressionError,
)
from oocarr.store import Compression, Locator, corrupt
from oocarr_drivers.bounded import gunzip, unzstd

__all__ = [
    "CodecPipeline",
    "DEFAULT_LEVELS",
    "LEVEL_RANGES",
    "chunk_error",
    "codecs_json",
    "parse_codecs",
]

#: Level used when ``create`` is given a compressor without one.
DEFAULT_LEVELS = {"gzip": 5, "zstd": 3}
#: Accepted compression levels, inclusive.
LEVEL_RANGES = {"gzip": (0, 9), "zstd": (-(2**17), zstandard.MAX_COMPRESSION_LEVEL)}

_READABLE = "bytes, transpose, gzip, zstd, crc32c"


def _load_crc32c(locator: Locator):
    try:
        import google_crc32c
    except ImportError:
        raise MissingDependencyError(
            f"{locator.full_url} uses the crc32c codec; install google-crc32c to read it "
            "(pip install google-crc32c)",
            url=locator.full_url,
        ) from None
    return google_crc32c


def _swap_view(dtype: np.dtype) -> np.dtype:
    """A dtype whose ``byteswap`` reverses the bytes of each scalar of ``dtype``."""
    if dtype.kind == "c":
        return np.dtype(f"<f{dtype.itemsize // 2}")
    return np.dtype(f"<u{dtype.itemsize}")


@dataclass(frozen=True)
class _BytesCodec:
    """One bytes-to-bytes codec: ``gzip``, ``zstd`` or ``crc32c``."""

    name: str
    level: int | None = None
    checksum: bool = False

    def encode(self, data: bytes) -> bytes:
        if self.name == "gzip":
            return gzip.compress(data, compresslevel=self.level, mtime=0)
        if self.name == "zstd":
            compressor = zstandard.ZstdCompressor(
                level=self.level, write_checksum=self.checksum, write_content_size=True
            )
            return compressor.compress(data)
        raise AssertionError(f"oocarr does not write the {self.name} codec")

    def decode(self, data: bytes, max_size: int, crc32c: Any) -> bytes:
        if self.name == "gzip":
            return gunzip(data, max_size)
        if self.name == "zstd":
            return unzstd(data, max_size)
        if len(data) < 4:
            raise ValueError("chunk shorter than its crc32c checksum")
        body, stored = data[:-4], int.from_bytes(data[-4:], "little")
        if crc32c.value(body) != stored:
            raise ValueError("crc32c checksum mismatch")
        return body


@dataclass(frozen=True)
class CodecPipeline:
    """Encode a chunk to stored bytes and back.

    Parameters
    ----------
    dtype : numpy.dtype
        The in-memory (little-endian) dtype of the array.
    big_endian : bool
        The ``bytes`` codec stores big-endian scalars.
    orders : tuple of tuple of int
        ``transpose`` permutations, in pipeline order.
    compressors : tuple
        Bytes-to-bytes codecs, in pipeline order.
    crc32c : module, optional
        ``google_crc32c`` when a ``crc32c`` codec is present.

    Examples
    --------
    >>> pipe = CodecPipeline.for_writing(np.dtype("<i4"), Compression("zstd", 3))
    >>> chunk = np.arange(6, dtype="<i4").reshape(2, 3)
    >>> np.array_equal(pipe.decode(pipe.encode(chunk), (2, 3)), chunk)
    True
    >>> pipe.compression
    'zstd:3'
    """

    dtype: np.dtype
    big_endian: bool = False
    orders: tuple[tuple[int, ...], ...] = ()
    compressors: tuple[_BytesCodec, ...] = ()
    crc32c: Any = None

    @property
    def plain(self) -> bool:
        """The stored bytes of a chunk are its C-ordered little-endian array as is."""
        return not (self.compressors or self.orders or self.big_endian)

    @classmethod
    def for_writing(cls, dtype: np.dtype, compression: Compression | None) -> CodecPipeline:
        """The pipeline oocarr writes: ``bytes`` little endian plus an optional compressor."""
        if compression is None:
            return cls(dtype)
        level = DEFAULT_LEVELS[compression.name] if compression.level is None else compression.level
        return cls(dtype, compressors=(_BytesCodec(compression.name, level),))

    @property
    def compression(self) -> str | None:
        """The first compressor in ``create``'s form (``"gzip:5"``), or ``None``."""
        for codec in self.compressors:
            if codec.name != "crc32c":
                return str(Compression(codec.name, codec.level))
        return None

    def to_json(self) -> list[dict[str, Any]]:
        """The ``codecs`` entry of ``zarr.json`` for this pipeline."""
        out: list[dict[str, Any]] = [
            {"name": "transpose", "configuration": {"order": list(o)}} for o in self.orders
        ]
        out.append(_bytes_json(self.dtype, "big" if self.big_endian else "little"))
        for codec in self.compressors:
            if codec.name == "gzip":
                out.append({"name": "gzip", "configuration": {"level": codec.level}})
            elif codec.name == "zstd":
                config = {"level": codec.level, "checksum": codec.checksum}
                out.append({"name": "zstd", "configuration": config})
            else:
                out.append({"name": "crc32c"})
        return out

    def _stored_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        for order in self.orders:
            shape = tuple(shape[i] for i in order)
        return shape

    def encode(self, chunk: np.ndarray) -> bytes:
        """Stored bytes of one full-size chunk (C order, this pipeline's dtype)."""
        for order in self.orders:
            chunk = chunk.transpose(order)
        if self.big_endian:
            chunk = np.ascontiguousarray(chunk).view(_swap_view(self.dtype)).byteswap()
        data = chunk.tobytes()
        for codec in self.compressors:
            if codec.name == "crc32c":
                data = data + self.crc32c.value(data).to_bytes(4, "little")
            else:
                data = codec.encode(data)
        return data

    def decode(self, data: bytes, shape: tuple[int, ...]) -> np.ndarray:
        """The chunk of ``shape`` stored as ``data`` (may be a read-only view of ``data``).

        Raises
        ------
        ValueError
            When the bytes do not decode to a chunk of that shape (corrupt data).
        """
        nbytes = math.prod(shape) * self.dtype.itemsize
        for codec in reversed(self.compressors):
            try:
                data = codec.decode(data, nbytes, self.crc32c)
            except (OSError, EOFError, zlib.error, zstandard.ZstdError) as err:
                raise ValueError(f"{codec.name} data does not decode ({err})") from None
        if len(data) != nbytes:
            raise ValueError(f"decoded chunk has {len(data)} bytes, expected {nbytes}")
        stored = self._stored_shape(shape)
        if self.big_endian:
            chunk = np.frombuffer(data, dtype=_swap_view(self.dtype)).byteswap().view(self.dtype)
        else:
            chunk = np.frombuffer(data, dtype=self.dtype)
        chunk = chunk.reshape(stored)
        for order in reversed(self.orders):
            chunk = chunk.transpose(np.argsort(order))
        return chunk


def _bytes_json(dtype: np.dtype, endian: str) -> dict[str, Any]:
    if dtype.itemsize == 1:
        return {"name": "bytes"}
    return {"name": "bytes", "configuration": {"endian": endian}}


def codecs_json(dtype: np.dtype, compression: Compression | None) -> list[dict[str, Any]]:
    """The ``codecs`` oocarr writes for ``dtype`` and ``compression``.

    Examples
    --------
    >>> codecs_json(np.dtype("f4"), Compression("gzip"))[1]
    {'name': 'gzip', 'configuration': {'level': 5}}
    >>> codecs_json(np.dtype("u1"), None)
    [{'name': 'bytes'}]
    """
    return CodecPipeline.for_writing(dtype, compression).to_json()


def _entry(entry: Any, locator: Locator) -> tuple[str, dict[str, Any]]:
    if isinstance(entry, str):
        return entry, {}
    if isinstance(entry, dict) and isinstance(entry.get("name"), str):
        config = entry.get("configuration") or {}
        if isinstance(config, dict):
            return entry["name"], config
    raise corrupt(locator, f"codec entry {entry!r} is malformed")


def _level(config: dict[str, Any], name: str, locator: Locator) -> int:
    level = config.get("level", DEFAULT_LEVELS[name] if name == "gzip" else 0)
    if isinstance(level, bool) or not isinstance(level, int):
        raise corrupt(locator, f"{name} level {level!r} is not an integer")
    low, high = LEVEL_RANGES[name]
    if not low <= level <= high:
        raise corrupt(locator, f"{name} level {level} is outside {low}..{high}")
    return level


def _checksum(config: dict[str, Any], locator: Locator) -> bool:
    checksum = config.get("checksum", False)
    if not isinstance(checksum, bool):
        raise corrupt(locator, f"zstd checksum {checksum!r} is not true or false")
    return checksum


def _order(config: dict[str, Any], ndim: int, locator: Locator) -> tuple[int, ...]:
    order = config.get("order")
    if order == "C":
        order = list(range(ndim))
    elif order == "F":
        order = list(range(ndim))[::-1]
    if (
        not isinstance(order, list)
        or not all(isinstance(i, int) and not isinstance(i, bool) for i in order)
        or sorted(order) != list(range(ndim))
    ):
        raise corrupt(locator, f"transpose order {order!r} is not a permutation")
    return tuple(order)


def parse_codecs(entries: Any, dtype: np.dtype, ndim: int, locator: Locator) -> CodecPipeline:
    """Build the pipeline described by the ``codecs`` list of ``zarr.json``.

    Raises
    ------
    InvalidStoreError
        When the list is malformed (no ``bytes`` codec, codecs out of order ...).
    UnsupportedCompressionError
        When a codec is not one this driver decodes.
    MissingDependencyError
        For ``crc32c`` without ``google-crc32c`` installed.
    """
    if not isinstance(entries, list):
        raise corrupt(locator, f"codecs {entries!r} is not a list")
    orders: list[tuple[int, ...]] = []
    compressors: list[_BytesCodec] = []
    big_endian = None
    crc32c = None
    for entry in entries:
        name, config = _entry(entry, locator)
        if name == "transpose":
            if big_endian is not None:
                raise corrupt(locator, "the transpose codec comes after the bytes codec")
            orders.append(_order(config, ndim, locator))
        elif name == "bytes":
            if big_endian is not None:
                raise corrupt(locator, "the codecs list has two array-to-bytes codecs")
            endian = config.get("endian", "little" if dtype.itemsize == 1 else None)
            if endian not in ("little", "big"):
                raise corrupt(locator, f"the bytes codec has endian {endian!r}")
            big_endian = endian == "big" and dtype.itemsize > 1
        elif name in ("gzip", "zstd", "crc32c"):
            if big_endian is None:
                raise corrupt(locator, f"the {name} codec comes before the bytes codec")
            if name == "crc32c":
                crc32c = _load_crc32c(locator)
                compressors.append(_BytesCodec("crc32c"))
            else:
                level, checksum = _level(config, name, locator), _checksum(config, locator)
                compressors.append(_BytesCodec(name, level, checksum))
        else:
            raise UnsupportedCompressionError(
                f"{locator.full_url} uses the Zarr codec {name!r}, which oocarr's fsspec driver "
                f"does not decode (it reads {_READABLE}); rewrite the array with those codecs, "
                "e.g. zarr.create_array(..., compressors=zarr.codecs.ZstdCodec(), "
                "shards=None)",
                url=locator.full_url,
            )
    if big_endian is None:
        raise corrupt(locator, "the codecs list has no bytes codec")
    return CodecPipeline(dtype, big_endian, tuple(orders), tuple(compressors), crc32c)


def chunk_error(locator: Locator, key: str, err: Exception) -> InvalidStoreError:
    """The error for a chunk that does not decode."""
    return corrupt(locator, f"chunk {key!r} is corrupt ({err})")
