"""Decompression that stops at the size a chunk must have: a small stored chunk that inflates
to gigabytes (a decompression bomb, or a corrupt file) costs at most one chunk of memory.

Every decoder here is handed the chunk's expected size and raises ``ValueError`` as soon as
the output would exceed it, or when the stream is corrupt (whichever zlib implementation is
in use); the caller turns that into its corrupt-chunk error.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np
import zstandard
from numcodecs import blosc as _blosc
from numcodecs import zstd as _zstd

zlib_impl: ModuleType  # ISA-L's zlib-compatible inflate where it is installed, else zlib
try:
    from isal import isal_zlib

    zlib_impl = isal_zlib
except ImportError:  # pragma: no cover - isal has wheels for the common platforms
    import zlib

    zlib_impl = zlib

__all__ = ["inflate", "gunzip", "unblosc", "unzstd"]

#: Bytes a zstd frame of unstated size is decoded in at a time.
PIECE_BYTES = 4 * 2**20
#: Bytes of a Blosc frame's header.
BLOSC_HEADER = 16
# numcodecs < 0.16 names it without the underscore
_cbuffer_sizes = getattr(_blosc, "cbuffer_sizes", None) or _blosc._cbuffer_sizes
#: ``wbits`` of a zlib stream (HDF5's deflate filter) and of a gzip member (Zarr's gzip codec).
ZLIB_WBITS, GZIP_WBITS = 15, 31


def _inflate(data: bytes, limit: int, wbits: int, members: bool) -> bytes:
    parts: list[bytes] = []
    size = 0
    while True:
        decoder = zlib_impl.decompressobj(wbits)
        try:
            # one byte more than allowed tells an oversized stream from one of exactly ``limit``
            out = decoder.decompress(data, limit - size + 1)
        except zlib_impl.error as err:  # isal's IsalError is no zlib.error
            raise ValueError(f"the compressed stream is corrupt ({err})") from None
        size += len(out)
        if size > limit or decoder.unconsumed_tail:
            raise ValueError(f"it decompresses to more than the {limit} bytes a chunk holds")
        parts.append(out)
        if not decoder.eof:
            raise ValueError("the compressed stream ends early")
        data = decoder.unused_data
        if not (members and data):
            return b"".join(parts)


def inflate(data: bytes, limit: int) -> bytes:
    """A zlib stream (HDF5's deflate filter) decompressed, at most ``limit`` bytes.

    Examples
    --------
    >>> import zlib
    >>> inflate(zlib.compress(bytes(10)), 10) == bytes(10)
    True
    >>> inflate(zlib.compress(bytes(11)), 10)
    Traceback (most recent call last):
    ...
    ValueError: it decompresses to more than the 10 bytes a chunk holds
    """
    return _inflate(data, limit, ZLIB_WBITS, members=False)


def gunzip(data: bytes, limit: int) -> bytes:
    """Gzip data (one or more members, as ``gzip.decompress`` reads) decompressed, at most
    ``limit`` bytes.

    Examples
    --------
    >>> import gzip
    >>> gunzip(gzip.compress(b"ab") + gzip.compress(b"c"), 3)
    b'abc'
    """
    return _inflate(data, limit, GZIP_WBITS, members=True)


def unzstd(
    data: bytes | memoryview, limit: int, out: np.ndarray | None = None
) -> bytes | np.ndarray:
    """A zstd frame decompressed, at most ``limit`` bytes, whether or not its header states
    its content size (zstandard trusts a stated size over ``max_output_size``); into ``out``
    (uint8) when the frame states exactly its size.  Into a reused buffer, numcodecs decodes
    a 4 MiB chunk of a 4 GiB float32 plane at 5.6 GiB/s a thread; into a fresh one, page
    faults bring that to 0.6 GiB/s.

    Examples
    --------
    >>> c = zstandard.ZstdCompressor(write_content_size=True)
    >>> unzstd(c.compress(bytes(8)), 8) == bytes(8)
    True
    >>> unzstd(c.compress(bytes(9)), 8)
    Traceback (most recent call last):
    ...
    ValueError: it decompresses to more than the 8 bytes a chunk holds
    >>> unsized = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(100))
    >>> len(unzstd(unsized, 2**40))  # without allocating 2**40 bytes first
    100
    """
    try:
        stated = zstandard.frame_content_size(data)
        if stated > limit:
            raise ValueError(f"it decompresses to more than the {limit} bytes a chunk holds")
        if stated >= 0 and out is not None and out.nbytes == stated:
            try:
                _zstd.decompress(data, out)
            except RuntimeError as err:
                raise ValueError(f"the zstd frame is corrupt ({err})") from None
            return out
        if stated >= 0:  # zstandard allocates exactly the stated size, at most ``limit``
            decoded = zstandard.ZstdDecompressor().decompress(data, max_output_size=limit + 1)
        else:  # decompress() would allocate all of max_output_size up front
            decoded = _unzstd_pieces(data, limit)
    except zstandard.ZstdError as err:
        raise ValueError(f"the zstd frame is corrupt ({err})") from None
    if len(decoded) > limit:
        raise ValueError(f"it decompresses to more than the {limit} bytes a chunk holds")
    return decoded


def _unzstd_pieces(data: bytes | memoryview, limit: int) -> bytes:
    """A frame of unstated size decoded a piece at a time, stopping one byte past ``limit``."""
    reader = zstandard.ZstdDecompressor().stream_reader(data)
    parts: list[bytes] = []
    size = 0
    while size <= limit:
        piece = reader.read(min(limit + 1 - size, PIECE_BYTES))
        if not piece:
            break
        parts.append(piece)
        size += len(piece)
    return b"".join(parts)


def unblosc(data: bytes | memoryview, limit: int, out: np.ndarray | None = None) -> np.ndarray:
    """A Blosc frame (a Zarr ``blosc`` chunk, an HDF5 Blosc filter's chunk) decompressed
    through numcodecs, refused before any allocation when its header claims more than
    ``limit`` bytes or more stored bytes than it has; into ``out`` (uint8) when the frame
    decodes to exactly its size.

    Examples
    --------
    >>> frame = _blosc.compress(bytes(range(100)), b"lz4", 5, _blosc.SHUFFLE, 4)
    >>> unblosc(frame, 100).tobytes() == bytes(range(100))
    True
    >>> unblosc(frame, 99)
    Traceback (most recent call last):
    ...
    ValueError: its Blosc header claims 100 bytes, more than the 99 a chunk holds
    """
    if len(data) < BLOSC_HEADER:
        raise ValueError(f"it holds {len(data)} bytes, less than a Blosc header")
    nbytes, cbytes, _blocksize = _cbuffer_sizes(data)
    if nbytes > limit:
        raise ValueError(
            f"its Blosc header claims {nbytes} bytes, more than the {limit} a chunk holds"
        )
    if cbytes > len(data) or cbytes < BLOSC_HEADER:
        raise ValueError(f"its Blosc header claims {cbytes} stored bytes, but it has {len(data)}")
    if out is None or out.nbytes != nbytes:
        out = np.empty(nbytes, np.uint8)
    try:
        _blosc.decompress(data, out)
    except (RuntimeError, ValueError) as err:
        raise ValueError(f"the Blosc frame is corrupt ({err})") from None
    return out
