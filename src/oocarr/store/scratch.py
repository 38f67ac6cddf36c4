"""Scratch storage: where arrays without a URL (``from_numpy(x)``, op outputs, gradients) live.

Scratch arrays are ``.npy`` files in one directory by default; they can
instead be any driver's arrays under any URL (``memory://scratch`` with
the ``fsspec`` driver, say).  The default directory is
``$OOCARR_SCRATCH_DIR`` when set, else ``oocarr-scratch-<user>`` in the
system temporary directory, else (when that is RAM-backed, as ``/tmp`` is
on some Linux systems) ``~/.cache/oocarr/scratch``.  A directory the user
names that is RAM-backed is refused unless they allow it, since spilling
to RAM defeats the purpose of out-of-core arrays.
"""

from __future__ import annotations

import atexit
import contextlib
import getpass
import os
import shutil
import tempfile
import threading
import uuid
from typing import Any

from oocarr.errors import InvalidArgumentError

__all__ = [
    "scratch_dir",
    "scratch_driver",
    "scratch_locator",
    "set_scratch_dir",
    "scratch_path",
    "is_ram_backed",
    "track",
    "release",
    "remove_tracked",
]

_RAM_FILESYSTEMS = {"tmpfs", "ramfs"}
# Configuration, not driver knowledge: the drivers used when none is configured. Everything
# else about a scratch array (its address, layout, deletion) is asked of its driver.
DEFAULT_LOCAL_DRIVER = "memmap"
DEFAULT_URL_DRIVER = "fsspec"
_lock = threading.Lock()
_configured: tuple[str, bool, str] | None = None
_tracked: set[str] = set()
_tracked_locators: set[Any] = set()
#: Local containers (an HDF5 file, a Zarr group) made for one scratch array each, by locator.
_containers: dict[Any, str] = {}
_owner_pid = os.getpid()


def is_ram_backed(path: str) -> bool:
    """True when ``path`` lies on a RAM filesystem (``tmpfs``/``ramfs``; Linux only).

    Examples
    --------
    >>> is_ram_backed("/proc/self") in (True, False)
    True
    """
    path = os.path.realpath(path)
    best, fstype = "", ""
    try:
        with open("/proc/mounts", encoding="utf-8") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) < 3:
                    continue
                mount = fields[1].replace("\\040", " ")
                inside = path == mount or path.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) >= len(best):
                    best, fstype = mount, fields[2]
    except OSError:
        return False
    return fstype in _RAM_FILESYSTEMS


def _is_url(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def set_scratch_dir(
    path: str | None, *, allow_ram: bool = False, driver: str | None = None
) -> None:
    """Use ``path`` for scratch arrays (``None`` restores the default).

    Parameters
    ----------
    path : str or None
        A local directory (created if missing), or a URL such as
        ``"memory://scratch"`` or ``"s3://bucket/scratch"``.
    allow_ram : bool
        Accept a RAM-backed directory (refused by default).
    driver : str, optional
        The driver scratch arrays are written with: ``"memmap"`` for a
        local directory, ``"fsspec"`` (Zarr) for a URL, unless named.

    Raises
    ------
    InvalidArgumentError
        When ``path`` is RAM-backed and ``allow_ram`` is false.
    UnknownDriverError
        When ``driver`` is not registered.

    Examples
    --------
    >>> import tempfile
    >>> set_scratch_dir(tempfile.mkdtemp(), allow_ram=True)
    >>> set_scratch_dir("memory://oocarr-doc-scratch")
    >>> scratch_driver()
    'fsspec'
    >>> set_scratch_dir(None)
    """
    global _configured
    if path is None:
        with _lock:
            _configured = None
        return
    if driver is not None:
        from .registry import get_driver

        get_driver(driver)
    if _is_url(path):
        path = path.rstrip("/")
        driver = driver or DEFAULT_URL_DRIVER
    else:
        path = os.path.abspath(os.path.expanduser(path))
        _check_dir(path, allow_ram)
        driver = driver or DEFAULT_LOCAL_DRIVER
    with _lock:
        _configured = (path, allow_ram, driver)


def _check_dir(path: str, allow_ram: bool) -> None:
    os.makedirs(path, exist_ok=True)
    if not allow_ram and is_ram_backed(path):
        raise InvalidArgumentError(
            f"scratch directory {path} is RAM-backed (tmpfs); out-of-core arrays would "
            "use memory. Point OOCARR_SCRATCH_DIR at a disk directory, or pass "
            "allow_ram=True (OOCARR_SCRATCH_ALLOW_RAM=1) to accept it",
            url=path,
        )


def scratch_dir() -> str:
    """The directory scratch arrays are written to (created on first use).

    Examples
    --------
    >>> import os
    >>> os.path.isdir(scratch_dir())
    True
    """
    with _lock:
        configured = _configured
    if configured is not None:
        if not _is_url(configured[0]):
            _check_dir(*configured[:2])
        return configured[0]
    allow_ram = os.environ.get("OOCARR_SCRATCH_ALLOW_RAM", "") not in ("", "0")
    env = os.environ.get("OOCARR_SCRATCH_DIR")
    if env:
        path = os.path.abspath(os.path.expanduser(env))
        _check_dir(path, allow_ram)
        return path
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid()) if hasattr(os, "getuid") else "user"
    path = os.path.join(tempfile.gettempdir(), f"oocarr-scratch-{user}")
    os.makedirs(path, exist_ok=True)
    if is_ram_backed(path) and not allow_ram:
        path = os.path.join(os.path.expanduser("~"), ".cache", "oocarr", "scratch")
        _check_dir(path, allow_ram)
    return path


