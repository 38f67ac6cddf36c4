"""``inspect --stats``: min, max, mean, std and the NaN and infinity counts, one tile at a time."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from oocarr.engine.io import TASK_BUFFERS
from oocarr.engine.stats import IOCounts
from oocarr.engine.tasks import opened
from oocarr.store.locator import Locator

__all__ = ["Summary", "TileMoments", "TileSummaryTask"]


class Summary:
    """Statistics of an array fed tile by tile (Chan et al.'s pairwise update of mean and M2).

    ``min``, ``max``, ``mean`` and ``std`` (population, ``ddof=0``) are over
    the finite values; NaNs and infinities are counted apart.  Complex
    arrays have no ``min``/``max``; their mean is ``[real, imag]`` and
    their std is ``sqrt(mean(|x - mean|**2))``, as NumPy's.

    Examples
    --------
    >>> s = Summary(np.dtype("f4"))
    >>> s.add(np.array([1.0, np.nan, 3.0], "f4"))
    >>> s.add(np.array([np.inf, 5.0], "f4"))
    >>> s.result()
    {'count': 3, 'min': 1.0, 'max': 5.0, 'mean': 3.0, 'std': 1.632993161855452, 'nan_count': 1, 'inf_count': 1}
    """  # noqa: E501

    def __init__(self, dtype: np.dtype) -> None:
        self.dtype = np.dtype(dtype)
        self.complex = self.dtype.kind == "c"
        self.count = 0
        self.mean: complex | float = 0.0
        self.m2 = 0.0
        self.min: Any = None
        self.max: Any = None
        self.nan = 0
        self.inf = 0

    def add(self, block: np.ndarray) -> None:
        """Fold one tile in."""
        self.merge(TileMoments.of(block, self.dtype))

    def merge(self, tile: TileMoments) -> None:
        """Fold in one tile's moments (computed here or by a task elsewhere: the same bits)."""
        self.nan += tile.nan
        self.inf += tile.inf
        if tile.min is not None:
            self.min = tile.min if self.min is None else min(self.min, tile.min)
            self.max = tile.max if self.max is None else max(self.max, tile.max)
        n = tile.count
        if n == 0:
            return
        total = self.count + n
        delta = tile.mean - self.mean
        self.m2 += tile.m2 + abs(delta) ** 2 * self.count * n / total
        self.mean = self.mean + delta * n / total
        self.count = total

    def result(self) -> dict[str, Any]:
        """The statistics as a JSON-able dict (``None`` where there are no finite values)."""
        mean: Any = None
        std = None
        if self.count:
            mean = complex(self.mean) if self.complex else float(self.mean.real)
            mean = [mean.real, mean.imag] if self.complex else mean
            std = math.sqrt(max(0.0, self.m2 / self.count))
        return {
            "count": self.count,
            "min": self.min,
            "max": self.max,
            "mean": mean,
            "std": std,
            "nan_count": self.nan,
            "inf_count": self.inf,
        }


@dataclass(frozen=True)
class TileMoments:
    """One tile's count, mean and sum of squared deviations of its finite values, extremes,
    and NaN and infinity counts: what :meth:`Summary.merge` folds."""

    count: int = 0
    mean: Any = 0.0
    m2: float = 0.0
    min: Any = None
    max: Any = None
    nan: int = 0
    inf: int = 0

    @classmethod
    def of(cls, block: np.ndarray, dtype: np.dtype) -> TileMoments:
        """The moments of ``block`` (values of ``dtype``).

        Examples
        --------
        >>> TileMoments.of(np.array([1.0, 3.0, np.nan]), np.dtype("f8"))
        TileMoments(count=2, mean=np.float64(2.0), m2=2.0, min=1.0, max=3.0, nan=1, inf=0)
        """
        dtype = np.dtype(dtype)
        values = np.asarray(block).reshape(-1)
        if values.size == 0:
            return cls()
        low = high = None
        nans = infs = 0
        if dtype.kind in "biu":
            low, high = values.min().item(), values.max().item()
            finite: np.ndarray = values.astype(np.float64)
        else:
            wide = values.astype(np.complex128 if dtype.kind == "c" else np.float64)
            nan, bad = np.isnan(wide), ~np.isfinite(wide)
            nans = int(nan.sum())
            infs = int(bad.sum()) - nans
            finite = wide[~bad] if nans or bad.any() else wide
            if finite.size and dtype.kind != "c":
                low, high = finite.min().item(), finite.max().item()
        if finite.size == 0:
            return cls(0, 0.0, 0.0, low, high, nans, infs)
        mean = finite.mean()
        finite -= mean
        m2 = float(np.vdot(finite, finite).real)
        return cls(finite.size, mean, m2, low, high, nans, infs)


@dataclass(frozen=True)
class TileSummaryTask:
    """The :class:`TileMoments` of one tile of a stored array, computed where the task runs
    (a cluster's worker): the array is reopened there by locator."""

    source: Locator
    region: tuple[slice, ...]

    def run(self, counts: IOCounts | None = None) -> TileMoments:
        """Read the tile and compute its moments.

        Examples
        --------
        >>> import oocarr
        >>> store = oocarr.from_numpy(np.array([1.0, 2.0, 6.0])).store
        >>> TileSummaryTask(store.locator, (slice(1, 3),)).run().count
        2
        """
        with opened((self.source,)) as (store,):
            block = store.read_view(self.region, TASK_BUFFERS.empty)
            dtype = store.dtype
        if counts is not None:
            counts.count_read(block.nbytes)
        return TileMoments.of(block, dtype)
