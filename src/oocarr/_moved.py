"""Old module paths, kept for one release: ``oocarr.blocked`` is now ``oocarr.store.blocked``.

Importing an old path warns with a ``DeprecationWarning`` naming the new
path and gives a module whose attributes are the new module's.  Only the names in
:data:`MOVED` are answered; every other import is left to Python.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings
from typing import Any

__all__ = ["MOVED", "install"]

#: Old module path -> where it lives now.  Remove in the release after 0.2.
MOVED = {
    "oocarr.blocked": "oocarr.store.blocked",
    "oocarr.buffers": "oocarr.store.buffers",
    "oocarr.compression": "oocarr.store.compression",
    "oocarr.dtypes": "oocarr.store.dtypes",
    "oocarr.interface": "oocarr.store",
    "oocarr.locator": "oocarr.store.locator",
    "oocarr.pages": "oocarr.store.pages",
    "oocarr.regions": "oocarr.store.regions",
    "oocarr.registry": "oocarr.store.registry",
    "oocarr.scratch": "oocarr.store.scratch",
    "oocarr.views": "oocarr.store.views",
    "oocarr.stats": "oocarr.engine.stats",
    "oocarr.ops.base": "oocarr.engine.op",
    "oocarr.disk_array": "oocarr.jaxlayer.disk_array",
    "oocarr.make_op": "oocarr.jaxlayer.make_op",
    "oocarr.checkpoint": "oocarr.train.checkpoint",
    "oocarr.full_batch": "oocarr.train.full_batch",
    "oocarr.minibatches": "oocarr.train.minibatches",
}


class _Forward(types.ModuleType):
    """A module standing at an old path: every attribute is read from the new module."""

    def __getattr__(self, name: str) -> Any:
        return getattr(importlib.import_module(MOVED[self.__name__]), name)

    def __dir__(self) -> list[str]:
        return dir(importlib.import_module(MOVED[self.__name__]))


class _Alias(importlib.abc.Loader):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def create_module(self, spec: Any) -> Any:
        warnings.warn(
            f"{self.old} moved to {self.new}; import it from there (the old path goes away "
            "in the next release)",
            DeprecationWarning,
            stacklevel=2,
        )
        importlib.import_module(self.new)
        return _Forward(self.old)

    def exec_module(self, module: Any) -> None:
        pass  # nothing runs at the old path


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(fullname, new))


_FINDER = _Finder()


def install() -> None:
    """Answer the old paths in :data:`MOVED` (done once, by ``import oocarr``).

    Examples
    --------
    >>> import warnings
    >>> install()
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     from oocarr.blocked import BlockedArray
    >>> caught[0].category.__name__
    'DeprecationWarning'
    """
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
