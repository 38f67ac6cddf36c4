"""LU with partial pivoting of a stored square matrix, left-looking over column panels.

``P A = L U`` for an n × n ``A`` larger than the memory budget.  The columns are cut
in panels of width ``w`` (the budget's, see :func:`panel_plan`); panel ``j`` is read
from ``A``, given the updates of every factored panel ``k < j`` (read back from a
scratch array kept panel by panel, :class:`PanelStore`: ``U_kj = L_kk⁻¹ A_kj``, then
``A_ij -= L_ik U_kj`` below), and factored with partial pivoting down its whole height (by
one LAPACK ``getrf`` when the panel is at least :data:`WHOLE_FROM` wide), then written to
the scratch array.

Row interchanges are never applied to storage.  A panel in memory is indexed by the
matrix's own rows; pivoting only chooses which rows come next.  A factored panel is
stored in the order "pivot rows so far, then the rows not yet pivoted in ascending
order", so a later pass finds where each stored row belongs from the pivots alone
(:meth:`Factorization.rest`): the interchanges are applied lazily, consistently, and
cost no I/O.  Forward and back substitution (:mod:`oocarr.ops.lu_solve`) stream the
panels the same way.

Memory: two shares of the budget (``residency = 2``, ``whole_budget``): the panel
(n × w), and everything else: the n-long pivot vectors, three w × w blocks (a
diagonal block, ``U_kj`` and its solve) and row blocks of h × w (streamed with one read
ahead, their updates and gathers), and, while a panel is factored, the in-panel LU of n × b
columns or LAPACK's column-major copy of the whole panel (then 4 columns narrower, so that
the copy fits beside the vectors).  Block math runs
through ``run.jit`` (small blocks on the host: :data:`HOST_BELOW`).

Read volume.  With ``p = ⌈n/w⌉`` panels (``w_k = w`` but the last), the LU reads ``A``
once and, for each panel ``j``, rows ``k·w ..< n`` of every panel ``k < j``::

    R_LU(w) = n²·s_A + s · Σ_{j=1}^{p-1} Σ_{k=0}^{j-1} (n - k·w)·w
            ≈ n²·s_A + s·n²·(p² - 1)/(3p)        (n a multiple of w)

(``s_A``: ``A``'s itemsize, ``s``: the factor's).  ``solve`` adds the right-hand side
(``n·K·s_B``) and, per block of right-hand sides, a forward sweep (rows ``k·w ..< n``
of each panel: ``Σ_k (n - k·w)·w_k``; skipped when the right-hand sides are few enough
to ride along the factorization in memory) and a back sweep (rows ``0 ..< k·w + w_k``:
``Σ_k (k·w + w_k)·w_k``).

The optimum it is compared with is this same algorithm with the widest panel a budget
of ``M`` bytes could hold, ``w* = ⌊M / (n·s)⌋``: a panel taking the whole budget, with
nothing else resident.  That is unattainable (the factor's row blocks must be somewhere),
so ``R(w*)`` is a lower bound on this panel algorithm's reads; ours holds the panel in
half the budget, ``w ≈ w*/2``, and since ``R`` grows like ``p/3``, ``R(w)/R(w*) < 2``.
It is *not* the lower bound over all LU algorithms: those read ``Ω(n³/√M)`` words (the
Hong-Kung bound for the n³ multiply-adds), which recursive square-block algorithms
approach, while a column-panel algorithm reads ``Θ(n⁴/M)``: the same order while the
matrix is a few budgets large, more for a matrix many budgets large.

A singular matrix gives an exactly zero pivot (its column is zero below the diagonal, so
nothing is divided by it): ``U`` has a zero on its diagonal, ``det`` is 0 and solves give
``inf``/``nan``, as ``jax.numpy.linalg``'s.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from oocarr.engine.op import CustomOp, Region, Run
from oocarr.errors import NotSupportedError, ShapeMismatchError

__all__ = [
    "Blocks",
    "Factorization",
    "LUOp",
    "PanelPlan",
    "PanelStore",
    "compute_dtype",
    "diagonal_block",
    "factor",
    "gradient_accumulator",
    "panel_plan",
    "panel_store",
    "row_regions",
    "share_of",
    "square_size",
]

#: n-long vectors held beside the panel (pivots, rows left, an order, a mask), counted in
#: elements of the factor (an int32 or a bool is no wider than a float32).
VECTORS = 4
#: w × w blocks held at once: a diagonal block, the rows it solves for, the solution.
SQUARES = 3
#: The narrowest panel factored whole by LAPACK's ``getrf`` (:meth:`Factorization.factor_panel`);
#: narrower panels are factored ``columns`` at a time, keeping the width the copy would cost
#: (a few columns out of fewer than this would raise the reads, which grow with the panels).
WHOLE_FROM = 64
#: Rows copied at a time between the panel (row-major) and LAPACK's column-major copy: whole
#: gathers into a column-major array ran at 190 ms for 8192 × 895, blocks of 256 rows at 6.5 ms.
COPY_ROWS = 256
#: h × w row blocks held at once: the one used, the one read ahead, the one XLA holds, a
#: gather of the panel's rows, their update and the product.
ROW_BLOCKS = 6


@dataclass(frozen=True)
class PanelPlan:
    """Panel width, row-block height and in-panel column width for an n × n matrix.

    Examples
    --------
    >>> plan = panel_plan(256, 8192)
    >>> plan.width, plan.panels()[-1]
    (32, (224, 32))
    """

    n: int
    #: w: columns of a panel (the last may be narrower)
    width: int
    #: h: rows of a streamed block
    rows: int
    #: b: columns factored at once inside a panel
    columns: int
    #: elements of the second share left for row blocks and in-panel columns
    spare: int
    #: whether LAPACK factors each panel whole (else ``columns`` at a time)
    whole: bool = False

    def panels(self) -> list[tuple[int, int]]:
        """``(first column, width)`` of each panel."""
        return [(a, min(self.width, self.n - a)) for a in range(0, self.n, self.width)]


def panel_plan(n: int, share: int, beside: int = 0) -> PanelPlan:
    """The plan for a share of ``share`` elements (half the budget), with ``beside`` columns of
    right-hand sides held next to the panel.

    Panels at least :data:`WHOLE_FROM` wide are factored whole by LAPACK (``whole``): a few
    columns narrower, so that the second share holds LAPACK's column-major copy of the panel
    beside the n-long vectors.

    Examples
    --------
    >>> panel_plan(100, 100_000).width  # the whole matrix in one panel
    100
    >>> panel_plan(256, 2100).width, panel_plan(256, 2100).rows
    (8, 9)
    >>> plan = panel_plan(1024, 200_000)
    >>> plan.whole, plan.width, plan.rows
    (True, 191, 37)
    """
    w = max(1, min(n, share // n - beside))
    while w > 1 and (VECTORS + 2) * n + SQUARES * w * w + ROW_BLOCKS * w > share:
        w -= 1
    whole_width = min(w, (share - VECTORS * n) // n - beside)
    whole = whole_width >= WHOLE_FROM
    if whole:
        w = whole_width
    spare = max(0, share - VECTORS * n - SQUARES * w * w)
    columns = max(1, min(w, spare // (4 * n)))
    rows = max(1, min(n, spare // (2 * ROW_BLOCKS * w)))
    return PanelPlan(n, w, rows, columns, spare, whole)


def least_share(n: int) -> int:
    """Elements of the smallest share :func:`panel_plan` runs with: one-column panels."""
    return (VECTORS + 2) * n + SQUARES + ROW_BLOCKS


def square_size(shape: tuple[int, ...], what: str) -> int:
    """``n`` of an n × n matrix; raises naming ``shape`` otherwise.

    Examples
    --------
    >>> square_size((3, 3), "det")
    3
    """
    if len(shape) != 2:
        raise NotSupportedError(
            f"{what} factors one matrix of 2 axes, got shape {shape}; for a stack of matrices, "
            "call it on each x[i]"
        )
    if shape[0] != shape[1]:
        raise ShapeMismatchError(
            f"{what} needs a square matrix, got shape {shape}; for a least-squares solution "
            "of a rectangular system use oocarr.linalg.lstsq"
        )
    return shape[0]


def compute_dtype(*dtypes: Any, what: str = "LU") -> np.dtype:
    """The factor's dtype for inputs of ``dtypes``: JAX's promotion to a real floating type
    (float32 without ``jax_enable_x64``); integers and complex numbers are refused.

    Examples
    --------
    >>> compute_dtype(np.dtype("float32"))
    dtype('float32')
    """
    for dtype in map(np.dtype, dtypes):
        if dtype.kind != "f":
            raise NotSupportedError(
                f"{what} of a {dtype} matrix is not built (real floating matrices only); cast "
                "it first, e.g. x.astype('float32')"
            )
    promoted = np.result_type(*dtypes, np.float32)
    return np.dtype(jax.dtypes.canonicalize_dtype(promoted))


# -- block math ---------------------------------------------------------------------------------
#: Blocks of fewer elements than this are computed on the host with NumPy's BLAS and LAPACK
#: instead of by ``run.jit``'s compiled functions: a compiled call costs about a millisecond
#: besides its math (dispatch, and the engine's heap trim while the op holds its budget), more
#: than a small block's math (a 256 × 256 solve under a quarter of its size, blocks of 10 × 32:
#: 3000 calls, 3 s compiled, 0.5 s on the host); larger blocks run faster compiled (a 2048 × 2048
#: solve, blocks of 120 × 191: 5 s compiled, 19 s on the host, on 2 busy cores).
HOST_BELOW = 1 << 12


def _times(a: jax.Array, b: jax.Array) -> jax.Array:
    return a @ b


def _times_t(a: jax.Array, b: jax.Array) -> jax.Array:
    return a.T @ b


def _eliminate(rows: jax.Array, multipliers: jax.Array, u: jax.Array) -> jax.Array:
    return rows - multipliers @ u


def _minus_times_t(acc: jax.Array, a: jax.Array, b: jax.Array) -> jax.Array:
    return acc - a @ b.T


def _lu_columns(s: jax.Array) -> tuple[jax.Array, jax.Array]:
    lu, _, permutation = jax.lax.linalg.lu(s)
    return lu, permutation


def _solve_unit_lower(d: jax.Array, r: jax.Array) -> jax.Array:
    return jax.scipy.linalg.solve_triangular(d, r, lower=True, unit_diagonal=True)


def _solve_upper(d: jax.Array, r: jax.Array) -> jax.Array:
    return jax.scipy.linalg.solve_triangular(d, r, lower=False)


def _solve_upper_t(d: jax.Array, r: jax.Array) -> jax.Array:
    return jax.scipy.linalg.solve_triangular(d, r, trans=1, lower=False)


def _solve_unit_lower_t(d: jax.Array, r: jax.Array) -> jax.Array:
    return jax.scipy.linalg.solve_triangular(d, r, trans=1, lower=True, unit_diagonal=True)


#: The triangular solves by name: the compiled function, whether ``d`` is unit lower
#: triangular (else upper), and whether it is transposed.
TRIANGULAR = {
    "unit_lower": (_solve_unit_lower, True, False),
    "upper": (_solve_upper, False, False),
    "upper_t": (_solve_upper_t, False, True),
    "unit_lower_t": (_solve_unit_lower_t, True, True),
}


def _host_triangular(d: np.ndarray, r: np.ndarray, unit_lower: bool, transposed: bool) -> Any:
    """The triangular solve with NumPy's LAPACK (raises on a zero diagonal).  NumPy's BLAS
    only: SciPy's, a second thread pool beside NumPy's, took 12 ms a call on 2 busy cores."""
    t = np.tril(d, -1) + np.eye(d.shape[0], dtype=d.dtype) if unit_lower else np.triu(d)
    return np.linalg.solve(t.T if transposed else t, r)


def _host_lu_columns(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LAPACK's ``getf2`` in NumPy: a few columns, partial pivoting (the first largest
    magnitude), no division by an exact zero pivot (its column is zero below it)."""
    lu = np.array(s)
    m, b = lu.shape
    permutation = np.arange(m)
    for i in range(min(m, b)):
        p = i + int(np.argmax(np.abs(lu[i:, i])))
        if p != i:
            lu[[i, p]] = lu[[p, i]]
            permutation[[i, p]] = permutation[[p, i]]
        if lu[i, i] != 0:
            lu[i + 1 :, i] /= lu[i, i]
        lu[i + 1 :, i + 1 :] -= np.outer(lu[i + 1 :, i], lu[i, i + 1 :])
    return lu, permutation


