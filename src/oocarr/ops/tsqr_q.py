"""The Q factor of a tall matrix's QR decomposition by direct TSQR, times a small matrix.

Direct TSQR (Benson, Gleich and Demmel, "Direct QR factorizations for
tall-and-skinny matrices in MapReduce architectures", 2013): pass 1 factors
each row panel ``x_i = Q_i R_i``, writes ``Q_i`` where Q goes and keeps
``R_i``; the stacked ``R_i`` (a (p·n) × n matrix, in memory) are factored,
``[R_1; …; R_p] = Q₂ R``; pass 2 reads each ``Q_i`` back and writes
``Q_i · Q₂_i``, ``Q₂_i`` the i-th n × n block of ``Q₂``.  When the p
factors do not fit the room the op keeps for them (one panel's), the
stacked ``R_i`` go to a scratch array whose Q is made the same way: a
tree, each level shorter than the one below by the panels' rows over n.
Every factor is orthonormal to rounding, so Q is orthonormal to about ε
whatever the condition of ``x`` (``x R⁻¹``, "indirect TSQR", is
orthonormal to about ε·κ(x) only).  R's diagonal is made non-negative
(``Q₂``'s columns flipped to match), so Q pairs with
:class:`~oocarr.ops.tsqr.TSQR`'s R.

The op computes ``Y = Q·W`` for an n × n ``W`` given in memory (the
identity for ``qr``, the SVD's ``U_R`` of R for ``svd``'s U), folded into
the panels' n × n factors at no cost.  Its inputs are ``x``, TSQR's ``R``
(used by the gradient only: the forward pass makes its own) and ``W``.

Gradient, with ``Q̄ = Ȳ Wᵀ`` and the Q part of QR's reverse rule (Walter
and Lehmann 2018; the R̄ part is :class:`~oocarr.ops.tsqr.TSQR`'s):
``x̄ = (Q̄ − Q copyltu(Q̄ᵀQ)) R⁻ᵀ``.  With ``P = Ȳᵀ Y`` (one pass over Ȳ
and Y), ``Q̄ᵀQ = W P W⁻¹`` and ``W̄ = Qᵀ Ȳ = W⁻ᵀ Pᵀ``; a second pass writes
``x̄_i = Ȳ_i (Wᵀ R⁻ᵀ) − Y_i (W⁻¹ copyltu(W P W⁻¹) R⁻ᵀ)``.  ``R`` itself gets
no gradient from here: ``Y`` depends on ``x`` (and ``W``) alone.
"""

from __future__ import annotations

import contextlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from oocarr.engine.op import CustomOp, Reader, Region, Run, cotangent, forward_output
from oocarr.errors import InvalidArgumentError, NotSupportedError
from oocarr.ops.tsqr import panel_rows, real_float_dtype

__all__ = ["TSQRQ"]

#: n × n matrices kept in memory per row panel: its R factor, its block of the stacked
#: factorization's Q and the panel's factor Q₂_i·W.
FACTORS_PER_PANEL = 3


def _copyltu(m: jax.Array) -> jax.Array:
    """The lower triangle of ``m`` copied onto its upper one."""
    return jnp.tril(m) + jnp.tril(m, -1).T


