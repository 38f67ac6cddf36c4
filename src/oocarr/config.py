"""The settings in force, in one place: the memory budget and scratch storage.

The budget itself lives in the engine (:mod:`oocarr.engine.budget`), scratch
storage in the page-store layer (:mod:`oocarr.store.scratch`); this module
is the public face of both.
"""

from __future__ import annotations

from typing import Any

from oocarr.engine.budget import (
    budget_source,
    memory_budget,
    memory_budget_bytes,
    parse_size,
    set_memory_budget,
)
from oocarr.store.scratch import scratch_dir, scratch_driver, set_scratch_dir

__all__ = [
    "config",
    "memory_budget",
    "memory_budget_bytes",
    "parse_size",
    "scratch_dir",
    "set_memory_budget",
    "set_scratch_dir",
]


def config() -> dict[str, Any]:
    """The settings in force: budget, where it came from, and the scratch directory.

    Examples
    --------
    >>> sorted(config())
    ['memory_budget', 'memory_budget_source', 'scratch_dir', 'scratch_driver']
    """
    return {
        "memory_budget": memory_budget_bytes(),
        "memory_budget_source": budget_source(),
        "scratch_dir": scratch_dir(),
        "scratch_driver": scratch_driver(),
    }
