"""oocarr as an Array API namespace (standard 2023.12): ``x.__array_namespace__()``.

Code written against the standard (``xp = x.__array_namespace__()``, then ``xp.mean(x)``,
``xp.std(x, correction=1)`` ...) runs on stored arrays, streamed tile by tile.  The
functions here are oocarr's own; docs/array-api.md lists every function of the standard
with its status.  A function the standard has and oocarr does not yet give raises
:class:`oocarr.errors.NotSupportedError` naming it, with the reason and what to use.

Outside a trace every result of the namespace's functions (``xp.linalg`` and ``xp.fft``'s
too) is a ``DiskArray``, 0-d reductions and small factors included, so code that finds its
namespace from the arrays it holds (``array_api_compat.array_namespace``, scikit-learn's Array
API dispatch) finds this one; under ``jax.jit`` and ``jax.grad`` 0-d results stay JAX values.

Examples
--------
>>> import numpy as np, oocarr
>>> x = oocarr.from_numpy(np.array([[1.0, 2.0], [3.0, 4.0]], "f4"))
>>> xp = x.__array_namespace__()
>>> print(f"{float(xp.mean(xp.sqrt(x))):.4f}", xp.matrix_transpose(x).shape)
1.5366 (2, 2)
"""

from __future__ import annotations

import builtins
import functools
import math
import sys
import types
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core as jax_core

from oocarr import fft as fft_module  # the standard's extensions: xp.fft and xp.linalg
from oocarr import linalg as linalg_module
from oocarr.api import (
    contraction,
    creation,
    indexing,
    manipulation,
    numpy_reductions,
    searching,
    sets,
)
from oocarr.api import elementwise as fn
from oocarr.errors import InvalidArgumentError, NotProvidedError
from oocarr.jaxlayer.disk_array import DiskArray, DiskArrayType
from oocarr.ops.elementwise import (
    BINARY,
    BITWISE,
    COMPARISON,
    MATH,
    MATH_BINARY,
    PREDICATES,
    UNARY,
)

__array_api_version__ = "2023.12"

# ----------------------------------------------------------------------------
# Constants and data types (NumPy's scalar types, which compare equal to the dtypes of
# stored arrays: ``x.dtype == xp.float32``)
# ----------------------------------------------------------------------------
e, pi, inf, nan, newaxis = math.e, math.pi, math.inf, math.nan, None
bool = np.bool_  # noqa: A001
int8, int16, int32, int64 = np.int8, np.int16, np.int32, np.int64
uint8, uint16, uint32, uint64 = np.uint8, np.uint16, np.uint32, np.uint64
float32, float64 = np.float32, np.float64
complex64, complex128 = np.complex64, np.complex128

# ----------------------------------------------------------------------------
# Elementwise functions and reductions: oocarr's own
# ----------------------------------------------------------------------------
#: The elementwise ops, less the ones the standard does not name (neural-network helpers).
_ELEMENTWISE = [
    name
    for group in (UNARY, BINARY, COMPARISON, MATH, MATH_BINARY, PREDICATES, BITWISE)
    for name in group
    if name not in ("relu", "sigmoid", "softplus")
]
_REDUCTIONS = ("sum", "mean", "max", "min", "any", "all")
globals().update({name: getattr(fn, name) for name in (*_ELEMENTWISE, *_REDUCTIONS, "pow")})
var, std = numpy_reductions.var, numpy_reductions.std
# NumPy's NaN-ignoring reductions, which xarray asks a namespace for (``skipna``): without them
# ``DataArray.mean`` of floating data would go to ``np.nanmean`` and read it all into memory
_NAN_REDUCTIONS = ("nanmean", "nansum", "nanvar", "nanstd", "nanmax", "nanmin")
globals().update({name: getattr(numpy_reductions, name) for name in _NAN_REDUCTIONS})
astype, matmul, where = fn.astype, fn.matmul, fn.where
take = indexing.take
# the linalg extension's, which the main namespace has too
matrix_transpose, vecdot = linalg_module.matrix_transpose, linalg_module.vecdot
#: The standard's functions that live in oocarr's other modules, by module.
_ELSEWHERE = {
    manipulation: [n for n in manipulation.__all__ if n != "install_methods"],
    contraction: ("tensordot",),
    searching: [n for n in searching.__all__ if not n.startswith(("nan", "install"))],
    creation: creation.FUNCTIONS,
    sets: ("unique_all", "unique_counts", "unique_inverse", "unique_values", "nonzero"),
}
globals().update({name: getattr(m, name) for m, names in _ELSEWHERE.items() for name in names})


