"""``solve``, ``inv``, ``det`` and ``slogdet`` of a stored square matrix, from the out-of-core
LU of :mod:`oocarr.ops.lu`, and their gradients.

``A X = B`` is ``L U X = P B``: the right-hand sides, in blocks of ``w`` columns held in
memory (rows indexed as ``A``'s), get every panel's forward elimination (streamed; when
the right-hand sides are at most a quarter of a panel they ride along the factorization
and this sweep reads nothing), then the back substitution streams the panels backwards,
rows above each diagonal block, and writes each solved block of rows of ``X``.  ``inv``
solves against the identity, whose blocks are made in memory, never stored.

Gradients (as ``jax.numpy.linalg``'s), each refactoring ``A`` into scratch:

* ``solve``: ``x̄2 = A⁻ᵀ X̄`` (``Uᵀ`` then ``Lᵀ`` streamed, ``Pᵀ`` free), ``x̄1 = −x̄2 Xᵀ``
  (``x̄2`` kept in scratch, ``x̄1`` accumulated in column panels);
* ``inv``: ``x̄ = −Yᵀ Ȳ Yᵀ = −(A⁻ᵀ Ȳ) Yᵀ``, the same two steps;
* ``det``: ``x̄ = ḡ · det · A⁻ᵀ``, ``slogdet``: ``x̄ = ḡ_logabsdet · A⁻ᵀ`` (``A⁻ᵀ`` in
  column blocks, ``A⁻ᵀ I``).  At a singular matrix these are ``inf``/``nan`` (JAX's
  ``det`` uses cofactors there; this one does not).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from oocarr.engine.op import Reader, Run, cotangent, forward_output
from oocarr.errors import InvalidArgumentError, ShapeMismatchError

from .lu import (
    Factorization,
    LUOp,
    PanelPlan,
    compute_dtype,
    factor,
    gradient_accumulator,
    panel_plan,
    panel_store,
    row_regions,
    share_of,
    square_size,
)

__all__ = ["LUDeterminant", "LUInverse", "LUSolve", "back_substitute", "transposed_solve"]

RowsOf = Callable[[slice, slice], np.ndarray]


# -- sweeps -------------------------------------------------------------------------------------
def forward_substitute(run: Run, fac: Factorization, y: np.ndarray) -> None:
    """``y ← L⁻¹ P y`` in place (rows as ``A``'s), every panel streamed once."""
    for k in range(len(fac.plan.panels())):
        fac.apply_stored(run, k, y)


def back_substitute(
    run: Run, fac: Factorization, y: np.ndarray, emit: Callable[[int, np.ndarray], None]
) -> None:
    """Solve ``U X = y`` (``y`` as :func:`forward_substitute` leaves it), panels backwards;
    ``emit(first_row, rows)`` gets each block of rows of ``X`` once."""
    plan = fac.plan
    w, h, columns = plan.width, plan.rows, y.shape[1]
    math = fac.blocks
    panels = plan.panels()
    for k in reversed(range(len(panels))):
        start, width = panels[k]
        pivots = fac.pivots[start : start + width]
        x = math.triangular("upper", fac.diagonal(k), run.pad(y[pivots], (w, columns)))
        emit(start, x[:width])
        if not start:
            continue
        solved = math.put(x)
        regions = row_regions(0, start, h, slice(start, start + width))
        for region, (block,) in run.stream(regions, [fac.store]):
            rows = fac.pivots[region[0]]
            block = run.pad(np.asarray(block, fac.dtype), (h, w))
            y[rows] -= math.times(block, solved)[: len(rows)]


def transposed_solve(run: Run, fac: Factorization, g_rows: Callable[[int, int], Any]) -> Any:
    """``Z = A⁻ᵀ G`` for the rows ``g_rows(start, stop)`` of ``G`` (n × c), in memory.

    ``Aᵀ = Uᵀ Lᵀ P``: ``Uᵀ Y = G`` panels forwards (rows above each diagonal block), then
    ``Lᵀ W = Y`` backwards (rows below); held with rows as ``A``'s, ``W`` is ``Z``."""
    plan = fac.plan
    n, w, h = plan.n, plan.width, plan.rows
    panels = plan.panels()
    first = np.asarray(g_rows(0, panels[0][1]), fac.dtype)
    columns = first.shape[1]
    v = np.zeros((n, columns), fac.dtype)
    math = fac.blocks

    def minus(r: np.ndarray, block: np.ndarray, rows: np.ndarray) -> None:
        block = run.pad(np.asarray(block, fac.dtype), (h, w))
        r -= math.times_t(block, run.pad(v[rows], (h, columns)))

    for k, (start, width) in enumerate(panels):
        g = first if k == 0 else np.asarray(g_rows(start, start + width), fac.dtype)
        r = np.array(run.pad(g, (w, columns)))
        regions = row_regions(0, start, h, slice(start, start + width))
        for region, (block,) in run.stream(regions, [fac.store]):
            minus(r, block, fac.pivots[region[0]])
        v[fac.pivots[start : start + width]] = math.triangular("upper_t", fac.diagonal(k), r)[
            :width
        ]
    for k in reversed(range(len(panels))):
        start, width = panels[k]
        pivots = fac.pivots[start : start + width]
        r = np.array(run.pad(v[pivots], (w, columns)))
        for rows, block in fac.lower_blocks(run, k):
            minus(r, block, rows)
        v[pivots] = math.triangular("unit_lower_t", fac.diagonal(k), r)[:width]
    return v


def identity_rows(first_column: int, count: int, dtype: Any) -> Callable[[int, int], np.ndarray]:
    """Rows ``start ..< stop`` of the identity's columns ``first_column ..< + count``."""

    def rows(start: int, stop: int) -> np.ndarray:
        block = np.zeros((stop - start, count), dtype)
        hit = np.arange(start, stop)
        inside = (hit >= first_column) & (hit < first_column + count)
        block[hit[inside] - start, hit[inside] - first_column] = 1
        return block

    return rows


def rows_writer(run: Run, cols: slice, vector: bool) -> Callable[[int, np.ndarray], None]:
    """``emit(first_row, rows)`` writing solved rows of the output's columns ``cols`` (of its
    only column, for a ``vector`` output)."""

    def emit(first: int, x: np.ndarray) -> None:
        rows = slice(first, first + x.shape[0])
        if vector:
            run.write((rows,), x[:, 0])
        else:
            run.write((rows, cols), x[:, : cols.stop - cols.start])

    return emit


def column_blocks(total: int, width: int) -> list[slice]:
    return [slice(a, min(a + width, total)) for a in range(0, total, width)]


def minus_outer(run: Run, fac: Factorization, z: Any, x_rows: RowsOf, k: int) -> None:
    """Add ``−Z Xᵀ`` to input 0's gradient (``Z`` in scratch, n × k; ``X``'s rows from
    ``x_rows``), in column panels of a third of a panel's width: the panel, the
    update's result, the panel written behind."""
    plan, math = fac.plan, fac.blocks
    n, b = plan.n, plan.columns
    width = max(1, plan.width // 3)
    for cols in column_blocks(n, width):
        acc = np.zeros((n, width), z.store.dtype)
        for part in column_blocks(k, b):
            zc = run.pad(z.read((slice(0, n), part)), (n, b))
            xc = run.pad(np.asarray(x_rows(cols, part), acc.dtype), (width, b))
            acc = math.minus_times_t(acc, zc, xc)
        run.accumulate(0, (slice(0, n), cols), np.asarray(acc)[:, : cols.stop - cols.start])


def solve_backward(
    op: LUOp, run: Run, g_rows: RowsOf, x_rows: RowsOf, k: int, b_shape: tuple | None
) -> None:
    """``x̄2 = A⁻ᵀ Ḡ`` (when ``b_shape``, the right-hand side's shape, is given and its
    gradient wanted) and ``x̄1 = −x̄2 Xᵀ``."""
    want_a = run.wants_grad(0)
    want_b = b_shape is not None and run.wants_grad(1)
    if not (want_a or want_b):
        return
    n = op.n
    dtype = compute_dtype(*(r.dtype for r in run.inputs), what=op.what)
    plan = op.plan_for(run)
    add_b = gradient_accumulator(run, 1, plan.rows, b_shape or (n, k))
    with panel_store(run, plan, dtype) as store, run.temporary((n, k), dtype) as z:
        fac = factor(run, plan, run.inputs[0], store, dtype)
        for cols in column_blocks(k, plan.width):

            def g_panel(a: int, b: int, c: slice = cols) -> np.ndarray:
                return g_rows(slice(a, b), c)

            solved = transposed_solve(run, fac, g_panel)
            if want_b:
                add_b(0, cols, solved)
            if want_a:
                z.write((slice(0, n), cols), solved)
            del solved
        if want_a:
            minus_outer(run, fac, z, x_rows, k)


class LUSolve(LUOp):
    """``X`` of ``A X = B`` for a square ``A`` (n × n) and ``B`` of shape (n,) or (n, K).

    Examples
    --------
    >>> LUSolve((4, 4), (4, 2)).output_shape
    (4, 2)
    """

    name = "solve"
    what = "solve"

    def compute_output_shape(self) -> tuple[int, ...]:
        a, b = self.in_shapes
        n = square_size(a, "solve")
        if len(b) not in (1, 2) or b[0] != n:
            raise ShapeMismatchError(
                f"solve: x2 must have shape ({n},) or ({n}, K) for x1 of shape {a}, got {b}; "
                f"its rows must match x1's {n} rows"
            )
        return b

    @property
    def k(self) -> int:
        b = self.in_shapes[1]
        return 1 if len(b) == 1 else b[1]

    def _rows(self, reader: Reader, rows: slice, cols: slice) -> np.ndarray:
        if len(self.in_shapes[1]) == 1:
            return np.asarray(reader.read((rows,))).reshape(-1, 1)
        return np.asarray(reader.read((rows, cols)))

    def _right_hand_side(self, run: Run, plan: PanelPlan, cols: slice, dtype: Any) -> np.ndarray:
        n = self.n
        y = np.zeros((n, cols.stop - cols.start), dtype)
        extra = () if len(self.in_shapes[1]) == 1 else (cols,)
        for region, (block,) in run.stream(row_regions(0, n, plan.rows, *extra), run.inputs[1:]):
            y[region[0]] = np.asarray(block).reshape(-1, y.shape[1])
        return y

    def forward(self, run: Run) -> None:
        n, k = self.n, self.k
        dtype = compute_dtype(*(r.dtype for r in run.inputs), what=self.what)
        share = share_of(run, n)
        fused = k <= (share // n) // 4
        plan = panel_plan(n, share, beside=k if fused else 0)
        with panel_store(run, plan, dtype) as store:
            if fused:
                cols = slice(0, k)
                y = self._right_hand_side(run, plan, cols, dtype)
                fac = factor(run, plan, run.inputs[0], store, dtype, rhs=y)
                back_substitute(run, fac, y, rows_writer(run, cols, len(self.in_shapes[1]) == 1))
                return
            fac = factor(run, plan, run.inputs[0], store, dtype)
            for cols in column_blocks(k, plan.width):
                y = self._right_hand_side(run, plan, cols, dtype)
                forward_substitute(run, fac, y)
                back_substitute(run, fac, y, rows_writer(run, cols, len(self.in_shapes[1]) == 1))
                del y

    def backward(self, run: Run) -> None:
        solve_backward(
            self,
            run,
            lambda rows, cols: self._rows(cotangent(run), rows, cols),
            lambda rows, cols: self._rows(forward_output(run), rows, cols),
            self.k,
            self.in_shapes[1],
        )


class LUInverse(LUOp):
    """``A⁻¹`` of a square matrix: ``solve`` against the identity, made in memory.

    Examples
    --------
    >>> LUInverse((4, 4)).output_shape
    (4, 4)
    """

    name = "inv"
    what = "inv"

    def compute_output_shape(self) -> tuple[int, ...]:
        (a,) = self.in_shapes
        square_size(a, "inv")
        return a

    def forward(self, run: Run) -> None:
        n = self.n
        dtype = compute_dtype(run.inputs[0].dtype, what=self.what)
        plan = self.plan_for(run)
        with self.factored(run, plan, dtype) as fac:
            for cols in column_blocks(n, plan.width):
                y = identity_rows(cols.start, cols.stop - cols.start, dtype)(0, n)
                forward_substitute(run, fac, y)
                back_substitute(run, fac, y, rows_writer(run, cols, vector=False))
                del y

    def backward(self, run: Run) -> None:
        solve_backward(
            self,
            run,
            lambda rows, cols: np.asarray(cotangent(run).read((rows, cols))),
            lambda rows, cols: np.asarray(forward_output(run).read((rows, cols))),
            self.n,
            None,
        )


class LUDeterminant(LUOp):
    """``det(x)`` (``log=False``, a 0-d output) or ``(sign, log|det|)`` (``log=True``, 2
    values) of a square matrix, from one LU pass.

    Examples
    --------
    >>> LUDeterminant((5, 5), log=True).output_shape
    (2,)
    """

    name = "det"
    what = "det"

    def compute_output_shape(self) -> tuple[int, ...]:
        (shape,) = self.in_shapes
        log = self.params.get("log", False)
        if not isinstance(log, bool):
            raise InvalidArgumentError(f"LUDeterminant's log must be a bool, got {log!r}")
        square_size(shape, "slogdet" if log else "det")
        return (2,) if log else ()

    def forward(self, run: Run) -> None:
        dtype = compute_dtype(run.inputs[0].dtype, what=self.what)
        with self.factored(run, self.plan_for(run), dtype) as fac:
            if self.params.get("log"):
                sign = fac.sign()
                log_abs = -np.inf if sign == 0 else fac.log_abs
                run.write((slice(0, 2),), np.array([sign, log_abs], dtype))
            else:
                with np.errstate(over="ignore"):  # |det| beyond the dtype's range: inf, as JAX's
                    run.write((), np.asarray(fac.det(), dtype))

    def backward(self, run: Run) -> None:
        # d det = det · tr(A⁻¹ dA) and d log|det| = tr(A⁻¹ dA): x̄ = scale · A⁻ᵀ
        if not run.wants_grad(0):
            return
        if self.params.get("log"):
            scale = float(np.asarray(cotangent(run).read((slice(0, 2),)))[1])
        else:
            scale = float(np.asarray(cotangent(run).read(()))) * float(
                np.asarray(forward_output(run).read(()))
            )
        n = self.n
        dtype = compute_dtype(run.inputs[0].dtype, what=self.what)
        plan = self.plan_for(run)
        add = gradient_accumulator(run, 0, plan.rows, (n, n))
        with self.factored(run, plan, dtype) as fac:
            for cols in column_blocks(n, plan.width):
                rows = identity_rows(cols.start, cols.stop - cols.start, dtype)
                add(0, cols, scale * transposed_solve(run, fac, rows))
