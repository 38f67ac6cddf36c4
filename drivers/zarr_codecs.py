"""The codec pipelines of Zarr v2 and v3 chunks, encoded and decoded through numcodecs.

A :class:`CodecPipeline` turns one chunk (an array of the array's dtype
and chunk shape) into its stored bytes and back.  Its stages, in encoding
order: array-to-array steps (``transpose``, a v2 array's ``order: "F"``,
the numcodecs filters of a v3 ``numcodecs.*`` entry), the serialisation to
bytes (little or big endian), the v2 ``filters``, then the bytes-to-bytes
codecs (Blosc, Zstd, GZip, Zlib, BZ2, LZ4, LZMA, CRC32C ... any codec
numcodecs registers).  Sharding (``sharding_indexed``) wraps a pipeline of
its own; see :mod:`oocarr_drivers.zarr_shards`.

Every decode is bounded by the chunk's size: a codec whose frame states
its decoded size (Blosc, Zstd, LZ4) is checked before anything is
allocated, and the streaming formats (gzip, zlib, bz2, lzma) stop one byte
past it, so a small corrupt or hostile chunk costs at most one chunk of
memory.  An unknown codec raises
:class:`~oocarr.errors.UnsupportedCompressionError` naming it.
"""

from __future__ import annotations

import bz2
import lzma
import math
from dataclasses import dataclass, field
from typing import Any

import numcodecs
import numpy as np
import zstandard
from numcodecs.abc import Codec

from oocarr.errors import InvalidStoreError, UnsupportedCompressionError
from oocarr.store import Compression, Locator, corrupt
from oocarr_drivers.bounded import gunzip, inflate, unblosc, unzstd

__all__ = [
    "CodecPipeline",
    "DEFAULT_LEVELS",
    "LEVEL_RANGES",
    "WRITABLE",
    "NamedCodec",
    "Stage",
    "chunk_error",
    "codecs_json",
    "parse_codecs",
    "parse_v2_codecs",
]

#: Compressions ``create`` writes, with the level used when none is given.
DEFAULT_LEVELS = {"gzip": 5, "zstd": 3, "blosc": 5, "lz4": 1, "zlib": 5, "bz2": 9}
#: Accepted compression levels, inclusive (``lz4``'s is its acceleration).
LEVEL_RANGES = {
    "gzip": (0, 9),
    "zlib": (0, 9),
    "bz2": (1, 9),
    "blosc": (0, 9),
    "lz4": (1, 65537),
    "zstd": (-(2**17), zstandard.MAX_COMPRESSION_LEVEL),
}
WRITABLE = frozenset(DEFAULT_LEVELS)
#: Blosc compressor oocarr writes (the fastest to decode; zarr-python's v2 default too).
BLOSC_CNAME = "lz4"
#: Zarr v3 ``blosc`` shuffle names and numcodecs' numbers for them.
_BLOSC_SHUFFLES = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}
#: The Zarr v3 names of codecs that are numcodecs codecs under another configuration.
_V3_CORE = {"blosc", "gzip", "zstd", "crc32c"}
#: Slack allowed past the chunk's size while bytes-to-bytes codecs are undone (checksums).
_SLACK = 64