def sum(  # noqa: A001
    x: Any,
    /,
    *,
    axis: int | tuple[int, ...] | None = None,
    dtype: Any = None,
    keepdims: builtins.bool = False,
) -> Any:
    """Sum over ``axis``, the standard's signature: ``dtype`` casts ``x`` first (fused into the
    sum under ``jax.jit``).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.array([200, 100], "u1"))
    >>> int(sum(x)), float(sum(x, dtype=float32))
    (300, 300.0)
    """
    if dtype is None:
        return fn.sum(x, axis=axis, keepdims=keepdims)
    if np.dtype(dtype) != np.dtype(x.dtype):
        x = fn.astype(x, dtype)
    out = fn.sum(x, axis=axis, keepdims=keepdims)
    if np.dtype(out.dtype) == np.dtype(dtype):
        return out
    # JAX sums small integers in 32 bits; the standard wants the dtype asked for, which the
    # wider sum gives modulo its range, as a sum in that dtype would
    return fn.astype(out, dtype) if isinstance(out, DiskArray) else jnp.asarray(out, dtype)


def permute_dims(x: Any, /, axes: tuple[int, ...]) -> Any:
    """``x`` with its axes in the order ``axes``, copied tile by tile.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> permute_dims(oocarr.from_numpy(np.zeros((2, 3, 4))), (2, 0, 1)).shape
    (4, 2, 3)
    """
    return fn.transpose(x, tuple(axes))


def clip(x: Any, /, min: Any = None, max: Any = None) -> Any:  # noqa: A002
    """``x`` with values below ``min`` raised to it and above ``max`` lowered to it.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> np.asarray(clip(oocarr.from_numpy(np.array([-2.0, 0.5, 3.0], "f4")), 0.0, 1.0)).tolist()
    [0.0, 0.5, 1.0]
    """
    out = x
    if min is not None:
        out = fn.maximum(out, min)
    if max is not None:
        out = fn.minimum(out, max)
    return out


# ----------------------------------------------------------------------------
# Data type functions: metadata only, answered by NumPy
# ----------------------------------------------------------------------------
def _dtype_of(value: Any) -> np.dtype:
    if isinstance(value, (np.dtype, type, str)):
        return np.dtype(value)
    return np.dtype(value.dtype)


def result_type(*arrays_and_dtypes: Any) -> np.dtype:
    """The dtype the standard's promotion gives these arrays and dtypes (JAX's rules, which
    oocarr's ops follow).

    Examples
    --------
    >>> result_type(int8, float32), result_type(uint8, int8)
    (dtype('float32'), dtype('int16'))
    """
    return np.dtype(jnp.result_type(*(_dtype_of(a) for a in arrays_and_dtypes)))


def can_cast(from_: Any, to: Any, /) -> builtins.bool:
    """Whether the standard's promotion casts ``from_`` to ``to`` without loss.

    Examples
    --------
    >>> can_cast(int8, int32), can_cast(float64, float32)
    (True, False)
    """
    return builtins.bool(np.can_cast(_dtype_of(from_), np.dtype(to), casting="safe"))


class FInfo(NamedTuple):
    """A floating dtype's limits, as the standard gives them: Python numbers and the dtype
    (the real one, for a complex dtype)."""

    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: np.dtype


def finfo(type: Any, /) -> FInfo:  # noqa: A002
    """Machine limits of a floating dtype (NumPy's, as Python numbers).

    Examples
    --------
    >>> finfo(float32).eps, finfo(complex64).dtype
    (1.1920928955078125e-07, dtype('float32'))
    """
    info = np.finfo(_dtype_of(type))
    return FInfo(
        int(info.bits),
        float(info.eps),
        float(info.max),
        float(info.min),
        float(info.smallest_normal),
        np.dtype(info.dtype),
    )


def iinfo(type: Any, /) -> np.iinfo:  # noqa: A002
    """Machine limits of an integer dtype (NumPy's ``iinfo``).

    Examples
    --------
    >>> int(iinfo(int8).max)
    127
    """
    return np.iinfo(_dtype_of(type))


