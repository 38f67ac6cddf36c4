"""``stream_sum``: a loss summed over the row tiles of stored arrays, and its gradient, in one pass.

``stream_sum(fn)`` turns a per-tile loss written in plain ``jax.numpy`` into a
function of in-memory parameters and row-aligned arrays (stored or in
memory).  Its value is the sum of ``fn`` over row tiles read under the
memory budget; its reverse-mode rule reads each tile once and computes the
tile's value and gradient with one compiled function, so
``jax.value_and_grad`` of it costs one read of the data.

Under tracing the sum is a hijax primitive whose work runs in an
``io_callback``: stored arrays closed over by the caller are constants whose
locators the callback reopens; traced stored arrays contribute their marker,
so XLA runs the callback after whatever wrote them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.hijax import ShapedArray

from oocarr.engine.plan import STREAM_SUM_TILES
from oocarr.engine.stats import call_site
from oocarr.errors import InvalidArgumentError, ShapeMismatchError
from oocarr.jaxlayer.disk_array import is_disk
from oocarr.jaxlayer.row_sums import Kernel, Source, Spec, StreamSum, row_plan
from oocarr.jaxlayer.row_sums import sources as sources_of
from oocarr.jaxlayer.row_tasks import RowPlan

__all__ = ["stream_sum", "RESIDENT_TILES"]

#: Row-tile buffers counted against the budget (kept for one release; the memory model's
#: constants live in :mod:`oocarr.engine.plan`).
RESIDENT_TILES = STREAM_SUM_TILES


# ----------------------------------------------------------------------------
# What one call streams
# ----------------------------------------------------------------------------
# ----------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------
def _output_kind(fn: Callable[..., Any], params: Any, sources: Sequence[Source]) -> tuple:
    """``(per_row, dtype)`` of ``fn``'s result on the whole data (traced abstractly)."""
    n = sources[0].shape[0]
    tiles = [jax.ShapeDtypeStruct(s.shape, s.aval.dtype) for s in sources]
    out = jax.eval_shape(fn, params, *tiles)
    shape = getattr(out, "shape", None)
    if shape not in ((), (n,)) or not jnp.issubdtype(out.dtype, jnp.inexact):
        raise InvalidArgumentError(
            f"stream_sum's fn must return a float scalar (the tile's sum) or one float value "
            f"per row; on {n} rows it returned {out}"
        )
    return shape == (n,), np.dtype(out.dtype)


class StreamSumFunction(Protocol):
    """What :func:`stream_sum` returns: the sum as a function of the parameters and arrays,
    with its ``tasks`` (the call as row tasks)."""

    tasks: Callable[..., RowPlan]

    def __call__(self, params: Any, *arrays: Any, weights: Any = None) -> jax.Array: ...


