"""oocarr: disk-backed arrays for JAX, written once against one page-store interface.

The layers, top to bottom, are folders (docs/architecture.md): ``cli/``, ``train/``, the public
API (``api/``: one module per family, re-exported here and by :mod:`oocarr.array_api`),
``jaxlayer/``, ``ops/``, ``engine/`` and ``store/``; the drivers live outside the package and are
found through the registry.  This module, :mod:`oocarr.array_api`, :mod:`oocarr.config` and
:mod:`oocarr.errors` are the package's faces.

Importing oocarr changes nothing outside oocarr: no allocator setting, no JAX configuration or
dispatch mode, no function of JAX or of another library wrapped or replaced (the engine computes
on a CPU client of its own, :mod:`oocarr.engine.device`).  It installs ``DiskArray``'s
operators and methods, on oocarr's own class.

Examples
--------
>>> import numpy as np, tempfile, os, oocarr
>>> path = os.path.join(tempfile.mkdtemp(), "data.h5#/x")
>>> x = oocarr.save(np.arange(12.0).reshape(3, 4), path)
>>> x.store[1]
array([4., 5., 6., 7.])
"""

from importlib.metadata import PackageNotFoundError, version

from . import api, array_api, errors, fft, linalg
from .api.contraction import einsum, tensordot
from .api.creation import (
    arange,
    asarray,
    empty,
    empty_like,
    eye,
    full,
    full_like,
    linspace,
    meshgrid,
    ones,
    ones_like,
    tril,
    triu,
    zeros,
    zeros_like,
)
from .api.elementwise import (
    abs,
    acos,
    acosh,
    add,
    all,
    any,
    asin,
    asinh,
    astype,
    atan,
    atan2,
    atanh,
    bitwise_and,
    bitwise_invert,
    bitwise_left_shift,
    bitwise_or,
    bitwise_right_shift,
    bitwise_xor,
    ceil,
    conj,
    copysign,
    cos,
    cosh,
    divide,
    equal,
    exp,
    expm1,
    floor,
    floor_divide,
    greater,
    greater_equal,
    hypot,
    imag,
    install_operators,
    isfinite,
    isinf,
    isnan,
    less,
    less_equal,
    log,
    log1p,
    log2,
    log10,
    logaddexp,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    logsumexp,
    materialize,
    matmul,
    max,
    maximum,
    mean,
    min,
    minimum,
    multiply,
    negative,
    nextafter,
    not_equal,
    positive,
    pow,
    power,
    real,
    reciprocal,
    relu,
    remainder,
    round,
    sigmoid,
    sign,
    signbit,
    sin,
    sinh,
    softmax,
    softplus,
    sqrt,
    square,
    subtract,
    sum,
    tan,
    tanh,
    transpose,
    trunc,
    update,
    where,
)
from .api.indexing import install_indexing, take
from .api.manipulation import (
    broadcast_arrays,
    broadcast_to,
    concat,
    expand_dims,
    flip,
    moveaxis,
    repeat,
    reshape,
    roll,
    squeeze,
    stack,
    tile,
    unstack,
)
from .api.searching import (
    argmax,
    argmin,
    argsort,
    cumulative_sum,
    nanargmax,
    nanargmin,
    prod,
    searchsorted,
    sort,
)
from .api.sets import nonzero, unique_all, unique_counts, unique_inverse, unique_values
from .api.statistics import (
    count_nonzero,
    install_methods,
    nanmax,
    nanmean,
    nanmin,
    nanstd,
    nansum,
    nanvar,
    std,
    var,
)
from .api.storage import create, from_numpy, open, resolve, save, to_numpy
from .api.types import AnyArray, ArrayLike, DTypeLike, Result, Shape, ShapeLike
from .config import config, memory_budget, progress, set_memory_budget
from .engine.executor import current_executor, executor, set_executor
from .engine.stats import io_stats
from .jaxlayer import jnp_errors
from .jaxlayer.disk_array import DiskArray
from .jaxlayer.jit_errors import jit, original_error, typed_errors
from .jaxlayer.make_op import make_op
from .store.blocked import BlockedArray
from .store.locator import Locator
from .store.registry import available_drivers, get_driver, register_driver
from .store.scratch import scratch_dir, set_scratch_dir
from .train import optim
from .train.checkpoint import load_params, save_params
from .train.full_batch import stream_sum
from .train.grain_source import GrainSource
from .train.minibatches import batches

