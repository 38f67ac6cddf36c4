"""``DiskArray``: the user-facing handle on one stored array.

This layer holds the storage side only: the handle wraps a
:class:`~oocarr.blocked.BlockedArray` (``.store``), converts to NumPy and
describes itself.  The JAX integration builds on this class.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from .blocked import BlockedArray
from .dtypes import dtype_name
from .locator import Locator

__all__ = ["DiskArray"]


def _delete_owned(driver: type[BlockedArray], locator: Locator) -> None:
    try:
        driver.delete(locator)
    except OSError:
        pass


class DiskArray:
    """An array that lives in storage.

    Made by :func:`oocarr.open`, :func:`oocarr.create`,
    :func:`oocarr.from_numpy` and :func:`oocarr.save`, never directly.
    ``np.asarray(x)`` reads it whole; ``x.store`` is the page store for
    region and block I/O (``x.store[0:10]``, ``x.store[0:10] = values``).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.arange(6.0).reshape(2, 3))
    >>> x.shape, x.dtype, np.asarray(x)[1, 2]
    ((2, 3), dtype('float64'), np.float64(5.0))
    """

    def __init__(self, store: BlockedArray, *, owned: bool = False) -> None:
        self._store = store
        self._finalizer = (
            weakref.finalize(self, _delete_owned, type(store), store.locator) if owned else None
        )

    @property
    def store(self) -> BlockedArray:
        """The :class:`~oocarr.blocked.BlockedArray` holding the data."""
        return self._store

    @property
    def locator(self) -> Locator:
        """The address that reopens this array in any process."""
        return self._store.locator

    @property
    def url(self) -> str:
        """``container#/inner`` form of the locator."""
        return self._store.url

    @property
    def shape(self) -> tuple[int, ...]:
        """The array's shape."""
        return self._store.shape

    @property
    def dtype(self) -> np.dtype:
        """The array's dtype."""
        return self._store.dtype

    @property
    def ndim(self) -> int:
        """Number of axes."""
        return self._store.ndim

    @property
    def size(self) -> int:
        """Number of elements."""
        return self._store.size

    @property
    def nbytes(self) -> int:
        """Logical size in bytes."""
        return self._store.nbytes

    @property
    def chunks(self) -> tuple[int, ...] | None:
        """The storage's chunk shape (``None``: contiguous)."""
        return self._store.chunks

    @property
    def attrs(self) -> dict[str, Any]:
        """A copy of the stored attributes."""
        return self._store.attrs

    def info(self) -> dict[str, Any]:
        """The store's JSON-able description (see :meth:`BlockedArray.info`)."""
        return self._store.info()

    def close(self) -> None:
        """Commit a created array and release its handles."""
        self._store.close()

    def __enter__(self) -> DiskArray:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._store.__exit__(exc_type, exc, tb)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        return self._store.__array__(dtype)

    def __len__(self) -> int:
        return len(self._store)

    def __repr__(self) -> str:
        return f"DiskArray({self.url!r}, shape={self.shape}, dtype={dtype_name(self.dtype)})"
