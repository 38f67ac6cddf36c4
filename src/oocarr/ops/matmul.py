"""Matrix product with NumPy's ``matmul`` rules: stacks of matrices broadcast over their batch
axes, and 1-d operands are vectors.  An output tile accumulates row-panel × column-panel
products over k."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from oocarr.engine.op import INPUT_TILES, BlockParallelOp, HostBlock, Plan, Region
from oocarr.errors import ShapeMismatchError

from .elementwise import broadcast_region

__all__ = ["Matmul"]


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

    def plan(self, budget_elems: int, chunks, host: bool = False) -> Plan:
        """Output tiles as large as the budget allows, fed by k-panels of ``a`` and ``b``.

        Each input is read ``n / tn`` (``a``) or ``m / tm`` (``b``) times, so
        the output tile is what has to be large.  ``budget_elems`` is the whole
        budget (``whole_budget``).  Folded by XLA, the accumulator, the product
        being added to it and the finished tile waiting to be written take
        ``3 tm tn``, and the panels of ``a`` and ``b``, ``INPUT_TILES + 1`` each
        (the one in use, the next one read ahead, the previous one until XLA
        lets go of it), ``3 tk (tm + tn)``: square tiles with ``tk = side / 16``
        spend it as ``3.375 side²``.  Folded by the host BLAS (``host``), the
        product is added in place (GEMM with ``beta = 1``) and no panel is held
        after its step: ``2 tm tn + 2 tk (tm + tn)``, ``2.25 side²``.  A short
        side (a vector, a tall-skinny product) leaves room to lengthen the
        other.  What is left after the tile goes to ``tk``: the GEMM runs at
        148 GFLOP/s with ``tk = 256`` and 235 with ``tk = 1024`` on a 4096² tile
        (OpenBLAS, 2 cores).  Sides are balanced so that no edge tile is mostly
        padding.
        """
        total = max(1, budget_elems)
        tiles, panels = (2, 2) if host else (3, INPUT_TILES + 1)
        m = 1 if self.a_vec else max(self.m, 1)
        n = 1 if self.b_vec else max(self.n, 1)
        k = max(self.k, 1)
        # tiles * side² + 2 * panels * side * side / 16 = total
        side = max(1, math.isqrt(total * 8 // (8 * tiles + panels)))
        tm, tn = min(m, side), min(n, side)
        # Lengthening the long side only saves re-reads of the short operand, a fraction
        # short / long of the long one's bytes: beyond SHORT_SIDE_RATIO times, not worth memory.
        if tn < side and tn <= tm:
            longest = max(side, SHORT_SIDE_RATIO * tn)
            tm = min(m, longest, max(tm, (total - panels * k * tn) // (tiles * tn + panels * k)))
        elif tm < side:
            longest = max(side, SHORT_SIDE_RATIO * tm)
            tn = min(n, longest, max(tn, (total - panels * k * tm) // (tiles * tm + panels * k)))
        tm, tn = _balanced(m, tm), _balanced(n, tn)
        room = (total - tiles * tm * tn) // (panels * (tm + tn))
        if host:  # several steps a tile, so that reading the next panels overlaps a GEMM
            room = min(room, HOST_PANEL)
        tk = _balanced(k, min(k, max(1, room)))
        tile = (
            *(1 for _ in self.batch),
            *(() if self.a_vec else (tm,)),
            *(() if self.b_vec else (tn,)),
        )
        return Plan(tile, {"k": tk})

    def buffers(self, out_tile, in_blocks, stored, host=False) -> list[tuple[str, int, int]]:
        """What :meth:`plan` counts: three output-tile buffers and three panels of each side
        (folded by the host BLAS: two of each)."""
        if len(in_blocks) < 2:  # an empty product has no tiles, and reads nothing
            in_blocks = [(0,), (0,)]
        if host:
            return [
                ("accumulator and finished tile", 2, math.prod(out_tile)),
                ("a panels (in use, read ahead)", 2, math.prod(in_blocks[0])),
                ("b panels (in use, read ahead)", 2, math.prod(in_blocks[1])),
            ]
        panels = INPUT_TILES + 1
        return [
            ("accumulator, product and finished tile", 3, math.prod(out_tile)),
            ("a panels (in use, read ahead, held by XLA)", panels, math.prod(in_blocks[0])),
            ("b panels (in use, read ahead, held by XLA)", panels, math.prod(in_blocks[1])),
        ]

    def host_block(self, dtypes) -> HostBlock | None:
        """The host BLAS's GEMM for a product of two matrices of one float or complex dtype:
        each k-panel's product added into the accumulator in place (``beta = 1``), which
        XLA's ``acc + a @ b`` cannot do without a product-sized buffer and a second pass over
        the tile.  A 4096² tile with 256-wide panels: XLA 93 GFLOP/s, NumPy's ``matmul`` then
        an add 121, SciPy's ``gemm`` with ``beta = 1`` 171 (NumPy alone, in memory: 188).

        Examples
        --------
        >>> import numpy as np
        >>> host = Matmul((2, 3), (3, 2)).host_block([np.dtype("f4")] * 2)
        >>> a, b = np.ones((2, 3), "f4"), np.ones((3, 2), "f4")
        >>> host.fold(host.forward(a, b), a, b).tolist()
        [[6.0, 6.0], [6.0, 6.0]]
        """
        a, b = (np.dtype(d) for d in dtypes)
        if self.a_vec or self.b_vec or self.batch or a != b or a.char not in _GEMM:
            return None
        if jax.dtypes.canonicalize_dtype(a) != a:
            return None  # JAX computes it narrowed (float64 without x64)
        from scipy.linalg import blas

        gemm = getattr(blas, _GEMM[a.char])

        # C-ordered a (m×k), b (k×n) and c are F-ordered aᵀ, bᵀ, cᵀ: cᵀ = bᵀ aᵀ in BLAS terms,
        # so no operand is copied to Fortran order.
        def forward(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            return np.ascontiguousarray(gemm(1.0, b.T, a.T).T)

        def fold(acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
            out = gemm(1.0, b.T, a.T, beta=1.0, c=acc.T, overwrite_c=True)
            return out.T if np.shares_memory(out, acc) else np.ascontiguousarray(out.T)

        def combine(acc: np.ndarray, part: np.ndarray) -> np.ndarray:
            return np.add(acc, part, out=acc)

        return HostBlock(forward, combine, fold)

    def host_backward(self, dtypes, wanted) -> Any:
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


#: The widest k-panel folded by the host BLAS: the GEMM of a 4096² tile runs as fast with it
#: as with wider ones (235 GFLOP/s against 243 for 4096, 2 cores), and a tile of several
#: steps reads the next panels while one computes (4096², 512 MB budget: one 4096-wide step
#: 0.83 s, four 1024-wide steps 0.75 s).
HOST_PANEL = 1024

#: SciPy's GEMM by dtype character.
_GEMM = {"f": "sgemm", "d": "dgemm", "F": "cgemm", "D": "zgemm"}

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
