"""Zarr v3 sharding (``sharding_indexed``): the layout of a shard and its index.

A shard is one stored object holding a grid of inner chunks, each encoded
with the shard's own codec pipeline, plus an index of ``(offset, nbytes)``
pairs (``2**64 - 1`` twice for an empty inner chunk) encoded with its
``index_codecs`` (``bytes`` little endian and usually ``crc32c``), at the
start or the end of the shard.  The fsspec driver fetches a shard's index
with one byte-range request and then only the runs of inner chunks a
region needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from oocarr.store import Locator, corrupt
from oocarr_drivers.zarr_codecs import CodecPipeline, parse_codecs

__all__ = ["EMPTY", "ShardLayout", "coalesce", "parse_sharding"]

#: The index entry of an empty inner chunk.
EMPTY = np.uint64(2**64 - 1)
#: Largest gap between two needed inner chunks still fetched in one request.
GAP_BYTES = 0


@dataclass(frozen=True, eq=False)
class ShardLayout:
    """How shards of ``shard_shape`` hold inner chunks of ``chunk_shape``.

    Examples
    --------
    >>> from oocarr.store import Locator
    >>> loc = Locator.make("fsspec", "/a.zarr")
    >>> layout = parse_sharding({"chunk_shape": [2, 2], "codecs": [{"name": "bytes"}],
    ...     "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
    ...     {"name": "crc32c"}]}, (4, 4), np.dtype("u1"), loc)
    >>> layout.per_shard, layout.index_nbytes
    ((2, 2), 68)
    >>> chunks = [np.full((2, 2), i, "u1") for i in range(4)]
    >>> blob = layout.assemble([layout.inner.encode(c) for c in chunks])
    >>> index = layout.decode_index(blob[-layout.index_nbytes:], "c/0/0")
    >>> layout.inner.decode(blob[int(index[3, 0]):][:4], (2, 2)).tolist()
    [[3, 3], [3, 3]]
    """

    shard_shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]
    inner: CodecPipeline
    index: CodecPipeline
    index_at_start: bool
    document: dict[str, Any]

    @cached_property
    def per_shard(self) -> tuple[int, ...]:
        """Inner chunks along each axis of a shard."""
        return tuple(s // c for s, c in zip(self.shard_shape, self.chunk_shape))

    @cached_property
    def count(self) -> int:
        """Inner chunks in one shard."""
        return math.prod(self.per_shard)

    @cached_property
    def index_nbytes(self) -> int:
        """Stored bytes of a shard's index."""
        return len(self.encode_index(np.zeros((self.count, 2), np.uint64)))

    def encode_index(self, entries: np.ndarray) -> bytes:
        return self.index.encode(entries.reshape((*self.per_shard, 2)).astype("<u8"))

    def decode_index(self, data: Any, key: str) -> np.ndarray:
        """The ``(count, 2)`` offsets and sizes stored as ``data``.

        Raises
        ------
        ValueError
            When the index does not decode (wrong size, checksum mismatch).
        """
        if len(data) != self.index_nbytes:
            raise ValueError(
                f"the shard index has {len(data)} bytes, expected {self.index_nbytes} "
                "(a truncated shard?)"
            )
        try:
            entries = self.index.decode(data, (*self.per_shard, 2))
        except ValueError as err:
            raise ValueError(f"the shard index does not decode ({err})") from None
        return np.asarray(entries, dtype=np.uint64).reshape(self.count, 2)

    def check_index(self, entries: np.ndarray, size: int | None) -> None:
        """Raise ``ValueError`` when an entry points outside the shard's data."""
        used = ~((entries[:, 0] == EMPTY) & (entries[:, 1] == EMPTY))
        offsets, sizes = entries[used, 0], entries[used, 1]
        low = self.index_nbytes if self.index_at_start else 0
        if offsets.size and (offsets.min() < low or (offsets + sizes < offsets).any()):
            raise ValueError("the shard index holds an offset inside the index itself")
        if size is not None and offsets.size:
            high = size if self.index_at_start else size - self.index_nbytes
            if (offsets + sizes).max() > high:
                raise ValueError(
                    f"the shard index points past the shard's {high} bytes of chunk data"
                )

    def local(self, index: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
        """The shard holding inner chunk ``index`` and the chunk's place in its index."""
        shard, place = [], 0
        for i, p in zip(index, self.per_shard):
            shard.append(i // p)
            place = place * p + i % p
        return tuple(shard), place

    def assemble(self, blobs: list[bytes | None]) -> bytes:
        """A shard holding ``blobs`` (one per inner chunk in C order, ``None`` when empty)."""
        entries = np.full((self.count, 2), EMPTY, np.uint64)
        offset = self.index_nbytes if self.index_at_start else 0
        for place, blob in enumerate(blobs):
            if blob is not None:
                entries[place] = (offset, len(blob))
                offset += len(blob)
        index = self.encode_index(entries)
        data = b"".join(b for b in blobs if b is not None)
        return index + data if self.index_at_start else data + index

    def to_json(self) -> dict[str, Any]:
        """The ``sharding_indexed`` codec entry."""
        return {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": list(self.chunk_shape),
                "codecs": self.inner.to_json(),
                "index_codecs": self.index.to_json(),
                "index_location": "start" if self.index_at_start else "end",
            },
        }

    @classmethod
    def for_writing(
        cls,
        shard_shape: tuple[int, ...],
        chunk_shape: tuple[int, ...],
        inner: CodecPipeline,
        locator: Locator,
    ) -> ShardLayout:
        """The layout oocarr writes: index at the end, ``bytes`` + ``crc32c``, as zarr-python."""
        index = parse_codecs(
            [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
            np.dtype("<u8"),
            len(shard_shape) + 1,
            locator,
        )
        return cls(tuple(shard_shape), tuple(chunk_shape), inner, index, False, {})


def parse_sharding(
    config: object, shard_shape: tuple[int, ...], dtype: np.dtype, locator: Locator
) -> ShardLayout:
    """The layout a ``sharding_indexed`` configuration describes for shards of ``shard_shape``.

    Raises
    ------
    InvalidStoreError
        When the configuration is malformed (inner chunks that do not divide the shard ...).
    UnsupportedCompressionError
        When an inner or index codec is not one numcodecs decodes.
    """
    if not isinstance(config, dict):
        raise corrupt(locator, f"the sharding configuration {config!r} is not an object")
    chunk_shape = config.get("chunk_shape")
    if (
        not isinstance(chunk_shape, list)
        or len(chunk_shape) != len(shard_shape)
        or not all(isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in chunk_shape)
    ):
        raise corrupt(locator, f"the inner chunk_shape {chunk_shape!r} does not fit the shards")
    if any(s % c for s, c in zip(shard_shape, chunk_shape)):
        raise corrupt(
            locator,
            f"the inner chunk_shape {chunk_shape} does not divide the shard shape "
            f"{list(shard_shape)}",
        )
    location = config.get("index_location", "end")
    if location not in ("start", "end"):
        raise corrupt(locator, f"the shard index_location {location!r} is not start or end")
    codecs = config.get("codecs", [{"name": "bytes", "configuration": {"endian": "little"}}])
    names = (
        [c.get("name") if isinstance(c, dict) else c for c in codecs]
        if isinstance(codecs, list)
        else []
    )
    if "sharding_indexed" in names:
        raise corrupt(locator, "nested sharding (a shard of shards) is not supported")
    inner = parse_codecs(codecs, dtype, len(shard_shape), locator)
    index_codecs = config.get(
        "index_codecs",
        [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
    )
    index = parse_codecs(index_codecs, np.dtype("<u8"), len(shard_shape) + 1, locator)
    if index.compressors and any(not c.codec_id.startswith("crc32") for c in index.compressors):
        raise corrupt(locator, "the shard index is compressed; its size must be fixed")
    return ShardLayout(
        tuple(shard_shape), tuple(chunk_shape), inner, index, location == "start", config
    )


def coalesce(entries: list[tuple[int, int, Any]], gap: int = GAP_BYTES) -> list[list]:
    """Runs of ``(offset, nbytes, tag)`` entries adjacent in the shard (at most ``gap`` bytes
    apart), sorted by offset: each run is one byte-range request.

    Examples
    --------
    >>> [[t for _, _, t in run] for run in coalesce([(10, 5, "b"), (0, 10, "a"), (20, 1, "c")])]
    [['a', 'b'], ['c']]
    """
    runs: list[list] = []
    end = None
    for entry in sorted(entries, key=lambda e: e[0]):
        offset, nbytes, _ = entry
        if runs and end is not None and offset - end <= gap and offset >= end:
            runs[-1].append(entry)
        else:
            runs.append([entry])
        end = offset + nbytes
    return runs