install_operators()
install_methods()
install_indexing()
api.manipulation.install_methods()
api.searching.install_methods()
array_api.install_namespace()

try:
    __version__ = version("oocarr")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "array_api",
    "fft",
    "linalg",
    # storage
    "BlockedArray",
    "DiskArray",
    # the types of the public signatures (oocarr.api.types)
    "AnyArray",
    "ArrayLike",
    "DTypeLike",
    "Result",
    "Shape",
    "ShapeLike",
    "Locator",
    "available_drivers",
    "create",
    "from_numpy",
    "get_driver",
    "open",
    "register_driver",
    "resolve",
    "save",
    "to_numpy",
    # jitted calls raising oocarr's errors as themselves
    "jit",
    "original_error",
    "typed_errors",
    # settings and counters
    "config",
    "io_stats",
    "progress",
    "memory_budget",
    "executor",
    "set_executor",
    "current_executor",
    "scratch_dir",
    "set_memory_budget",
    "set_scratch_dir",
    # ops
    "abs",
    "add",
    "divide",
    "equal",
    "exp",
    "greater",
    "greater_equal",
    "less",
    "less_equal",
    "log",
    "log1p",
    "logsumexp",
    "make_op",
    "materialize",
    "matmul",
    "max",
    "maximum",
    "mean",
    "min",
    "minimum",
    "multiply",
    "negative",
    "not_equal",
    "power",
    "relu",
    "sigmoid",
    "softmax",
    "softplus",
    "sqrt",
    "square",
    "subtract",
    "sum",
    "tanh",
    "transpose",
    "update",
    "where",
    # training
    "batches",
    "GrainSource",
    "load_params",
    "optim",
    "save_params",
    "stream_sum",
    # modules
    "errors",
    "acos",
    "acosh",
    "all",
    "any",
    "asin",
    "asinh",
    "atan",
    "atan2",
    "atanh",
    "bitwise_and",
    "bitwise_invert",
    "bitwise_left_shift",
    "bitwise_or",
    "bitwise_right_shift",
    "bitwise_xor",
    "ceil",
    "copysign",
    "cos",
    "cosh",
    "expm1",
    "floor",
    "floor_divide",
    "hypot",
    "isfinite",
    "isinf",
    "isnan",
    "log10",
    "log2",
    "logaddexp",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "nextafter",
    "positive",
    "pow",
    "reciprocal",
    "remainder",
    "round",
    "sign",
    "signbit",
    "sin",
    "sinh",
    "tan",
    "trunc",
    "astype",
    "var",
    "std",
    "count_nonzero",
    "nansum",
    "nanmean",
    "nanmax",
    "nanmin",
    "nanvar",
    "nanstd",
    "take",
    "tensordot",
    "einsum",
    "conj",
    "real",
    "imag",
    # manipulation
    "broadcast_arrays",
    "broadcast_to",
    "concat",
    "expand_dims",
    "flip",
    "moveaxis",
    "repeat",
    "reshape",
    "roll",
    "squeeze",
    "stack",
    "tile",
    "unstack",
    # creation
    "arange",
    "asarray",
    "empty",
    "empty_like",
    "eye",
    "full",
    "full_like",
    "linspace",
    "meshgrid",
    "ones",
    "ones_like",
    "tril",
    "triu",
    "zeros",
    "zeros_like",
    # searching and sorting
    "argmax",
    "argmin",
    "argsort",
    "cumulative_sum",
    "nanargmax",
    "nanargmin",
    "prod",
    "searchsorted",
    "sort",
    # sets
    "nonzero",
    "unique_all",
    "unique_counts",
    "unique_inverse",
    "unique_values",
]

jnp_errors.install(name for name in __all__ if callable(globals()[name]))