@dataclass(frozen=True, eq=False)
class NamedCodec:
    """A numcodecs codec plus the name the metadata gave it (``"blosc"``, ``"numcodecs.lz4"``,
    a v2 ``id``) and the configuration it was written with.

    Examples
    --------
    >>> c = NamedCodec.from_v2({"id": "zstd", "level": 1})
    >>> bytes(c.decode(c.encode(b"abc" * 10), 30))[:6]
    b'abcabc'
    """

    name: str
    codec: Codec
    config: dict[str, Any] = field(default_factory=dict)
    typesize: int | None = None

    @classmethod
    def from_v2(cls, config: dict[str, Any]) -> NamedCodec:
        """A codec from a v2 ``compressor``/``filters`` entry (numcodecs' own config form)."""
        return cls(str(config["id"]), numcodecs.get_codec(dict(config)), dict(config))

    @property
    def codec_id(self) -> str:
        """numcodecs' id of the codec (``"blosc"``, ``"lz4"``)."""
        return self.codec.codec_id

    def encode(self, data: Any) -> Any:
        """The codec's encoding of ``data`` (an array or bytes)."""
        if self.typesize and self.typesize > 1:
            raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
            if raw.size % self.typesize == 0 and self.typesize in (2, 4, 8):
                data = raw.view(f"u{self.typesize}")
        return self.codec.encode(data)

    def decode(self, data: Any, limit: int, out: np.ndarray | None = None) -> Any:
        """The codec's decoding of ``data``, at most ``limit`` bytes; into ``out`` (a uint8
        buffer) when the codec's frame says it decodes to exactly ``out``'s size.

        Raises
        ------
        ValueError
            When the data is corrupt or would decode to more than ``limit`` bytes.
        """
        cid = self.codec_id
        try:
            if cid == "gzip":
                return gunzip(bytes(data), limit)
            if cid == "zlib":
                return inflate(bytes(data), limit)
            if cid == "zstd":
                return unzstd(_bytes_view(data), limit, out)
            if cid in ("bz2", "lzma"):
                return _stream(data, limit, cid)
            if cid == "blosc":
                return unblosc(_bytes_view(data), limit, out)
            if cid == "lz4":
                return _unlz4(data, limit, self.codec, out)
            if cid.startswith("crc32") or cid in ("adler32", "fletcher32", "jenkins_lookup3"):
                out = self.codec.decode(np.frombuffer(_bytes_view(data), np.uint8))
            else:
                out = self.codec.decode(data)
        except ValueError:
            raise
        except Exception as err:  # numcodecs raises what its C library reports
            raise ValueError(f"{self.name} data does not decode ({err})") from None
        if _nbytes(out) > limit:
            raise ValueError(f"it decodes to more than the {limit} bytes a chunk holds")
        return out

    def v3_json(self) -> dict[str, Any]:
        """The entry of this codec in a v3 ``codecs`` list."""
        if self.name in _V3_CORE or self.name.startswith("numcodecs."):
            return {"name": self.name, "configuration": dict(self.config)}
        config = {k: v for k, v in self.codec.get_config().items() if k != "id"}
        return {"name": f"numcodecs.{self.codec_id}", "configuration": config}

    def v2_json(self) -> dict[str, Any]:
        """The entry of this codec as a v2 ``compressor`` or filter (zarr-python's form: a
        ``zstd`` entry without ``checksum: false``, which TensorStore refuses)."""
        config = self.codec.get_config()
        if config.get("id") == "zstd" and config.get("checksum") is False:
            del config["checksum"]
        return config


def _bytes_view(data: Any) -> memoryview:
    view = memoryview(data)
    return view.cast("B") if view.ndim != 1 or view.format != "B" else view


def _nbytes(data: Any) -> int:
    return data.nbytes if isinstance(data, np.ndarray) else memoryview(data).nbytes


def _into(codec: Codec, view: memoryview, stated: int, out: np.ndarray | None) -> Any:
    """Decode into ``out`` when the frame states exactly its size (a reused buffer spares a
    fresh, page-faulting allocation per chunk), else into a new buffer."""
    if out is not None and stated == out.nbytes:
        codec.decode(view, out=out)
        return out
    return codec.decode(view)


def _stream(data: Any, limit: int, cid: str) -> bytes:
    """bz2 and lzma decoded one byte past ``limit`` at most (numcodecs decodes the whole
    stream, whatever its size)."""
    decoder = bz2.BZ2Decompressor() if cid == "bz2" else lzma.LZMADecompressor()
    try:
        out = decoder.decompress(bytes(data), max_length=limit + 1)
    except (OSError, EOFError, lzma.LZMAError) as err:
        raise ValueError(f"the {cid} stream is corrupt ({err})") from None
    if len(out) > limit:
        raise ValueError(f"it decompresses to more than the {limit} bytes a chunk holds")
    if not decoder.eof:
        raise ValueError(f"the {cid} stream ends early")
    return out


def _unlz4(data: Any, limit: int, codec: Codec, out: np.ndarray | None = None) -> Any:
    view = _bytes_view(data)
    if len(view) < 4:
        raise ValueError("the LZ4 data is shorter than its 4-byte size header")
    stated = int.from_bytes(view[:4], "little", signed=True)
    if not 0 <= stated <= limit:
        raise ValueError(f"its LZ4 header claims {stated} bytes, the chunk holds {limit}")
    return _into(codec, view, stated, out)


