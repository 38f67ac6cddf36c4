"""The Array API's manipulation functions (2023.12) over stored arrays, streamed tile by tile.

Three ops do the copying: :class:`~oocarr.ops.reshape.Reshape` (contiguous
runs of the flattened order), :class:`~oocarr.ops.concat.Concat` (each
input's tiles written at its offset; ``stack`` too) and
:class:`~oocarr.ops.broadcast.BroadcastTo` (each output tile read from its
input region).  The rest are compositions: ``expand_dims``, ``squeeze``,
``flip`` and ``unstack`` index the array (a view of a concrete ``DiskArray``,
no copy; a tile-by-tile copy under ``jax.jit`` or ``jax.grad``), ``moveaxis``
is a transpose, ``roll`` a concat of two slices, ``tile`` and ``repeat`` a
broadcast followed by a reshape.

Every function takes ``DiskArray``s, NumPy and JAX arrays (mixed, for
``concat``), works under ``jax.jit`` and is differentiable; a result that
equals its input (a reshape to the same shape, a squeeze of no axes) is the
input itself.  Other results are ``DiskArray``s in scratch storage, or views.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from jax._src import core as jax_core

from oocarr.api import elementwise as fn
from oocarr.errors import InvalidArgumentError, NotSupportedError, ShapeMismatchError
from oocarr.jaxlayer.disk_array import DiskArray, add_methods
from oocarr.jaxlayer.make_op import make_op
from oocarr.ops.broadcast import BroadcastTo
from oocarr.ops.concat import Concat
from oocarr.ops.reshape import Reshape, resolve_shape
from oocarr.ops.slicing import Slice
from oocarr.store.views import key_region

if TYPE_CHECKING:
    from oocarr.jaxlayer.disk_array import AnyArray, ArrayLike, Result

__all__ = [
    "reshape",
    "expand_dims",
    "squeeze",
    "concat",
    "stack",
    "flip",
    "moveaxis",
    "broadcast_to",
    "broadcast_arrays",
    "roll",
    "tile",
    "repeat",
    "unstack",
    "install_methods",
]

_reshape = make_op(Reshape)
_concat = make_op(Concat)
_broadcast = make_op(BroadcastTo)
_slice = make_op(Slice)


def _shape(x: Any) -> tuple[int, ...]:
    shape = getattr(x, "shape", None)
    return tuple(np.shape(x) if shape is None else shape)


def _index(x: Any, key: tuple) -> Any:
    """``x[key]`` for basic indexing: a view of a concrete ``DiskArray``, else a copy made
    tile by tile (differentiable, and a ``DiskArray`` for in-memory inputs too)."""
    if isinstance(x, DiskArray):
        return x[key]
    region = key_region(key, _shape(x))
    return _slice(x, region=tuple(None if r is None else tuple(r) for r in region))


def _axis(axis: Any, ndim: int, what: str) -> int:
    """``axis`` as a non-negative axis of ``ndim`` axes."""
    try:
        a = operator.index(axis)
    except TypeError:
        raise InvalidArgumentError(f"{what}: axis must be an integer, got {axis!r}") from None
    if not -ndim <= a < ndim:
        raise InvalidArgumentError(
            f"{what}: axis {a} is out of range for an array of {ndim} axes; "
            f"give an integer in [{-ndim}, {ndim - 1}]"
        )
    return a % ndim


def _axes(axis: Any, ndim: int, what: str) -> tuple[int, ...]:
    """``axis`` (an integer or a sequence of them) as distinct non-negative axes."""
    given = tuple(axis) if isinstance(axis, Sequence) else (axis,)
    axes = tuple(_axis(a, ndim, what) for a in given)
    if len(set(axes)) != len(axes):
        raise InvalidArgumentError(f"{what}: repeated axis in {given}; give each axis once")
    return axes


def _lengths(values: Any, what: str, name: str) -> tuple[int, ...]:
    """``values`` as a tuple of non-negative integers."""
    try:
        out = tuple(operator.index(n) for n in values)
    except TypeError:
        raise InvalidArgumentError(
            f"{what}: {name} must be a tuple of integers, got {values!r}"
        ) from None
    if any(n < 0 for n in out):
        raise InvalidArgumentError(f"{what}: {name} must be non-negative, got {out}")
    return out


def reshape(x: AnyArray, /, shape: tuple[int, ...], *, copy: bool | None = None) -> AnyArray:
    """``x`` with a new shape of the same number of elements, in C order.

    Each output tile is a contiguous run of the flattened order, read from
    ``x`` as a few boxes; nothing larger than a tile is held.

    Parameters
    ----------
    x : DiskArray or array-like
    shape : tuple of int
        The new shape; one length may be ``-1`` (worked out from the others).
    copy : bool, optional
        ``None``: ``x`` itself when the shape is unchanged, else a copy.  ``True``: always a
        copy.  ``False``: never a copy, so an error unless the shape is unchanged (a stored
        array in a new shape is always written anew).

    Returns
    -------
    DiskArray
        In scratch storage (``x`` itself for an unchanged shape without ``copy=True``).

    Raises
    ------
    ShapeMismatchError
        When the shape does not hold ``x``'s elements.
    InvalidArgumentError
        For a malformed shape, or ``copy=False`` with a new shape.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api.manipulation import reshape
    >>> x = oocarr.from_numpy(np.arange(6.0, dtype="f4"))
    >>> np.asarray(reshape(x, (2, -1)))
    array([[0., 1., 2.],
           [3., 4., 5.]], dtype=float32)
    >>> reshape(x, (6,)) is x
    True
    """
    current = _shape(x)
    target = resolve_shape(math.prod(current), shape)
    if target == current and not copy:
        return x
    if copy is False:
        raise InvalidArgumentError(
            f"reshape: copy=False, but an array of shape {current} takes a copy to have shape "
            f"{target}; pass copy=None (or True) to allow it"
        )
    return _reshape(x, shape=target)


def expand_dims(x: ArrayLike, /, axis: int = 0) -> Result:
    """``x`` with a new axis of length one at ``axis``.

    A view of a concrete ``DiskArray`` (no copy); a copy under ``jax.jit`` or ``jax.grad``.

    Parameters
    ----------
    x : DiskArray or array-like
    axis : int, default 0
        Where the new axis goes, in ``[-x.ndim - 1, x.ndim]``; a negative one counts from
        the end of the result (``-1`` appends).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api.manipulation import expand_dims
    >>> x = oocarr.from_numpy(np.zeros((2, 3)))
    >>> expand_dims(x, axis=1).shape, expand_dims(x, axis=-1).shape
    ((2, 1, 3), (2, 3, 1))
    """
    ndim = len(_shape(x))
    at = _axis(axis, ndim + 1, "expand_dims")
    return _index(x, (slice(None),) * at + (None,))


def squeeze(x: AnyArray, /, axis: int | tuple[int, ...]) -> AnyArray:
    """``x`` without the axes ``axis``, each of which must have length one.

    A view of a concrete ``DiskArray``; ``x`` itself for no axes.

    Raises
    ------
    InvalidArgumentError
        When an axis does not have length one, or is out of range.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api.manipulation import squeeze
    >>> x = oocarr.from_numpy(np.zeros((2, 1, 3, 1)))
    >>> squeeze(x, axis=(1, -1)).shape, squeeze(x, ()) is x
    ((2, 3), True)
    """
    shape = _shape(x)
    axes = _axes(axis, len(shape), "squeeze")
    wrong = [a for a in axes if shape[a] != 1]
    if wrong:
        raise InvalidArgumentError(
            f"squeeze: axis {wrong[0]} of an array of shape {shape} has length "
            f"{shape[wrong[0]]}, not 1; squeeze only axes of length one"
        )
    if not axes:
        return x
    return _index(x, tuple(0 if a in axes else slice(None) for a in range(len(shape))))


def concat(arrays: Sequence[Any], /, *, axis: int | None = 0) -> Result:
    """The arrays joined along an existing axis (``None``: each flattened, then joined).

    Each input is copied tile by tile to its offset in the result; inputs may
    mix stored and in-memory arrays.  The result's dtype is the inputs'
    promoted one (JAX's rules).

    Parameters
    ----------
    arrays : sequence of DiskArray or array-like
        At least one; the same shape except on ``axis``.
    axis : int or None, default 0

    Raises
    ------
    ShapeMismatchError
        When the shapes differ elsewhere than on ``axis``.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api.manipulation import concat
    >>> x = oocarr.from_numpy(np.zeros((2, 3), "f4"))
    >>> np.asarray(concat([x, np.ones((1, 3), "f4")]))
    array([[0., 0., 0.],
           [0., 0., 0.],
           [1., 1., 1.]], dtype=float32)
    """
    arrays = list(arrays)
    if not arrays:
        raise InvalidArgumentError("concat needs at least one array, got none")
    if axis is None:
        arrays = [reshape(a, (-1,)) for a in arrays]
        axis = 0
    _axis(axis, len(_shape(arrays[0])), "concat")
    if len(arrays) == 1:
        return arrays[0]
    return _concat(*arrays, axis=operator.index(axis), stack=False)


def stack(arrays: Sequence[Any], /, *, axis: int = 0) -> Result:
    """The arrays joined along a new axis at ``axis`` (in ``[-ndim - 1, ndim]``).

    One pass: each input's tiles are written at its index of the new axis.

    Raises
    ------
    ShapeMismatchError
        When the arrays' shapes differ.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api.manipulation import stack
    >>> x = oocarr.from_numpy(np.arange(3.0, dtype="f4"))
    >>> np.asarray(stack([x, x + 10.0], axis=1))
    array([[ 0., 10.],
           [ 1., 11.],
           [ 2., 12.]], dtype=float32)
    """
    arrays = list(arrays)
    if not arrays:
        raise InvalidArgumentError("stack needs at least one array, got none")
    return _concat(*arrays, axis=_axis(axis, len(_shape(arrays[0])) + 1, "stack"), stack=True)


def flip(x: AnyArray, /, *, axis: int | tuple[int, ...] | None = None) -> AnyArray:
    """``x`` with the order of elements reversed along ``axis`` (every axis by default).

    A (read-only) view of a concrete ``DiskArray``; a copy under a transformation.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api.manipulation import flip
    >>> x = oocarr.from_numpy(np.arange(6).reshape(2, 3))
    >>> np.asarray(flip(x, axis=1))
    array([[2, 1, 0],
           [5, 4, 3]])
    """
    ndim = len(_shape(x))
    axes = tuple(range(ndim)) if axis is None else _axes(axis, ndim, "flip")
    if not axes:
        return x
    return _index(
        x, tuple(slice(None, None, -1) if a in axes else slice(None) for a in range(ndim))
    )


def moveaxis(
    x: AnyArray, source: int | tuple[int, ...], destination: int | tuple[int, ...], /
) -> AnyArray:
    """``x`` with the axes ``source`` moved to ``destination``, the others in their order.

    Raises
    ------
    InvalidArgumentError
        When ``source`` and ``destination`` differ in length, repeat an axis or are out of
        range.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api.manipulation import moveaxis
    >>> moveaxis(oocarr.from_numpy(np.zeros((2, 3, 4))), 0, -1).shape
    (3, 4, 2)
    """
    ndim = len(_shape(x))
    src = _axes(source, ndim, "moveaxis")
    dst = _axes(destination, ndim, "moveaxis")
    if len(src) != len(dst):
        raise InvalidArgumentError(
            f"moveaxis: source {source!r} and destination {destination!r} must name as many "
            "axes as each other"
        )
    order = [a for a in range(ndim) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    if order == list(range(ndim)):
        return x
    return fn.transpose(x, tuple(order))


def broadcast_to(x: AnyArray, /, shape: tuple[int, ...]) -> AnyArray:
    """``x`` broadcast to ``shape`` (NumPy's rules), each output tile read from the input
    region it repeats; the gradient sums over the broadcast axes.

    Raises
    ------
    ShapeMismatchError
        When ``x`` cannot be broadcast to ``shape``.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api.manipulation import broadcast_to
    >>> x = oocarr.from_numpy(np.arange(3.0, dtype="f4"))
    >>> np.asarray(broadcast_to(x, (2, 3)))
    array([[0., 1., 2.],
           [0., 1., 2.]], dtype=float32)
    """
    target = _lengths((shape,) if isinstance(shape, int) else shape, "broadcast_to", "shape")
    if target == _shape(x):
        return x
    return _broadcast(x, shape=target)


def broadcast_arrays(*arrays: Any) -> list[Any]:
    """The arrays broadcast against one another (those already of the common shape as they
    are).

    Raises
    ------
    ShapeMismatchError
        When the shapes do not broadcast together.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api.manipulation import broadcast_arrays
    >>> a, b = broadcast_arrays(oocarr.from_numpy(np.zeros((2, 1))), np.ones(3))
    >>> a.shape, b.shape
    ((2, 3), (2, 3))
    """
    shapes = [_shape(a) for a in arrays]
    try:
        common = tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ShapeMismatchError(
            f"broadcast_arrays: shapes {shapes} do not broadcast together; each axis must "
            "have one length, or 1"
        ) from None
    return [broadcast_to(a, common) for a in arrays]


def _roll_axis(x: Any, shift: int, axis: int) -> Any:
    """``x`` rolled by ``shift`` (in ``[1, n)``) along ``axis`` of length ``n``."""
    n = _shape(x)[axis]
    before = (slice(None),) * axis
    return _concat(
        _index(x, (*before, slice(n - shift, None))),
        _index(x, (*before, slice(0, n - shift))),
        axis=axis,
        stack=False,
    )


def roll(
    x: AnyArray, /, shift: int | tuple[int, ...], *, axis: int | tuple[int, ...] | None = None
) -> AnyArray:
    """``x`` with its elements shifted by ``shift`` along ``axis``, those that leave one end
    coming back at the other (``axis=None``: over the flattened array, shape kept).

    Each rolled axis is one concatenation of two slices of the array.

    Parameters
    ----------
    x : DiskArray or array-like
    shift : int or tuple of int
        One per axis of a tuple ``axis``, or one for all of them.
    axis : int, tuple of int or None

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api.manipulation import roll
    >>> x = oocarr.from_numpy(np.arange(6).reshape(2, 3))
    >>> np.asarray(roll(x, 1, axis=1)), np.asarray(roll(x, -1)).tolist()
    (array([[2, 0, 1],
           [5, 3, 4]]), [[1, 2, 3], [4, 5, 0]])
    """
    shape = _shape(x)
    shifts = _integers(shift, "shift")
    if axis is None:
        total = sum(shifts) % max(1, math.prod(shape))
        if not total:
            return x
        return reshape(_roll_axis(reshape(x, (-1,)), total, 0), shape)
    axes = tuple(axis) if isinstance(axis, Sequence) else (axis,)
    axes = tuple(_axis(a, len(shape), "roll") for a in axes)
    if len(shifts) == 1:
        shifts = shifts * len(axes)
    if len(shifts) != len(axes):
        raise InvalidArgumentError(
            f"roll: {len(shifts)} shifts for {len(axes)} axes; give one shift per axis, or one "
            "for all"
        )
    net = dict.fromkeys(axes, 0)
    for a, s in zip(axes, shifts):
        net[a] += s
    for a, s in net.items():
        if s % max(1, shape[a]):
            x = _roll_axis(x, s % shape[a], a)
    return x


def _integers(values: Any, name: str) -> tuple[int, ...]:
    given = tuple(values) if isinstance(values, Sequence) else (values,)
    try:
        return tuple(operator.index(v) for v in given)
    except TypeError:
        raise InvalidArgumentError(
            f"{name} must be an integer or a tuple of integers, got {values!r}"
        ) from None


def tile(x: AnyArray, repetitions: tuple[int, ...], /) -> AnyArray:
    """``x`` repeated ``repetitions[i]`` times along each axis ``i`` (the shorter of ``x``'s
    shape and ``repetitions`` padded with leading ones), as ``jax.numpy.tile``.

    A broadcast of ``x`` (each output tile read from its input region), then a reshape,
    which is skipped when no axis both has more than one element and is repeated.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api.manipulation import tile
    >>> x = oocarr.from_numpy(np.array([[1, 2]]))
    >>> np.asarray(tile(x, (2, 2)))
    array([[1, 2, 1, 2],
           [1, 2, 1, 2]])
    """
    shape = _shape(x)
    reps = _lengths(repetitions, "tile", "repetitions")
    d = max(len(shape), len(reps))
    reps = (1,) * (d - len(reps)) + reps
    padded = (1,) * (d - len(shape)) + shape
    lead = d - len(shape)
    out = tuple(r * n for r, n in zip(reps, padded))
    if d == len(shape) and all(r == 1 for r in reps):
        return x
    if all(r == 1 or n == 1 for r, n in zip(reps, padded)):
        return _broadcast(x, shape=out, dims=tuple(range(lead, d)))
    interleaved = tuple(v for pair in zip(reps, padded) for v in pair)
    dims = tuple(2 * (k + lead) + 1 for k in range(len(shape)))
    return reshape(_broadcast(x, shape=interleaved, dims=dims), out)


def repeat(x: AnyArray, repeats: int | Any, /, *, axis: int | None = None) -> Result:
    """Each element of ``x`` repeated ``repeats`` times along ``axis`` (``None``: over the
    flattened array).

    An integer count streams: a broadcast along a new axis beside ``axis``, then a
    reshape.  An array of counts (one per element along ``axis``, or one for all) must be
    concrete: the result's shape depends on it, so under ``jax.jit`` it can only be a
    constant (a NumPy array); each run of equal counts is repeated as one piece and the
    pieces concatenated, so the cost grows with the number of runs.

    Raises
    ------
    NotSupportedError
        For counts that are a traced JAX value (under ``jax.jit``).
    InvalidArgumentError
        For negative counts, or an array of counts of the wrong length.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api.manipulation import repeat
    >>> x = oocarr.from_numpy(np.array([[1, 2], [3, 4]]))
    >>> np.asarray(repeat(x, 2, axis=1)).tolist(), np.asarray(repeat(x, [1, 2], axis=0)).tolist()
    ([[1, 1, 2, 2], [3, 3, 4, 4]], [[1, 2], [3, 4], [3, 4]])
    """
    if axis is None:
        x = reshape(x, (-1,))
        axis = 0
    shape = _shape(x)
    a = _axis(axis, len(shape), "repeat")
    counts = _counts(repeats, shape[a])
    if len(set(counts)) <= 1:
        return _repeat_all(x, counts[0] if counts else 1, a)
    pieces, start = [], 0
    while start < len(counts):
        stop = start
        while stop < len(counts) and counts[stop] == counts[start]:
            stop += 1
        if counts[start]:
            piece = _index(x, (slice(None),) * a + (slice(start, stop),))
            pieces.append(_repeat_all(piece, counts[start], a))
        start = stop
    if not pieces:
        return _index(x, (slice(None),) * a + (slice(0, 0),))
    return concat(pieces, axis=a)


def _counts(repeats: Any, n: int) -> list[int]:
    """``repeats`` as one count per element along the axis (of length ``n``), or a single
    count for all of them."""
    if isinstance(repeats, jax_core.Tracer):
        raise NotSupportedError(
            "repeat: the counts are a traced value, but the result's shape depends on them; "
            "pass an integer or a NumPy array (a constant under jax.jit)"
        )
    counts = np.asarray(repeats)
    if counts.ndim > 1 or counts.dtype.kind not in "iu":
        raise InvalidArgumentError(
            f"repeat: repeats must be an integer or a 1-d array of integers, got {repeats!r}"
        )
    counts = counts.reshape(-1)
    if counts.size not in (1, n):
        raise InvalidArgumentError(
            f"repeat: {counts.size} counts for an axis of length {n}; give one count per "
            "element, or one for all"
        )
    if (counts < 0).any():
        raise InvalidArgumentError(f"repeat: counts must be non-negative, got {counts.min()}")
    return [int(c) for c in counts]


def _repeat_all(x: Any, count: int, axis: int) -> Any:
    """Each element of ``x`` repeated ``count`` times along ``axis``."""
    if count == 1:
        return x
    shape = _shape(x)
    spread = (*shape[: axis + 1], count, *shape[axis + 1 :])
    dims = tuple(k if k <= axis else k + 1 for k in range(len(shape)))
    out = (*shape[:axis], shape[axis] * count, *shape[axis + 1 :])
    return reshape(_broadcast(x, shape=spread, dims=dims), out)


def unstack(x: ArrayLike, /, *, axis: int = 0) -> tuple[Any, ...]:
    """The slices of ``x`` along ``axis``, as a tuple (views of a concrete ``DiskArray``).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api.manipulation import unstack
    >>> parts = unstack(oocarr.from_numpy(np.arange(6).reshape(2, 3)), axis=1)
    >>> [np.asarray(p).tolist() for p in parts]
    [[0, 3], [1, 4], [2, 5]]
    """
    shape = _shape(x)
    a = _axis(axis, len(shape), "unstack")
    before = (slice(None),) * a
    return tuple(_index(x, (*before, i)) for i in range(shape[a]))


def _reshape_method(self: Any, *shape: Any, copy: bool | None = None) -> Any:
    """``x.reshape(2, 3)`` or ``x.reshape((2, 3))``, as NumPy's method takes either."""
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
        shape = tuple(shape[0])
    return reshape(self, tuple(shape), copy=copy)


def _squeeze_method(self: Any, axis: int | tuple[int, ...] | None = None) -> Any:
    """``x.squeeze()`` drops every axis of length one, as NumPy's method does."""
    if axis is None:
        axis = tuple(i for i, n in enumerate(self.shape) if n == 1)
    return squeeze(self, axis)


def install_methods() -> None:
    """Give ``DiskArray`` (and its traced type) the methods ``.reshape()`` and ``.squeeze()``;
    :mod:`oocarr` calls this once when it is imported.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> install_methods()
    >>> x = oocarr.from_numpy(np.arange(6.0).reshape(1, 6))
    >>> x.reshape(-1, 2).shape, x.reshape((3, 2)).shape, x.squeeze().shape
    ((3, 2), (3, 2), (6,))
    """
    add_methods({"reshape": _reshape_method, "squeeze": _squeeze_method})
