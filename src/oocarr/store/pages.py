"""Block-shape arithmetic shared by page shapes, default chunks and copy tiles.

Everything here is pure shape math on tuples: no I/O and no driver.
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Iterator, Sequence

from oocarr.errors import InvalidStoreError, OocarrError

__all__ = [
    "DEFAULT_PAGE_BYTES",
    "DEFAULT_CHUNK_BYTES",
    "MAX_NBYTES",
    "MAX_NDIM",
    "check_layout",
    "grid_indices",
    "grow_block",
    "grid_shape",
    "block_region",
    "tile_regions",
    "region_shape",
    "common_block",
]

#: Target size of one page when neither the caller nor the planner picks one.
DEFAULT_PAGE_BYTES = 8 * 2**20
#: Target size of one storage chunk when ``create`` is not given ``chunks``.
DEFAULT_CHUNK_BYTES = 2**20
#: Largest logical size of an array, and of one chunk: what a signed 64-bit count holds.
MAX_NBYTES = 2**63 - 1
#: Most axes an array may have (NumPy's own limit).
MAX_NDIM = 64
#: Axes of a grid with at most this many blocks are handed to ``itertools.product`` whole.
_SMALL_AXIS = 2**16


def grow_block(
    shape: Sequence[int],
    itemsize: int,
    target_bytes: int,
    base: Sequence[int] | None = None,
    *,
    first_axis_first: bool = False,
) -> tuple[int, ...]:
    """Grow a block from ``base`` in whole multiples, last axis first, up to ``target_bytes``.

    The result spans whole trailing axes where it can, so a block of a
    C-ordered contiguous array is one contiguous run of bytes, and each of
    its sides is a multiple of ``base`` (or the whole axis), so a block of a
    chunked array is made of whole chunks.  No side is smaller than the
    corresponding side of ``base`` (clipped to the axis) or than 1.

    Parameters
    ----------
    shape : sequence of int
        Shape of the array.
    itemsize : int
        Bytes per element.
    target_bytes : int
        Largest block wanted, in bytes; one ``base`` block is kept even
        when it alone is larger.
    base : sequence of int, optional
        The unit to grow in (the storage chunks); all ones by default.
    first_axis_first : bool
        Grow the first axis first instead: every chunk of the block is then
        one contiguous run of the block's memory, which HDF5 and Zarr read
        without a second copy (for blocks that are reduced, not written).

    Examples
    --------
    >>> grow_block((1000, 512), 4, 2**20)
    (512, 512)
    >>> grow_block((1000, 512), 4, 2**20, base=(100, 100))
    (500, 512)
    >>> grow_block((1000, 512), 4, 2**20, base=(100, 100), first_axis_first=True)
    (1000, 200)
    >>> grow_block((1000, 512), 4, 280_000, base=(100, 100), first_axis_first=True)
    (500, 100)
    >>> grow_block((2048, 8192), 4, 30 * 2**20, base=(1024, 1024), first_axis_first=True)
    (2048, 2048)
    >>> grow_block((), 8, 1024)
    ()
    """
    shape = tuple(int(s) for s in shape)
    base = tuple(1 for _ in shape) if base is None else tuple(int(b) for b in base)
    block = [max(1, min(b, s)) for b, s in zip(base, shape)]
    budget = max(1, target_bytes // max(1, itemsize))
    axes = range(len(shape))
    for axis in axes if first_axis_first else reversed(axes):
        rest = math.prod(block) // block[axis]
        unit = block[axis]
        full = max(1, shape[axis])
        if rest * full <= budget:
            block[axis] = full
            continue
        multiples = max(1, budget // (rest * unit))
        if first_axis_first:  # blocks along the axis all of one size: no edge padding
            units = -(-full // unit)
            even = _largest_divisor(units, multiples)
            if 2 * even >= multiples:  # a side that divides the axis, at most halving the block
                multiples = even
            else:  # as many blocks, of as equal sizes as whole units allow
                parts = -(-units // multiples)
                multiples = -(-units // parts)
        block[axis] = min(full, unit * multiples)
        break
    return tuple(block)


def _largest_divisor(n: int, most: int) -> int:
    """The largest divisor of ``n`` that is at most ``most`` (1 at least)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return max(d for d in (*small, *(n // d for d in small)) if d <= max(1, most))


def grid_shape(shape: Sequence[int], block: Sequence[int]) -> tuple[int, ...]:
    """Number of blocks along each axis (edge blocks may be smaller).

    Examples
    --------
    >>> grid_shape((10, 0, 7), (4, 1, 7))
    (3, 0, 1)
    """
    return tuple(-(-int(s) // int(b)) for s, b in zip(shape, block))


def block_region(
    index: Sequence[int], block: Sequence[int], shape: Sequence[int]
) -> tuple[slice, ...]:
    """The slices of the array covered by block ``index``.

    Examples
    --------
    >>> block_region((2, 0), (4, 7), (10, 7))
    (slice(8, 10, None), slice(0, 7, None))
    """
    return tuple(slice(i * b, min((i + 1) * b, s)) for i, b, s in zip(index, block, shape))


def tile_regions(shape: Sequence[int], tile: Sequence[int]) -> Iterator[tuple[slice, ...]]:
    """The regions of an array of ``shape`` cut in ``tile``s, in C order (none when it has no
    elements, ``()`` alone for a 0-d one).

    Examples
    --------
    >>> [r[0] for r in tile_regions((5,), (2,))]
    [slice(0, 2, None), slice(2, 4, None), slice(4, 5, None)]
    """
    if 0 in tuple(shape):
        return
    for index in grid_indices(grid_shape(shape, tile)):
        yield block_region(index, tile, shape)


def region_shape(region: Sequence[slice]) -> tuple[int, ...]:
    """Shape of a region of unit-step slices with explicit bounds.

    Examples
    --------
    >>> region_shape((slice(2, 5), slice(0, 0)))
    (3, 0)
    """
    return tuple(r.stop - r.start for r in region)


def common_block(
    shape: Sequence[int],
    itemsize: int,
    target_bytes: int,
    *chunk_shapes: Sequence[int] | None,
) -> tuple[int, ...]:
    """A block made of whole chunks of every given chunk shape, when one fits.

    Used to copy between two chunked arrays without cutting chunks on
    either side; falls back to the first chunk shape given when their
    least common multiple is larger than ``target_bytes``.

    Examples
    --------
    >>> common_block((100, 100), 4, 10**6, (10, 100), (4, 100))
    (100, 100)
    >>> common_block((1000, 1000), 4, 40_000, (10, 1000), (4, 1000))
    (10, 1000)
    """
    given = [tuple(c) for c in chunk_shapes if c is not None]
    if not given:
        return grow_block(shape, itemsize, target_bytes)
    lcm = tuple(
        min(max(1, s), math.lcm(*(max(1, c[i]) for c in given))) for i, s in enumerate(shape)
    )
    if math.prod(lcm) * itemsize <= target_bytes:
        return grow_block(shape, itemsize, target_bytes, base=lcm)
    return grow_block(shape, itemsize, target_bytes, base=given[0])


def check_layout(
    shape: Sequence[int],
    itemsize: int,
    chunks: Sequence[int] | None,
    url: str,
    *,
    error: type[OocarrError] = InvalidStoreError,
) -> None:
    """Refuse a shape or chunk shape no array can have: negative lengths, more than
    :data:`MAX_NDIM` axes, zero-length chunks, or a size in bytes (of the array or of one
    chunk) over :data:`MAX_NBYTES`.

    Parameters
    ----------
    shape, chunks : sequence of int
        The array's shape and its storage chunks (``None`` for contiguous).
    itemsize : int
        Bytes per element.
    url : str
        Named in the error.
    error : type
        Raised on failure: :class:`~oocarr.errors.InvalidStoreError` for metadata read
        from storage (the default), ``InvalidArgumentError`` for a caller's arguments.

    Examples
    --------
    >>> check_layout((10, 3), 4, (5, 3), "a.zarr")
    >>> try:
    ...     check_layout((2**62,), 4, None, "a.zarr")
    ... except InvalidStoreError as err:
    ...     print(str(err)[:61])
    a.zarr claims shape (4611686018427387904,) of 4-byte elements
    """
    problem = _shape_problem(shape, itemsize, "shape") or (
        None if chunks is None else _shape_problem(chunks, itemsize, "chunk shape", 1)
    )
    if chunks is not None and problem is None and len(chunks) != len(shape):
        problem = f"chunk shape {tuple(chunks)} for shape {tuple(shape)}"
    if problem is None:
        return
    if issubclass(error, InvalidStoreError):
        raise error(f"{url} claims {problem}; the metadata is corrupt: recreate the array", url=url)
    raise error(f"{url} cannot have {problem}; pass a shape and chunks an array can have", url=url)


def _shape_problem(shape: Sequence[int], itemsize: int, what: str, least: int = 0) -> str | None:
    shape = tuple(shape)
    if len(shape) > MAX_NDIM:
        return f"a {what} of {len(shape)} axes, more than the {MAX_NDIM} an array may have"
    if any(isinstance(n, bool) or not isinstance(n, numbers.Integral) for n in shape):
        return f"{what} {shape!r}, which is not a tuple of integers"
    if any(n < least for n in shape):
        return f"{what} {shape}, with a length under {least}"
    nbytes = math.prod(int(n) for n in shape) * itemsize
    if nbytes > MAX_NBYTES:
        return (
            f"{what} {tuple(int(n) for n in shape)} of {itemsize}-byte elements: {nbytes} bytes, "
            f"over the {MAX_NBYTES} an array may hold"
        )
    return None


def grid_indices(grid: Sequence[int]) -> Iterator[tuple[int, ...]]:
    """Every index of a grid of ``grid`` blocks, in C order, without building any axis whole.

    ``itertools.product`` turns each of its ranges into a tuple first, which for a grid of
    2**40 blocks along one axis is a ``MemoryError``; here long leading axes are walked one
    index at a time and only short trailing axes go to ``itertools.product``.

    Examples
    --------
    >>> list(grid_indices((2, 2)))
    [(0, 0), (0, 1), (1, 0), (1, 1)]
    >>> list(grid_indices(())), list(grid_indices((3, 0)))
    ([()], [])
    >>> next(grid_indices((2**62, 3)))
    (0, 0)
    """
    grid = tuple(int(n) for n in grid)
    if any(n <= 0 for n in grid):
        return iter(())
    split = len(grid)
    while split > 0 and grid[split - 1] <= _SMALL_AXIS:
        split -= 1
    inner = grid[split:]
    if split == 0:
        return itertools.product(*(range(n) for n in inner))
    return _walk(grid[:split], inner)


def _walk(outer: tuple[int, ...], inner: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    if not outer:
        yield from itertools.product(*(range(n) for n in inner))
        return
    for i in range(outer[0]):
        for rest in _walk(outer[1:], inner):
            yield (i, *rest)
