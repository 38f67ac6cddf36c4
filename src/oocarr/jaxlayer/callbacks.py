"""The plumbing every oocarr primitive shares: markers, callbacks and the caller's budget.

A primitive's ``expand`` describes its work as ``run(*values)``, a function of
NumPy values that reads and writes storage, and hands it to :func:`call`
with the primitive's arguments.  :func:`call` lowers each argument
(:func:`lower`: a ``DiskArray`` contributes its marker, anything else its
value), then runs ``run`` directly when nothing is traced, or stages it as an
``io_callback`` whose inputs are those markers, so XLA runs it after whatever
wrote them.  ``run`` always sees the memory budget that was in force where the
primitive was called, although under ``jit`` XLA calls it in its own threads.
An exception ``run`` raises there (``KeyboardInterrupt`` too) is kept, and
named by the ``JaxRuntimeError`` of the jitted call, so that
:func:`~oocarr.jaxlayer.jit_errors.typed_errors` gives it back as itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core as jax_core
from jax.experimental import io_callback

from oocarr.engine import heap
from oocarr.engine.budget import memory_budget, memory_budget_bytes
from oocarr.errors import ReadOnlyError
from oocarr.store.blocked import BlockedArray
from oocarr.store.locator import Locator
from oocarr.store.registry import get_driver
from oocarr.store.scratch import is_scratch

from . import jit_errors
from .disk_array import MARKER_DTYPE, DiskArray, DiskArrayType, is_writable

__all__ = [
    "lower",
    "is_traced",
    "marker",
    "result_struct",
    "call",
    "open_store",
    "create_store",
    "scratch_takes_chunks",
    "check_writable",
]


def lower(x: Any) -> Any:
    """What an argument contributes to a callback: a ``DiskArray``'s marker, or the value itself.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> lower(oocarr.from_numpy(np.ones(3, "f4")))  # an eager DiskArray: a zero marker
    Array(0., dtype=float32)
    >>> lower(2.0)
    2.0
    """
    if isinstance(x, DiskArray):
        return x.aval.lower_val(x)[0]
    return x


def is_traced(values: Iterable[Any] = ()) -> bool:
    """Whether work must be staged as a callback rather than run now.

    True under any JAX trace other than plain evaluation (``jit``, ``lax``
    control flow, ``make_jaxpr``), even when no argument is a tracer: a
    primitive whose arguments are all constants (a ``stream_sum`` over
    closed-over arrays) must still run at every call of the compiled
    function, not once while it is traced.  Also true when one of ``values``
    is a tracer, or a ``DiskArray`` whose marker is one.

    Examples
    --------
    >>> import jax, numpy as np
    >>> is_traced([np.ones(2)])
    False
    >>> seen = []
    >>> _ = jax.jit(lambda x: seen.append(is_traced()) or x)(1.0)
    >>> seen
    [True]
    """
    if not isinstance(jax_core.trace_ctx.trace, jax_core.EvalTrace):
        return True
    return any(
        isinstance(x._marker if isinstance(x, DiskArray) else x, jax_core.Tracer) for x in values
    )


def marker() -> np.ndarray:
    """The marker a callback returns for a stored array it has written.

    Examples
    --------
    >>> marker()
    array(0., dtype=float32)
    """
    return np.zeros((), MARKER_DTYPE)


def result_struct(aval: Any) -> jax.ShapeDtypeStruct:
    """The shape and dtype a callback returns for an output of type ``aval``: a marker for a
    stored array, the value itself for an in-memory one.

    Examples
    --------
    >>> from jax.experimental.hijax import ShapedArray
    >>> result_struct(ShapedArray((2, 3), np.float32))
    ShapeDtypeStruct(shape=(2, 3), dtype=float32)
    """
    if isinstance(aval, DiskArrayType):
        return jax.ShapeDtypeStruct((), MARKER_DTYPE)
    return jax.ShapeDtypeStruct(tuple(aval.shape), aval.dtype)


def call(run: Callable[..., Any], result_shapes: Any, *args: Any) -> Any:
    """Run ``run`` on the lowered ``args`` under the caller's memory budget.

    When :func:`is_traced` is false for ``args``, ``run`` runs now and its
    results come back as ``jax.Array``s; otherwise it is staged as an
    ``io_callback`` that takes the lowered ``args`` (so XLA orders it after
    whatever wrote the ``DiskArray``s among them) and returns
    ``result_shapes``.  The memory budget in force here, in the caller's
    thread, is the one ``run`` sees, whichever thread XLA calls it in, and
    an exception ``run`` raises there is kept for
    :func:`~oocarr.jaxlayer.jit_errors.original_error`.

    Parameters
    ----------
    run : callable
        ``run(*values)``: NumPy (or JAX) values, one per argument (a marker for
        a ``DiskArray``); returns NumPy values shaped as ``result_shapes``.
    result_shapes : pytree of jax.ShapeDtypeStruct
        What ``run`` returns (see :func:`result_struct`).
    *args
        The primitive's arguments: ``DiskArray``s, arrays, tracers.

    Returns
    -------
    pytree of jax.Array
        ``run``'s results, with the structure of ``result_shapes``.

    Examples
    --------
    >>> import jax, numpy as np, oocarr
    >>> from oocarr.engine.budget import memory_budget_bytes
    >>> def run(x):
    ...     return np.asarray(x * 2), np.asarray(memory_budget_bytes(), np.int32)
    >>> shapes = (result_struct(jax.typeof(jnp.ones(2))), jax.ShapeDtypeStruct((), np.int32))
    >>> with oocarr.memory_budget("1MB"):
    ...     value, budget = jax.jit(lambda x: call(run, shapes, x))(jnp.ones(2))
    >>> value, int(budget)
    (Array([2., 2.], dtype=float32), 1000000)
    """
    budget = memory_budget_bytes()

    def in_budget(*values: Any) -> Any:
        with memory_budget(budget), heap.watching(budget):
            return run(*values)

    traced = is_traced(args)
    lowered = [lower(x) for x in args]
    if not traced:
        return jax.tree.map(jnp.asarray, in_budget(*lowered))
    return io_callback(jit_errors.guarded(in_budget), result_shapes, *lowered)


def open_store(locator: Locator, mode: str = "r") -> BlockedArray:
    """Open the array at ``locator`` with its driver.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.arange(3.0))
    >>> with open_store(x.locator) as store:
    ...     store.shape
    (3,)
    """
    return get_driver(locator.driver).open(locator, mode)


def least_read_bytes(locators: Iterable[Locator]) -> int:
    """The drivers' buffers for reading one row (all of every axis but the first) of each
    array at ``locators`` that exists (one an op of the same jitted call writes later is not
    counted), for a plan of whole rows made while tracing.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> least_read_bytes([oocarr.from_numpy(np.arange(3.0)).locator])
    0
    """
    nbytes = 0
    for locator in locators:
        driver = get_driver(locator.driver)
        if not driver.exists(locator):
            continue
        with driver.open(locator, "r") as store:
            shape = tuple(store.shape)
            nbytes += store.read_overhead((1, *shape[1:]) if shape else ())
    return nbytes


def create_store(
    locator: Locator, shape: tuple[int, ...], dtype: Any, chunks: tuple[int, ...] | None = None
) -> BlockedArray:
    """Create (or replace) the array at ``locator``, zero-filled, with its driver.

    An array the user stored there (not a scratch array) is replaced by one
    with the same chunks, compression and attributes: ``update_`` and the
    optimizers' in-place updates change values, never the layout.  A scratch
    array takes ``chunks`` where its driver is chunked (an op's output tiles:
    each tile then whole chunks, which a cluster's workers write themselves).

    Examples
    --------
    >>> from oocarr.store.scratch import scratch_locator
    >>> loc = scratch_locator(None, (2,), "f4")
    >>> with create_store(loc, (2,), "f4") as store:
    ...     store.dtype
    dtype('float32')
    >>> open_store(loc)[:].tolist()
    [0.0, 0.0]
    """
    driver = get_driver(locator.driver)
    if not is_scratch(locator):
        layout = _stored_layout(driver, locator, shape)
    elif chunks is not None and driver.supports_chunks and len(chunks) == len(shape):
        layout = {"chunks": tuple(max(1, min(c, n)) for c, n in zip(chunks, shape))}
    else:
        layout = {}
    return driver.create(locator, shape, dtype, overwrite=True, **layout)


def scratch_takes_chunks(locator: Locator) -> bool:
    """Whether :func:`create_store` would chunk the array at ``locator`` as asked (a scratch
    array of a chunked driver): else an op need not plan its output tile for it first.

    Examples
    --------
    >>> from oocarr.store.scratch import scratch_locator
    >>> scratch_takes_chunks(scratch_locator(None, (2,), "f4"))  # .npy scratch
    False
    """
    return is_scratch(locator) and get_driver(locator.driver).supports_chunks


def _stored_layout(
    driver: type[BlockedArray], locator: Locator, shape: tuple[int, ...]
) -> dict[str, Any]:
    """``create``'s layout arguments for a copy of the array stored at ``locator`` (none when
    nothing is stored there, or when it has another shape)."""
    if not driver.exists(locator):
        return {}
    with driver.open(locator, "r") as old:
        if tuple(old.shape) != tuple(shape):
            return {}
        chunks = old.chunks if driver.supports_chunks else None
        return {"chunks": chunks, "compression": old.compression, "attrs": old.attrs}


def check_writable(aval: DiskArrayType) -> None:
    """Refuse to write an array the user did not open for writing.

    Gradients and scratch arrays are always writable.

    Raises
    ------
    ReadOnlyError
        When ``aval``'s array was opened read-only.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> check_writable(oocarr.from_numpy(np.ones(2)).aval)  # scratch: writable
    """
    locator = aval.locator
    if aval.tangent or is_writable(locator) or is_scratch(locator):
        return
    raise ReadOnlyError(
        f"{locator.full_url} was not opened for writing; open it with mode='r+' to update it",
        url=locator.full_url,
    )