@dataclass(frozen=True, eq=False)
class Stage:
    """One array-to-array step: a transpose (``order``) or a numcodecs filter (``codec``)."""

    order: tuple[int, ...] | None = None
    codec: NamedCodec | None = None


def _out_dtype(codec: NamedCodec, dtype: np.dtype) -> np.dtype:
    """The dtype a filter's encoding produces from ``dtype`` (its ``astype``, if any)."""
    for attr in ("astype", "encode_dtype"):
        value = getattr(codec.codec, attr, None)
        if value is not None:
            return np.dtype(value)
    return dtype


@dataclass(frozen=True, eq=False)
class CodecPipeline:
    """Encode a chunk to stored bytes and back.

    Parameters
    ----------
    dtype : numpy.dtype
        The in-memory (native, little-endian) dtype of the array.
    big_endian : bool
        Scalars are serialised big endian.
    stages : tuple of Stage
        Array-to-array steps, in encoding order.
    filters : tuple of NamedCodec
        Zarr v2 ``filters``, applied to the serialised chunk before the compressors.
    compressors : tuple of NamedCodec
        Bytes-to-bytes codecs, in encoding order.

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
    stages: tuple[Stage, ...] = ()
    filters: tuple[NamedCodec, ...] = ()
    compressors: tuple[NamedCodec, ...] = ()

    @property
    def plain(self) -> bool:
        """The stored bytes of a chunk are its C-ordered little-endian array as is."""
        return not (self.compressors or self.stages or self.filters or self.big_endian)

    @property
    def orders(self) -> tuple[tuple[int, ...], ...]:
        """The transposes among the stages (a v2 ``"F"`` order is one)."""
        return tuple(s.order for s in self.stages if s.order is not None)

    @classmethod
    def for_writing(
        cls, dtype: np.dtype, compression: Compression | None, zarr_format: int = 3
    ) -> CodecPipeline:
        """What oocarr writes: little-endian scalars plus an optional compressor."""
        if compression is None:
            return cls(dtype)
        name = compression.name
        level = DEFAULT_LEVELS[name] if compression.level is None else compression.level
        if name == "blosc":
            v3: dict[str, Any] = {
                "typesize": dtype.itemsize,
                "cname": BLOSC_CNAME,
                "clevel": level,
                "shuffle": "shuffle" if dtype.itemsize > 1 else "noshuffle",
                "blocksize": 0,
            }
            shuffle = _BLOSC_SHUFFLES[v3["shuffle"]]
            codec = numcodecs.Blosc(cname=BLOSC_CNAME, clevel=level, shuffle=shuffle)
            named = NamedCodec("blosc", codec, v3, dtype.itemsize)
        elif name == "zstd":
            named = NamedCodec(
                "zstd", numcodecs.Zstd(level=level), {"level": level, "checksum": False}
            )
        elif name == "gzip":
            named = NamedCodec("gzip", numcodecs.GZip(level=level), {"level": level})
        elif name == "lz4":
            named = NamedCodec("lz4", numcodecs.LZ4(acceleration=level))
        elif name == "zlib":
            named = NamedCodec("zlib", numcodecs.Zlib(level=level))
        else:
            named = NamedCodec("bz2", numcodecs.BZ2(level=level))
        if zarr_format == 2:
            named = NamedCodec(named.codec_id, named.codec, named.codec.get_config())
        elif name in ("lz4", "zlib", "bz2"):
            config = {k: v for k, v in named.codec.get_config().items() if k != "id"}
            named = NamedCodec(f"numcodecs.{name}", named.codec, config)
        return cls(dtype, compressors=(named,))

    @property
    def compression(self) -> str | None:
        """The first compressor in ``create``'s form (``"zstd:3"``, ``"blosc:5"``), or ``None``."""
        for named in self.compressors:
            cid = named.codec_id
            if cid.startswith("crc32") or cid in ("adler32", "fletcher32", "shuffle"):
                continue
            level = getattr(named.codec, "level", None)
            if cid == "blosc":
                level = named.codec.clevel
            elif cid == "lz4":
                level = named.codec.acceleration
            return str(Compression(cid, level if isinstance(level, int) else None))
        return None

    def to_json(self) -> list[dict[str, Any]]:
        """The v3 ``codecs`` list of this pipeline."""
        out: list[dict[str, Any]] = []
        for stage in self.stages:
            if stage.order is not None:
                out.append({"name": "transpose", "configuration": {"order": list(stage.order)}})
            elif stage.codec is not None:  # a stage is one or the other
                out.append(stage.codec.v3_json())
        out.append(_bytes_json(self.dtype, "big" if self.big_endian else "little"))
        out.extend(named.v3_json() for named in self.compressors)
        return out

    def v2_json(self) -> tuple[dict[str, Any] | None, list[dict[str, Any]] | None]:
        """The v2 ``compressor`` and ``filters`` of this pipeline."""
        compressor = self.compressors[0].v2_json() if self.compressors else None
        filters = [f.v2_json() for f in self.filters] or None
        return compressor, filters

    def _serial_dtype(self) -> np.dtype:
        """The dtype of the array the stages hand to serialisation."""
        dtype = self.dtype
        for stage in self.stages:
            if stage.codec is not None:
                dtype = _out_dtype(stage.codec, dtype)
        return dtype

    def _stored_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        for order in self.orders:
            shape = tuple(shape[i] for i in order)
        return shape

    def encode(self, chunk: np.ndarray) -> bytes:
        """Stored bytes of one full-size chunk."""
        arr = chunk
        for stage in self.stages:
            if stage.order is not None:
                arr = arr.transpose(stage.order)
            elif stage.codec is not None:
                shape = arr.shape
                arr = np.asarray(stage.codec.encode(np.ascontiguousarray(arr))).reshape(shape)
        arr = np.ascontiguousarray(arr)
        if self.big_endian and arr.dtype.itemsize > 1:
            arr = arr.astype(arr.dtype.newbyteorder(">"))
        if arr.dtype.kind not in "biufc":  # bfloat16: no buffer-protocol format of its own
            arr = arr.view(f"u{arr.dtype.itemsize}")
        data: Any = arr
        for named in self.filters:
            data = named.encode(data)
        for named in self.compressors:
            data = named.encode(data)
        if isinstance(data, np.ndarray):
            return np.ascontiguousarray(data).tobytes()
        return bytes(data)

    def decode(
        self, data: Any, shape: tuple[int, ...], buffer: np.ndarray | None = None
    ) -> np.ndarray:
        """The chunk of ``shape`` stored as ``data`` (may be a read-only view of ``data``, or
        of ``buffer``: a uint8 scratch array of at least the chunk's bytes that a single
        compressor decodes into, when given; the result then lives only until the buffer's
        next use).

        Raises
        ------
        ValueError
            When the bytes do not decode to a chunk of that shape (corrupt data).
        """
        count = math.prod(shape)
        serial = self._serial_dtype()
        widest = max([serial.itemsize] + [_out_dtype(f, serial).itemsize for f in self.filters])
        limit = count * widest + _SLACK
        last = len(self.compressors) - 1
        into = None
        if buffer is not None and last >= 0 and not self.filters:
            into = buffer.reshape(-1).view(np.uint8)[: count * serial.itemsize]
        for i, named in enumerate(reversed(self.compressors)):
            data = named.decode(data, limit, into if i == last else None)
        for named in reversed(self.filters):
            data = named.decode(data, limit)
        raw = _bytes_view(data) if not isinstance(data, np.ndarray) else data.reshape(-1)
        nbytes = count * serial.itemsize
        if _nbytes(raw) != nbytes:
            raise ValueError(f"decoded chunk has {_nbytes(raw)} bytes, expected {nbytes}")
        stored = serial.newbyteorder(">") if self.big_endian else serial
        if isinstance(raw, np.ndarray):
            arr = raw.view(np.uint8).view(stored)
        else:
            arr = np.frombuffer(raw, dtype=stored)
        if self.big_endian and serial.itemsize > 1:
            arr = arr.astype(serial)
        arr = arr.reshape(self._stored_shape(shape))
        for stage in reversed(self.stages):
            if stage.order is not None:
                arr = arr.transpose(np.argsort(stage.order))
            elif stage.codec is not None:
                current = arr.shape
                arr = np.asarray(stage.codec.decode(np.ascontiguousarray(arr), limit))
                arr = arr.reshape(current)
        if arr.dtype != self.dtype:
            arr = arr.astype(self.dtype)
        return arr