_KINDS = {
    "bool": "b",
    "signed integer": "i",
    "unsigned integer": "u",
    "integral": "iu",
    "real floating": "f",
    "complex floating": "c",
    "numeric": "iufc",
}


def isdtype(dtype: Any, kind: Any) -> builtins.bool:
    """Whether ``dtype`` is of ``kind``: a dtype, a kind's name (``"real floating"`` ...) or a
    tuple of them.

    Examples
    --------
    >>> isdtype(float32, "real floating"), isdtype(int8, ("bool", "unsigned integer"))
    (True, False)
    """
    dtype = np.dtype(dtype)
    if isinstance(kind, tuple):
        return builtins.any(isdtype(dtype, k) for k in kind)
    if isinstance(kind, str):
        if kind not in _KINDS:
            raise InvalidArgumentError(f"isdtype: unknown kind {kind!r}; one of {list(_KINDS)}")
        return dtype.kind in _KINDS[kind]
    return dtype == np.dtype(kind)


def __array_namespace_info__() -> Any:  # noqa: N807 (the standard's name)
    """The standard's inspection object: what this namespace supports.

    Examples
    --------
    >>> __array_namespace_info__().capabilities()["boolean indexing"]
    False
    """
    return _Info()


class _Info:
    def capabilities(self) -> dict[str, Any]:
        return {"boolean indexing": False, "data-dependent shapes": False}

    def default_device(self) -> str:
        return "cpu"

    def devices(self) -> list[str]:
        return ["cpu"]

    def default_dtypes(self, *, device: Any = None) -> dict[str, Any]:
        return {
            "real floating": creation.default_dtype("real floating"),
            "complex floating": creation.default_dtype("complex floating"),
            "integral": creation.default_dtype("integral"),
            "indexing": creation.default_dtype("integral"),
        }

    def dtypes(self, *, device: Any = None, kind: Any = None) -> dict[str, np.dtype]:
        # The dtypes results have, as jax.numpy's namespace says: without jax_enable_x64 the
        # 64-bit ones are computed in 32 bits, so a library that picks its working precision
        # from here (scikit-learn's float64 accumulators) asks for what it gets, with no
        # warning. Stored 64-bit arrays still open, read and keep their dtype.
        names = [
            "bool",
            *(f"int{b}" for b in (8, 16, 32, 64)),
            *(f"uint{b}" for b in (8, 16, 32, 64)),
            "float32",
            "float64",
            "complex64",
            "complex128",
        ]
        found = {n: np.dtype(n) for n in names}
        return {
            n: d
            for n, d in found.items()
            if jax.dtypes.canonicalize_dtype(d) == d and (kind is None or isdtype(d, kind))
        }


# ----------------------------------------------------------------------------
# What the standard has and oocarr does not give yet
# ----------------------------------------------------------------------------
#: The standard's functions this namespace does not provide, each with why and what to use.
NOT_PROVIDED = {
    "from_dlpack": (
        "a DLPack capsule is memory, not storage: use oocarr.from_numpy(np.from_dlpack(x)) "
        "to store it"
    ),
}


def __getattr__(name: str) -> Any:
    if name in NOT_PROVIDED:
        raise NotProvidedError(
            f"oocarr.array_api.{name} is not provided for stored arrays: {NOT_PROVIDED[name]}"
        )
    raise AttributeError(f"module 'oocarr.array_api' has no attribute {name!r}")


# ----------------------------------------------------------------------------
# The namespace's functions return the namespace's arrays
# ----------------------------------------------------------------------------
class NamespaceFunction:
    """A function of the namespace: ``function`` itself (name, docstring, signature), with its
    results passed through :func:`oocarr.api.elementwise.stored` (outside a trace, in-memory
    arrays come back stored).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> mean = NamespaceFunction(oocarr.mean)
    >>> m = mean(oocarr.from_numpy(np.array([1.0, 2.0], "f4")))
    >>> type(m).__name__, float(m), mean.__name__
    ('DiskArray', 1.5, 'mean')
    """

    __wrapped__: Callable[..., Any]  # set by functools.update_wrapper, as __qualname__
    __qualname__: str

    def __init__(self, function: Callable[..., Any]) -> None:
        functools.update_wrapper(self, function)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return fn.stored(self.__wrapped__(*args, **kwargs))

    def __repr__(self) -> str:
        return f"<function oocarr.array_api {self.__qualname__}>"


