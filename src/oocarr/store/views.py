"""Views: a region of a stored array, addressed by its own locator, sharing the storage.

``x[2:10, 3]`` on a ``DiskArray`` gives a view: no data is copied; reads and
writes go to the base array's region.  A view's locator (driver ``"view"``)
holds the base array's locator and the region, so it pickles, reopens in
other processes and works as a JAX type like any other array.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from oocarr.errors import InvalidArgumentError, InvalidUrlError

from .blocked import BlockedArray
from .locator import Locator
from .regions import parse_key

__all__ = ["RegionView", "key_region", "view_locator"]


def key_region(key: Any, shape: tuple[int, ...]) -> list[list]:
    """``[start, stop, kept]`` per axis of ``shape`` for NumPy basic indexing with unit steps.

    Examples
    --------
    >>> key_region((slice(2, 5), -1), (10, 4))
    [[2, 5, True], [3, 4, False]]
    """
    sel = parse_key(key, shape)
    keys = key if isinstance(key, tuple) else (key,)
    if any(isinstance(k, slice) and k.step not in (None, 1) for k in keys):
        raise InvalidArgumentError(
            f"views take integers and unit-step slices, not {key!r}; read a strided selection "
            "with x.store[key]"
        )
    return [[b.start, b.stop, not isinstance(p, int)] for b, p in zip(sel.bounds, sel.post)]


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
        self._base_region = tuple(slice(start, stop) for start, stop, _ in region)
        self._kept = tuple(keep for _, _, keep in region)
        shape = tuple(stop - start for start, stop, keep in region if keep)
        chunks = None
        if base.chunks is not None:
            chunks = tuple(c for c, keep in zip(base.chunks, self._kept) if keep)
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
    def _create(cls, locator, shape, dtype, chunks, compression, attrs, overwrite):
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
        parts = iter(region)
        out = []
        for base_slice, keep in zip(self._base_region, self._kept):
            if keep:
                r = next(parts)
                out.append(slice(base_slice.start + r.start, base_slice.start + r.stop))
            else:
                out.append(base_slice)
        return tuple(out)

    def _base_shape(self, region: tuple[slice, ...]) -> tuple[int, ...]:
        return tuple(r.stop - r.start for r in self._to_base(region))

    def _read(self, region: tuple[slice, ...], out: np.ndarray) -> None:
        self._base.read_region(self._to_base(region), out=out.reshape(self._base_shape(region)))

    def _view(self, region: tuple[slice, ...]) -> np.ndarray | None:
        view = self._base._view(self._to_base(region))
        return None if view is None else view.reshape(tuple(r.stop - r.start for r in region))

    def _write(self, region: tuple[slice, ...], value: np.ndarray) -> None:
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