def _bytes_json(dtype: np.dtype, endian: str) -> dict[str, Any]:
    if dtype.itemsize == 1:
        return {"name": "bytes"}
    return {"name": "bytes", "configuration": {"endian": endian}}


def codecs_json(dtype: np.dtype, compression: Compression | None) -> list[dict[str, Any]]:
    """The v3 ``codecs`` oocarr writes for ``dtype`` and ``compression``.

    Examples
    --------
    >>> codecs_json(np.dtype("f4"), Compression("gzip"))[1]
    {'name': 'gzip', 'configuration': {'level': 5}}
    >>> codecs_json(np.dtype("u1"), None)
    [{'name': 'bytes'}]
    """
    return CodecPipeline.for_writing(dtype, compression).to_json()


# ----------------------------------------------------------------------
# Parsing
# ----------------------------------------------------------------------
def _entry(entry: Any, locator: Locator) -> tuple[str, dict[str, Any]]:
    if isinstance(entry, str):
        return entry, {}
    if isinstance(entry, dict) and isinstance(entry.get("name"), str):
        config = entry.get("configuration") or {}
        if isinstance(config, dict):
            return entry["name"], config
    raise corrupt(locator, f"codec entry {entry!r} is malformed")


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


def _unsupported(name: str, locator: Locator, detail: str = "") -> UnsupportedCompressionError:
    return UnsupportedCompressionError(
        f"{locator.full_url} uses the Zarr codec {name!r}{detail}, which oocarr's fsspec driver "
        "does not decode (it reads the codecs numcodecs registers: "
        f"{', '.join(sorted(numcodecs.registry.codec_registry))}); rewrite the array with "
        "one of those, e.g. zarr.create_array(..., compressors=zarr.codecs.ZstdCodec())",
        url=locator.full_url,
    )


