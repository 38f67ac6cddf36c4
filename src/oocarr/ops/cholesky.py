"""The Cholesky factor of a stored symmetric positive-definite matrix, blocked and out of core.

Forward: left-looking over column blocks
-----------------------------------------
The output ``L`` (``x = L Lᵀ``, lower triangular; its transpose ``U`` when ``upper``) is
written one column block ``K = [s, s + w)`` at a time, left to right.  The block's rows
``[s, n)`` are taken in row blocks of ``h`` rows (the first holds the diagonal block).  For
a row block ``I`` the accumulator ``A[I, K]`` (read from ``x``) takes the finished columns'
update ``− L[I, :s] L[K, :s]ᵀ``, streamed in column chunks read back from a private copy of
the finished columns kept in column strips (``run.temporary``: each chunk of rows is one
contiguous run of the file, where the row-major factor has a run per row); the first row
block then gives ``L_KK = chol(acc[K])`` and every row ``L[i, K] = acc[i] · L_KK⁻ᵀ``. Only
``x``'s lower triangle is used (as LAPACK's ``potrf``; ``jax.numpy`` symmetrises its input
instead, the same for a symmetric ``x``).

Every block function works on fixed shapes (a row piece of ``p`` rows, a chunk of ``c``
columns, the ``w × w`` diagonal block; edges padded), so a call compiles a handful of
functions however many blocks it has.  The updates are compiled products; the diagonal
block's factor (``potrf``) and the pieces' solves by it (``trsm``) run on the host with
SciPy's LAPACK and BLAS, in place, with none of XLA's w × w temporaries beside the budget.
One buffer's share ``B`` of the budget (elements;
the op holds ``residency = R`` buffers, the engine 3 more) bounds each piece and chunk; the
op's own ``P = (R − 4) B`` holds the accumulator and two ``w × w`` blocks
(``h w + 2 w² ≤ P``), the other 4 buffers a piece's update, the streamed chunks and the
last piece's padding.  :func:`plan_blocks` takes the width ``w`` (one for every block; the
last one narrower) whose plan reads least, each block's row blocks as tall as fit:
``h = min(n − s, P / w − 2w)``.  A block with ``h ≥ n − s`` is a panel.

Read volume, in elements (times the itemsize: ``x``'s for the first term, ``L``'s for the
second), over the column blocks ``(s, w, h)`` of :func:`plan_blocks`, ``m = n − s``::

    reads = Σ  m·w  +  s · (m + (⌈m / h⌉ − 1) · w)

(``x`` read once below the diagonal, rectangles ``[s, n) × K``; the finished columns ``:s``
read once for the rows below ``K``, and for ``K``'s own ``w`` rows once per row block).
:func:`forward_reads` computes it.  The optimum it is compared with (:func:`optimum_reads`)
is the same algorithm with the largest blocks the budget allows: the accumulator alone
filling the whole budget ``M`` (``h w ≤ M``, nothing else resident, no engine buffers), at
its best width.  For n = 256 at budgets of a quarter and an eighth of a float32 matrix the
forward reads 1.50 and 1.60 times that (measured by ``io_stats``; exactly what the formula
gives).  The asymptotic I/O lower bound for Cholesky, ``n³ / (3√(2M))`` loads (Beaumont,
Eyraud-Dubois, Langou and Vérité, "I/O-optimal algorithms for symmetric linear algebra
kernels", SPAA 2022), is below the ``n(n+1)/2`` elements of the input at these budgets;
against ``max(n(n+1)/2, n³/(3√(2M)))`` the same runs read 2.99 and 2.93 times that bound:
the engine's buffers and the accumulator's companions leave the blocks about half the
budget, and column blocks of one width do not exploit symmetry as that bound's algorithm
does.

A matrix that is not positive definite gives NaNs in the whole lower triangle, as
``jax.numpy.linalg.cholesky`` (NumPy raises ``LinAlgError``).

Backward: the symmetric solve ``tril(X L) = tril(L̄)``
-----------------------------------------------------
``jax.numpy``'s gradient is ``x̄ = ½ L⁻ᵀ (P + Pᵀ) L⁻¹`` with ``P = Φ(Lᵀ L̄)`` (``Φ``: the
lower triangle with its diagonal halved; Murray, "Differentiation of the Cholesky
decomposition", 2016).  It is the symmetric ``x̄ = ½X`` with ``tril(X L) = tril(L̄)`` (from
``dx = dL Lᵀ + L dLᵀ``), solved over the same column blocks right to left: for the row blocks
``I`` below ``K``, ``X[I, K] = (L̄[I, K] − X[I, s+w:] L[s+w:, K]) L_KK⁻¹``, streaming the
columns already solved from a scratch copy of ``X`` (``run.temporary``, both triangles, so a
row piece is one read); then the diagonal block is the small Cholesky gradient of
``tril(L̄_KK − X[s+w:, K]ᵀ L[s+w:, K])``.  It holds what the forward pass holds (``L_KK`` and
that diagonal accumulator the two ``w × w`` blocks) and reads, per column block, ``X``'s
solved columns once per row block and ``L[s+w:, K]`` twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from oocarr.engine.op import CustomOp, Reader, Region, Run, cotangent, forward_output
from oocarr.errors import InvalidArgumentError, UnsupportedDtypeError

__all__ = ["Block", "Cholesky", "forward_reads", "optimum_reads", "plan_blocks"]

#: The smallest tile side the op plans with (the budget check's least tile).
MIN_SIDE = 8
#: Own buffers besides the accumulator and the two diagonal blocks: a piece's update, the
#: two streamed chunks and the last piece's padding.
SPARE_BUFFERS = 4
#: ``w × w`` blocks held beside the accumulator: ``L_KK`` and the diagonal block it comes from
#: (backward: the diagonal's accumulator).
SQUARES = 2


class Block(NamedTuple):
    """One column block: columns ``[start, start + width)``, rows ``[start, n)`` in row blocks
    of ``height`` rows (``height ≥ n − start``: a panel)."""

    start: int
    width: int
    height: int


def _blocks(n: int, width: int, height: int) -> list[Block]:
    return [Block(s, min(width, n - s), max(1, min(height, n - s))) for s in range(0, n, width)]


def forward_reads(n: int, blocks: list[Block]) -> tuple[int, int]:
    """Elements the forward pass reads: of ``x``, and of ``L`` read back.

    Examples
    --------
    >>> forward_reads(4, [Block(0, 2, 4), Block(2, 2, 2)])
    (12, 4)
    """
    of_x = sum((n - b.start) * b.width for b in blocks)
    of_l = sum(
        b.start * ((n - b.start) + (-(-(n - b.start) // b.height) - 1) * b.width) for b in blocks
    )
    return of_x, of_l


def _least_read(n: int, own: int, squares: int, widest: int) -> list[Block]:
    """The plan of one width (at most ``widest``) that reads least, row blocks as tall as
    ``own`` elements hold beside ``squares`` diagonal blocks."""
    best: tuple[int, list[Block]] | None = None
    for w in range(1, max(1, min(n, widest)) + 1):
        height = own // w - squares * w
        if w > 1 and height < w:
            break
        blocks = _blocks(n, w, height)
        reads = sum(forward_reads(n, blocks))
        if best is None or reads < best[0]:
            best = (reads, blocks)
    return best[1] if best else []


def plan_blocks(n: int, buffer_elems: int, buffers: int) -> list[Block]:
    """The column blocks of an ``n × n`` factor for an op holding ``buffers`` buffers of
    ``buffer_elems`` elements.

    Examples
    --------
    >>> plan_blocks(256, 606, 24)[:2]  # a budget of a quarter of a 256 x 256 float32 matrix
    [Block(start=0, width=56, height=104), Block(start=56, width=56, height=104)]
    """
    own = (buffers - SPARE_BUFFERS) * buffer_elems
    return _least_read(n, own, SQUARES, buffer_elems)


def optimum_reads(n: int, budget_elems: int) -> int:
    """Elements the same blocked algorithm reads with the largest blocks a budget of
    ``budget_elems`` allows: the accumulator alone filling it (``hw ≤ M``, see the module).

    Examples
    --------
    >>> optimum_reads(256, 256 * 256 // 4) / 256**2
    1.0
    """
    return sum(forward_reads(n, _least_read(n, budget_elems, 0, n)))


# -- block math (compiled once per op and block shape) -----------------------
def _chol_syrk(d: jax.Array, y: jax.Array) -> jax.Array:
    return d - y @ y.T


def _chol_update(acc: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
    return acc - x @ y.T


def _host_cholesky(d: Any) -> np.ndarray:
    """``L`` of ``d``'s lower triangle (as ``potrf``; all NaN when not positive definite, as
    ``jax.numpy``'s), by LAPACK on the host, in place on one copy of ``d``.  Compiled, XLA's
    copies of a w × w block (the input's, potrf's, the masked output) stood beside the
    budget's two: 8192² under 64 MiB peaked 13 MiB over it."""
    from scipy.linalg import lapack  # a core dependency, imported with the first factor

    a = np.array(d, order="C")  # C-ordered L is column-major U = Lᵀ: potrf's upper, in place
    (potrf,) = lapack.get_lapack_funcs(("potrf",), (a,))
    u, info = potrf(a.T, lower=0, overwrite_a=1, clean=1)
    if info != 0:
        u.fill(np.nan)
    return u.T


def _host_right_solve(acc: Any, lkk: np.ndarray) -> np.ndarray:
    """``acc · L⁻ᵀ`` by BLAS ``trsm``, in place when ``acc`` is a writable C-ordered array
    (XLA's right-side triangular solve ran at 59 GFLOP/s within the factorization, 137-150
    alone, trsm at 194-203 alone, on a 2-core VM)."""
    from scipy.linalg import blas

    b = acc if acc.flags.writeable and acc.flags.c_contiguous else np.array(acc, order="C")
    (trsm,) = blas.get_blas_funcs(("trsm",), (lkk,))
    # Xᵀ = L⁻¹ accᵀ, all column-major views of the C-ordered arrays
    return trsm(1.0, lkk.T, b.T, side=0, lower=0, trans_a=1, overwrite_b=1).T


def _chol_grad_update(acc: jax.Array, x: jax.Array, ls: jax.Array) -> jax.Array:
    return acc - x @ ls


def _chol_grad_solve(acc: jax.Array, lkk: jax.Array) -> jax.Array:
    return jax.scipy.linalg.solve_triangular(lkk, acc.T, lower=True, trans="T").T


def _chol_grad_gram(c: jax.Array, x: jax.Array, ls: jax.Array) -> jax.Array:
    return c - x.T @ ls


def _chol_grad_diagonal(lkk: jax.Array, c: jax.Array) -> jax.Array:
    """The symmetric ``X`` with ``tril(X L) = tril(c)`` for a small ``L``."""
    z = lkk.T @ jnp.tril(c)
    p = jnp.tril(z) - 0.5 * jnp.diag(jnp.diagonal(z))
    solve = jax.scipy.linalg.solve_triangular
    y = solve(lkk, p + p.T, lower=True, trans="T")  # L⁻ᵀ (P + Pᵀ)
    x = solve(lkk, y.T, lower=True, trans="T").T  # ... L⁻¹
    return (x + x.T) * 0.5


def _pieces(rows: slice, height: int) -> Iterator[slice]:
    """``rows`` cut in pieces of ``height`` rows (the last one shorter)."""
    for a in range(rows.start, rows.stop, height):
        yield slice(a, min(a + height, rows.stop))


def _padded(block: np.ndarray, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """``block`` as ``dtype``, zero-padded at the end to ``shape``."""
    block = np.asarray(block, dtype)
    return np.pad(block, [(0, t - k) for t, k in zip(shape, block.shape)])


def _padded_diagonal(block: np.ndarray, width: int) -> np.ndarray:
    """``block`` (square) in the top left of a ``width × width`` identity."""
    out = np.eye(width, dtype=block.dtype)
    k = block.shape[0]
    out[:k, :k] = block
    return out


class _Strips:
    """L's finished columns kept a second time, in a private scratch array of strips of
    ``chunk`` columns (shape ``(strips, n, chunk)``): the forward pass reads them back a
    strip at a time, rows by rows, so each read is one contiguous run of the file.  Read
    from the factor itself (row-major), a strip of rows is a run per row, each a page or
    less: 8192² float32 at 64 MiB, 1.1 s of a 5.4 s factorization went to those reads."""

    def __init__(self, store: Any, chunk: int) -> None:
        self._store = store
        self._chunk = chunk

    def write(self, rows: slice, cols: slice, value: Any) -> None:
        """Store ``value`` (padded is fine: cropped to the region) as ``L[rows, cols]``."""
        value = np.asarray(value)[: rows.stop - rows.start, : cols.stop - cols.start]
        c = self._chunk
        for strip in range(cols.start // c, -(-cols.stop // c)):
            first, last = max(cols.start, strip * c), min(cols.stop, (strip + 1) * c)
            region = (slice(strip, strip + 1), rows, slice(first - strip * c, last - strip * c))
            part = value[:, first - cols.start : last - cols.start]
            self._store.write(region, part[None])

    def read(self, rows: slice, columns: slice) -> np.ndarray:
        """``L[rows, columns]`` for ``columns`` within one strip (starting at its first)."""
        strip = columns.start // self._chunk
        inner = slice(columns.start - strip * self._chunk, columns.stop - strip * self._chunk)
        return self._store.read((slice(strip, strip + 1), rows, inner))[0]


class Cholesky(CustomOp):
    """``L`` of ``x = L Lᵀ`` (``upper``: ``U = Lᵀ``) for a symmetric positive-definite ``x``.

    Examples
    --------
    >>> Cholesky((5, 5)).output_shape
    (5, 5)
    """

    name = "cholesky"
    # 20 buffers for the accumulator and two diagonal blocks, 4 for a piece's update, the
    # streamed chunks and padding
    residency = 24
    needs_output = True

    @property
    def upper(self) -> bool:
        return bool(self.params.get("upper", False))

    def compute_output_shape(self) -> tuple[int, ...]:
        (shape,) = self.in_shapes
        if len(shape) != 2 or shape[0] != shape[1]:
            raise InvalidArgumentError(
                f"cholesky factors one square matrix, got shape {shape}; pass an n × n "
                "symmetric positive-definite matrix (a stack through oocarr.linalg.cholesky)"
            )
        return shape

    def result_dtype(self, *inputs: jax.ShapeDtypeStruct | Reader) -> np.dtype:
        dtype = np.dtype(inputs[0].dtype)
        if dtype.kind != "f":
            raise UnsupportedDtypeError(
                f"cholesky of a {dtype} matrix is not defined here; cast it to a real "
                "floating dtype (x.astype('float32') or 'float64') first"
            )
        return np.dtype(jnp.promote_types(dtype, jnp.float32))

    def min_tile_elems(self) -> int:
        return max(1, min(self.output_shape[0], MIN_SIDE)) ** 2

    def min_tile_label(self) -> str:
        side = min(self.output_shape[0], MIN_SIDE)
        return f"op tiles of {side} × {side} elements (the blocked Cholesky's smallest blocks)"

    # -- planning ----------------------------------------------------------
    def blocks(self, run: Run) -> tuple[list[Block], int]:
        """This call's column blocks, and one buffer's elements (from the budget)."""
        n = self.output_shape[0]
        buffer = run.tile_shape((n * n,))[0]
        return plan_blocks(n, buffer, self.residency), buffer

    # -- L (or U) by regions of L --------------------------------------------
    def _region(self, rows: slice, cols: slice) -> Region:
        return (cols, rows) if self.upper else (rows, cols)

    def _as_lower(self, block: np.ndarray) -> np.ndarray:
        return block.T if self.upper else block

    def _read(self, read: Any, rows: slice, cols: slice, shape: tuple, dtype: Any) -> np.ndarray:
        """``L[rows, cols]`` through ``read`` (a region of the stored factor), zero-padded to
        ``shape``."""
        return _padded(self._as_lower(read(self._region(rows, cols))), shape, dtype)

    def _write(self, run: Run, rows: slice, cols: slice, value: Any) -> None:
        value = np.asarray(value)[: rows.stop - rows.start, : cols.stop - cols.start]
        run.write(self._region(rows, cols), self._as_lower(value))

    # -- forward -------------------------------------------------------------
    def forward(self, run: Run) -> None:
        n = self.output_shape[0]
        if n == 0:
            return
        dtype = np.dtype(self.result_dtype(run.inputs[0]))
        blocks, buffer = self.blocks(run)
        fns = {f.__name__: run.jit(f) for f in (_chol_syrk, _chol_update)}
        width = blocks[0].width
        pieces = max(1, buffer // width)
        chunk = max(1, buffer // max(pieces, width))
        shapes = (width, pieces, chunk)
        failed = False
        strips = -(-n // chunk)
        with run.temporary((strips, n, chunk), dtype) as copy:
            finished = _Strips(copy, chunk)
            for block in blocks:
                failed |= self._column_block(run, block, shapes, dtype, fns, finished)
        if failed:  # as jax.numpy: NaN wherever L is not zero
            for b in blocks:
                cols = slice(b.start, b.start + b.width)
                for piece in _pieces(slice(b.start, n), pieces):
                    nan = np.full((piece.stop - piece.start, b.width), np.nan, dtype)
                    self._write(run, piece, cols, np.tril(nan, piece.start - b.start))

    def _column_block(
        self, run: Run, block: Block, shapes: tuple, dtype: np.dtype, fns: dict, finished: Any
    ) -> bool:
        """Write ``L``'s columns of ``block``; whether its diagonal block is not positive
        definite."""
        n = self.output_shape[0]
        width, height, chunk = shapes
        s, w, h = block
        cols = slice(s, s + w)
        (x,) = run.inputs
        lkk = None
        for top in range(s, n, h):
            rows = slice(top, min(top + h, n))
            below = slice(max(rows.start, s + w), rows.stop)
            acc = [
                _padded(x.read((p, cols)), (height, width), dtype) for p in _pieces(below, height)
            ]
            diagonal = None
            if lkk is None:
                diagonal = _padded_diagonal(np.asarray(x.read((cols, cols)), dtype), width)
            for a in range(0, s, chunk):
                columns = slice(a, min(a + chunk, s))
                y = _padded(finished.read(cols, columns), (width, chunk), dtype)
                if diagonal is not None:
                    diagonal = fns["_chol_syrk"](diagonal, y)
                for i, p in enumerate(_pieces(below, height)):
                    left = _padded(finished.read(p, columns), (height, chunk), dtype)
                    acc[i] = fns["_chol_update"](acc[i], left, y)
                del y
            if diagonal is not None:
                lkk = _host_cholesky(np.asarray(diagonal))
                del diagonal
                self._write(run, cols, cols, lkk)
                finished.write(cols, cols, lkk)
            assert lkk is not None  # the first row block factored the diagonal block
            for p in _pieces(below, height):
                part = _host_right_solve(np.asarray(acc.pop(0), dtype), lkk)
                self._write(run, p, cols, part)
                finished.write(p, cols, part)
                del part  # before the next piece's solve: one tile-sized result at a time
        zeros = np.zeros((height, w), dtype)
        for p in _pieces(slice(0, s), height):  # above the diagonal (for an np.empty target)
            self._write(run, p, cols, zeros)
        return bool(np.isnan(np.asarray(lkk)).any())

    # -- backward ------------------------------------------------------------
    def backward(self, run: Run) -> None:
        n = self.output_shape[0]
        if n == 0 or not run.wants_grad(0):
            return
        dtype = np.dtype(forward_output(run).dtype)
        blocks, buffer = self.blocks(run)
        names = (_chol_grad_update, _chol_grad_solve, _chol_grad_gram, _chol_grad_diagonal)
        fns = {f.__name__: run.jit(f) for f in names}
        width = blocks[0].width
        pieces = max(1, buffer // width)
        shapes = (width, pieces, max(1, buffer // max(pieces, width)))
        with run.temporary((n, n), dtype) as xs:
            for block in reversed(blocks):
                self._grad_column_block(run, xs, block, shapes, dtype, fns)

    def _grad_column_block(
        self, run: Run, xs: Any, block: Block, shapes: tuple, dtype: np.dtype, fns: dict
    ) -> None:
        """Solve ``X``'s columns of ``block`` (those right of it solved), store them in ``xs``
        and add ``½X`` to the gradient."""
        n = self.output_shape[0]
        width, height, chunk = shapes
        s, w, h = block
        cols = slice(s, s + w)
        square = (width, width)
        lkk = _padded_diagonal(
            self._read(forward_output(run).read, cols, cols, (w, w), dtype), width
        )
        gram = np.tril(self._read(cotangent(run).read, cols, cols, square, dtype))
        for top in range(s + w, n, h):
            rows = slice(top, min(top + h, n))
            acc = [
                self._read(cotangent(run).read, p, cols, (height, width), dtype)
                for p in _pieces(rows, height)
            ]
            for a in range(s + w, n, chunk):
                columns = slice(a, min(a + chunk, n))
                ls = self._read(forward_output(run).read, columns, cols, (chunk, width), dtype)
                for i, p in enumerate(_pieces(rows, height)):
                    left = _padded(xs.read((p, columns)), (height, chunk), dtype)
                    acc[i] = fns["_chol_grad_update"](acc[i], left, ls)
                del ls
            for p in _pieces(rows, height):
                solved = np.asarray(fns["_chol_grad_solve"](acc.pop(0), lkk))
                part = solved[: p.stop - p.start, :w]
                xs.write((p, cols), part)
                xs.write((cols, p), part.T)
                run.accumulate(0, (p, cols), part * 0.5)
                run.accumulate(0, (cols, p), part.T * 0.5)
                ls = self._read(forward_output(run).read, p, cols, (height, width), dtype)
                gram = fns["_chol_grad_gram"](gram, solved, ls)
        diagonal = np.asarray(fns["_chol_grad_diagonal"](lkk, gram))[:w, :w]
        xs.write((cols, cols), diagonal)
        run.accumulate(0, (cols, cols), diagonal * 0.5)
