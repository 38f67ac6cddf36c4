"""The settings in force, in one place: the memory budget, scratch storage and progress.

The budget itself lives in the engine (:mod:`oocarr.engine.budget`), scratch
storage in the page-store layer (:mod:`oocarr.store.scratch`), progress bars in
the engine (:mod:`oocarr.engine.progress`); this module is the public face of all three.
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
from oocarr.engine.progress import enabled as progress_enabled
from oocarr.engine.progress import progress, set_progress
from oocarr.store.scratch import scratch_dir, scratch_driver, set_scratch_dir

__all__ = [
    "config",
    "memory_budget",
    "memory_budget_bytes",
    "parse_size",
    "progress",
    "scratch_dir",
    "set_memory_budget",
    "set_progress",
    "set_scratch_dir",
]


def config(*, progress: bool | None = None) -> dict[str, Any]:
    """The settings in force: budget, where it came from, the scratch directory, and
    whether streamers show their progress.

    Parameters
    ----------
    progress : bool, optional
        Turn progress bars on (``True``) or off for the whole process from now on, outside
        any :func:`~oocarr.engine.progress.progress` block (see :func:`oocarr.progress`).

    Examples
    --------
    >>> sorted(config())
    ['memory_budget', 'memory_budget_source', 'progress', 'scratch_dir', 'scratch_driver']
    >>> config(progress=True)["progress"], config(progress=False)["progress"]
    (True, False)
    """
    if progress is not None:
        set_progress(progress)
    return {
        "memory_budget": memory_budget_bytes(),
        "memory_budget_source": budget_source(),
        "progress": progress_enabled(),
        "scratch_dir": scratch_dir(),
        "scratch_driver": scratch_driver(),
    }