def _numcodec(cid: str, config: dict[str, Any], name: str, locator: Locator) -> Codec:
    """numcodecs' codec ``cid`` with ``config``; its errors become the store's."""
    if cid not in numcodecs.registry.codec_registry:
        raise _unsupported(name, locator)
    try:
        return numcodecs.get_codec({**config, "id": cid})
    except (TypeError, ValueError, KeyError) as err:
        raise corrupt(locator, f"the {name} codec's configuration {config!r} ({err})") from None


def _level(config: dict[str, Any], key: str, name: str, locator: Locator, default: int) -> int:
    level = config.get(key, default)
    if isinstance(level, bool) or not isinstance(level, int):
        raise corrupt(locator, f"{name} level {level!r} is not an integer")
    low, high = LEVEL_RANGES[name]
    if not low <= level <= high:
        raise corrupt(locator, f"{name} level {level} is outside {low}..{high}")
    return level


def _v3_codec(name: str, config: dict[str, Any], locator: Locator) -> NamedCodec:
    """A v3 bytes-to-bytes or ``numcodecs.*`` entry as a numcodecs codec."""
    if name == "blosc":
        shuffle = config.get("shuffle", "noshuffle")
        if shuffle not in _BLOSC_SHUFFLES:
            raise corrupt(
                locator, f"blosc shuffle {shuffle!r} is not one of {list(_BLOSC_SHUFFLES)}"
            )
        typesize = config.get("typesize")
        if typesize is not None and (isinstance(typesize, bool) or not isinstance(typesize, int)):
            raise corrupt(locator, f"blosc typesize {typesize!r} is not an integer")
        settings = {
            "cname": config.get("cname", "zstd"),
            "clevel": _level(config, "clevel", "blosc", locator, 5),
            "shuffle": _BLOSC_SHUFFLES[shuffle],
            "blocksize": config.get("blocksize", 0),
        }
        return NamedCodec(name, _numcodec("blosc", settings, name, locator), config, typesize)
    if name == "gzip":
        level = _level(config, "level", "gzip", locator, 5)
        return NamedCodec(name, _numcodec("gzip", {"level": level}, name, locator), config)
    if name == "zstd":
        level = _level(config, "level", "zstd", locator, 0)
        checksum = config.get("checksum", False)
        if not isinstance(checksum, bool):
            raise corrupt(locator, f"zstd checksum {checksum!r} is not true or false")
        codec = _numcodec("zstd", {"level": level, "checksum": checksum}, name, locator)
        return NamedCodec(name, codec, config)
    if name == "crc32c":
        return NamedCodec(name, _numcodec("crc32c", {}, name, locator), config)
    if name.startswith("numcodecs."):
        cid = name[len("numcodecs.") :]
        return NamedCodec(name, _numcodec(cid, dict(config), name, locator), config)
    raise _unsupported(name, locator)


