"""``inspect --stats``: min, max, mean, std and the NaN and infinity counts, one tile at a time."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["Summary"]


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
        self.exact = self.dtype.kind in "biu"
        self.count = 0
        self.mean: complex | float = 0.0
        self.m2 = 0.0
        self.min: Any = None
        self.max: Any = None
        self.nan = 0
        self.inf = 0

    def add(self, block: np.ndarray) -> None:
        """Fold one tile in."""
        values = np.asarray(block).reshape(-1)
        if values.size == 0:
            return
        if self.exact:
            self._extremes(values.min(), values.max())
            finite = values.astype(np.float64)
        else:
            wide = values.astype(np.complex128 if self.complex else np.float64)
            nan, bad = np.isnan(wide), ~np.isfinite(wide)
            nans = int(nan.sum())
            self.nan += nans
            self.inf += int(bad.sum()) - nans
            finite = wide[~bad] if nans or bad.any() else wide
            if finite.size and not self.complex:
                self._extremes(finite.min(), finite.max())
        self._moments(finite)

    def _extremes(self, low: Any, high: Any) -> None:
        low, high = low.item(), high.item()
        self.min = low if self.min is None else min(self.min, low)
        self.max = high if self.max is None else max(self.max, high)

    def _moments(self, finite: np.ndarray) -> None:
        n = finite.size
        if n == 0:
            return
        mean = finite.mean()
        finite -= mean
        m2 = float(np.vdot(finite, finite).real)
        total = self.count + n
        delta = mean - self.mean
        self.m2 += m2 + abs(delta) ** 2 * self.count * n / total
        self.mean = self.mean + delta * n / total
        self.count = total

    def result(self) -> dict[str, Any]:
        """The statistics as a JSON-able dict (``None`` where there are no finite values)."""
        mean: Any = None
        std = None
        if self.count:
            mean = complex(self.mean) if self.complex else float(self.mean)
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
