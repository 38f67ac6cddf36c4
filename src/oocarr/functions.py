"""The public op functions and the operators of ``DiskArray``, built with :func:`make_op`."""

from __future__ import annotations

from typing import Any

from jax._src import core as jax_core

from oocarr.jaxlayer.disk_array import DiskArray, DiskArrayType, is_disk
from oocarr.jaxlayer.make_op import make_op, materialize, update
from oocarr.ops.elementwise import BINARY, COMPARISON, UNARY, Where
from oocarr.ops.matmul import Matmul
from oocarr.ops.reductions import LogSumExp, Max, Mean, Min, Sum
from oocarr.ops.slicing import Slice
from oocarr.ops.softmax import Softmax
from oocarr.ops.transpose import Transpose
from oocarr.store.views import key_region

__all__ = [
    *UNARY,
    *BINARY,
    *COMPARISON,
    "sum",
    "mean",
    "max",
    "min",
    "logsumexp",
    "softmax",
    "where",
    "matmul",
    "transpose",
    "materialize",
    "update",
    "install_operators",
]


def _elementwise_doc(name: str, arity: int) -> str:
    args = "x" if arity == 1 else "x1, x2"
    return f"""Elementwise ``{name}`` of stored or in-memory arrays, streamed tile by tile.

    Follows ``jax.numpy.{name}`` (NumPy broadcasting); differentiable.

    Parameters
    ----------
    {args} : DiskArray, array-like or scalar

    Returns
    -------
    DiskArray
        In scratch storage (a 0-d result is a ``jax.Array``).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.array([1.0, 4.0], "f4"))
    >>> np.asarray(oocarr.{name}({", ".join(["x"] * arity)})).shape
    (2,)
    """


_globals = globals()
for _name, _cls in UNARY.items():
    _globals[_name] = make_op(_cls, doc=_elementwise_doc(_name, 1))
for _name, _cls in {**BINARY, **COMPARISON}.items():
    _globals[_name] = make_op(_cls, doc=_elementwise_doc(_name, 2))

_sum = make_op(Sum)
_mean = make_op(Mean)


