"""The Array API's ``fft`` extension (standard 2023.12) over stored arrays.

Each transform runs along axes whose lines fit the memory budget, streamed over the other
axes: a tile holds whole lines along the transformed axis (as many as the budget allows), so
an array far larger than the budget transforms tile by tile.  An axis whose one line does not
fit a tile of the budget is refused with :class:`~oocarr.errors.BudgetTooSmallError`, which
names the line's length.  The multi-axis transforms (``fftn``, ``ifftn``, ``rfftn``,
``irfftn``) apply the one-axis transform axis by axis, each into scratch storage, in NumPy's
order (``rfftn``: ``rfft`` along the last axis, then ``fft`` along the others; ``irfftn``: the
reverse).

Values and dtypes are ``jax.numpy.fft``'s: without ``jax_enable_x64`` a float32 array
transforms to complex64 and back to float32.  Every transform is differentiable (the
gradient streams the cotangent through the transform's ``jax.vjp``, as ``jax.grad`` of
``jax.numpy.fft`` gives it) and works under ``jax.jit``.  ``fftfreq`` and ``rfftfreq`` write
small 1-d arrays as :mod:`oocarr.api.creation` does; ``fftshift`` and ``ifftshift`` are
:func:`~oocarr.api.manipulation.roll`.

Examples
--------
>>> import numpy as np, oocarr
>>> from oocarr.api import fft
>>> x = oocarr.from_numpy(np.array([[1.0, 2.0, 3.0, 4.0]] * 2, "f4"))
>>> y = fft.fft(x)
>>> y.dtype, np.asarray(y)[0].tolist()
(dtype('complex64'), [(10+0j), (-2+2j), (-2+0j), (-2-2j)])
>>> np.asarray(fft.irfft(fft.rfft(x))).tolist()
[[1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0]]
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
from jax._src import core as jax_core

from oocarr.api import elementwise as fn
from oocarr.api.creation import _check_device, _concrete, default_dtype, write_scratch
from oocarr.api.manipulation import roll
from oocarr.errors import InvalidArgumentError, NotSupportedError
from oocarr.jaxlayer.disk_array import DiskArray
from oocarr.jaxlayer.make_op import make_op
from oocarr.ops.fft import FFT, NORMS

if TYPE_CHECKING:
    from oocarr.jaxlayer.disk_array import AnyArray, ArrayLike, DTypeLike, Result

__all__ = [
    "fft",
    "ifft",
    "fftn",
    "ifftn",
    "rfft",
    "irfft",
    "rfftn",
    "irfftn",
    "hfft",
    "ihfft",
    "fftfreq",
    "rfftfreq",
    "fftshift",
    "ifftshift",
]

_transform = make_op(FFT)


# ----------------------------------------------------------------------------
# Arguments
# ----------------------------------------------------------------------------
def _int(value: Any, what: str, name: str) -> int:
    """``value`` as a Python int (``operator.index``); a traced one is refused."""
    if isinstance(value, jax_core.Tracer):
        raise NotSupportedError(
            f"{name}: {what} cannot be traced ({value}); pass a Python int (under jax.jit, a "
            "static argument)"
        )
    try:
        return operator.index(value)
    except TypeError:
        raise InvalidArgumentError(f"{name}: {what} must be an int, got {value!r}") from None


def _length(n: Any, name: str) -> int | None:
    """``n`` as a positive int, or ``None``."""
    if n is None:
        return None
    n = _int(n, "n", name)
    if n < 1:
        raise InvalidArgumentError(f"{name}: n must be a positive int, got {n}")
    return n


def _norm(norm: Any, name: str) -> str:
    if norm is None:
        return "backward"
    if norm not in NORMS:
        raise InvalidArgumentError(f"{name}: norm must be one of {list(NORMS)}, got {norm!r}")
    return norm


def _shape(x: Any) -> tuple[int, ...]:
    shape = getattr(x, "shape", None)
    return tuple(np.shape(x) if shape is None else shape)


def _one(kind: str, x: Any, n: Any, axis: Any, norm: Any) -> Any:
    """``jax.numpy.fft.<kind>`` along one axis of ``x``, streamed."""
    return _transform(
        x, kind=kind, n=_length(n, kind), axis=_int(axis, "axis", kind), norm=_norm(norm, kind)
    )


def _sequence(values: Any, what: str, name: str) -> tuple:
    """``values`` (a sequence or 1-d array of ints) as a tuple."""
    if isinstance(values, str) or np.ndim(values) != 1:
        raise InvalidArgumentError(f"{name}: {what} must be a sequence of ints, got {values!r}")
    return tuple(values)


def _plan(x: Any, s: Any, axes: Any, name: str) -> list[tuple[int, int | None]]:
    """The ``(axis, n)`` of each transformed axis, in the order given: ``axes`` (all axes by
    default, or the last ``len(s)`` when only ``s`` is given) with ``s`` (``-1`` or ``None``:
    the axis's own length)."""
    ndim = len(_shape(x))
    s = None if s is None else _sequence(s, "s", name)
    axes = None if axes is None else _sequence(axes, "axes", name)
    if axes is None:
        axes = range(ndim) if s is None else range(ndim - len(s), ndim)
    axes = [_int(a, "axes", name) for a in axes]
    for a in axes:
        if not -ndim <= a < ndim:
            raise InvalidArgumentError(
                f"{name}: axis {a} is out of range for an array of {ndim} axes"
            )
    normalized = [a % ndim for a in axes]
    if len(set(normalized)) != len(normalized):
        raise InvalidArgumentError(f"{name}: axes {tuple(axes)} repeat an axis; give each once")
    if s is None:
        lengths: list[int | None] = [None] * len(axes)
    else:
        if len(s) != len(axes):
            raise InvalidArgumentError(
                f"{name}: s has {len(s)} lengths for {len(axes)} axes; give one per axis"
            )
        lengths = [None if n is None or _int(n, "s", name) == -1 else _length(n, name) for n in s]
    return list(zip(normalized, lengths))


def _complex_copy(x: Any) -> Any:
    """``x`` cast to the complex dtype ``jax.numpy.fft`` gives a transform over no axes."""
    dtype = np.dtype(x.dtype) if hasattr(x, "dtype") else np.asarray(x).dtype
    return fn.astype(x, jax.dtypes.canonicalize_dtype(np.result_type(dtype, np.complex64)))


def _nd(kind: str, x: Any, s: Any, axes: Any, norm: Any, name: str) -> Any:
    norm = _norm(norm, name)
    plan = _plan(x, s, axes, name)
    if not plan:
        return _complex_copy(x)
    for axis, n in reversed(plan):
        x = _transform(x, kind=kind, n=n, axis=axis, norm=norm)
    return x


# ----------------------------------------------------------------------------
# One axis
# ----------------------------------------------------------------------------
def fft(x: ArrayLike, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Result:
    """The one-dimensional discrete Fourier transform along ``axis``, streamed over the
    other axes.

    Parameters
    ----------
    x : DiskArray or array-like
        The input (a real array transforms as complex).
    n : int, optional
        The transform's length: each line is cropped to ``n`` elements or padded with zeros
        to it (default: the axis's length).
    axis : int, default -1
        The axis to transform; its lines (of ``max(n, length)`` elements) must fit the
        memory budget.
    norm : {"backward", "ortho", "forward"}
        No scaling, ``1/sqrt(n)``, or ``1/n`` on the forward transform.

    Returns
    -------
    DiskArray
        Complex, in scratch storage; ``n`` elements along ``axis``.

    Raises
    ------
    BudgetTooSmallError
        When one line along ``axis`` does not fit a tile of the memory budget.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api import fft
    >>> x = oocarr.from_numpy(np.array([1.0, 0.0, -1.0, 0.0], "f4"))
    >>> np.asarray(fft.fft(x)).tolist()
    [0j, (2+0j), 0j, (2+0j)]
    >>> fft.fft(x, n=6).shape
    (6,)
    """
    return _one("fft", x, n, axis, norm)


def ifft(
    x: ArrayLike, /, *, n: int | None = None, axis: int = -1, norm: str = "backward"
) -> Result:
    """The one-dimensional inverse discrete Fourier transform along ``axis``, streamed.

    Parameters as :func:`fft` (``norm="backward"`` scales the inverse by ``1/n``).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api import fft
    >>> x = oocarr.from_numpy(np.array([0, 2, 0, 2], "c8"))
    >>> np.asarray(fft.ifft(x)).real.tolist()
    [1.0, 0.0, -1.0, 0.0]
    """
    return _one("ifft", x, n, axis, norm)


def rfft(
    x: ArrayLike, /, *, n: int | None = None, axis: int = -1, norm: str = "backward"
) -> Result:
    """The one-dimensional discrete Fourier transform of a real array along ``axis``: the
    ``n // 2 + 1`` non-negative frequencies.

    Parameters as :func:`fft`; ``x`` must be real.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api import fft
    >>> x = oocarr.from_numpy(np.array([1.0, 0.0, -1.0, 0.0], "f4"))
    >>> np.asarray(fft.rfft(x)).tolist()
    [0j, (2+0j), 0j]
    """
    return _one("rfft", x, n, axis, norm)


def irfft(
    x: ArrayLike, /, *, n: int | None = None, axis: int = -1, norm: str = "backward"
) -> Result:
    """The inverse of :func:`rfft` along ``axis``: a real array of ``n`` elements along it
    (default ``2 * (m - 1)`` for an axis of ``m``), from the non-negative frequencies.

    Each line reads its first ``n // 2 + 1`` elements (padded with zeros when it has fewer).
    Parameters as :func:`fft`.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api import fft
    >>> x = oocarr.from_numpy(np.array([0, 2, 0], "c8"))
    >>> np.asarray(fft.irfft(x)).tolist()
    [1.0, 0.0, -1.0, 0.0]
    """
    return _one("irfft", x, n, axis, norm)


def hfft(
    x: ArrayLike, /, *, n: int | None = None, axis: int = -1, norm: str = "backward"
) -> Result:
    """The discrete Fourier transform of a signal with Hermitian symmetry, given by its first
    half along ``axis``: a real array of ``n`` elements along it (default ``2 * (m - 1)``).

    Parameters as :func:`irfft`.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api import fft
    >>> x = oocarr.from_numpy(np.array([1, 2, 3], "c8"))
    >>> np.asarray(fft.hfft(x)).tolist()
    [8.0, -2.0, 0.0, -2.0]
    """
    return _one("hfft", x, n, axis, norm)


def ihfft(
    x: ArrayLike, /, *, n: int | None = None, axis: int = -1, norm: str = "backward"
) -> Result:
    """The inverse of :func:`hfft` along ``axis``: the ``n // 2 + 1`` first elements of the
    Hermitian-symmetric spectrum of a real array.

    Parameters as :func:`rfft`.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api import fft
    >>> x = oocarr.from_numpy(np.array([8.0, -2.0, 0.0, -2.0], "f4"))
    >>> y = fft.ihfft(x)
    >>> y.dtype, np.asarray(y).real.tolist()
    (dtype('complex64'), [1.0, 2.0, 3.0])
    """
    return _one("ihfft", x, n, axis, norm)


# ----------------------------------------------------------------------------
# Several axes
# ----------------------------------------------------------------------------
def fftn(
    x: ArrayLike,
    /,
    *,
    s: Sequence[int] | None = None,
    axes: Sequence[int] | None = None,
    norm: str = "backward",
) -> Result:
    """The n-dimensional discrete Fourier transform over ``axes``: :func:`fft` along each.

    Parameters
    ----------
    x : DiskArray or array-like
    s : sequence of int, optional
        The transform's length along each of ``axes`` (``-1``: the axis's length), as
        :func:`fft`'s ``n``.
    axes : sequence of int, optional
        The axes to transform, each once; all of them by default (the last ``len(s)`` when
        only ``s`` is given).  Each axis's lines must fit the memory budget.
    norm : {"backward", "ortho", "forward"}
        Applied along each axis (``"forward"``: ``1 / prod(s)`` in all).

    Returns
    -------
    DiskArray
        Complex, in scratch storage.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api import fft
    >>> x = oocarr.from_numpy(np.ones((2, 3), "f4"))
    >>> np.asarray(fft.fftn(x)).real.tolist()
    [[6.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    >>> fft.fftn(x, s=(4,), axes=(0,)).shape
    (4, 3)
    """
    return _nd("fft", x, s, axes, norm, "fftn")


def ifftn(
    x: ArrayLike,
    /,
    *,
    s: Sequence[int] | None = None,
    axes: Sequence[int] | None = None,
    norm: str = "backward",
) -> Result:
    """The n-dimensional inverse discrete Fourier transform: :func:`ifft` along each of
    ``axes``.  Parameters as :func:`fftn`.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api import fft
    >>> x = oocarr.from_numpy(np.array([[6, 0, 0], [0, 0, 0]], "c8"))
    >>> np.asarray(fft.ifftn(x)).real.tolist()
    [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    """
    return _nd("ifft", x, s, axes, norm, "ifftn")


def rfftn(
    x: AnyArray,
    /,
    *,
    s: Sequence[int] | None = None,
    axes: Sequence[int] | None = None,
    norm: str = "backward",
) -> AnyArray:
    """The n-dimensional discrete Fourier transform of a real array: :func:`rfft` along the
    last of ``axes`` (``s[-1] // 2 + 1`` elements), then :func:`fft` along the others.

    Parameters as :func:`fftn`; ``x`` must be real and ``axes`` not empty.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api import fft
    >>> x = oocarr.from_numpy(np.ones((2, 4), "f4"))
    >>> y = fft.rfftn(x)
    >>> y.shape, np.asarray(y).real.tolist()
    ((2, 3), [[8.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    """
    plan = _plan(x, s, axes, "rfftn")
    if not plan:
        raise InvalidArgumentError("rfftn needs at least one axis to transform")
    norm = _norm(norm, "rfftn")
    (last, n), rest = plan[-1], plan[:-1]
    x = _transform(x, kind="rfft", n=n, axis=last, norm=norm)
    for axis, n in reversed(rest):
        x = _transform(x, kind="fft", n=n, axis=axis, norm=norm)
    return x


def irfftn(
    x: ArrayLike,
    /,
    *,
    s: Sequence[int] | None = None,
    axes: Sequence[int] | None = None,
    norm: str = "backward",
) -> Result:
    """The inverse of :func:`rfftn`: :func:`ifft` along all but the last of ``axes``, then
    :func:`irfft` along the last (``s[-1]`` elements, default ``2 * (m - 1)``).

    Parameters as :func:`fftn`; ``axes`` must not be empty.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api import fft
    >>> x = oocarr.from_numpy(np.array([[8, 0, 0], [0, 0, 0]], "c8"))
    >>> np.asarray(fft.irfftn(x)).tolist()
    [[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]]
    """
    plan = _plan(x, s, axes, "irfftn")
    if not plan:
        raise InvalidArgumentError("irfftn needs at least one axis to transform")
    norm = _norm(norm, "irfftn")
    (last, n), rest = plan[-1], plan[:-1]
    for axis, m in rest:
        x = _transform(x, kind="ifft", n=m, axis=axis, norm=norm)
    return _transform(x, kind="irfft", n=n, axis=last, norm=norm)


# ----------------------------------------------------------------------------
# Frequencies and shifts
# ----------------------------------------------------------------------------
def _frequencies(n: Any, d: Any, device: Any, dtype: Any, name: str, half: bool) -> DiskArray:
    _check_device(device, name)
    _concrete(name, d=d)
    n = _int(n, "n", name)
    if n < 1:
        raise InvalidArgumentError(f"{name}: n must be a positive int, got {n}")
    dtype = default_dtype("real floating") if dtype is None else np.dtype(dtype)
    if dtype.kind != "f":
        raise InvalidArgumentError(f"{name}: dtype must be a real floating dtype, got {dtype}")
    scale = 1.0 / (float(d) * n)
    length = n // 2 + 1 if half else n

    def compute(region: tuple[slice, ...]) -> np.ndarray:
        index = np.arange(region[0].start, region[0].stop, dtype=np.float64)
        if not half:
            index[index > (n - 1) // 2] -= n
        return index * scale

    return write_scratch((length,), dtype, name, compute)


def fftfreq(
    n: int, /, *, d: float = 1.0, device: Any = None, dtype: DTypeLike | None = None
) -> DiskArray:
    """The sample frequencies of an ``n``-point :func:`fft` with sample spacing ``d``:
    ``[0, 1, ..., (n - 1) // 2, -(n // 2), ..., -1] / (d * n)``.

    Parameters
    ----------
    n : int
        The window length (positive).
    d : float, default 1.0
        The sample spacing.
    device : optional
        ``None`` or the CPU: stored arrays live on the host.
    dtype : optional
        A real floating dtype (default float32, or float64 with ``jax_enable_x64``), as in
        the standard's 2024.12 revision.

    Returns
    -------
    DiskArray
        ``n`` frequencies, in scratch storage.

    Examples
    --------
    >>> import numpy as np
    >>> from oocarr.api import fft
    >>> np.asarray(fft.fftfreq(5, d=0.5)).tolist()
    [0.0, 0.4000000059604645, 0.800000011920929, -0.800000011920929, -0.4000000059604645]
    """
    return _frequencies(n, d, device, dtype, "fftfreq", half=False)


def rfftfreq(
    n: int, /, *, d: float = 1.0, device: Any = None, dtype: DTypeLike | None = None
) -> DiskArray:
    """The sample frequencies of an ``n``-point :func:`rfft` with sample spacing ``d``:
    ``[0, 1, ..., n // 2] / (d * n)``.  Parameters as :func:`fftfreq`.

    Examples
    --------
    >>> import numpy as np
    >>> from oocarr.api import fft
    >>> np.asarray(fft.rfftfreq(4)).tolist()
    [0.0, 0.25, 0.5]
    """
    return _frequencies(n, d, device, dtype, "rfftfreq", half=True)


def _shift(x: Any, axes: Any, sign: int, name: str) -> Any:
    shape = _shape(x)
    if axes is None:
        axes = tuple(range(len(shape)))
    elif isinstance(axes, Sequence):
        axes = tuple(_int(a, "axes", name) for a in axes)
    else:
        axes = (_int(axes, "axes", name),)
    for a in axes:
        if not -len(shape) <= a < len(shape):
            raise InvalidArgumentError(
                f"{name}: axis {a} is out of range for an array of {len(shape)} axes"
            )
    if not axes:
        return x
    return roll(x, tuple(sign * (shape[a] // 2) for a in axes), axis=axes)


def fftshift(x: ArrayLike, /, *, axes: int | Sequence[int] | None = None) -> Result:
    """``x`` with the zero-frequency term moved to the middle of each of ``axes`` (all by
    default): a roll by ``n // 2`` along each, streamed.

    Examples
    --------
    >>> import numpy as np
    >>> from oocarr.api import fft
    >>> np.asarray(fft.fftshift(fft.fftfreq(5))).tolist()
    [-0.4000000059604645, -0.20000000298023224, 0.0, 0.20000000298023224, 0.4000000059604645]
    """
    return _shift(x, axes, 1, "fftshift")


def ifftshift(x: ArrayLike, /, *, axes: int | Sequence[int] | None = None) -> Result:
    """The inverse of :func:`fftshift`: a roll by ``-(n // 2)`` along each of ``axes``.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api import fft
    >>> x = oocarr.from_numpy(np.arange(5, dtype="f4"))
    >>> np.asarray(fft.ifftshift(fft.fftshift(x))).tolist()
    [0.0, 1.0, 2.0, 3.0, 4.0]
    """
    return _shift(x, axes, -1, "ifftshift")