class TSQRQ(CustomOp):
    """``Q·W`` of ``x = QR`` for a tall ``x`` (m × n, m ≥ n) by direct TSQR: inputs ``x``,
    TSQR's ``R`` (n × n, for the gradient) and ``W`` (n × n); output m × n.

    Examples
    --------
    >>> TSQRQ((100, 3), (3, 3), (3, 3)).output_shape
    (100, 3)
    """

    name = "tsqr_q"
    # the panel, its Householder work, its Q_i and product, and one panel's room for the
    # panels' n x n factors (more of them go to scratch: see _q_times)
    residency = 5
    needs_output = True

    def compute_output_shape(self) -> tuple[int, ...]:
        shape, r_shape, w_shape = self.in_shapes
        if len(shape) != 2:
            raise NotSupportedError(
                f"TSQR's Q factors one matrix of 2 axes, got shape {shape}; for a stack of "
                "matrices, factor each x[i] in turn"
            )
        m, n = shape
        if m < n:
            raise InvalidArgumentError(
                f"TSQR's Q needs a tall matrix (rows >= columns), got shape {shape}; factor its "
                "transpose (x.mT) instead"
            )
        if r_shape != (n, n) or w_shape != (n, n):
            raise InvalidArgumentError(
                f"TSQR's Q of a matrix of shape {shape} needs R and W of shape {(n, n)}, got "
                f"{r_shape} and {w_shape}"
            )
        return (m, n)

    def result_dtype(self, *inputs: jax.ShapeDtypeStruct | Reader) -> np.dtype:
        return real_float_dtype(inputs[0].dtype)

    def min_tile_elems(self) -> int:
        # panels of twice as many rows as columns: each level of the tree halves the rows
        m, n = self.output_shape
        return max(1, min(m, 2 * n) * n)

    def min_tile_label(self) -> str:
        n = self.output_shape[1]
        return f"op tiles of {2 * n} whole rows of {n} columns (TSQR's row panels and factors)"

    def _panels(self, run: Run, m: int) -> tuple[list[Region], tuple[int, ...]]:
        """Row panels of an m × n matrix (x's or a level of the tree's), the last one padded
        to the tile's shape."""
        n = self.output_shape[1]
        # at least 2n rows (min_tile_elems makes the engine refuse a budget without room for
        # them): each level of the tree then has fewer rows than the one below
        least = min(self.output_shape[0], 2 * n)
        itemsize = real_float_dtype(run.inputs[0].dtype).itemsize
        rows = min(panel_rows(self._room(run), n, itemsize, least), m)
        regions: list[Region] = [
            (slice(a, min(a + rows, m)), slice(0, n)) for a in range(0, m, rows)
        ]
        return regions, (rows, n)

    def _room(self, run: Run) -> int:
        """Rows of one tile-sized buffer: the room the op keeps for the panels' factors, and
        the most rows a panel may have (panels are capped at :data:`PANEL_BYTES`)."""
        m, n = self.output_shape
        return run.tile_shape((m * n,))[0] // max(1, n)

    def _factors_fit(self, panels: int, rows: int) -> bool:
        """Whether the panels' n × n factors fit the room the op keeps for them (one
        buffer's, ``rows`` of n columns)."""
        return panels <= 1 or FACTORS_PER_PANEL * panels * self.output_shape[1] <= rows

    # -- block math (compiled once per op) ----------------------------------
    def _panel_qr(self, block: jax.Array) -> tuple[jax.Array, jax.Array]:
        return jnp.linalg.qr(block)

    def _panel_factors(self, rs: jax.Array, w: jax.Array) -> jax.Array:
        p, n, _ = rs.shape
        q2, r2 = jnp.linalg.qr(rs.reshape(p * n, n))
        signs = jnp.where(jnp.diagonal(r2) < 0, -1.0, 1.0).astype(q2.dtype)
        return (q2 * signs[None, :]).reshape(p, n, n) @ w.astype(q2.dtype)

    def _times(self, q: jax.Array, factor: jax.Array) -> jax.Array:
        return q @ factor

    def _single_panel_q(self, block: jax.Array, w: jax.Array) -> jax.Array:
        q, r = jnp.linalg.qr(block)
        signs = jnp.where(jnp.diagonal(r) < 0, -1.0, 1.0).astype(q.dtype)
        return (q * signs[None, :]) @ w

    def _gram(self, acc: jax.Array, gblock: jax.Array, yblock: jax.Array) -> jax.Array:
        return acc + gblock.T @ yblock

    def _grad_factors(
        self, p: jax.Array, r: jax.Array, w: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        solve = jax.scipy.linalg.solve_triangular
        w_inv = jnp.linalg.inv(w)
        qbar_q = w @ p @ w_inv
        left = solve(r, w, lower=False).T  # W^T R^-T
        right = solve(r, (w_inv @ _copyltu(qbar_q)).T, lower=False).T  # W^-1 copyltu R^-T
        return left, right, w_inv.T @ p.T

    def _grad_panel(
        self, gblock: jax.Array, yblock: jax.Array, left: jax.Array, right: jax.Array
    ) -> jax.Array:
        return gblock @ left - yblock @ right

    # -- passes --------------------------------------------------------------
    def forward(self, run: Run) -> None:
        n = self.output_shape[1]
        ((_, (w,)),) = list(run.stream([(slice(0, n), slice(0, n))], [run.inputs[2]]))
        dtype = self.result_dtype(run.inputs[0])
        m = self.output_shape[0]
        self._q_times(run, run.inputs[0], m, np.asarray(w, dtype), run.write, run.written)

    def _q_times(
        self, run: Run, source: Any, m: int, w: np.ndarray, write: Any, written: Any
    ) -> None:
        """Write ``Q·W`` of the m × n matrix ``source`` (read by region) with ``write``.

        Pass 1 writes each panel's ``Q_i`` (kept: reading it back in pass 2 was faster than
        factoring the panel again) and keeps its ``R_i``: in memory where the p factors fit,
        else in scratch, whose Q is made by this same method a level up the tree.  Pass 2
        reads ``Q_i`` back (``written``) and writes ``Q_i`` times the panel's factor.
        """
        n = self.output_shape[1]
        regions, tile = self._panels(run, m)
        dtype = w.dtype
        if len(regions) == 1:  # one panel: its own QR, in one pass
            ((region, (block,)),) = list(run.stream(regions, [source]))
            out = run.jit(self._single_panel_q)(run.pad(np.asarray(block, dtype), tile), w)
            write(region, run.crop(out, region))
            return
        p = len(regions)
        fits = self._factors_fit(p, self._room(run))
        rows_of = [(slice(i * n, (i + 1) * n), slice(0, n)) for i in range(p)]
        panel_qr = run.jit(self._panel_qr)
        with contextlib.ExitStack() as scratch:
            rs: list[jax.Array] = []
            stacked = None if fits else scratch.enter_context(run.temporary((p * n, n), dtype))
            for i, (region, (block,)) in enumerate(run.stream(regions, [source])):
                q, r = panel_qr(run.pad(np.asarray(block, dtype), tile))
                write(region, run.crop(q, region))
                if stacked is None:
                    rs.append(r)
                else:
                    stacked.write(rows_of[i], np.asarray(r))
            if stacked is None:
                factors = run.jit(self._panel_factors)(jnp.stack(rs), w)
                del rs

                def factor_of(i: int) -> Any:
                    return factors[i]

            else:
                f = scratch.enter_context(run.temporary((p * n, n), dtype))
                self._q_times(run, stacked, p * n, w, f.write, f.read)

                def factor_of(i: int) -> Any:
                    return f.read(rows_of[i])

            times = run.jit(self._times)
            for i, region in enumerate(regions):
                q = run.pad(np.asarray(written(region), dtype), tile)
                write(region, run.crop(times(q, factor_of(i)), region))

    def backward(self, run: Run) -> None:
        if not (run.wants_grad(0) or run.wants_grad(2)):
            return
        n = self.output_shape[1]
        whole = (slice(0, n), slice(0, n))
        ((_, (r, w)),) = list(run.stream([whole], [run.inputs[1], run.inputs[2]]))
        dtype = np.dtype(forward_output(run).dtype)
        regions, tile = self._panels(run, self.output_shape[0])
        gram = run.jit(self._gram)
        p = jnp.zeros((n, n), dtype)
        for _, (g, y) in run.stream(regions, [cotangent(run), forward_output(run)]):
            p = gram(p, run.pad(np.asarray(g, dtype), tile), run.pad(np.asarray(y, dtype), tile))
        factors = run.jit(self._grad_factors)(p, np.asarray(r, dtype), np.asarray(w, dtype))
        left, right, wbar = (run.put(np.asarray(f)) for f in factors)
        run.accumulate(2, whole, np.asarray(wbar))
        if not run.wants_grad(0):
            return
        grad_panel = run.jit(self._grad_panel)
        for region, (g, y) in run.stream(regions, [cotangent(run), forward_output(run)]):
            out = grad_panel(
                run.pad(np.asarray(g, dtype), tile),
                run.pad(np.asarray(y, dtype), tile),
                left,
                right,
            )
            run.accumulate(0, region, run.crop(out, region))
