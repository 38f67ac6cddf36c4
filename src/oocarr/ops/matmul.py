"""Matrix product with NumPy's ``matmul`` rules: stacks of matrices broadcast over their batch
axes, and 1-d operands are vectors.  An output tile accumulates row-panel × column-panel
products over k."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from oocarr.engine.op import INPUT_TILES, BlockParallelOp, HostBlock, Plan, Region
from oocarr.errors import ShapeMismatchError

from .elementwise import broadcast_region

__all__ = ["Matmul", "RowMatmul"]


class Matmul(BlockParallelOp):
    """``a @ b``: ``(..., m, k) @ (..., k, n)``, with ``(k,)`` vectors on either side."""

    name = "matmul"
    residency = 5  # for the budget check: a panel, b panel, partial, accumulator, output tile
    whole_budget = True
    shape_dependent = True

    def compute_output_shape(self) -> tuple[int, ...]:
        a, b = self.in_shapes
        if not a or not b:
            raise ShapeMismatchError(f"matmul needs arrays of at least 1 axis, got {a} @ {b}")
        self.a_vec, self.b_vec = len(a) == 1, len(b) == 1
        pa = (1, *a) if self.a_vec else a
        pb = (*b, 1) if self.b_vec else b
        if pa[-1] != pb[-2]:
            raise ShapeMismatchError(
                f"matmul: the last axis of {a} does not match the contraction axis of {b}"
            )
        try:
            self.batch = tuple(np.broadcast_shapes(pa[:-2], pb[:-2]))
        except ValueError:
            raise ShapeMismatchError(
                f"matmul: batch axes of {a} and {b} do not broadcast"
            ) from None
        self.m, self.k, self.n = pa[-2], pa[-1], pb[-1]
        self.a_batch, self.b_batch = pa[:-2], pb[:-2]
        return (
            *self.batch,
            *(() if self.a_vec else (self.m,)),
            *(() if self.b_vec else (self.n,)),
        )

    def plan(self, budget_elems: int, chunks: tuple[int, ...] | None, host: bool = False) -> Plan:
        """Output tiles as large as the budget allows, fed by k-panels of ``a`` and ``b``.

        Each input is read ``n / tn`` (``a``) or ``m / tm`` (``b``) times, so
        the output tile is what has to be large.  ``budget_elems`` is the whole
        budget (``whole_budget``).  Folded by XLA, the accumulator, the product
        being added to it and the finished tile waiting to be written take
        ``3 tm tn``, and the panels of ``a`` and ``b``, ``INPUT_TILES + 1`` each
        (the one in use, the next one read ahead, the previous one until XLA
        lets go of it), ``3 tk (tm + tn)``: square tiles with ``tk = side / 16``
        spend it as ``3.375 side²``.  Folded in place strip by strip (``host``:
        :meth:`host_block`), the accumulator is donated, the product is one
        strip of it and no panel is held after its step: ``(2 + 3/STRIPS) tm tn
        + 2 tk (tm + tn)``.  A short side (a vector, a tall-skinny product)
        leaves room to lengthen the other.  What is left after the tile goes to
        ``tk``: the fold of a 4096² tile runs at 324 GFLOP/s with ``tk = 512``
        and 358 with ``tk = 1024`` (2 cores).  Sides are balanced so that no edge tile is mostly
        padding.
        """
        total = max(1, budget_elems)
        # tiles held, in STRIPS-ths of a tile (folded in strips: the accumulator, the finished
        # tile and three strips: the product, the accumulator's strip it is added to, their
        # sum; with one strip counted, 8192² under 1 GB peaked at 964 of 954 MiB), and panels
        # of each side
        tiles, panels = (2 * STRIPS + 3, 2) if host else (3 * STRIPS, INPUT_TILES + 1)
        m = 1 if self.a_vec else max(self.m, 1)
        n = 1 if self.b_vec else max(self.n, 1)
        k = max(self.k, 1)
        # tiles / STRIPS * side² + 2 * panels * side * side / 16 = total
        side = max(1, math.isqrt(total * 8 * STRIPS // (8 * tiles + panels * STRIPS)))
        tm, tn = min(m, side), min(n, side)
        # Lengthening the long side only saves re-reads of the short operand, a fraction
        # short / long of the long one's bytes: beyond SHORT_SIDE_RATIO times, not worth memory.
        per_row = -(-tiles // STRIPS)  # whole tiles, rounded up, for the long side's rows
        if tn < side and tn <= tm:
            longest = max(side, SHORT_SIDE_RATIO * tn)
            tm = min(m, longest, max(tm, (total - panels * k * tn) // (per_row * tn + panels * k)))
        elif tm < side:
            longest = max(side, SHORT_SIDE_RATIO * tm)
            tn = min(n, longest, max(tn, (total - panels * k * tm) // (per_row * tm + panels * k)))
        tm, tn = _balanced(m, tm), _balanced(n, tn)
        room = (total - tiles * tm * tn // STRIPS) // (panels * (tm + tn))
        if host:  # several steps a tile, so that reading the next panels overlaps a GEMM
            room = min(room, HOST_PANEL)
        tk = _balanced(k, min(k, max(1, room)))
        tile = (
            *(1 for _ in self.batch),
            *(() if self.a_vec else (tm,)),
            *(() if self.b_vec else (tn,)),
        )
        return Plan(tile, {"k": tk})

    def buffers(
        self,
        out_tile: tuple[int, ...],
        in_blocks: Sequence[tuple[int, ...]],
        stored: Sequence[bool],
        host: bool = False,
    ) -> list[tuple[str, int, int]]:
        """What :meth:`plan` counts: three output-tile buffers and three panels of each side
        (folded by the host BLAS: two of each)."""
        if len(in_blocks) < 2:  # an empty product has no tiles, and reads nothing
            in_blocks = [(0,), (0,)]
        if host:
            return [
                ("accumulator and finished tile", 2, math.prod(out_tile)),
                (
                    "a step's product strip, its sum and its strip of the accumulator",
                    3,
                    -(-math.prod(out_tile) // STRIPS),
                ),
                ("a panels (in use, read ahead)", 2, math.prod(in_blocks[0])),
                ("b panels (in use, read ahead)", 2, math.prod(in_blocks[1])),
            ]
        panels = INPUT_TILES + 1
        return [
            ("accumulator, product and finished tile", 3, math.prod(out_tile)),
            ("a panels (in use, read ahead, held by XLA)", panels, math.prod(in_blocks[0])),
            ("b panels (in use, read ahead, held by XLA)", panels, math.prod(in_blocks[1])),
        ]

    def host_block(self, dtypes: Sequence[np.dtype]) -> HostBlock | None:
        """A product of two matrices of one float or complex dtype folded in place: each
        k-panel's product added into the accumulator by one function the engine compiles
        donating it (``compiled``), row strip by row strip (:func:`_fold_strips`), so XLA's
        product buffer is a strip, not a tile.  A 4096² tile: 1024-wide panels at 358
        GFLOP/s, where SciPy's GEMM with ``beta = 1`` ran at 187 and XLA's ``acc + a @ b`` on
        the whole tile at 253 (with a product-sized temporary); 512-wide: 324, 153 and 223
        (2-core VM).

        Examples
        --------
        >>> import numpy as np
        >>> host = Matmul((2, 3), (3, 2)).host_block([np.dtype("f4")] * 2)
        >>> a, b = np.ones((2, 3), "f4"), np.ones((3, 2), "f4")
        >>> host.compiled, np.asarray(host.fold(host.forward(a, b), a, b)).tolist()
        (True, [[6.0, 6.0], [6.0, 6.0]])
        """
        a, b = (np.dtype(d) for d in dtypes)
        if self.a_vec or self.b_vec or self.batch or a != b or a.char not in "fdFD":
            return None
        if jax.dtypes.canonicalize_dtype(a) != a:
            return None  # JAX computes it narrowed (float64 without x64)
        return HostBlock(jnp.matmul, _add, _fold_strips, compiled=True)

    def host_backward(self, dtypes: Sequence[np.dtype], wanted: Sequence[bool]) -> Any:
        """``g @ bᵀ`` and ``aᵀ @ g`` with NumPy's BLAS, for the products :meth:`host_block`
        folds: XLA's ``vjp`` of a 6400×256 by 256×1 block took 0.31 ms, NumPy's ``aᵀ @ g``
        0.18 ms, and each jitted call puts its three arguments on the device first.

        Examples
        --------
        >>> import numpy as np
        >>> backward = Matmul((2, 3), (3, 1)).host_backward([np.dtype("f4")] * 2, [True, True])
        >>> ga, gb = backward(np.ones((2, 1), "f4"), np.ones((2, 3), "f4"), np.ones((3, 1), "f4"))
        >>> ga.tolist(), gb.ravel().tolist()
        ([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], [2.0, 2.0, 2.0])
        """
        if self.host_block(dtypes) is None:
            return None
        want_a, want_b = wanted

        def backward(g: np.ndarray, a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
            grads = []
            if want_a:
                grads.append(g @ b.T)
            if want_b:
                grads.append(a.T @ g)
            return grads

        return backward

    def index_map(self, out_region: Region, plan: Plan) -> Iterator[tuple[Region, ...]]:
        nb = len(self.batch)
        batch, rest = out_region[:nb], list(out_region[nb:])
        rows = slice(0, 1) if self.a_vec else rest.pop(0)
        cols = slice(0, 1) if self.b_vec else rest.pop(0)
        a_batch = broadcast_region(batch, self.a_batch) if self.a_batch else ()
        b_batch = broadcast_region(batch, self.b_batch) if self.b_batch else ()
        step = plan.extra["k"]
        starts = range(0, self.k, step) if self.k else [0]
        for start in starts:
            ks = slice(start, min(start + step, self.k))
            a_region = (ks,) if self.a_vec else (*a_batch, rows, ks)
            b_region = (ks,) if self.b_vec else (*b_batch, ks, cols)
            yield a_region, b_region

    def forward_block(self, a: jax.Array, b: jax.Array) -> jax.Array:
        return jnp.matmul(a, b)

    def fused_form(self, stored: Sequence[bool]) -> BlockParallelOp | None:
        """A stored matrix (or stack) times an in-memory vector or matrix fuses as a
        :class:`RowMatmul`; any other product runs as a stored op."""
        a, b = self.in_shapes
        if tuple(stored) != (True, False) or len(a) < 2 or len(b) > 2:
            return None
        return RowMatmul(a, b, **self.params)


class RowMatmul(Matmul):
    """``x @ w`` with ``x`` stored (at least 2-d) and ``w`` in memory (a vector or a matrix):
    each row of the result needs only the same row of ``x``, so under ``jax.jit`` the call
    fuses (a row-local node of a fused array, evaluated on its consumer's row tiles) instead
    of writing its result.  Its gradients are :class:`Matmul`'s.

    Examples
    --------
    >>> op = Matmul((100, 8), (8, 2)).fused_form([True, False])
    >>> type(op).__name__, op.output_shape
    ('RowMatmul', (100, 2))
    """

    fusable = True
    row_local = True
    fn = staticmethod(jnp.matmul)

    def fused_node(self) -> dict[str, Any]:
        """Its rows are the leading axes of ``x`` but the last."""
        return {"lead": len(self.in_shapes[0]) - 1}


#: The widest k-panel folded by the host BLAS: the GEMM of a 4096² tile runs as fast with it
#: as with wider ones (235 GFLOP/s against 243 for 4096, 2 cores), and a tile of several
#: steps reads the next panels while one computes (4096², 512 MB budget: one 4096-wide step
#: 0.83 s, four 1024-wide steps 0.75 s).
HOST_PANEL = 1024

#: Row strips an accumulator tile is folded in (:func:`_fold_strips`): XLA's product buffer
#: is an eighth of the tile.  4096² tiles, 1024-wide panels: 326 GFLOP/s in 4 strips, 358 in
#: 8, 215-322 in 16.
STRIPS = 8


def _fold_strips(acc: jax.Array, a: jax.Array, b: jax.Array) -> jax.Array:
    """``acc + a @ b``, one row strip of ``acc`` at a time (``acc`` donated: in place)."""
    rows = acc.shape[0] // STRIPS

    def strip(i: Any, acc: jax.Array) -> jax.Array:
        top = i * rows
        part = jax.lax.dynamic_slice_in_dim(a, top, rows, 0) @ b
        here = jax.lax.dynamic_slice_in_dim(acc, top, rows, 0)
        return jax.lax.dynamic_update_slice_in_dim(acc, here + part.astype(acc.dtype), top, 0)

    if rows:
        acc = jax.lax.fori_loop(0, STRIPS, strip, acc)
    rest = acc.shape[0] - rows * STRIPS
    if rest:  # the rows left over, in one more (smaller) strip
        part = a[rows * STRIPS :] @ b
        acc = acc.at[rows * STRIPS :].add(part.astype(acc.dtype))
    return acc


def _add(acc: jax.Array, part: jax.Array) -> jax.Array:
    return acc + part


#: How much longer than a short side (a vector, a narrow matrix) the other side of an output
#: tile grows, budget permitting.
SHORT_SIDE_RATIO = 64

#: Tile sides above this are rounded to a multiple of it where that fits: vector widths and
#: storage chunks are powers of two.
_ALIGN = 128


def _balanced(extent: int, most: int) -> int:
    """The tile side, at most ``most``, that cuts ``extent`` into the fewest, most equal parts.

    A multiple of :data:`_ALIGN` that divides ``extent`` exactly is preferred when one lies
    between ``most / 2`` and ``most``.

    >>> _balanced(4096, 2828), _balanced(8192, 1365), _balanced(1000, 300), _balanced(7, 3)
    (2048, 1024, 250, 3)
    """
    most = max(1, min(most, extent))
    for side in range(most - most % _ALIGN, most // 2, -_ALIGN):
        if side and extent % side == 0:
            return side
    parts = -(-extent // most)
    return -(-extent // parts)
