"""Turning NumPy basic-index keys and user regions into validated unit-step regions."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from oocarr.errors import InvalidArgumentError

__all__ = ["Selection", "parse_key", "check_region", "broadcast_region"]


@dataclass(frozen=True)
class Selection:
    """A basic-index key resolved against a shape.

    ``bounds`` is the smallest unit-step region holding every selected
    element; ``post`` is the key that picks the selection out of an array
    holding that region (steps and dropped integer axes), and ``shape`` is
    the selection's NumPy result shape.
    """

    bounds: tuple[slice, ...]
    post: tuple[Any, ...]
    shape: tuple[int, ...]

    @property
    def is_contiguous(self) -> bool:
        """True when the selection is exactly ``bounds`` (no steps, no reversal)."""
        return all(isinstance(p, int) or p == slice(None) for p in self.post)


def _as_index(obj: Any, what: str) -> int:
    try:
        return operator.index(obj)
    except TypeError:
        raise InvalidArgumentError(
            f"{what} must be an integer, a slice or '...', got {obj!r}; "
            "oocarr arrays take NumPy basic indexing only (no fancy or boolean indexing)"
        ) from None


def parse_key(key: Any, shape: Sequence[int]) -> Selection:
    """Resolve a NumPy basic-indexing key (ints, slices, ``...``) against ``shape``.

    Raises
    ------
    InvalidArgumentError
        For fancy, boolean or ``None`` indices.
    IndexError
        For an integer out of range, as NumPy does.

    Examples
    --------
    >>> sel = parse_key((1, slice(None, None, 2)), (3, 5))
    >>> sel.bounds, sel.shape
    ((slice(1, 2, None), slice(0, 5, None)), (3,))
    """
    if not isinstance(key, tuple):
        key = (key,)
    n_ellipsis = sum(k is Ellipsis for k in key)
    if n_ellipsis > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if n_ellipsis:
        at = next(i for i, k in enumerate(key) if k is Ellipsis)
        fill = len(shape) - (len(key) - 1)
        key = key[:at] + (slice(None),) * max(fill, 0) + key[at + 1 :]
    if len(key) > len(shape):
        raise IndexError(
            f"too many indices: array is {len(shape)}-dimensional, but {len(key)} were indexed"
        )
    key = key + (slice(None),) * (len(shape) - len(key))
    bounds: list[slice] = []
    post: list[Any] = []
    out_shape: list[int] = []
    for axis, (k, n) in enumerate(zip(key, shape)):
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            count = len(range(start, stop, step))
            if count == 0:
                bounds.append(slice(0, 0))
                post.append(slice(None))
            elif step > 0:
                last = start + (count - 1) * step
                bounds.append(slice(start, last + 1))
                post.append(slice(None) if step == 1 else slice(None, None, step))
            else:
                last = start + (count - 1) * step
                bounds.append(slice(last, start + 1))
                post.append(slice(None, None, step))
            out_shape.append(count)
        else:
            i = _as_index(k, f"index on axis {axis}")
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
            i %= n
            bounds.append(slice(i, i + 1))
            post.append(0)
    return Selection(tuple(bounds), tuple(post), tuple(out_shape))


def check_region(region: Sequence[Any] | None, shape: Sequence[int], url: str) -> tuple[slice, ...]:
    """Validate a region of unit-step slices and give it explicit bounds.

    ``None`` means the whole array; ``slice(None)`` entries are filled in.

    Examples
    --------
    >>> check_region((slice(None), slice(2, 4)), (3, 5), "a.npy")
    (slice(0, 3, None), slice(2, 4, None))
    """
    if region is None:
        return tuple(slice(0, int(n)) for n in shape)
    region = tuple(region)
    if len(region) != len(shape):
        raise InvalidArgumentError(
            f"region {region!r} has {len(region)} axes but {url} has {len(shape)}; "
            "give one slice per axis",
            url=url,
        )
    out = []
    for axis, (r, n) in enumerate(zip(region, shape)):
        if not isinstance(r, slice) or r.step not in (None, 1):
            raise InvalidArgumentError(
                f"region axis {axis} of {url} must be a unit-step slice, got {r!r}", url=url
            )
        start = 0 if r.start is None else _as_index(r.start, "region start")
        stop = int(n) if r.stop is None else _as_index(r.stop, "region stop")
        if not 0 <= start <= stop <= n:
            raise InvalidArgumentError(
                f"region {start}:{stop} on axis {axis} is outside {url}'s extent {n}", url=url
            )
        out.append(slice(start, stop))
    return tuple(out)


def broadcast_region(out_region: Sequence[slice], in_shape: Sequence[int]) -> tuple[slice, ...]:
    """The region of an input of ``in_shape`` that NumPy broadcasting pairs with ``out_region``
    of the output: axes of length 1 give ``slice(0, 1)``, missing leading axes are dropped.

    Examples
    --------
    >>> broadcast_region((slice(2, 4), slice(0, 3)), (1, 5))
    (slice(0, 1, None), slice(0, 3, None))
    >>> broadcast_region((slice(2, 4), slice(0, 3)), (5,))
    (slice(0, 3, None),)
    """
    offset = len(out_region) - len(in_shape)
    return tuple(
        slice(0, 1) if n == 1 else out_region[axis + offset] for axis, n in enumerate(in_shape)
    )
