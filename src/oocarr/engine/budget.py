"""The memory budget: how many bytes of tiles the engine may hold at once.

The budget is a promise about resident tiles (inputs in flight, partial
results, accumulators and blocks waiting to be written); the planner sizes
each op call's tiles from it.  Without a call to :func:`set_memory_budget`
it is an eighth of the machine's available memory, between 64 MB and 2 GB.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import threading
from collections.abc import Iterator

from oocarr.errors import InvalidArgumentError
from oocarr.store.scratch import scratch_dir as current_scratch_dir
from oocarr.store.scratch import set_scratch_dir

__all__ = [
    "MAX_SIZE",
    "available_memory",
    "parse_size",
    "set_memory_budget",
    "memory_budget",
    "memory_budget_bytes",
    "budget_source",
]

_UNITS = {
    "": 1,
    "B": 1,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "KI": 2**10,
    "MI": 2**20,
    "GI": 2**30,
    "TI": 2**40,
}
MAX_SIZE = 2**60
"""The largest size :func:`parse_size` accepts (1 EiB): larger is a typo."""
_local = threading.local()
_default_budget: int | None = None


def parse_size(size: int | str) -> int:
    """Bytes in ``size``: an int, or text like ``"64MB"``, ``"1.5GiB"``, ``"512k"``.

    Sizes that are not positive, not finite or over ``MAX_SIZE`` (1 EiB) are
    refused with :class:`~oocarr.errors.InvalidArgumentError`.

    Examples
    --------
    >>> parse_size("64MB"), parse_size("1GiB"), parse_size(4096)
    (64000000, 1073741824, 4096)
    >>> try:
    ...     parse_size("9" * 40 + "MB")
    ... except InvalidArgumentError as err:
    ...     print(err)
    memory size '99999999999999999999...MB' is over 1 EiB; write a size like '64MB' or '2GiB'
    """
    if isinstance(size, bool):
        raise InvalidArgumentError(f"memory size must be bytes or text like '64MB', got {size!r}")
    if isinstance(size, int):
        value = size
    elif isinstance(size, float):
        value = _whole_bytes(size, size)
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kKmMgGtT]?)(i?)[bB]?\s*", str(size))
        if not match:
            raise InvalidArgumentError(
                f"cannot read memory size {_shown(size)}; write bytes or text like '64MB' or '2GiB'"
            )
        number, unit, binary = match.groups()
        value = _whole_bytes(float(number) * _UNITS[unit.upper() + ("I" if binary else "")], size)
    if value <= 0:
        raise InvalidArgumentError(f"memory size must be positive, got {_shown(size)}")
    if value > MAX_SIZE:
        raise InvalidArgumentError(
            f"memory size {_shown(size)} is over 1 EiB; write a size like '64MB' or '2GiB'"
        )
    return value


def _whole_bytes(number: float, size: object) -> int:
    if math.isnan(number):
        raise InvalidArgumentError(f"memory size must be a number of bytes, got {_shown(size)}")
    if number < 0:
        raise InvalidArgumentError(f"memory size must be positive, got {_shown(size)}")
    if number > MAX_SIZE:
        raise InvalidArgumentError(
            f"memory size {_shown(size)} is over 1 EiB; write a size like '64MB' or '2GiB'"
        )
    return int(number)


def _shown(size: object) -> str:
    text = repr(size)
    return text if len(text) <= 30 else f"{text[:21]}...{text[-3:]}"


def available_memory() -> int:
    """Bytes of memory this machine can still hand out (``MemAvailable``), as a best guess.

    Examples
    --------
    >>> available_memory() > 0
    True
    """
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 * 2**30


def _default() -> int:
    global _default_budget
    if _default_budget is None:
        _default_budget = min(2 * 10**9, max(64 * 10**6, available_memory() // 8))
    return _default_budget


def memory_budget_bytes() -> int:
    """The budget in force in this thread, in bytes.

    Examples
    --------
    >>> with memory_budget("32MB"):
    ...     memory_budget_bytes()
    32000000
    """
    stack = getattr(_local, "stack", None)
    if stack:
        return stack[-1]
    return _global_budget if _global_budget is not None else _default()


_global_budget: int | None = None


def set_memory_budget(
    size: int | str | None,
    *,
    scratch_dir: str | None = None,
    scratch_driver: str | None = None,
    allow_tmpfs: bool = False,
) -> None:
    """Set the memory budget for every thread (``None`` restores the default).

    Parameters
    ----------
    size : int, str or None
        Bytes, or text like ``"256MB"``.
    scratch_dir : str, optional
        Also move scratch storage here: a local directory or any URL a
        driver reads, such as ``"memory://scratch"`` (see
        :func:`oocarr.set_scratch_dir`).
    scratch_driver : str, optional
        The driver scratch arrays are written with (``"memmap"`` for a
        directory and ``"fsspec"`` for a URL unless named).
    allow_tmpfs : bool
        Accept a RAM-backed scratch directory.

    Examples
    --------
    >>> set_memory_budget("128MB")
    >>> memory_budget_bytes()
    128000000
    >>> set_memory_budget(None)
    """
    global _global_budget
    _global_budget = None if size is None else parse_size(size)
    if scratch_dir is not None or scratch_driver is not None:
        set_scratch_dir(
            current_scratch_dir() if scratch_dir is None else scratch_dir,
            allow_ram=allow_tmpfs,
            driver=scratch_driver,
        )


@contextlib.contextmanager
def memory_budget(size: int | str) -> Iterator[int]:
    """Use another budget inside a ``with`` block (this thread only).

    Examples
    --------
    >>> with memory_budget("64MB") as budget:
    ...     budget
    64000000
    """
    value = parse_size(size)
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    stack.append(value)
    try:
        yield value
    finally:
        stack.pop()


def budget_source() -> str:
    """Where the budget in force in this thread comes from.

    Examples
    --------
    >>> with memory_budget("32MB"):
    ...     budget_source()
    'memory_budget() block'
    """
    if getattr(_local, "stack", None):
        return "memory_budget() block"
    if _global_budget is not None:
        return "set_memory_budget()"
    return "default: 1/8 of available memory, between 64 MB and 2 GB"