class NamespaceExtension(types.ModuleType):
    """An extension of the namespace (``xp.linalg``, ``xp.fft``): ``module``'s names, its
    functions wrapped in :class:`NamespaceFunction`, looked up when asked for (a function the
    module gains later is there too).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.array([[3.0, 0.0], [4.0, 5.0]], "f4"))
    >>> [type(a).__name__ for a in x.__array_namespace__().linalg.svd(x, full_matrices=False)]
    ['DiskArray', 'DiskArray', 'DiskArray']
    """

    def __init__(self, module: types.ModuleType) -> None:
        super().__init__(module.__name__, module.__doc__)
        self._module = module
        self._functions: dict[str, NamespaceFunction] = {}

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._module, name)
        if not callable(value) or isinstance(value, type):
            return value
        function = self._functions.get(name)
        if function is None or function.__wrapped__ is not value:
            function = self._functions[name] = NamespaceFunction(value)
        return function

    def __dir__(self) -> list[str]:
        return dir(self._module)


#: The namespace's functions that return arrays: every function but the data type functions
#: (which answer with dtypes, numbers and booleans) and the inspection object.
ARRAY_FUNCTIONS = (
    *_ELEMENTWISE,
    *_REDUCTIONS,
    *(name for names in _ELSEWHERE.values() for name in names),
    *("pow", "var", "std", "astype", "matmul", "where", "take", "matrix_transpose", "vecdot"),
    *("permute_dims", "clip"),
    *_NAN_REDUCTIONS,
)
globals().update({name: NamespaceFunction(globals()[name]) for name in ARRAY_FUNCTIONS})
linalg = NamespaceExtension(linalg_module)
fft = NamespaceExtension(fft_module)


def namespace_of(*arrays: Any, api_version: str | None = None) -> Any:
    """This module, for ``DiskArray.__array_namespace__``; ``api_version`` must be ``None``
    or ``"2023.12"``.

    Examples
    --------
    >>> namespace_of().__array_api_version__
    '2023.12'
    """
    if api_version not in (None, __array_api_version__):
        raise InvalidArgumentError(
            f"oocarr implements the Array API {__array_api_version__}, not {api_version!r}"
        )
    return sys.modules[__name__]


def install_namespace() -> None:
    """Give ``DiskArray`` ``__array_namespace__`` (this module) and ``mT``; :mod:`oocarr` calls
    this once when it is imported.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> install_namespace()
    >>> oocarr.from_numpy(np.zeros((2, 3))).__array_namespace__().__name__
    'oocarr.array_api'
    """

    def array_namespace(self: Any, /, *, api_version: str | None = None) -> Any:
        return namespace_of(self, api_version=api_version)

    # set by name: DiskArray declares them for type checkers only (under TYPE_CHECKING)
    installed: dict[str, Any] = {
        "__array_namespace__": array_namespace,
        "mT": property(matrix_transpose, doc=_MT_DOC),
        "device": property(lambda self: "cpu", doc="Where the array is: ``'cpu'``."),
        "to_device": _to_device,
    }
    for name, value in installed.items():
        setattr(DiskArray, name, value)
    traced = {
        "__array_namespace__": jax_core.aval_method(array_namespace),
        "mT": jax_core.aval_property(matrix_transpose),
    }
    for name, value in traced.items():
        setattr(DiskArrayType, name, value)


def _to_device(self: Any, device: Any, /, *, stream: Any = None) -> Any:
    """``x`` itself for the CPU (a stored array's only device): ``jax.device_put`` moves a
    read of it anywhere else."""
    if device not in ("cpu", None) and getattr(device, "platform", None) != "cpu":
        raise InvalidArgumentError(
            f"a DiskArray lives in storage read by the CPU, not on {device!r}: read it with "
            "oocarr.materialize (under jit) or oocarr.to_numpy, then jax.device_put it"
        )
    return self


_MT_DOC = """Each matrix of a stack transposed (the last two axes swapped), tile by tile.

Examples
--------
>>> import numpy as np, oocarr
>>> oocarr.from_numpy(np.zeros((5, 2, 3))).mT.shape
(5, 3, 2)
"""
