"""Reading part of an uncompressed, C-ordered chunk file without reading the whole chunk.

A region of such a file is a set of contiguous byte runs; each is read with ``pread`` straight
into the caller's buffer.  Nothing the size of a chunk is held, so a chunk larger than the
memory budget streams within it (issue 14: "read sub-chunk regions where the format allows").
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from types import EllipsisType

import numpy as np

__all__ = ["read_chunk_region", "read_chunk_slabs"]


def _split_axis(chunk: Sequence[int], region: Sequence[slice], target: np.ndarray) -> int:
    """The outermost axis from which ``region`` is one contiguous run in the file and in
    ``target``: every later axis is whole in the chunk, and ``target`` is C-contiguous there."""
    axis = max(len(chunk) - 1, 0)
    while axis > 0:
        inner = region[axis]
        if inner.start != 0 or inner.stop != chunk[axis]:
            break
        candidate = axis - 1
        index = (0,) * candidate
        key: tuple[int | EllipsisType, ...] = (*index, ...)
        if not target[key].flags.c_contiguous:
            break
        axis = candidate
    return axis


def _runs(
    chunk: Sequence[int], region: Sequence[slice], axis: int
) -> Iterator[tuple[tuple[int, ...], int]]:
    """``(outer index in the region, element offset in the chunk)`` of each run."""
    strides = [math.prod(chunk[i + 1 :]) for i in range(len(chunk))]
    outer = [range(s.stop - s.start) for s in region[:axis]]
    base = sum(s.start * st for s, st in zip(region, strides))
    for index in np.ndindex(*(len(r) for r in outer)):
        yield index, base + sum(i * st for i, st in zip(index, strides))


def _pread_into(fd: int, view: memoryview, offset: int, path: str) -> None:
    done = 0
    while done < len(view):
        got = os.preadv(fd, [view[done:]], offset + done)
        if not got:
            raise ValueError(f"the chunk file {path} ended early")
        done += got


def read_chunk_region(
    path: str,
    chunk: Sequence[int],
    dtype: np.dtype,
    region: Sequence[slice],
    target: np.ndarray,
) -> bool:
    """Read ``region`` of the uncompressed C-ordered chunk file at ``path`` into ``target``.

    Parameters
    ----------
    path : str
        The chunk file: ``prod(chunk) * itemsize`` bytes, C order.
    chunk : sequence of int
        The chunk's shape.
    dtype : numpy.dtype
        The stored dtype (the file's byte order).
    region : sequence of slice
        Bounded, step-1 slices within ``chunk``.
    target : numpy.ndarray
        Where the values go; its shape is the region's (any strides).

    Returns
    -------
    bool
        False when there is no file at ``path`` (the chunk was never written).

    Raises
    ------
    ValueError
        When the file does not hold exactly one chunk.

    Examples
    --------
    >>> import tempfile, os, numpy as np
    >>> path = os.path.join(tempfile.mkdtemp(), "c")
    >>> np.arange(12, dtype="<i4").tofile(path)
    >>> out = np.zeros((2, 2), "<i4")
    >>> read_chunk_region(path, (3, 4), np.dtype("<i4"), (slice(1, 3), slice(1, 3)), out)
    True
    >>> out.tolist()
    [[5, 6], [9, 10]]
    """
    itemsize = dtype.itemsize
    fd = _open_chunk(path, math.prod(chunk) * itemsize)
    if fd is None:
        return False
    try:
        if target.size == 0:
            return True
        axis = _split_axis(chunk, region, target)
        run_shape = target.shape[axis:]
        bounce = None
        direct = target.dtype == dtype
        for index, offset in _runs(chunk, region, axis):
            key: tuple[int | EllipsisType, ...] = (*index, ...)
            piece = target[key]
            if direct and piece.flags.c_contiguous:
                view = memoryview(piece.reshape(-1).view(np.uint8))  # type: ignore[arg-type]  # numpy's ndarray has __buffer__ in its stubs from Python 3.12
                _pread_into(fd, view, offset * itemsize, path)
                continue
            if bounce is None:  # strided or converted: one run at a time through a small buffer
                bounce = np.empty(run_shape, dtype)
            view = memoryview(bounce.reshape(-1).view(np.uint8))  # type: ignore[arg-type]  # numpy's ndarray has __buffer__ in its stubs from Python 3.12
            _pread_into(fd, view, offset * itemsize, path)
            piece[...] = bounce
    finally:
        os.close(fd)
    return True


def _open_chunk(path: str, expected: int) -> int | None:
    """A descriptor of the chunk file at ``path`` (``None`` when there is none), checked to
    hold ``expected`` bytes (``ValueError`` otherwise)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    size = os.fstat(fd).st_size
    if size != expected:
        os.close(fd)
        raise ValueError(f"the chunk file has {size} bytes, expected {expected}")
    return fd


def read_chunk_slabs(
    path: str,
    chunk: Sequence[int],
    dtype: np.dtype,
    region: Sequence[slice],
    target: np.ndarray,
    buffer: np.ndarray,
) -> bool:
    """Fill ``target`` with ``region`` of the uncompressed C-ordered chunk file at ``path``,
    read in slabs of whole rows (first-axis slices) through ``buffer`` (uint8, at least one
    row): a few large reads and copies where :func:`read_chunk_region` would make one small
    read per run (a 64³ uint16 chunk: 4096 runs of 128 bytes).  False when there is no file.

    Raises
    ------
    ValueError
        When the file does not hold exactly one chunk's bytes.

    Examples
    --------
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "c")
    >>> np.arange(24, dtype="<u2").tofile(path)
    >>> out = np.zeros((2, 2), "<u2")
    >>> read_chunk_slabs(path, (3, 8), np.dtype("<u2"), (slice(1, 3), slice(2, 4)), out,
    ...                  np.empty(16, np.uint8))
    True
    >>> out.tolist()
    [[10, 11], [18, 19]]
    """
    row = math.prod(chunk[1:]) * dtype.itemsize
    rows = max(1, buffer.nbytes // max(1, row))
    fd = _open_chunk(path, math.prod(chunk) * dtype.itemsize)
    if fd is None:
        return False
    try:
        first = region[0]
        for start in range(first.start, first.stop, rows):
            stop = min(start + rows, first.stop)
            view = buffer[: (stop - start) * row]
            if os.preadv(fd, [view], start * row) != view.nbytes:  # type: ignore[list-item]  # (as above)
                raise ValueError("the chunk file ended early")
            slab = view.view(dtype).reshape((stop - start, *chunk[1:]))
            target[start - first.start : stop - first.start] = slab[(slice(None), *region[1:])]
    finally:
        os.close(fd)
    return True
