"""oocarr: disk-backed arrays for JAX, written once against one page-store interface.

Examples
--------
>>> import numpy as np, tempfile, os, oocarr
>>> path = os.path.join(tempfile.mkdtemp(), "data.h5#/x")
>>> x = oocarr.save(np.arange(12.0).reshape(3, 4), path)
>>> x.store[1]
array([4., 5., 6., 7.])
"""

from importlib.metadata import PackageNotFoundError, version

from . import errors, optim  # optim imports optax only when used
from .api import create, from_numpy, open, resolve, save, to_numpy
from .blocked import BlockedArray
from .checkpoint import load_params, save_params
from .config import config, memory_budget, set_memory_budget
from .disk_array import DiskArray
from .full_batch import stream_sum
from .functions import *  # noqa: F403
from .functions import __all__ as _function_names
from .locator import Locator
from .make_op import make_op
from .minibatches import batches
from .registry import available_drivers, get_driver
from .scratch import scratch_dir, set_scratch_dir
from .stats import io_stats

try:
    __version__ = version("oocarr")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    *_function_names,
    "config",
    "io_stats",
    "make_op",
    "memory_budget",
    "set_memory_budget",
    "BlockedArray",
    "DiskArray",
    "Locator",
    "available_drivers",
    "batches",
    "create",
    "errors",
    "optim",
    "from_numpy",
    "get_driver",
    "load_params",
    "open",
    "resolve",
    "save",
    "save_params",
    "scratch_dir",
    "set_scratch_dir",
    "stream_sum",
    "to_numpy",
]