def lapack_lu(columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(lu, permutation)`` of the tall column-major ``columns`` by LAPACK's ``getrf``, in
    place: ``columns[permutation] = L U`` before the call.  An exactly zero pivot is left
    undivided (LAPACK's ``info > 0``), as in :func:`_host_lu_columns`.

    Examples
    --------
    >>> lu, permutation = lapack_lu(np.asfortranarray([[1.0, 2.0], [3.0, 4.0]]))
    >>> permutation, float(lu[1, 0])
    (array([1, 0]), 0.3333333333333333)
    """
    from scipy.linalg import lapack  # a core dependency, imported with the first factor

    (getrf,) = lapack.get_lapack_funcs(("getrf",), (columns,))
    lu, swaps, _ = getrf(columns, overwrite_a=True)
    permutation = np.arange(columns.shape[0])
    for i, p in enumerate(swaps):  # LAPACK's row interchanges, in order
        permutation[i], permutation[p] = permutation[p], permutation[i]
    return lu, permutation


class Blocks:
    """The block math of one pass, on NumPy arrays: ``run.jit``'s compiled functions, or for
    blocks under :data:`HOST_BELOW` elements NumPy's BLAS and LAPACK on the host.

    Examples
    --------
    >>> blocks = Blocks(None, 16)
    >>> blocks.triangular("upper", np.array([[2.0, 1.0], [0.0, 4.0]]), np.ones((2, 1))).ravel()
    array([0.375, 0.25 ])
    """

    def __init__(self, run: Run | None, block_elems: int) -> None:
        self.run = run
        self.host = run is None or block_elems < HOST_BELOW

    def _device(self) -> Run:
        """The run whose device computes the blocks (there is one unless ``host``)."""
        if self.run is None:
            raise RuntimeError("blocks made without a run compute on the host")
        return self.run

    def _jit(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self._device().jit(fn)(*args)

    def put(self, value: np.ndarray) -> Any:
        """``value`` where the block math runs, to pass to many calls."""
        return value if self.host else self._device().put(value)

    def times(self, a: Any, b: Any) -> np.ndarray:
        return a @ b if self.host else np.asarray(self._jit(_times, a, b))

    def times_t(self, a: Any, b: Any) -> np.ndarray:
        return a.T @ b if self.host else np.asarray(self._jit(_times_t, a, b))

    def eliminate(self, rows: Any, multipliers: Any, u: Any) -> np.ndarray:
        if self.host:
            return rows - multipliers @ u
        return np.asarray(self._jit(_eliminate, rows, multipliers, u))

    def minus_times_t(self, acc: Any, a: Any, b: Any) -> np.ndarray:
        return acc - a @ b.T if self.host else np.asarray(self._jit(_minus_times_t, acc, a, b))

    def lu_columns(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(lu, permutation)`` of the tall ``s`` with partial pivoting:
        ``s[permutation] = L U``."""
        if self.host:
            return _host_lu_columns(s)
        lu, permutation = self._jit(_lu_columns, s)
        return np.asarray(lu), np.asarray(permutation)

    def triangular(self, kind: str, d: np.ndarray, r: np.ndarray) -> np.ndarray:
        """``d⁻¹ r`` (or ``d⁻ᵀ r``) for a triangular ``d`` of :data:`TRIANGULAR`'s ``kind``;
        a zero on ``U``'s diagonal gives ``inf``/``nan``, as JAX's."""
        fn, unit_lower, transposed = TRIANGULAR[kind]
        if self.host:
            with contextlib.suppress(np.linalg.LinAlgError):  # singular: XLA's division
                return _host_triangular(d, r, unit_lower, transposed)
            if self.run is None:
                raise np.linalg.LinAlgError(f"a singular {kind} triangular block")
        return np.asarray(self._jit(fn, d, r))


# -- helpers ----------------------------------------------------------------------------------
def row_regions(start: int, stop: int, height: int, *cols: slice) -> list[Region]:
    """Blocks of ``height`` rows of ``[start, stop)``, over the columns ``cols``."""
    return [(slice(a, min(a + height, stop)), *cols) for a in range(start, stop, height)]


def diagonal_block(block: np.ndarray, width: int) -> np.ndarray:
    """A diagonal block padded to ``width`` × ``width`` with the identity (triangular solves
    with it leave the padded rows zero)."""
    m = block.shape[0]
    if m == width:
        return block
    out = np.eye(width, dtype=block.dtype)
    out[:m, :m] = block
    return out


def parity(order: np.ndarray) -> int:
    """The sign of the permutation ``order`` (+1 even, -1 odd).

    Examples
    --------
    >>> parity(np.array([0, 1, 2])), parity(np.array([1, 0, 2])), parity(np.array([1, 2, 0]))
    (1, -1, 1)
    """
    seen = np.zeros(len(order), bool)
    sign = 1
    for i in range(len(order)):
        if seen[i]:
            continue
        length, j = 0, i
        while not seen[j]:
            seen[j] = True
            j = int(order[j])
            length += 1
        if length % 2 == 0:
            sign = -sign
    return sign


class PanelStore:
    """The factor's panels in a private scratch array of shape ``(panels, n, w)``, read and
    written by regions ``(rows, columns within one panel)`` of the n × n factor: a block of a
    panel's rows is one contiguous run of the file, where in an n × n row-major array it was
    a run per row (an 8192² solve under 64 MiB: 82,000 writes of 3.5 KB, 0.5 s of 5.4, and
    0.7 s waiting for the strided reads behind its block products)."""

    def __init__(self, temporary: Any, n: int, width: int, dtype: np.dtype) -> None:
        self._temporary = temporary
        self._width = width
        self.shape = (n, n)
        self.dtype = np.dtype(dtype)

    def _where(self, region: Region) -> Region:
        rows, cols = region
        k = cols.start // self._width
        first = k * self._width
        return (slice(k, k + 1), rows, slice(cols.start - first, cols.stop - first))

    def read(self, region: Region) -> np.ndarray:
        return self._temporary.read(self._where(region))[0]

    def write(self, region: Region, value: Any) -> None:
        self._temporary.write(self._where(region), np.asarray(value)[None])


@contextlib.contextmanager
def panel_store(run: Run, plan: PanelPlan, dtype: np.dtype) -> Iterator[PanelStore]:
    """A :class:`PanelStore` for ``plan``'s factor, removed when the block exits."""
    shape = (len(plan.panels()), plan.n, plan.width)
    with run.temporary(shape, dtype) as temporary:
        yield PanelStore(temporary, plan.n, plan.width, dtype)


class Factorization:
    """``P A = L U`` as one LU pass leaves it: the factor's panels in a scratch array
    (``store``, a :class:`PanelStore`), the pivots and the diagonal's statistics in memory.

    ``pivots[i]`` is the row of ``A`` at position ``i`` of ``P A``.  Stored panel ``k``
    (columns ``k·w ..``) holds its rows in the order ``pivots[:k·w + w_k]`` then
    :meth:`rest` ``(k·w + w_k)``: rows above the diagonal block are ``U``, the diagonal
    block holds ``L_kk`` and ``U_kk``, the rows below are ``L``'s.
    """

    def __init__(self, store: Any, plan: PanelPlan, dtype: np.dtype, blocks: Blocks) -> None:
        self.store = store
        self.plan = plan
        self.blocks = blocks
        self.dtype = np.dtype(dtype)
        self.pivots = np.zeros(plan.n, np.int32)
        self.product = 1.0  # the diagonal's product, in float64
        self.log_abs = 0.0
        self.signs = 1.0

    def rest(self, end: int) -> np.ndarray:
        """The rows of ``A`` not among ``pivots[:end]``, ascending."""
        free = np.ones(self.plan.n, bool)
        free[self.pivots[:end]] = False
        return np.flatnonzero(free).astype(np.int32)

    def order(self, end: int) -> np.ndarray:
        """The rows of ``A`` in the order a panel factored up to column ``end`` is stored."""
        return np.concatenate([self.pivots[:end], self.rest(end)])

    def diagonal(self, k: int) -> np.ndarray:
        """Panel ``k``'s diagonal block (``L_kk`` below, ``U_kk`` on and above), padded."""
        start, width = self.plan.panels()[k]
        cols = slice(start, start + width)
        return diagonal_block(self.store.read((cols, cols)), self.plan.width)

    def count_diagonal(self, values: np.ndarray) -> None:
        values = np.asarray(values, np.float64)
        with np.errstate(over="ignore", under="ignore"):  # det beyond float64: ±inf or 0
            self.product *= float(np.prod(values))
        with np.errstate(divide="ignore"):
            self.log_abs += float(np.sum(np.log(np.abs(values))))
        self.signs *= float(np.prod(np.sign(values)))

    def sign(self) -> float:
        """The sign of ``det A``: the permutation's times the diagonal's (0 when singular)."""
        return parity(self.pivots) * self.signs

    def det(self) -> float:
        """``det A``; exactly 0 for a zero pivot, also where the other pivots' product
        overflows (as ``jax.numpy``'s, the sign times ``exp(log|det|)``)."""
        return 0.0 if self.signs == 0 else parity(self.pivots) * self.product

    # -- applying a factored panel to columns held in memory ----------------------------------
    def lower_blocks(self, run: Run, k: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``(rows of A, block of L)`` for the rows of panel ``k`` below its diagonal block,
        streamed from storage."""
        start, width = self.plan.panels()[k]
        below = start + width
        rest = self.rest(below)
        regions = row_regions(below, self.plan.n, self.plan.rows, slice(start, start + width))
        for region, (block,) in run.stream(regions, [self.store]):
            rows = region[0]
            yield rest[rows.start - below : rows.stop - below], block

    def apply(
        self,
        run: Run,
        k: int,
        target: np.ndarray,
        diagonal: np.ndarray,
        blocks: Iterable[tuple[np.ndarray, np.ndarray]],
    ) -> None:
        """Panel ``k``'s elimination applied to ``target`` (rows indexed as ``A``'s, in
        place): its pivot rows solved by ``L_kk`` become ``U_k·``, the rest get
        ``-= L_ik U_k·``."""
        plan = self.plan
        start, width = plan.panels()[k]
        pivots = self.pivots[start : start + width]
        columns = target.shape[1]
        math = self.blocks
        padded = run.pad(target[pivots], (plan.width, columns))
        solved = math.triangular("unit_lower", diagonal, padded)
        target[pivots] = solved[:width]
        u = math.put(solved)
        for rows, block in blocks:
            block = run.pad(np.asarray(block, self.dtype), (plan.rows, plan.width))
            target[rows] -= math.times(block, u)[: len(rows)]

    def apply_stored(self, run: Run, k: int, target: np.ndarray) -> None:
        """:meth:`apply` with panel ``k`` read back from storage."""
        self.apply(run, k, target, self.diagonal(k), self.lower_blocks(run, k))

    def apply_held(self, run: Run, k: int, panel: np.ndarray, target: np.ndarray) -> None:
        """:meth:`apply` with panel ``k`` still in memory (``panel``, rows as ``A``'s)."""
        plan = self.plan
        start, width = plan.panels()[k]
        pivots = self.pivots[start : start + width]
        diagonal = diagonal_block(panel[pivots, :width], plan.width)
        rest = self.rest(start + width)
        blocks = (
            (rest[a : a + plan.rows], panel[rest[a : a + plan.rows], :width])
            for a in range(0, len(rest), plan.rows)
        )
        self.apply(run, k, target, diagonal, blocks)

    # -- one panel -------------------------------------------------------------------------------
    def factor_panel(self, run: Run, j: int, panel: np.ndarray) -> None:
        """Factor panel ``j`` (updated by the panels before it) with partial pivoting down its
        whole height, ``plan.columns`` columns at a time; records its pivots."""
        plan = self.plan
        if plan.whole:
            self._factor_whole(run, j, panel)
            return
        n, w, b, h = plan.n, plan.width, plan.columns, plan.rows
        start, width = plan.panels()[j]
        math = self.blocks
        for first in range(0, width, b):
            count = min(b, width - first)
            free = self.rest(start + first)
            m = len(free)
            columns = np.zeros((n, b), self.dtype)
            columns[:m, :count] = panel[free, first : first + count]
            lu, permutation = math.lu_columns(columns)
            ordered = free[permutation[:m]]
            panel[ordered, first : first + count] = lu[:m, :count]
            chosen = ordered[:count]
            self.pivots[start + first : start + first + count] = chosen
            self.count_diagonal(np.diagonal(lu[:count, :count]))
            right = first + count
            if right >= width:
                continue
            l_cc = diagonal_block(lu[:count, :count], b)
            u = math.triangular("unit_lower", l_cc, run.pad(panel[chosen], (b, w)))[:count].copy()
            u[:, :right] = 0
            panel[chosen, right:] = u[:, right:]
            u = math.put(run.pad(u, (b, w)))
            left = ordered[count:]
            for a in range(0, len(left), h):
                rows = left[a : a + h]
                multipliers = run.pad(panel[rows, first : first + count], (h, b))
                updated = math.eliminate(run.pad(panel[rows], (h, w)), multipliers, u)
                panel[rows] = updated[: len(rows)]

    def _factor_whole(self, run: Run, j: int, panel: np.ndarray) -> None:
        """Factor panel ``j``'s rows not yet pivoted with one ``getrf``, on a column-major
        copy (LAPACK's layout) made and put back :data:`COPY_ROWS` rows at a time.  For
        8192 × 895 float32: 90 ms, where 149 columns at a time through XLA took 200."""
        start, width = self.plan.panels()[j]
        free = self.rest(start)
        run.release()  # the freed row blocks handed back before the copy takes the second share
        copy = run.empty((width, len(free)), self.dtype).T
        for a in range(0, len(free), COPY_ROWS):
            copy[a : a + COPY_ROWS] = panel[free[a : a + COPY_ROWS], :width]
        lu, permutation = lapack_lu(copy)
        ordered = free[permutation]
        for a in range(0, len(free), COPY_ROWS):
            panel[ordered[a : a + COPY_ROWS], :width] = lu[a : a + COPY_ROWS]
        self.pivots[start : start + width] = ordered[:width]
        self.count_diagonal(np.diagonal(lu[:width, :width]))

    def write_panel(self, j: int, panel: np.ndarray) -> None:
        """Store factored panel ``j`` in its order (see the class's docstring)."""
        plan = self.plan
        start, width = plan.panels()[j]
        order = self.order(start + width)
        for a in range(0, plan.n, plan.rows):
            rows = order[a : a + plan.rows]
            region = (slice(a, a + len(rows)), slice(start, start + width))
            self.store.write(region, panel[rows, :width])


def factor(
    run: Run,
    plan: PanelPlan,
    matrix: Any,
    store: Any,
    dtype: np.dtype,
    rhs: np.ndarray | None = None,
) -> Factorization:
    """LU-factor ``matrix`` (a reader of an n × n array) into ``store`` (a
    :class:`PanelStore`), left-looking over ``plan``'s panels.  ``rhs`` (n × K, rows as ``A``'s, in
    memory) gets each panel's forward elimination while the panel is in memory: on return
    it holds ``L⁻¹ P rhs`` (rows as ``A``'s: position ``i`` at row ``pivots[i]``)."""
    n, w = plan.n, plan.width
    fac = Factorization(store, plan, dtype, Blocks(run, plan.rows * w))
    for j, (start, width) in enumerate(plan.panels()):
        cols = slice(start, start + width)
        panel = run.empty((n, w), fac.dtype)
        panel.fill(0)
        for region, (block,) in run.stream(row_regions(0, n, plan.rows, cols), [matrix]):
            panel[region[0], :width] = block
        for k in range(j):
            fac.apply_stored(run, k, panel)
        fac.factor_panel(run, j, panel)
        if rhs is not None:
            fac.apply_held(run, j, panel, rhs)
        fac.write_panel(j, panel)
        del panel
    return fac


def share_of(run: Run, n: int) -> int:
    """Elements of one of the op's two shares of the budget (at most what a one-panel plan
    could use)."""
    return run.tile_shape((4 * n * n + 16 * n,))[0]


class LUOp(CustomOp):
    """What the LU ops share: two shares of the whole budget, the smallest plan, the dtype."""

    # the panel, and one share for everything else (see the module's docstring)
    residency = 2
    whole_budget = True
    needs_output = True
    what = "LU"

    @property
    def n(self) -> int:
        return self.in_shapes[0][0]

    def result_dtype(self, *inputs: jax.ShapeDtypeStruct) -> np.dtype:
        return compute_dtype(*(i.dtype for i in inputs), what=self.what)

    def min_tile_elems(self) -> int:
        return least_share(self.n)

    def min_tile_label(self) -> str:
        return (
            f"op tiles of {least_share(self.n)} elements ({self.what}'s smallest plan: panels "
            f"of one column of {self.n} rows, the pivot vectors and the in-panel LU)"
        )

    def plan_for(self, run: Run, beside: int = 0) -> PanelPlan:
        return panel_plan(self.n, share_of(run, self.n), beside)

    @contextlib.contextmanager
    def factored(self, run: Run, plan: PanelPlan, dtype: np.dtype) -> Iterator[Factorization]:
        """The LU factor of the op's first input, in a scratch array that lives as long as
        the block."""
        with panel_store(run, plan, dtype) as store:
            yield factor(run, plan, run.inputs[0], store, dtype)


def gradient_accumulator(
    run: Run, i: int, rows: int, shape: tuple[int, ...]
) -> Callable[[int, slice, np.ndarray], None]:
    """``add(first_row, columns, block)``: adds ``block`` (rows from ``first_row``) to input
    ``i``'s gradient in blocks of ``rows`` rows (a vector input of ``shape`` (n,) takes
    column 0)."""

    def add(first: int, columns: slice, block: np.ndarray) -> None:
        for a in range(0, block.shape[0], rows):
            part = block[a : a + rows]
            span = slice(first + a, first + a + part.shape[0])
            if len(shape) == 1:
                run.accumulate(i, (span,), part[:, 0])
            else:
                run.accumulate(i, (span, columns), part)

    return add
