"""Block-shape arithmetic shared by page shapes, default chunks and copy tiles.

Everything here is pure shape math on tuples: no I/O and no driver.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = [
    "DEFAULT_PAGE_BYTES",
    "DEFAULT_CHUNK_BYTES",
    "grow_block",
    "grid_shape",
    "block_region",
    "region_shape",
    "common_block",
]

#: Target size of one page when neither the caller nor the planner picks one.
DEFAULT_PAGE_BYTES = 8 * 2**20
#: Target size of one storage chunk when ``create`` is not given ``chunks``.
DEFAULT_CHUNK_BYTES = 2**20


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