def parse_codecs(entries: Any, dtype: np.dtype, ndim: int, locator: Locator) -> CodecPipeline:
    """Build the pipeline described by a v3 ``codecs`` list (without ``sharding_indexed``).

    Raises
    ------
    InvalidStoreError
        When the list is malformed (no ``bytes`` codec, codecs out of order ...).
    UnsupportedCompressionError
        When a codec is not one numcodecs decodes.

    Examples
    --------
    >>> loc = Locator.make("fsspec", "/a.zarr")
    >>> pipe = parse_codecs([{"name": "bytes"}, {"name": "numcodecs.zlib"}], np.dtype("u1"), 1, loc)
    >>> pipe.compression
    'zlib:1'
    """
    if not isinstance(entries, list):
        raise corrupt(locator, f"codecs {entries!r} is not a list")
    stages: list[Stage] = []
    compressors: list[NamedCodec] = []
    big_endian = None
    for entry in entries:
        name, config = _entry(entry, locator)
        if name == "transpose":
            if big_endian is not None:
                raise corrupt(locator, "the transpose codec comes after the bytes codec")
            stages.append(Stage(order=_order(config, ndim, locator)))
        elif name == "bytes":
            if big_endian is not None:
                raise corrupt(locator, "the codecs list has two array-to-bytes codecs")
            endian = config.get("endian", "little" if dtype.itemsize == 1 else None)
            if endian not in ("little", "big"):
                raise corrupt(locator, f"the bytes codec has endian {endian!r}")
            big_endian = endian == "big" and dtype.itemsize > 1
        elif name == "sharding_indexed":
            raise corrupt(locator, "sharding_indexed is not the array's only codec")
        else:
            named = _v3_codec(name, config, locator)
            if big_endian is None:
                if not name.startswith("numcodecs."):
                    raise corrupt(locator, f"the {name} codec comes before the bytes codec")
                stages.append(Stage(codec=named))
            else:
                compressors.append(named)
    if big_endian is None:
        raise corrupt(locator, "the codecs list has no bytes codec")
    return CodecPipeline(dtype, big_endian, tuple(stages), (), tuple(compressors))


def parse_v2_codecs(
    compressor: Any,
    filters: Any,
    dtype: np.dtype,
    big_endian: bool,
    order: str,
    ndim: int,
    locator: Locator,
) -> CodecPipeline:
    """Build the pipeline of a v2 ``.zarray`` (``compressor``, ``filters``, ``order``).

    Examples
    --------
    >>> loc = Locator.make("fsspec", "/a.zarr")
    >>> pipe = parse_v2_codecs({"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1},
    ...                        None, np.dtype("<f4"), False, "C", 2, loc)
    >>> pipe.compression
    'blosc:5'
    """
    if order not in ("C", "F"):
        raise corrupt(locator, f".zarray order {order!r} is not 'C' or 'F'")
    if filters is not None and not isinstance(filters, list):
        raise corrupt(locator, f".zarray filters {filters!r} is not a list")

    def codec(config: Any) -> NamedCodec:
        if not isinstance(config, dict) or not isinstance(config.get("id"), str):
            raise corrupt(locator, f"codec {config!r} has no 'id'")
        config = dict(config)
        cid = config.pop("id")
        return NamedCodec(cid, _numcodec(cid, config, cid, locator), {"id": cid, **config})

    stages = (Stage(order=tuple(range(ndim))[::-1]),) if order == "F" and ndim > 1 else ()
    named_filters = tuple(codec(f) for f in filters or ())
    compressors = () if compressor is None else (codec(compressor),)
    return CodecPipeline(dtype, big_endian, stages, named_filters, compressors)


def chunk_error(locator: Locator, key: str, err: Exception) -> InvalidStoreError:
    """The error for a chunk that does not decode."""
    return corrupt(locator, f"chunk {key!r} is corrupt ({err})")
