"""Views: a region of a stored array, addressed by its own locator, sharing the storage.

``x[2:10, 3]`` on a ``DiskArray`` gives a view: no data is copied; reads and
writes go to the base array's region.  A view's locator (driver ``"view"``)
holds the base array's locator and the region, so it pickles, reopens in
other processes and works as a JAX type like any other array.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from oocarr.errors import InvalidArgumentError, InvalidUrlError

from .blocked import BlockedArray
from .compression import Compression
from .locator import Locator
from .regions import parse_key

__all__ = ["RegionView", "key_region", "strided_length", "view_locator"]


def key_region(key: Any, shape: tuple[int, ...]) -> list[list | None]:
    """``[start, stop, kept]`` per axis of ``shape`` for NumPy basic indexing, with a fourth
    entry, the step, on an axis sliced with a step other than 1 (``start`` and ``stop`` as
    ``slice.indices`` gives them), and ``None`` where the key inserts a new axis of length
    one (``None``/``np.newaxis``).

    Examples
    --------
    >>> key_region((slice(2, 5), -1), (10, 4))
    [[2, 5, True], [3, 4, False]]
    >>> key_region((None, Ellipsis, 1, None), (10, 4))
    [None, [0, 10, True], [1, 2, False], None]
    >>> key_region((slice(None, None, -3), 0), (10, 4))
    [[9, -1, True, -3], [0, 1, False]]
    """
    keys = key if isinstance(key, tuple) else (key,)
    if not any(k is None for k in keys):
        if any(isinstance(k, slice) and k.step not in (None, 1) for k in keys):
            return _strided_region(keys, shape)
        sel = parse_key(key, shape)
        return [[b.start, b.stop, not isinstance(p, int)] for b, p in zip(sel.bounds, sel.post)]
    if sum(k is Ellipsis for k in keys) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if Ellipsis in keys:  # ``...`` stands for the axes the other entries, None aside, leave
        at = keys.index(Ellipsis)
        used = sum(k is not None for k in keys) - 1
        keys = keys[:at] + (slice(None),) * max(len(shape) - used, 0) + keys[at + 1 :]
    axes = iter(key_region(tuple(k for k in keys if k is not None), shape))
    region: list[list | None] = [None if k is None else next(axes) for k in keys]
    return region + list(axes)


def _strided_region(keys: tuple, shape: tuple[int, ...]) -> list[list | None]:
    """:func:`key_region` of a key (no ``None``) with a slice of a step other than 1."""
    unit = tuple(slice(None) if isinstance(k, slice) else k for k in keys)
    region = key_region(unit, shape)  # integers, the ellipsis and the axes' order checked
    if Ellipsis in keys:
        at = keys.index(Ellipsis)
        keys = keys[:at] + (slice(None),) * (len(shape) - len(keys) + 1) + keys[at + 1 :]
    for axis, k in enumerate(keys):
        if isinstance(k, slice):
            if k.step == 0:
                raise InvalidArgumentError("slice step cannot be zero")
            start, stop, step = k.indices(shape[axis])
            region[axis] = [start, stop, True] + ([step] if step != 1 else [])
    return region


def strided_length(start: int, stop: int, step: int) -> int:
    """Elements of ``range(start, stop, step)``.

    Examples
    --------
    >>> strided_length(9, -1, -3), strided_length(0, 10, 4)
    (4, 3)
    """
    return len(range(start, stop, step))


def view_locator(base: Locator, shape: tuple[int, ...], key: Any) -> Locator:
    """The locator of ``base[key]`` for NumPy basic indexing with unit steps.

    Examples
    --------
    >>> loc = view_locator(Locator.make("memmap", "/a.npy"), (10, 4), (slice(2, 5), 1))
    >>> loc.driver, loc.driver_kwargs["region"]
    ('view', [[2, 5, True], [1, 2, False]])
    """
    region = key_region(key, shape)
    return Locator.make("view", base.to_json(), "", None, {"region": region})


class RegionView(BlockedArray):
    """A region of another array, read and written in place."""

    name = "view"
    suffixes = ()
    supports_out_buffer = True
    atomic_create = False

    def __init__(self, locator: Locator, base: BlockedArray, region: list, mode: str) -> None:
        self._base = base
        # ``None`` entries are new axes of length one, which the base does not have
        new = tuple(r is None for r in region if r is None or r[2])  # per axis of the view
        self._axes_new = new if any(new) else None
        on_base = [r for r in region if r is not None]
        self._base_region = tuple(slice(r[0], r[1]) for r in on_base)
        self._kept = tuple(r[2] for r in on_base)
        # the step of each base axis (1 unless a slice with another step made it)
        self._steps = tuple(r[3] if len(r) > 3 else 1 for r in on_base)
        self._strided = any(step != 1 for step in self._steps)
        shape = tuple(
            1 if r is None else strided_length(r[0], r[1], r[3] if len(r) > 3 else 1)
            for r in region
            if r is None or r[2]
        )
        chunks: tuple[int, ...] | None = None
        if base.chunks is not None:
            base_chunks = iter(base.chunks)
            kept: list[int] = []
            for r in region:
                c = 1 if r is None else next(base_chunks)
                if r is not None and len(r) > 3:
                    c = max(1, c // abs(r[3]))
                if r is None or r[2]:
                    kept.append(c)
            chunks = tuple(kept)
        super().__init__(locator, shape, base.dtype, chunks, mode=mode)

    @classmethod
    def can_open(cls, container: str, inner: str, storage_options: Any) -> bool:
        return False

    @classmethod
    def _base_locator(cls, locator: Locator) -> Locator:
        try:
            return Locator.from_dict(json.loads(locator.url))
        except (ValueError, KeyError, TypeError) as err:
            raise InvalidUrlError(f"not a view locator: {locator} ({err})") from None

    @classmethod
    def _open(cls, locator: Locator, mode: str) -> RegionView:
        from .registry import get_driver

        base_locator = cls._base_locator(locator)
        base = get_driver(base_locator.driver).open(base_locator, mode)
        return cls(locator, base, locator.driver_kwargs["region"], mode)

    @classmethod
    def _create(
        cls,
        locator: Locator,
        shape: tuple[int, ...],
        dtype: np.dtype,
        chunks: tuple[int, ...] | None,
        compression: Compression | None,
        attrs: dict[str, Any],
        overwrite: bool,
    ) -> BlockedArray:
        raise InvalidArgumentError(
            "a view cannot be created; create the base array and slice it", url=str(locator)
        )

    @classmethod
    def exists(cls, locator: Locator) -> bool:
        from .registry import get_driver

        base = cls._base_locator(locator)
        return get_driver(base.driver).exists(base)

    @classmethod
    def delete(cls, locator: Locator) -> None:
        """Views never delete their base array."""

    def _to_base(self, region: tuple[slice, ...]) -> tuple[slice, ...]:
        if self._axes_new is not None:  # new axes' parts (always 0:1) are not in the base
            region = tuple(part for new, part in zip(self._axes_new, region) if not new)
        parts = iter(region)
        out = []
        for base_slice, keep, step in zip(self._base_region, self._kept, self._steps):
            if not keep:
                out.append(base_slice)
                continue
            r = next(parts)
            if step == 1:
                out.append(slice(base_slice.start + r.start, base_slice.start + r.stop))
            elif r.stop <= r.start:
                out.append(slice(base_slice.start, base_slice.start))
            else:  # the range covering the selected elements, read whole and then strided
                first = base_slice.start + step * r.start
                last = base_slice.start + step * (r.stop - 1)
                out.append(slice(min(first, last), max(first, last) + 1))
        return tuple(out)

    def _pick(self) -> tuple[slice, ...]:
        """What to take of a covering block read by :meth:`_to_base`: every ``step``-th
        element, from its end for a negative step."""
        return tuple(slice(None, None, step) for step in self._steps)

    def read_overhead(self, shape: Sequence[int]) -> int:
        """A strided view reads the range covering a region whole before taking every
        ``step``-th element: those bytes, and the base's own overhead for them."""
        if not self._strided:
            return self._base.read_overhead(self._base_shape_of(shape))
        covering = self._base_shape_of(shape)
        return int(np.prod(covering)) * self.dtype.itemsize + self._base.read_overhead(covering)

    def _base_shape_of(self, shape: Sequence[int]) -> tuple[int, ...]:
        return self._base_shape(tuple(slice(0, n) for n in shape))

    def _base_shape(self, region: tuple[slice, ...]) -> tuple[int, ...]:
        return tuple(r.stop - r.start for r in self._to_base(region))

    def _read(self, region: tuple[slice, ...], out: np.ndarray) -> None:
        if self._strided:
            covering = self._base.read_region(self._to_base(region))
            out[...] = covering[self._pick()].reshape(out.shape)
            return
        self._base.read_region(self._to_base(region), out=out.reshape(self._base_shape(region)))

    def _view(self, region: tuple[slice, ...]) -> np.ndarray | None:
        if self._strided:
            return None
        view = self._base._view(self._to_base(region))
        return None if view is None else view.reshape(tuple(r.stop - r.start for r in region))

    def _write(self, region: tuple[slice, ...], value: np.ndarray) -> None:
        if self._strided:
            raise InvalidArgumentError(
                f"{self.url} is a strided view (a slice with a step other than 1); write "
                "through a unit-step view or to the base array",
                url=self.url,
            )
        self._base.write_region(self._to_base(region), value.reshape(self._base_shape(region)))

    def _read_attrs(self) -> dict[str, Any]:
        return self._base.attrs

    def _write_attrs(self, attrs: dict[str, Any]) -> None:
        raise InvalidArgumentError(
            f"{self.url} is a view; set attrs on the array it views", url=self.url
        )

    def _flush(self) -> None:
        self._base.flush()

    def _release(self) -> None:
        self._base.close()

    @property
    def compression(self) -> str | None:
        return self._base.compression