def stream_sum(
    fn: Callable[..., Any], *, mean: bool = False, tile_rows: int | None = None
) -> StreamSumFunction:
    """Sum a per-tile loss over the row tiles of stored arrays, with its gradient in one pass.

    Parameters
    ----------
    fn : callable
        ``fn(params, *row_tiles)`` in plain ``jax.numpy``: the loss of one tile of
        rows (every array cut at the same rows), either as a float scalar (the
        tile's sum) or as one float value per row.  It must add up over rows:
        ``fn`` of two tiles stacked equals the sum of ``fn`` of each.
    mean : bool
        Divide the sum by the number of rows (or by the sum of the weights when
        ``weights`` are given).
    tile_rows : int, optional
        At most this many rows per tile.  By default (and never above it) tiles
        are sized from the memory budget: :data:`RESIDENT_TILES` row tiles of
        all arrays fit in it, in whole storage chunks where one fits.

    Returns
    -------
    callable
        ``g(params, *arrays, weights=None) -> jax.Array``, a float scalar.
        ``params`` is any pytree of in-memory arrays; ``arrays`` are
        ``DiskArray``s on any driver, or NumPy/JAX arrays, sharing their
        leading (row) axis.  ``weights`` (one value per row, stored or in
        memory) weights each row's loss, so ``fn`` must return per-row values.
        ``jax.jit``, ``jax.grad`` and ``jax.value_and_grad`` of ``g`` with
        respect to ``params`` work, inside ``jax.lax`` control flow too, and
        with the arrays closed over; one ``value_and_grad`` reads each tile
        once.  The arrays are constants: differentiating with respect to them
        raises ``InvalidArgumentError``.

    Raises
    ------
    InvalidArgumentError
        No arrays, arrays without a row axis, weights with a scalar ``fn``, or a
        ``fn`` result that is neither a scalar nor one value per row.
    ShapeMismatchError
        Arrays (or weights) with different numbers of rows.
    BudgetTooSmallError
        When four rows of all arrays do not fit in the memory budget.

    Notes
    -----
    The next tile is read in a background thread while the current one
    computes.  The value (and gradient) of each tile comes from one function
    compiled once: with per-row losses shorter tiles are padded and masked,
    so the last tile reuses it; a scalar ``fn`` compiles once more for a
    shorter last tile.  Sums accumulate in float64.  Memory that ``fn``'s own
    intermediates take beyond one tile-sized buffer is not counted in the
    budget: lower ``tile_rows`` for wide models.

    Examples
    --------
    >>> import jax, jax.numpy as jnp, numpy as np, oocarr
    >>> X = oocarr.from_numpy(np.arange(12.0, dtype="f4").reshape(6, 2))
    >>> y = oocarr.from_numpy(np.ones(6, "f4"))
    >>> sse = oocarr.stream_sum(lambda w, X, y: jnp.sum((X @ w - y) ** 2), tile_rows=4)
    >>> value, grad = jax.value_and_grad(sse)(jnp.zeros(2), X, y)
    >>> float(value), grad.tolist()
    (6.0, [-60.0, -72.0])

    Per-row losses take weights, and ``mean=True`` divides by their sum:

    >>> mse = oocarr.stream_sum(lambda w, X, y: (X @ w - y) ** 2, mean=True)
    >>> float(jax.jit(mse)(jnp.zeros(2), X, y, weights=np.arange(6.0, dtype="f4")))
    1.0
    """
    kernel = Kernel(fn)

    def prepare(params: Any, arrays: tuple, weights: Any) -> tuple[Spec, list, list]:
        if not arrays:
            raise InvalidArgumentError("stream_sum needs at least one array to stream")
        data = [*arrays, *(() if weights is None else (weights,))]
        sources, dynamic = sources_of(data)
        _check_rows(sources, weights is not None)
        leaves, treedef = jax.tree.flatten(params)
        if any(is_disk(x) for x in leaves):
            raise InvalidArgumentError(
                "stream_sum's params must be in memory; read stored ones with oocarr.materialize"
            )
        leaves = [jnp.asarray(x) for x in leaves]
        structs = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in leaves]
        data_sources = sources[: len(arrays)]
        per_row, out_dtype = _output_kind(fn, jax.tree.unflatten(treedef, structs), data_sources)
        if weights is not None and not per_row:
            raise InvalidArgumentError(
                "stream_sum with weights needs fn to return one loss per row, not the tile's sum"
            )
        spec = Spec(
            kernel,
            treedef,
            tuple(ShapedArray(x.shape, x.dtype) for x in leaves),
            tuple(sources),
            weights is not None,
            per_row,
            out_dtype,
            bool(mean),
            None if tile_rows is None else max(1, int(tile_rows)),
        )
        return spec, leaves, dynamic

    def g(params: Any, *arrays: Any, weights: Any = None) -> jax.Array:
        spec, leaves, dynamic = prepare(params, arrays, weights)
        return StreamSum(spec, call_site("stream_sum"))(*leaves, *dynamic)

    def tasks(params: Any, *arrays: Any, weights: Any = None, grad: bool = True) -> RowPlan:
        """This call (eager) as a map-reduce of picklable row tasks: each task's ``run()``
        gives its tile's partial in any process, ``combine`` folds the partials in order into
        the value (and, with ``grad``, the gradients of the inexact parameter leaves) that
        ``jax.value_and_grad`` of the call gives, bit for bit."""
        spec, leaves, dynamic = prepare(params, arrays, weights)
        wanted = tuple(jnp.issubdtype(a.dtype, jnp.inexact) for a in spec.leaf_avals)
        return row_plan(spec, wanted if grad else None, [*leaves, *dynamic])

    # a function's attributes cannot be declared: ``summed`` is ``g``, which gets its ``tasks``
    summed = cast(StreamSumFunction, g)
    summed.tasks = tasks

    g.__doc__ = f"The sum of {getattr(fn, '__name__', 'fn')} over row tiles (oocarr.stream_sum)."
    return summed


def _check_rows(sources: Sequence[Source], weighted: bool) -> None:
    if any(not s.shape for s in sources):
        raise InvalidArgumentError("stream_sum's arrays need a leading row axis, not 0-d arrays")
    n = sources[0].shape[0]
    if any(s.shape[0] != n for s in sources):
        raise ShapeMismatchError(
            "stream_sum's arrays must have the same number of rows, got shapes "
            + ", ".join(str(s.shape) for s in sources)
        )
    if weighted and len(sources[-1].shape) != 1:
        raise ShapeMismatchError(
            f"stream_sum's weights must be one value per row, shape ({n},); got {sources[-1].shape}"
        )