def sum(x: Any, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Any:  # noqa: A001
    """Sum over ``axis`` (all axes by default), streaming the input tile by tile.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> float(oocarr.sum(oocarr.from_numpy(np.arange(5.0, dtype="f4"))))
    10.0
    """
    return _sum(x, axis=axis, keepdims=keepdims)


def mean(x: Any, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Any:
    """Mean over ``axis`` (all axes by default), streaming the input tile by tile.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> float(oocarr.mean(oocarr.from_numpy(np.arange(5.0, dtype="f4"))))
    2.0
    """
    return _mean(x, axis=axis, keepdims=keepdims)


_max = make_op(Max)
_min = make_op(Min)
_logsumexp = make_op(LogSumExp)
_where = make_op(Where)


def max(x: Any, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Any:  # noqa: A001
    """Maximum over ``axis``; the gradient goes to the maximal elements.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> float(oocarr.max(oocarr.from_numpy(np.array([1.0, 5.0, 2.0], "f4"))))
    5.0
    """
    return _max(x, axis=axis, keepdims=keepdims)


def min(x: Any, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Any:  # noqa: A001
    """Minimum over ``axis``; the gradient goes to the minimal elements.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> float(oocarr.min(oocarr.from_numpy(np.array([1.0, 5.0, 2.0], "f4"))))
    1.0
    """
    return _min(x, axis=axis, keepdims=keepdims)


def logsumexp(x: Any, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Any:
    """``log(sum(exp(x)))`` over ``axis``, computed stably in one streaming pass.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> round(float(oocarr.logsumexp(oocarr.from_numpy(np.zeros(4, "f4")))), 4)
    1.3863
    """
    return _logsumexp(x, axis=axis, keepdims=keepdims)


_softmax = make_op(Softmax)


def softmax(x: Any, axis: int = -1) -> Any:
    """``exp(x) / sum(exp(x), axis)``, like ``jax.nn.softmax``, streamed a panel of rows at a time.

    Rows longer than a tile are handled in two passes (statistics, then
    outputs); the gradient is exact.

    Parameters
    ----------
    x : DiskArray or array-like
        At least 1-d.
    axis : int, default -1
        The axis the probabilities sum to one over.

    Returns
    -------
    DiskArray
        In scratch storage, the shape of ``x``.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.log(np.array([[1.0, 3.0], [2.0, 2.0]], "f4")))
    >>> np.asarray(oocarr.softmax(x)).round(4)
    array([[0.25, 0.75],
           [0.5 , 0.5 ]], dtype=float32)
    """
    return _softmax(x, axis=axis)


def where(condition: Any, x: Any, y: Any) -> Any:
    """Elements of ``x`` where ``condition`` holds, else of ``y`` (NumPy broadcasting).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.array([-1.0, 2.0], "f4"))
    >>> np.asarray(oocarr.where(x > 0, x, 0.0))
    array([0., 2.], dtype=float32)
    """
    return _where(condition, x, y)


matmul = make_op(
    Matmul,
    doc="""Matrix product of 2-d arrays, stored or in memory, tile by tile.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> a = oocarr.from_numpy(np.eye(3, dtype="f4"))
    >>> np.asarray(oocarr.matmul(a, np.ones((3, 2), "f4")))[0]
    array([1., 1.], dtype=float32)
    """,
)


_transpose = make_op(Transpose)


def transpose(x: Any, axes: tuple[int, ...] | None = None) -> Any:
    """Permute the axes (reverse them by default), tile by tile.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> oocarr.transpose(oocarr.from_numpy(np.zeros((2, 3, 4))), (1, 0, 2)).shape
    (3, 2, 4)
    """
    return _transpose(x, axes=None if axes is None else tuple(axes))


def _swap(fn):
    return lambda x, y: fn(y, x)


_OPERATORS = {
    "add": _globals["add"],
    "radd": _swap(_globals["add"]),
    "sub": _globals["subtract"],
    "rsub": _swap(_globals["subtract"]),
    "mul": _globals["multiply"],
    "rmul": _swap(_globals["multiply"]),
    "truediv": _globals["divide"],
    "rtruediv": _swap(_globals["divide"]),
    "matmul": matmul,
    "rmatmul": _swap(matmul),
    "pow": _globals["power"],
    "neg": _globals["negative"],
    "gt": _globals["greater"],
    "ge": _globals["greater_equal"],
    "lt": _globals["less"],
    "le": _globals["less_equal"],
}


_slice = make_op(Slice)


def _traced_getitem(x: Any, key: Any) -> Any:
    """``x[key]`` on a traced ``DiskArray``: a tile-by-tile copy, differentiable."""
    region = tuple(tuple(r) for r in key_region(key, tuple(x.shape)))
    return _slice(x, region=region)


def _deferring_to_disk(original: Any, ours: Any) -> Any:
    """``original`` (an operator of JAX's in-memory type), but ``ours(x, y)`` when ``y`` is a
    ``DiskArray``: under ``jit`` both are tracers of one Python class, so Python never asks
    the ``DiskArray``'s reflected operator (``lr * g`` with a traced ``lr``)."""

    def operator(x: Any, y: Any) -> Any:
        if is_disk(y):
            return ours(x, y)
        return original(x, y)

    operator.__wrapped__ = original  # type: ignore[attr-defined]
    return operator


def install_operators() -> None:
    """Give ``DiskArray`` (and its traced type) its operators and methods: ``+``, ``@``,
    ``<`` ..., ``.sum()``, ``.mean()``, ``.T``, ``.update_()`` and ``x[key]`` under ``jit``.

    :mod:`oocarr` calls this once when it is imported; calling it again changes nothing.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> install_operators()
    >>> np.asarray(oocarr.from_numpy(np.ones(2, "f4")) + 1.0)
    array([2., 2.], dtype=float32)
    """
    for name, fn in _OPERATORS.items():
        setattr(DiskArray, f"__{name}__", lambda self, *a, _fn=fn: _fn(self, *a))
        setattr(DiskArrayType, f"_{name}", staticmethod(fn))
    methods = {"sum": sum, "mean": mean, "transpose": transpose, "update_": update}
    for name, fn in methods.items():
        setattr(DiskArray, name, fn)
        setattr(DiskArrayType, name, jax_core.aval_method(fn))
    DiskArrayType._getitem = staticmethod(_traced_getitem)
    for name, fn in _OPERATORS.items():
        original = getattr(jax_core.ShapedArray, f"_{name}", None)
        if original is not None and not hasattr(original, "__wrapped__"):
            setattr(
                jax_core.ShapedArray, f"_{name}", staticmethod(_deferring_to_disk(original, fn))
            )
    DiskArray.T = property(transpose)
    DiskArrayType.T = jax_core.aval_property(transpose)
