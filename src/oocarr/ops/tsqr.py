"""The R factor of a tall matrix's QR decomposition by TSQR, streamed over row panels.

Each row panel of ``x`` (m × n, m ≥ n) is factored on its own, and its R
factor is combined with the running one (the QR of the two stacked: a flat
reduction tree, so one n × n factor is held however many panels there are).
Zero rows change no R factor, so the last, shorter panel is padded to the
others' shape (one compiled block function).  The result is made unique by
making its diagonal non-negative: the same R whatever the budget, hence the
panels, and the R of NumPy's ``qr`` up to the signs of its rows.

The gradient needs no Q: with ``x = QR``, a cotangent ``R̄`` gives
``x̄ = Q copyltu(R R̄ᵀ) R⁻ᵀ = x · G`` with ``G = R⁻¹ copyltu(R R̄ᵀ) R⁻ᵀ``
(``copyltu`` copies the lower triangle onto the upper; Walter & Lehmann,
"Algorithmic differentiation of linear algebra functions with application
in optimum experimental design", 2018): one more pass over the row panels,
each ``x̄`` tile a panel times an n × n matrix.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from oocarr.engine.op import CustomOp, Region, Run, cotangent, forward_output
from oocarr.errors import InvalidArgumentError, NotSupportedError

__all__ = ["PANEL_BYTES", "TSQR", "panel_rows", "real_float_dtype"]

#: The most bytes of a row panel factored by one LAPACK QR, whatever the budget: ``geqrf``
#: sweeps its panel once per block of columns, so a panel larger than the cache costs more
#: per row (n = 128 float32 on a 2-core VM, µs per row for Q and R / R alone: 2.0 / 1.0 at
#: 16,384 rows, 2.2 / 1.1 at 32,768, 2.7 / 1.4 at 65,536, 3.9 / 2.0 at 131,072; a 4 GiB
#: ``qr`` under 512 MiB took 66 s in panels of 131,072 rows).
PANEL_BYTES = 16 << 20


def panel_rows(budget_rows: int, n: int, itemsize: int, least: int) -> int:
    """Rows of a row panel of ``n`` columns: what the budget gives (``budget_rows``), at most
    :data:`PANEL_BYTES`, at least ``least``.

    Examples
    --------
    >>> panel_rows(1_000_000, 128, 4, 128), panel_rows(1000, 128, 4, 256)
    (32768, 1000)
    """
    return max(least, min(budget_rows, PANEL_BYTES // max(1, n * itemsize)))


def real_float_dtype(dtype: np.dtype) -> np.dtype:
    """``dtype``, which TSQR factors: a real floating dtype, else an error naming the cast."""
    dtype = np.dtype(dtype)
    if dtype.kind not in "f":
        raise NotSupportedError(
            f"TSQR of {dtype} is not built; cast the matrix to a real floating dtype "
            "(x.astype('float32')) first"
        )
    return dtype


def _positive_diagonal(r: jax.Array) -> jax.Array:
    """``r`` with each row's sign flipped so that its diagonal is non-negative."""
    signs = jnp.where(jnp.diagonal(r) < 0, -1.0, 1.0).astype(r.dtype)
    return r * signs[:, None]


class TSQR(CustomOp):
    """``R`` of ``x = QR`` for a tall ``x`` of shape (m, n), m ≥ n, with ``diag(R) ≥ 0``.

    Examples
    --------
    >>> TSQR((100, 3)).output_shape
    (3, 3)
    """

    name = "tsqr"
    # the panel, the panel's Householder work, the running factor and the stacked pair
    residency = 3
    needs_output = True

    def compute_output_shape(self) -> tuple[int, ...]:
        (shape,) = self.in_shapes
        if len(shape) != 2:
            raise NotSupportedError(
                f"TSQR factors one matrix of 2 axes, got shape {shape}; for a stack of "
                "matrices, factor each x[i] in turn"
            )
        m, n = shape
        if m < n:
            raise InvalidArgumentError(
                f"TSQR needs a tall matrix (rows >= columns), got shape {shape}; factor its "
                "transpose (x.mT) instead"
            )
        return (n, n)

    def result_dtype(self, *inputs: jax.ShapeDtypeStruct) -> np.dtype:
        return real_float_dtype(inputs[0].dtype)

    def min_tile_elems(self) -> int:
        # a panel of whole rows, at least as many as there are columns: n x n
        return max(1, self.output_shape[0]) ** 2

    def min_tile_label(self) -> str:
        n = self.output_shape[0]
        return f"op tiles of {n} whole rows of {n} columns (TSQR's row panels and R factor)"

    def _panels(self, run: Run) -> tuple[list[Region], tuple[int, ...]]:
        m, n = self.in_shapes[0]
        itemsize = real_float_dtype(run.inputs[0].dtype).itemsize
        rows = panel_rows(run.tile_shape((m * n,))[0] // max(1, n), n, itemsize, n)
        rows = min(rows, m)
        regions: list[Region] = [
            (slice(a, min(a + rows, m)), slice(0, n)) for a in range(0, m, rows)
        ]
        return regions, (rows, n)

    # -- block math (compiled once per op) ----------------------------------
    def _combine(self, r: jax.Array, block: jax.Array) -> jax.Array:
        panel = jnp.linalg.qr(block, mode="r")
        n = r.shape[0]
        stacked = jnp.concatenate([r, panel[:n]], axis=0)
        return _positive_diagonal(jnp.linalg.qr(stacked, mode="r"))

    def _gram_factor(self, r: jax.Array, rbar: jax.Array) -> jax.Array:
        m = r @ rbar.T
        sym = jnp.tril(m) + jnp.tril(m, -1).T
        solve = jax.scipy.linalg.solve_triangular
        left = solve(r, sym, lower=False)  # R^-1 copyltu(M)
        return solve(r, left.T, lower=False).T  # (R^-1 copyltu(M)) R^-T

    def _times(self, block: jax.Array, g: jax.Array) -> jax.Array:
        return block @ g

    # -- passes --------------------------------------------------------------
    def forward(self, run: Run) -> None:
        n = self.output_shape[0]
        regions, tile = self._panels(run)
        dtype = np.dtype(run.inputs[0].dtype)
        combine = run.jit(self._combine)
        r = jnp.zeros((n, n), dtype)
        for _, (block,) in run.stream(regions, run.inputs):
            r = jax.block_until_ready(combine(r, run.pad(np.asarray(block), tile)))
        run.write((slice(0, n), slice(0, n)), np.asarray(r))

    def backward(self, run: Run) -> None:
        if not run.wants_grad(0):
            return
        n = self.output_shape[0]
        whole = [(slice(0, n), slice(0, n))]
        ((_, (rbar, r)),) = list(run.stream(whole, [cotangent(run), forward_output(run)]))
        g = run.put(np.asarray(run.jit(self._gram_factor)(np.asarray(r), np.asarray(rbar))))
        times = run.jit(self._times)
        regions, tile = self._panels(run)
        for region, (block,) in run.stream(regions, run.inputs):
            out = times(run.pad(np.asarray(block), tile), g)
            run.accumulate(0, region, run.crop(out, region))
