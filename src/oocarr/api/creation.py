"""The Array API's creation functions (standard 2023.12), into scratch storage.

Every result is a new ``DiskArray`` that owns its scratch storage (deleted
when it is garbage collected, as :func:`oocarr.from_numpy`'s are), written
one tile at a time: a tile's values are computed from its global indices, so
no more than a few tiles are ever in memory (``zeros`` and ``empty`` write
nothing: new scratch storage reads as zeros).  ``tril`` and ``triu`` are ops
on a stored array (:mod:`oocarr.ops.triangle`): differentiable, under
``jax.jit`` too.

Default dtypes are ``jax.numpy``'s: float32 and int32 (float64 and int64
with ``jax_enable_x64``), complex64 for complex fill values; a dtype given
explicitly is stored as given.  NumPy and JAX arrays passed to
:func:`asarray` keep their dtype.

Under ``jax.jit`` the shapes and parameters of a creation call are concrete
(Python numbers), so the array is created once, while the function is
traced, and the compiled function reads it as a constant.  A traced
``fill_value`` of :func:`full` or :func:`full_like` works (the result is
computed where it is read, and is differentiable in ``fill_value``); traced
bounds of :func:`arange`, :func:`linspace` or :func:`eye` are refused with
:class:`~oocarr.errors.NotSupportedError`, since the output's values are
fixed when it is created.  :func:`asarray` of a traced in-memory array
writes it to scratch storage when the compiled function runs.

Examples
--------
>>> import numpy as np
>>> from oocarr.api import creation
>>> np.asarray(creation.arange(6, dtype="float32")).tolist()
[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
>>> np.asarray(creation.triu(creation.ones((3, 3)), k=1)).tolist()
[[0.0, 1.0, 1.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, overload

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core as jax_core

from oocarr.api import elementwise as fn
from oocarr.api.storage import from_numpy, save
from oocarr.engine import plan
from oocarr.engine.budget import memory_budget_bytes
from oocarr.engine.io import WriteBehind, stream_read
from oocarr.engine.stats import IOCounts, call_site, record
from oocarr.errors import BudgetTooSmallError, InvalidArgumentError, NotSupportedError
from oocarr.jaxlayer.callbacks import create_store, is_traced, open_store
from oocarr.jaxlayer.disk_array import DiskArray, is_disk
from oocarr.jaxlayer.make_op import make_op
from oocarr.ops.elementwise import Identity
from oocarr.ops.triangle import Tril, Triu
from oocarr.store import pages
from oocarr.store.blocked import BlockedArray
from oocarr.store.scratch import scratch_locator

if TYPE_CHECKING:
    from oocarr.jaxlayer.disk_array import AnyArray, DTypeLike, Result

#: The Array API's creation functions this module gives (the rest of ``__all__`` are helpers).
FUNCTIONS = (
    "asarray",
    "zeros",
    "ones",
    "empty",
    "full",
    "zeros_like",
    "ones_like",
    "empty_like",
    "full_like",
    "arange",
    "linspace",
    "eye",
    "meshgrid",
    "tril",
    "triu",
)

__all__ = [
    *FUNCTIONS,
    "default_dtype",
    "write_scratch",
    "plan_tile",
]

Region = tuple[slice, ...]

#: Tile-sized buffers a creation holds: the tile being computed (in 8-byte temporaries), the
#: one written behind, and (when it reads a source) the source's block read ahead.
CREATE_TILES = 3


# ----------------------------------------------------------------------------
# Argument checks and dtypes
# ----------------------------------------------------------------------------
def default_dtype(kind: str) -> np.dtype:
    """``jax.numpy``'s default dtype of a kind: ``"bool"``, ``"integral"``, ``"real
    floating"`` or ``"complex floating"`` (64-bit ones only with ``jax_enable_x64``).

    Examples
    --------
    >>> default_dtype("real floating"), default_dtype("integral")
    (dtype('float32'), dtype('int32'))
    """
    wide = {
        "bool": np.bool_,
        "integral": np.int64,
        "real floating": np.float64,
        "complex floating": np.complex128,
    }
    if kind not in wide:
        raise InvalidArgumentError(f"default_dtype: unknown kind {kind!r}; one of {list(wide)}")
    return np.dtype(jax.dtypes.canonicalize_dtype(wide[kind]))


def _kind_of(value: Any) -> str:
    """The dtype kind of a Python (or NumPy) number, by its type."""
    dtype = np.asarray(value).dtype
    return _kind_of_dtype(dtype, value)


def _kind_of_dtype(dtype: np.dtype, value: Any) -> str:
    if dtype.kind == "b":
        return "bool"
    if dtype.kind in "iu":
        return "integral"
    if dtype.kind == "f":
        return "real floating"
    if dtype.kind == "c":
        return "complex floating"
    raise InvalidArgumentError(f"{value!r} is not a number (its NumPy dtype is {dtype})")


@overload
def _dtype(dtype: Any, name: str, default: str) -> np.dtype: ...
@overload
def _dtype(dtype: Any, name: str, default: None = None) -> np.dtype | None: ...
def _dtype(dtype: Any, name: str, default: str | None = None) -> np.dtype | None:
    """``dtype`` as a NumPy dtype; when it is ``None``, the default dtype of kind ``default``
    (or ``None``)."""
    if dtype is None:
        return None if default is None else default_dtype(default)
    try:
        return np.dtype(dtype)
    except TypeError:
        raise InvalidArgumentError(f"{name}: {dtype!r} is not a dtype") from None


def _check_device(device: Any, name: str) -> None:
    """Stored arrays live on the host: ``device`` must be ``None`` or the CPU device."""
    if device is None or device == "cpu":
        return
    if isinstance(device, jax.Device) and device.platform == "cpu":
        return
    raise InvalidArgumentError(
        f"{name}: device={device!r} is not supported; arrays in storage are on the host, so "
        "device must be None or the CPU device (move values to an accelerator with "
        "oocarr.materialize or a training loader)"
    )


def _shape(shape: Any, name: str) -> tuple[int, ...]:
    if isinstance(shape, numbers.Integral):
        shape = (shape,)
    try:
        shape = tuple(_index(n) for n in shape)
    except TypeError:
        raise InvalidArgumentError(
            f"{name}: shape {shape!r} must be an int or a sequence of ints"
        ) from None
    if any(n < 0 for n in shape):
        raise InvalidArgumentError(f"{name}: shape {shape} has a negative length")
    return shape


def _index(value: Any) -> int:
    """``value`` as an int when it is an integer (``operator.index``), else a ``TypeError``;
    a traced integer is refused with a message saying why."""
    if isinstance(value, jax_core.Tracer):
        raise NotSupportedError(
            f"a shape or length cannot be traced ({value}); pass a Python int (under jax.jit, "
            "a static argument)"
        )
    return operator.index(value)


def _traced(value: Any) -> bool:
    return isinstance(value, jax_core.Tracer)


def _concrete(name: str, **values: Any) -> None:
    """Refuse traced arguments that fix the values of a created array."""
    for arg, value in values.items():
        if _traced(value):
            raise NotSupportedError(
                f"{name}: {arg} is traced ({value}); {name} creates its array once, with "
                "fixed values, so under jax.jit pass it as a Python number (a static argument)"
            )


# ----------------------------------------------------------------------------
# Writing a scratch array tile by tile
# ----------------------------------------------------------------------------
def write_scratch(
    shape: Sequence[int],
    dtype: Any,
    name: str,
    compute: Callable[..., np.ndarray] | None = None,
    *,
    source: BlockedArray | np.ndarray | None = None,
    element_bytes: int | None = None,
) -> DiskArray:
    """A new scratch array (owned: deleted when garbage collected) of ``shape`` and ``dtype``,
    written one tile at a time.

    Each tile at ``region`` is ``compute(region)``, or ``compute(region, block)`` with
    ``source``'s block at the same region (read ahead); with no ``compute`` nothing is
    written and the array reads as zeros.  Tiles are whole chunks of the storage (and of
    ``source``) where they fit (:func:`plan_tile`), sized so that :data:`CREATE_TILES` tiles
    of ``element_bytes`` per element (default: 8, or the dtype's itemsize when larger) fit
    the memory budget; the writes are counted by :func:`oocarr.io_stats` under ``name``.

    Raises
    ------
    BudgetTooSmallError
        When not even a tile of one element fits the budget.

    Examples
    --------
    >>> import numpy as np
    >>> x = write_scratch((2, 3), "int32", "demo", lambda r: np.full((2, 3), 7)[r])
    >>> np.asarray(x).tolist()
    [[7, 7, 7], [7, 7, 7]]
    """
    shape = tuple(int(n) for n in shape)
    dtype = np.dtype(dtype)
    locator = scratch_locator(None, shape, dtype)
    with create_store(locator, shape, dtype) as store:
        if compute is not None:
            _write_tiles(store, compute, name, source, element_bytes)
    return DiskArray(open_store(locator), owned=True)


def _write_tiles(
    store: BlockedArray,
    compute: Callable[..., np.ndarray],
    name: str,
    source: BlockedArray | np.ndarray | None,
    element_bytes: int | None,
) -> None:
    itemsize = element_bytes or max(store.itemsize, 8)
    source_chunks = source.chunks if isinstance(source, BlockedArray) else None
    tile, projection = plan_tile(
        name, store.shape, itemsize, CREATE_TILES, store.write_chunks, source_chunks, url=store.url
    )
    counts = IOCounts(calls=1)
    counts.project(projection.nbytes)
    regions = pages.tile_regions(store.shape, tile)

    def write(_: Any, region: Region, block: np.ndarray) -> None:
        store.write_region(region, block)
        counts.count_written(block.nbytes)

    def cast(region: Region, values: Any) -> np.ndarray:
        block = np.asarray(values, dtype=store.dtype)
        return np.broadcast_to(block, tuple(s.stop - s.start for s in region)).copy()

    try:
        with WriteBehind(write, None) as writer:
            if source is None:
                for region in regions:
                    writer.submit(region, cast(region, compute(region)))
                    counts.tiles += 1
            else:
                for region, block in stream_read(source, regions, counts):
                    writer.submit(region, cast(region, compute(region, block)))
                    counts.tiles += 1
    finally:
        record(call_site(name), counts)


def plan_tile(
    name: str,
    shape: Sequence[int],
    element_bytes: int,
    buffers: int,
    *chunks: Sequence[int] | None,
    url: str | None = None,
) -> tuple[tuple[int, ...], plan.Projection]:
    """A tile for a pass holding ``buffers`` tiles of ``element_bytes`` per element, and its
    projection (:func:`oocarr.engine.plan.chunk_tile`): whole ``chunks`` where one tile of
    them fits the budget, else any tile that does (partial chunks are read or written
    whole by their driver, which is slower but holds no more).

    Raises
    ------
    BudgetTooSmallError
        When not even one element fits.

    Examples
    --------
    >>> from oocarr.engine.budget import memory_budget
    >>> with memory_budget(400):
    ...     plan_tile("demo", (100, 100), 8, 2, (10, 10))[0]
    (1, 25)
    """
    budget = memory_budget_bytes()
    if any(c is not None for c in chunks):
        try:
            return plan.chunk_tile(name, shape, element_bytes, budget, buffers, *chunks, url=url)
        except BudgetTooSmallError:
            pass
    return plan.chunk_tile(name, shape, element_bytes, budget, buffers, url=url)


def _axis_indices(region: Region, axis: int, ndim: int) -> np.ndarray:
    """The global indices along ``axis`` of a tile at ``region``, shaped to broadcast."""
    s = region[axis]
    shape = [1] * ndim
    shape[axis] = s.stop - s.start
    return np.arange(s.start, s.stop).reshape(shape)


# ----------------------------------------------------------------------------
# asarray
# ----------------------------------------------------------------------------
_identity = make_op(Identity)


def asarray(
    obj: Any,
    /,
    *,
    dtype: DTypeLike | None = None,
    device: Any = None,
    copy: bool | None = None,
) -> Result:
    """``obj`` as a ``DiskArray`` (the Array API's ``asarray``).

    A ``DiskArray`` is returned as it is, or cast with :func:`oocarr.astype` when ``dtype``
    differs or ``copy=True`` (a stored copy, made tile by tile).  Python scalars and nested
    sequences, NumPy and JAX arrays are written to scratch storage
    (:func:`oocarr.from_numpy`): Python numbers take ``jax.numpy``'s default dtypes, arrays
    keep theirs.  A traced in-memory array (under ``jax.jit``) is written when the compiled
    function runs; that copy is differentiable.

    Parameters
    ----------
    obj : DiskArray, array-like, scalar or nested sequence
    dtype : dtype-like, optional
        The result's dtype (the values are cast, as NumPy casts).
    device : None or the CPU device
    copy : bool, optional
        ``True``: always a new stored array; ``False``: never copy, and raise when a copy is
        needed (an in-memory ``obj``, or a cast); ``None``: copy only when needed.

    Returns
    -------
    DiskArray

    Raises
    ------
    InvalidArgumentError
        ``copy=False`` when a copy is needed; a ``device`` other than the CPU; an ``obj``
        that is not numeric.

    Examples
    --------
    >>> import numpy as np
    >>> x = asarray([[1, 2], [3, 4]])
    >>> x.dtype, asarray(x) is x, asarray(x, dtype="float32").dtype
    (dtype('int32'), True, dtype('float32'))
    """
    _check_device(device, "asarray")
    dtype = _dtype(dtype, "asarray")
    if is_disk(obj):
        if dtype is None or dtype == np.dtype(obj.dtype):
            return _stored_copy(obj, obj.dtype) if copy else obj
        if copy is False:
            raise InvalidArgumentError(
                f"asarray: copy=False, but casting {obj.dtype} to {dtype} makes a copy; pass "
                "copy=None to allow it"
            )
        return _stored_copy(obj, dtype)
    if copy is False:
        raise InvalidArgumentError(
            "asarray: copy=False, but an array in memory is copied into storage; pass "
            "copy=None (or True), or asarray a DiskArray"
        )
    if _traced(obj):
        return _identity(obj if dtype is None else obj.astype(dtype))
    return from_numpy(_in_memory(obj, dtype))


def _stored_copy(x: DiskArray, dtype: np.dtype) -> Any:
    """A new stored array with ``x``'s values in ``dtype``.

    Outside a trace a copy in ``x``'s own dtype is its bytes, copied tile by tile: bit for
    bit, 64-bit dtypes too without ``jax_enable_x64`` (which :func:`oocarr.astype` computes in
    32 bits).  A cast, or a copy under a trace, is :func:`oocarr.astype`'s; its 0-d result is
    in memory, as every 0-d op result is, so that one is stored too (writable, as NumPy's copy
    is)."""
    if dtype == np.dtype(x.dtype) and not _traced(x):
        return DiskArray(save(x, scratch_locator(None, x.shape, x.dtype)).store, owned=True)
    out = fn.astype(x, dtype)
    if is_disk(out):
        return out
    return _identity(out) if _traced(out) else from_numpy(np.asarray(out))


def _in_memory(obj: Any, dtype: np.dtype | None) -> np.ndarray:
    """``obj`` as a NumPy array: arrays keep their dtype, Python numbers take the defaults."""
    if isinstance(obj, np.ndarray | np.generic | jax.Array):
        data = np.asarray(obj)
        return data if dtype is None else data.astype(dtype)
    try:
        if dtype is None:
            inferred = np.asarray(obj)
            dtype = default_dtype(_kind_of_dtype(inferred.dtype, obj))
        return np.asarray(obj, dtype=dtype)
    except (OverflowError, ValueError, TypeError) as error:
        raise InvalidArgumentError(
            f"asarray: cannot store {type(obj).__name__} {obj!r:.80} as an array of "
            f"{dtype or 'a numeric dtype'}: {error}"
        ) from None


# ----------------------------------------------------------------------------
# Filled arrays
# ----------------------------------------------------------------------------
def zeros(
    shape: int | Sequence[int], *, dtype: DTypeLike | None = None, device: Any = None
) -> DiskArray:
    """A new stored array of zeros (default dtype float32, ``jax.numpy``'s).

    Nothing is written: new scratch storage reads as zeros (sparse where the file system
    allows), so an array of any size is made in constant memory.

    Examples
    --------
    >>> import numpy as np
    >>> np.asarray(zeros((2, 3))).tolist(), zeros(4, dtype="int8").dtype
    ([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], dtype('int8'))
    """
    _check_device(device, "zeros")
    dtype = _dtype(dtype, "zeros", "real floating")
    return write_scratch(_shape(shape, "zeros"), dtype, "zeros")


def empty(
    shape: int | Sequence[int], *, dtype: DTypeLike | None = None, device: Any = None
) -> DiskArray:
    """A new stored array whose values are unspecified (they are zeros: nothing is written).

    Examples
    --------
    >>> empty((2, 3)).shape
    (2, 3)
    """
    _check_device(device, "empty")
    dtype = _dtype(dtype, "empty", "real floating")
    return write_scratch(_shape(shape, "empty"), dtype, "empty")


def ones(
    shape: int | Sequence[int], *, dtype: DTypeLike | None = None, device: Any = None
) -> DiskArray:
    """A new stored array of ones (default dtype float32), written tile by tile.

    Examples
    --------
    >>> import numpy as np
    >>> np.asarray(ones(3, dtype="int32")).tolist()
    [1, 1, 1]
    """
    _check_device(device, "ones")
    dtype = _dtype(dtype, "ones", "real floating")
    return _filled(_shape(shape, "ones"), 1, dtype, "ones")


def _fill_dtype(fill_value: Any, dtype: np.dtype | None) -> np.dtype:
    if dtype is not None:
        return dtype
    if isinstance(fill_value, np.ndarray | np.generic | jax.Array):
        return np.dtype(jnp.result_type(fill_value))
    return default_dtype(_kind_of(fill_value))


def full(
    shape: int | Sequence[int],
    fill_value: bool | int | float | complex | Any,
    *,
    dtype: DTypeLike | None = None,
    device: Any = None,
) -> Result:
    """A new stored array of ``shape`` filled with ``fill_value``, written tile by tile.

    With no ``dtype``, a Python ``bool``, ``int``, ``float`` or ``complex`` gives
    ``jax.numpy``'s default dtype of that kind (bool, int32, float32, complex64), and a
    NumPy or JAX scalar its own (canonical) dtype.  A traced ``fill_value`` (under
    ``jax.jit`` or ``jax.grad``) gives an array computed where it is read, differentiable in
    ``fill_value``.

    Examples
    --------
    >>> import numpy as np
    >>> x = full((2, 2), 1.5)
    >>> x.dtype, np.asarray(x).tolist(), full(3, True).dtype, full(2, 7).dtype
    (dtype('float32'), [[1.5, 1.5], [1.5, 1.5]], dtype('bool'), dtype('int32'))
    """
    _check_device(device, "full")
    shape = _shape(shape, "full")
    dtype = _fill_dtype(fill_value, _dtype(dtype, "full"))
    if _traced(fill_value):
        return _traced_fill(shape, fill_value, dtype)
    return _filled(shape, fill_value, dtype, "full")


def _filled(shape: tuple[int, ...], fill_value: Any, dtype: np.dtype, name: str) -> DiskArray:
    value = np.asarray(fill_value).astype(dtype)
    if value.ndim:
        raise InvalidArgumentError(f"{name}: fill_value must be a scalar, got shape {value.shape}")
    if not value.tobytes().strip(b"\0"):  # what new storage reads as: nothing to write
        return write_scratch(shape, dtype, name)
    return write_scratch(shape, dtype, name, lambda region: value)


def _traced_fill(shape: tuple[int, ...], fill_value: Any, dtype: np.dtype) -> Any:
    """``fill_value`` broadcast to ``shape``: a ``where`` over a stored array of the shape
    (no arithmetic, so every value, ``-0.0`` and NaNs included, is ``fill_value``'s)."""
    value = jnp.asarray(fill_value).astype(dtype)
    if value.ndim:
        raise InvalidArgumentError(f"full: fill_value must be a scalar, got shape {value.shape}")
    if not shape:
        return value
    return fn.where(write_scratch(shape, np.bool_, "full"), value, value)


def zeros_like(x: AnyArray, /, *, dtype: DTypeLike | None = None, device: Any = None) -> DiskArray:
    """A stored array of zeros with ``x``'s shape and (by default) dtype.

    ``x`` may be a ``DiskArray`` (traced too) or any array; only its shape and dtype are
    read.

    Examples
    --------
    >>> import numpy as np
    >>> zeros_like(np.ones((2, 3), "int16")).dtype
    dtype('int16')
    """
    _check_device(device, "zeros_like")
    return zeros(_shape(x.shape, "zeros_like"), dtype=_like_dtype(x, dtype, "zeros_like"))


def ones_like(x: AnyArray, /, *, dtype: DTypeLike | None = None, device: Any = None) -> DiskArray:
    """A stored array of ones with ``x``'s shape and (by default) dtype.

    Examples
    --------
    >>> import numpy as np
    >>> np.asarray(ones_like(np.zeros(2, "float32"))).tolist()
    [1.0, 1.0]
    """
    _check_device(device, "ones_like")
    return ones(_shape(x.shape, "ones_like"), dtype=_like_dtype(x, dtype, "ones_like"))


def empty_like(x: AnyArray, /, *, dtype: DTypeLike | None = None, device: Any = None) -> DiskArray:
    """A stored array with ``x``'s shape and (by default) dtype, values unspecified (zeros).

    Examples
    --------
    >>> import numpy as np
    >>> empty_like(np.zeros((4, 1), "uint8")).shape
    (4, 1)
    """
    _check_device(device, "empty_like")
    return empty(_shape(x.shape, "empty_like"), dtype=_like_dtype(x, dtype, "empty_like"))


def full_like(
    x: AnyArray,
    /,
    fill_value: bool | int | float | complex | Any,
    *,
    dtype: DTypeLike | None = None,
    device: Any = None,
) -> Result:
    """A stored array with ``x``'s shape, filled with ``fill_value`` cast to ``dtype``
    (``x``'s dtype by default); a traced ``fill_value`` works as in :func:`full`.

    Examples
    --------
    >>> import numpy as np
    >>> np.asarray(full_like(np.zeros(3, "int32"), 2.7)).tolist()
    [2, 2, 2]
    """
    _check_device(device, "full_like")
    dtype = _like_dtype(x, dtype, "full_like")
    return full(_shape(x.shape, "full_like"), fill_value, dtype=dtype)


def _like_dtype(x: Any, dtype: Any, name: str) -> np.dtype:
    return np.dtype(x.dtype if dtype is None else _dtype(dtype, name))


# ----------------------------------------------------------------------------
# Ranges
# ----------------------------------------------------------------------------
def _range_kind(*values: Any) -> str:
    kinds = {_kind_of(v) for v in values}
    for kind in ("complex floating", "real floating"):
        if kind in kinds:
            return kind
    return "integral"


def arange(
    start: int | float,
    /,
    stop: int | float | None = None,
    step: int | float = 1,
    *,
    dtype: DTypeLike | None = None,
    device: Any = None,
) -> DiskArray:
    """Evenly spaced values in ``[start, stop)`` (``[0, start)`` when ``stop`` is omitted),
    as ``numpy.arange`` gives them, written tile by tile.

    With no ``dtype``: int32 (the default integer) when ``start``, ``stop`` and ``step`` are
    all integers, else float32 (the default floating type).  Each value is ``start + i *
    step``, computed from its index in float64 (integers exactly) and cast.

    Raises
    ------
    InvalidArgumentError
        When ``step`` is zero.
    NotSupportedError
        When an argument is traced (the length and values are fixed at creation).

    Examples
    --------
    >>> import numpy as np
    >>> np.asarray(arange(5)).tolist(), np.asarray(arange(1.0, 2.0, 0.25)).tolist()
    ([0, 1, 2, 3, 4], [1.0, 1.25, 1.5, 1.75])
    """
    _check_device(device, "arange")
    _concrete("arange", start=start, stop=stop, step=step)
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise InvalidArgumentError("arange: step must not be zero")
    kind = _range_kind(start, stop, step)
    dtype = _dtype(dtype, "arange", kind)
    if kind == "integral":
        start, stop, step = int(start), int(stop), int(step)
        length = max(0, -((start - stop) // step))
    else:
        length = max(0, math.ceil((stop - start) / step))
        delta = np.float64(start + step) - np.float64(start)

    def compute(region: Region) -> np.ndarray:
        index = np.arange(region[0].start, region[0].stop)
        if kind == "integral":
            return start + index * step
        return np.float64(start) + index * delta

    return write_scratch((length,), dtype, "arange", compute)


def linspace(
    start: int | float | complex,
    stop: int | float | complex,
    /,
    num: int,
    *,
    dtype: DTypeLike | None = None,
    device: Any = None,
    endpoint: bool = True,
) -> DiskArray:
    """``num`` evenly spaced values from ``start`` to ``stop`` (included when ``endpoint``),
    as ``numpy.linspace`` computes them, written tile by tile.

    Each value is computed from its index (``start + i * step`` in float64, or complex128,
    the last one ``stop`` exactly when ``endpoint``) and cast to ``dtype`` (default float32,
    complex64 for complex bounds; integer dtypes take the floor, as NumPy's).

    Raises
    ------
    InvalidArgumentError
        When ``num`` is negative.
    NotSupportedError
        When ``start`` or ``stop`` is traced.

    Examples
    --------
    >>> import numpy as np
    >>> np.asarray(linspace(0, 1, 5)).tolist()
    [0.0, 0.25, 0.5, 0.75, 1.0]
    """
    _check_device(device, "linspace")
    _concrete("linspace", start=start, stop=stop)
    num = _index(num)
    if num < 0:
        raise InvalidArgumentError(f"linspace: num must be non-negative, got {num}")
    kind = _range_kind(start, stop, 0.0)
    dtype = _dtype(dtype, "linspace", kind)
    wide: Callable[[Any], np.inexact] = np.complex128 if kind == "complex floating" else np.float64
    begin, end = wide(start), wide(stop)
    div = num - 1 if endpoint else num
    delta = end - begin
    step = delta / div if div > 0 else None

    def compute(region: Region) -> np.ndarray:
        index = np.arange(region[0].start, region[0].stop, dtype=np.float64)
        if step is None:
            values = index * delta + begin
        elif step == 0:
            values = index / div * delta + begin
        else:
            values = index * step + begin
        if endpoint and num > 1:
            values[index == num - 1] = end
        if np.issubdtype(dtype, np.integer):
            values = np.floor(values)
        return values

    return write_scratch((num,), dtype, "linspace", compute)


def eye(
    n_rows: int,
    n_cols: int | None = None,
    /,
    *,
    k: int = 0,
    dtype: DTypeLike | None = None,
    device: Any = None,
) -> DiskArray:
    """A 2-d stored array with ones on the ``k``-th diagonal and zeros elsewhere (default dtype
    float32), written tile by tile.

    Examples
    --------
    >>> import numpy as np
    >>> np.asarray(eye(2, 3, k=1)).tolist()
    [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    """
    _check_device(device, "eye")
    _concrete("eye", n_rows=n_rows, n_cols=n_cols, k=k)
    n_cols = n_rows if n_cols is None else n_cols
    shape = _shape((n_rows, n_cols), "eye")
    k = _index(k)
    dtype = _dtype(dtype, "eye", "real floating")

    def compute(region: Region) -> np.ndarray:
        return _axis_indices(region, 1, 2) - _axis_indices(region, 0, 2) == k

    return write_scratch(shape, dtype, "eye", compute)


# ----------------------------------------------------------------------------
# meshgrid, tril, triu
# ----------------------------------------------------------------------------
def meshgrid(*arrays: Any, indexing: str = "xy") -> list[Any]:
    """Coordinate grids from 1-d arrays (the Array API's ``meshgrid``): output ``i`` holds
    ``arrays[i]`` along its axis, repeated along the others.

    With ``indexing="xy"`` (Cartesian) the first two axes are swapped: outputs have shape
    ``(len(arrays[1]), len(arrays[0]), len(arrays[2]), ...)``; with ``"ij"`` (matrix) they
    have shape ``(len(arrays[0]), len(arrays[1]), ...)``.  Each output has its input's
    dtype as ``jax.numpy.meshgrid`` gives it (int64 and float64 become int32 and float32
    unless ``jax_enable_x64``) and is written tile by tile, each tile read from a slice of
    its 1-d input; differentiable, and under ``jax.jit`` computed where it is read.

    Raises
    ------
    InvalidArgumentError
        When an input is not 1-d or ``indexing`` is neither ``"xy"`` nor ``"ij"``.

    Examples
    --------
    >>> import numpy as np
    >>> gx, gy = meshgrid(np.array([1, 2, 3]), np.array([4.0, 5.0]))
    >>> gx.shape, np.asarray(gx)[1].tolist(), np.asarray(gy)[:, 0].tolist()
    ((2, 3), [1, 2, 3], [4.0, 5.0])
    """
    if indexing not in ("xy", "ij"):
        raise InvalidArgumentError(f'meshgrid: indexing must be "xy" or "ij", got {indexing!r}')
    for i, a in enumerate(arrays):
        if len(a.shape) != 1:
            raise InvalidArgumentError(
                f"meshgrid: every input must be 1-d; input {i} has shape {tuple(a.shape)}"
            )
    lengths = [a.shape[0] for a in arrays]
    axes = list(range(len(arrays)))
    if indexing == "xy" and len(arrays) > 1:
        axes[0], axes[1] = 1, 0
    shape = [0] * len(arrays)
    for axis, n in zip(axes, lengths):
        shape[axis] = n
    if is_traced(arrays):
        stored = [a if is_disk(a) else asarray(a) for a in arrays]
        return [_grid(a, axis, tuple(shape)) for a, axis in zip(stored, axes)]
    return [_written_grid(a, axis, tuple(shape)) for a, axis in zip(arrays, axes)]


def _grid(a: Any, axis: int, shape: tuple[int, ...]) -> Any:
    """``a`` (stored, 1-d) placed along ``axis`` of ``shape`` and broadcast over the other
    axes by ``where``s with an all-true condition spanning each (no arithmetic, so every
    value, ``-0.0`` and NaNs included, is ``a``'s): differentiable, and fused under jit."""
    ndim = len(shape)
    grid = a[tuple(slice(None) if d == axis else None for d in range(ndim))]
    for d in range(ndim):
        if d != axis:
            span = [1] * ndim
            span[d] = shape[d]
            grid = fn.where(jnp.ones(span, bool), grid, grid)
    return fn.astype(grid, jax.dtypes.canonicalize_dtype(a.dtype)) if ndim == 1 else grid


def _written_grid(a: Any, axis: int, shape: tuple[int, ...]) -> DiskArray:
    """``a`` (concrete, 1-d) placed along ``axis`` of ``shape``, each tile of it written from
    the slice of ``a`` it spans."""
    source: BlockedArray | np.ndarray = a.store if is_disk(a) else np.asarray(a)

    def compute(region: Region) -> np.ndarray:
        part = region[axis]
        values = source.read_region((part,)) if isinstance(source, BlockedArray) else source[part]
        return values.reshape([-1 if d == axis else 1 for d in range(len(shape))])

    dtype = np.dtype(jax.dtypes.canonicalize_dtype(a.dtype))
    return write_scratch(shape, dtype, "meshgrid", compute)


_tril = make_op(Tril)
_triu = make_op(Triu)


def tril(x: AnyArray, /, *, k: int = 0) -> Result:
    """The lower triangle of ``x`` (of each matrix over its last two axes): elements on and
    below the ``k``-th diagonal kept, the rest zero, like ``jax.numpy.tril``.

    Streamed tile by tile: a tile wholly above the diagonal is written as zeros without
    reading ``x``.  Differentiable (the gradient is the cotangent's lower triangle) and
    works under ``jax.jit``.

    Raises
    ------
    InvalidArgumentError
        When ``x`` has fewer than 2 axes or ``k`` is not an int.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.arange(1.0, 10.0, dtype="f4").reshape(3, 3))
    >>> np.asarray(tril(x)).tolist()
    [[1.0, 0.0, 0.0], [4.0, 5.0, 0.0], [7.0, 8.0, 9.0]]
    """
    return _tril(x, k=_diagonal(k, "tril"))


def triu(x: AnyArray, /, *, k: int = 0) -> Result:
    """The upper triangle of ``x`` (over its last two axes): elements on and above the
    ``k``-th diagonal kept, the rest zero, like ``jax.numpy.triu``; streamed, differentiable
    and jittable as :func:`tril` is.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.arange(1.0, 10.0, dtype="f4").reshape(3, 3))
    >>> np.asarray(triu(x, k=1)).tolist()
    [[0.0, 2.0, 3.0], [0.0, 0.0, 6.0], [0.0, 0.0, 0.0]]
    """
    return _triu(x, k=_diagonal(k, "triu"))


def _diagonal(k: Any, name: str) -> int:
    if _traced(k) or isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise InvalidArgumentError(f"{name}: k must be a Python int (a static value), got {k!r}")
    return int(k)