def scratch_driver() -> str:
    """The driver scratch arrays are written with (``"memmap"`` unless configured).

    Examples
    --------
    >>> scratch_driver()
    'memmap'
    """
    with _lock:
        configured = _configured
    return DEFAULT_LOCAL_DRIVER if configured is None else configured[2]


def scratch_path(suffix: str = ".npy") -> str:
    """A fresh, unused path in the scratch directory, removed when the process exits.

    Examples
    --------
    >>> scratch_path().endswith(".npy")
    True
    """
    return track(os.path.join(scratch_dir(), f"{uuid.uuid4().hex}{suffix}"))


def scratch_locator(stem: str | None = None, shape: Any = None, dtype: Any = None) -> Any:
    """The locator of a scratch array named ``stem`` (fresh when not given), written with
    :func:`scratch_driver` and deleted at exit if still there.

    The driver picks the address (its ``scratch_locator``); ``shape`` and
    ``dtype`` let it choose a layout the array needs (bfloat16 on the memmap
    driver goes to a raw file whose locator holds the layout).

    Examples
    --------
    >>> loc = scratch_locator()
    >>> loc.driver, loc.url.endswith(".npy")
    ('memmap', True)
    >>> scratch_locator("grad-1") == scratch_locator("grad-1")
    True
    >>> scratch_locator("w", (2, 3), "bfloat16").url.endswith(".bin")
    True
    """
    from .locator import is_local
    from .registry import get_driver

    cls = get_driver(scratch_driver())
    locator = cls.scratch_locator(scratch_dir(), stem or uuid.uuid4().hex, shape, dtype)
    with _lock:
        _tracked_locators.add(locator)
        if locator.path and is_local(locator.url):
            _containers[locator] = locator.url
    return locator


def release(locator: Any) -> None:
    """Remove the container made for the scratch array at ``locator`` (once the array itself
    is deleted): an HDF5 file or Zarr group left empty would otherwise stay behind.

    Examples
    --------
    >>> release(scratch_locator())  # memmap scratch has no container: nothing to do
    """
    with _lock:
        container = _containers.get(locator)
    if container is None:
        return
    if os.path.isdir(container):
        shutil.rmtree(container, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.remove(container)


def track(path: str) -> str:
    """Remove the file ``path`` when this process exits; returns ``path``.

    Examples
    --------
    >>> track(scratch_path(".tmp")).endswith(".tmp")
    True
    """
    with _lock:
        _tracked.add(path)
    return path


def remove_tracked() -> None:
    """Remove every scratch file this process made that still exists.

    Run at exit; arrays garbage-collected earlier have removed theirs already.
    """
    if os.getpid() != _owner_pid:
        return
    with _lock:
        paths = list(_tracked)
        _tracked.clear()
        locators = list(_tracked_locators)
        _tracked_locators.clear()
    for locator in locators:
        from .registry import get_driver

        try:
            get_driver(locator.driver).delete(locator)
        except Exception:  # noqa: BLE001 - best effort at exit; the storage may be gone
            pass
        release(locator)
    for path in paths:
        with contextlib.suppress(OSError):
            os.remove(path)


atexit.register(remove_tracked)
