"""The HDF5 driver's process-wide shared file handles, their lock and their fork handling.

One ``h5py.File`` is kept per process and file, shared by every store on
that file and reference counted; it is opened on first use, never carried
across ``fork``, and closed when the last store on it is released.  It is
opened read-write while any store in the process writes to the file and
read-only otherwise, so other processes can read a file once its writers
are closed (HDF5 file locking forbids opening a file that another process
has open for writing).

Every use of a shared file or dataset happens inside :data:`LOCK`.  A store
holds a :class:`Handle`; a class method that needs the file only for a
moment uses :func:`borrowed`.  Before ``fork`` the lock is taken and files
open for writing are flushed; the child gets a fresh lock and keeps the
handles it inherited open but unused (:meth:`Handle.abandon`), since closing
them could write the parent's state into its files.

A remote file (an fsspec URL) is opened read-only through an fsspec file
object (:class:`~oocarr_drivers.hdf5_remote.RemoteFile`, kept with the
``h5py.File`` in its :class:`SharedFile`), one per process, file and
``storage_options``.  Remote files are closed when the interpreter exits:
left to HDF5's own exit handler, their Python file objects would be called
into while the interpreter is torn down (a segmentation fault with h5py
3.16 when the file object's class lives in ``__main__``).
"""

from __future__ import annotations

import atexit
import collections
import errno
import json
import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import h5py
import hdf5plugin  # noqa: F401  (registers every filter it ships with HDF5, once per process)

from oocarr.errors import OocarrError, ReadOnlyError, StorageBusyError, WriteError
from oocarr.store import Locator, corrupt, is_local, require_exists
from oocarr_drivers.hdf5_remote import RemoteFile, is_transport_error
from oocarr_drivers.hdf5_views import ALIGNED

__all__ = [
    "CACHE_W0",
    "FILES",
    "LOCK",
    "DriverLock",
    "Handle",
    "SharedFile",
    "borrowed",
    "ensure_file",
    "not_hdf5",
    "read_only_error",
]

#: Evict fully read or written chunks first: a chunk cut by a page boundary outlives them.
CACHE_W0 = 1.0


class SharedFile:
    """One open ``h5py.File``, its open datasets and the stores that use it, in one process.

    Datasets are shared too: HDF5 keeps one chunk cache per open dataset,
    sized by whoever opens it first, so a store that needs a larger cache
    closes the shared handle and reopens it larger.
    """

    __slots__ = ("path", "file", "writable", "readers", "writers", "datasets", "remote")

    def __init__(
        self, path: str, file: h5py.File, writable: bool, remote: RemoteFile | None = None
    ) -> None:
        self.path = path
        self.file: h5py.File | None = file
        self.writable = writable
        self.readers = 0
        self.writers = 0
        self.datasets: dict[str, tuple[h5py.Dataset, int]] = {}
        #: The remote file's fsspec access (``None`` for a local file).
        self.remote = remote

    def dataset(self, name: str, cache: tuple[int, int] | None, locator: Locator) -> h5py.Dataset:
        """The open dataset ``name`` with a chunk cache of at least ``cache`` (slots, bytes)."""
        file = ensure_file(self, locator)
        held = self.datasets.get(name)
        if held is not None and held[0].id.valid and (cache is None or cache[1] <= held[1]):
            return held[0]
        self.forget(name)
        try:
            if cache is None:
                dsid = h5py.h5d.open(file.id, name.encode("utf-8"))
            else:
                dapl = h5py.h5p.create(h5py.h5p.DATASET_ACCESS)
                dapl.set_chunk_cache(cache[0], cache[1], CACHE_W0)
                dsid = h5py.h5d.open(file.id, name.encode("utf-8"), dapl=dapl)
        except (KeyError, OSError) as err:
            raise corrupt(
                locator,
                f"its dataset {name} cannot be opened ({err}); it was deleted or moved "
                "since it was opened",
            ) from None
        dset = h5py.Dataset(dsid)
        self.datasets[name] = (dset, 0 if cache is None else cache[1])
        return dset

    def forget(self, name: str) -> None:
        """Close the shared handle on dataset ``name`` (before it is moved, deleted or regrown)."""
        held = self.datasets.pop(name, None)
        if held is not None:
            try:
                held[0].id.close()
            except Exception:
                pass


class DriverLock:
    """The driver's re-entrant lock; releases deferred by garbage collection run when it is let go.

    Every use of a shared file or dataset happens under it.  A handle
    collected while a thread is inside the lock (or while another thread
    holds it) must not close files under that thread's feet, nor wait, so
    its release is queued and run by whoever leaves the lock last.
    """

    def __init__(self) -> None:
        self.raw = threading.RLock()
        self._owner: int | None = None
        self._depth = 0

    def __enter__(self) -> DriverLock:
        self.raw.acquire()
        self._owner = threading.get_ident()
        self._depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self._depth == 1:
                while _DEFERRED:
                    _release_ref(*_DEFERRED.popleft())
        finally:
            self._depth -= 1
            if self._depth == 0:
                self._owner = None
            self.raw.release()

    def held_here(self) -> bool:
        """Whether the calling thread is inside the lock."""
        return self._owner == threading.get_ident()

    def reset(self) -> None:
        """Forget every holder (in a child after ``fork``, where the holding threads are gone)."""
        self.raw = threading.RLock()
        self._owner = None
        self._depth = 0

    def try_enter(self) -> bool:
        """Enter only if no thread, this one included, is inside; never wait."""
        if self._owner == threading.get_ident() or not self.raw.acquire(blocking=False):
            return False
        self._owner = threading.get_ident()
        self._depth += 1
        return True


_DEFERRED: collections.deque[tuple[int, str, bool, Locator]] = collections.deque()
LOCK = DriverLock()
FILES: dict[tuple[int, str], SharedFile] = {}
# Handles inherited across fork: kept alive and never closed in the child,
# where closing them could write the parent's state into its files.
_INHERITED: list[Any] = []


def _before_fork() -> None:
    LOCK.raw.acquire()
    pid = os.getpid()
    for (owner, _), entry in FILES.items():
        if owner == pid and entry.writable and entry.file is not None:
            try:
                entry.file.flush()
            except Exception:
                pass


def _after_fork_in_parent() -> None:
    LOCK.raw.release()


def _after_fork_in_child() -> None:
    LOCK.reset()
    _DEFERRED.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )


#: errno values of a file lock held by another process (``flock``/``fcntl``).
_BUSY_ERRNOS = frozenset({errno.EAGAIN, errno.EWOULDBLOCK})
#: errno values of a write refused by the filesystem rather than by the file's format.
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG, errno.EMFILE})


def _open_file(
    path: str, mode: str, locator: Locator, remote: RemoteFile | None = None
) -> h5py.File:
    """``h5py.File(path, mode)`` (through ``remote`` for a remote file) with its failures
    turned into oocarr errors; the storage's own errors under a remote file pass as they are."""
    if remote is not None:
        try:
            return remote.open_hdf5()
        except OSError as err:
            if isinstance(err, OocarrError) or is_transport_error(err):
                raise
            if "signature" in str(err):
                raise not_hdf5(locator, head=remote.head(4)) from None
            raise corrupt(locator, f"h5py cannot open the file ({err})") from None
    try:
        # What this process writes is page-aligned, so that its chunks can be mapped (views).
        return h5py.File(path, mode, **ALIGNED)
    except FileNotFoundError:
        require_exists(False, locator, "file")
        raise
    except OSError as err:
        raise _open_error(err, mode, locator) from None


def _open_error(err: OSError, mode: str, locator: Locator) -> OocarrError:
    """The oocarr error for ``h5py.File`` failing with ``err``.

    HDF5 reports every failure as an ``OSError`` whose text quotes its own
    internals (``sblock->base_addr`` of a truncated file contains "lock"), so
    a lock held elsewhere is recognised by its errno or its exact wording only.
    """
    url, text, writing = locator.full_url, str(err), mode != "r"
    if err.errno in _BUSY_ERRNOS or "unable to lock file" in text:
        return _lock_error(err, url, writing)
    if "already open for read-only" in text:
        return ReadOnlyError(
            f"cannot open {url} for writing: the file is open read-only elsewhere in this "
            "process (an h5py.File?); close that handle first",
            url=url,
        )
    if err.errno == errno.EROFS:
        return ReadOnlyError(
            f"cannot write {url}: its filesystem is read-only; write to another "
            "filesystem (reading it with mode='r' works)",
            url=url,
        )
    if isinstance(err, PermissionError) or err.errno in (errno.EACCES, errno.EPERM):
        return ReadOnlyError(
            f"cannot open {url}{' for writing' if writing else ''}: permission denied; "
            "check the file's permissions" + (" or open it with mode='r'" if writing else ""),
            url=url,
        )
    if writing and err.errno in _WRITE_ERRNOS:
        return WriteError(
            f"cannot open {url} for writing: {os.strerror(err.errno)}; free space or "
            "write elsewhere",
            url=url,
        )
    if _is_netcdf3(locator.url):
        return not_hdf5(locator)
    return corrupt(locator, f"h5py cannot open the file ({err})")


def not_hdf5(locator: Locator, detail: str = "", head: bytes | None = None) -> OocarrError:
    """The error for a file at ``locator`` that is not HDF5, saying so when it is netCDF-3
    (told from the file's first bytes, ``head``, or from the local file)."""
    if _netcdf3_signature(head) if head is not None else _is_netcdf3(locator.url):
        return corrupt(
            locator,
            "it is a netCDF-3 (classic) file, not HDF5: oocarr reads netCDF-4 files, which are "
            "HDF5; convert it first (nccopy -k nc4 IN OUT, or xarray's to_netcdf)",
        )
    return corrupt(locator, f"the file is not in HDF5 format{detail}")


def _is_netcdf3(path: str) -> bool:
    """Whether the local file at ``path`` starts with a netCDF-3 signature (``CDF`` and
    format 1, 2 or 5)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return _netcdf3_signature(head)


def _netcdf3_signature(head: bytes) -> bool:
    return len(head) >= 4 and head[:3] == b"CDF" and head[3] in (1, 2, 5)


def read_only_error(locator: Locator, action: str = "open it for writing") -> ReadOnlyError:
    """The error for a write to a remote HDF5 file, which the driver reads only."""
    url = locator.full_url
    container = locator.url
    stem = container.rsplit(".", 1)[0] if "." in container.rsplit("/", 1)[-1] else container
    return ReadOnlyError(
        f"cannot {action}: {url} is an HDF5 file on remote storage, which the hdf5 driver "
        "reads only. Write the HDF5 file locally (a local path; upload it afterwards), or save "
        f"the array as Zarr on the same filesystem: {stem}.zarr"
        + (f"#{locator.path}" if locator.path else ""),
        url=url,
    )


def _lock_error(err: OSError, url: str, writing: bool) -> OocarrError:
    if err.errno is not None and err.errno not in _BUSY_ERRNOS:
        return StorageBusyError(
            f"cannot open {url}: the filesystem refused HDF5's file lock "
            f"({os.strerror(err.errno)}); set HDF5_USE_FILE_LOCKING=FALSE if this filesystem "
            "does not support locks and no one writes to the file concurrently",
            url=url,
        )
    return StorageBusyError(
        f"cannot open {url}: another process has the file open"
        f"{'' if writing else ' for writing'} (HDF5 file locking); close it there "
        "first, or set HDF5_USE_FILE_LOCKING=FALSE if you are sure no one writes "
        "to it concurrently",
        url=url,
    )


def _close_quietly(file: h5py.File | None, remote: RemoteFile | None = None) -> None:
    if file is not None:
        try:
            file.close()
        except Exception:
            pass
    if remote is not None:
        remote.close()


def _reopen(entry: SharedFile, writable: bool, locator: Locator) -> None:
    """Reopen ``entry``'s file in another mode (HDF5 cannot hold one file in two modes)."""
    was = entry.writable
    entry.datasets.clear()
    _close_quietly(entry.file, entry.remote)
    entry.file = None
    if entry.remote is not None:
        entry.file = _open_file(entry.path, "r", locator, entry.remote)
        return
    try:
        entry.file = _open_file(entry.path, "r+" if writable else "r", locator)
        entry.writable = writable
    except OocarrError:
        try:
            entry.file = h5py.File(entry.path, "r+" if was else "r", **ALIGNED)
        except Exception:
            entry.file = None
        raise


def open_file(entry: SharedFile) -> h5py.File:
    """``entry``'s file, which a held handle or a borrowed entry keeps open."""
    if entry.file is None:
        raise RuntimeError(f"{entry.path} was closed while in use")
    return entry.file


def ensure_file(entry: SharedFile, locator: Locator) -> h5py.File:
    """``entry``'s open file, reopened if it was closed meanwhile (call with ``LOCK`` held).

    Examples
    --------
    >>> import h5py, numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "e.h5")
    >>> with h5py.File(path, "w") as f:
    ...     _ = f.create_dataset("x", data=np.arange(3))
    >>> locator = Locator.make("hdf5", path, "/x")
    >>> with borrowed(path, False, locator) as entry:
    ...     entry.file.close()
    ...     ensure_file(entry, locator)["x"][2]
    np.int64(2)
    """
    if entry.file is None or not entry.file.id.valid:
        _reopen(entry, entry.writers > 0, locator)
    return entry.file


def file_key(path: str, locator: Locator) -> str:
    """What tells this process's shared files apart: the path of a local file; a remote file's
    URL and its storage options (other credentials or endpoints can show another file).

    Examples
    --------
    >>> file_key("/d/a.h5", Locator.make("hdf5", "/d/a.h5", "/x"))
    '/d/a.h5'
    >>> file_key("s3://b/a.h5", Locator.make("hdf5", "s3://b/a.h5", "/x", {"anon": True}))
    's3://b/a.h5 {"anon": true}'
    """
    if is_local(path) or not locator.storage_options:
        return path
    return f"{path} {json.dumps(locator.options, sort_keys=True, default=repr)}"


def _acquire(path: str, writable: bool, locator: Locator, *, new: bool = False) -> SharedFile:
    """Take a reference on this process's shared file at ``path`` (call with ``LOCK`` held)."""
    key = (os.getpid(), file_key(path, locator))
    entry = FILES.get(key)
    if entry is None:
        if not is_local(path):
            if writable or new:
                raise read_only_error(locator)
            remote = RemoteFile(locator)
            entry = SharedFile(path, _open_file(path, "r", locator, remote), False, remote)
        else:
            mode = "w-" if new else ("r+" if writable else "r")
            entry = SharedFile(path, _open_file(path, mode, locator), writable or new)
        FILES[key] = entry
    else:
        ensure_file(entry, locator)
        if writable and not entry.writable:
            _reopen(entry, True, locator)
    if writable:
        entry.writers += 1
    else:
        entry.readers += 1
    return entry


def _release_ref(pid: int, path: str, writable: bool, locator: Locator) -> None:
    """Drop one reference; close the file when unused, reopen it read-only when writers are gone."""
    if pid != os.getpid():
        return
    key = (pid, file_key(path, locator))
    with LOCK:
        entry = FILES.get(key)
        if entry is None:
            return
        if writable:
            entry.writers -= 1
        else:
            entry.readers -= 1
        if entry.readers + entry.writers <= 0:
            del FILES[key]
            entry.datasets.clear()
            _close_quietly(entry.file, entry.remote)
            entry.file = None
        elif writable and entry.writers == 0 and entry.writable:
            try:
                _reopen(entry, False, locator)
            except Exception:
                pass


def _release_collected(pid: int, path: str, writable: bool, locator: Locator) -> None:
    """Finalizer of a garbage-collected handle: release now if that is safe, else queue it."""
    if pid != os.getpid():
        return
    _DEFERRED.append((pid, path, writable, locator))
    if LOCK.try_enter():
        LOCK.__exit__(None, None, None)


@contextmanager
def borrowed(path: str, writable: bool, locator: Locator) -> Iterator[SharedFile]:
    """The shared file at ``path`` for the duration of a block (holding ``LOCK``).

    Examples
    --------
    >>> import h5py, numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "b.h5")
    >>> with h5py.File(path, "w") as f:
    ...     _ = f.create_dataset("x", data=np.arange(3))
    >>> locator = Locator.make("hdf5", path, "/x")
    >>> with borrowed(path, False, locator) as entry:
    ...     entry.writable, entry.readers, entry.file["x"].shape
    (False, 1, (3,))
    >>> (os.getpid(), path) in FILES  # closed with its last reference
    False
    """
    with LOCK:
        entry = _acquire(path, writable, locator)
        try:
            yield entry
        finally:
            _release_ref(os.getpid(), path, writable, locator)


class Handle:
    """One store's reference to its shared file in one process (dropped when collected).

    Examples
    --------
    >>> import h5py, numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "h.h5")
    >>> with h5py.File(path, "w") as f:
    ...     _ = f.create_dataset("x", data=np.arange(3))
    >>> locator = Locator.make("hdf5", path, "/x")
    >>> with LOCK:
    ...     first, second = Handle(path, False, locator), Handle(path, True, locator)
    ...     first.entry is second.entry, first.entry.writable
    (True, True)
    >>> with LOCK:
    ...     second.close()
    ...     first.entry.writable  # reopened read-only once its last writer is gone
    False
    >>> with LOCK:
    ...     first.close()
    """

    def __init__(self, path: str, writable: bool, locator: Locator, *, new: bool = False):
        self.pid = os.getpid()
        self.entry = _acquire(path, writable, locator, new=new)
        self._ref = (self.pid, path, writable or new, locator)
        self._finalizer = weakref.finalize(self, _release_collected, *self._ref)

    def close(self) -> None:
        """Release the reference now (call with ``LOCK`` held)."""
        if self._finalizer.detach() is not None:
            _release_ref(*self._ref)

    def abandon(self) -> None:
        """Forget a handle inherited across fork without touching the parent's file."""
        self._finalizer.detach()
        _INHERITED.append(self)


#: Seconds the exit handler waits for a thread inside :data:`LOCK` before closing anyway.
_EXIT_WAIT = 5.0


def _close_remote_files() -> None:
    """Close every remote file in this process, inherited ones included, before HDF5's own exit
    handler would (calling into their Python file objects while the interpreter is torn
    down can crash it).  Closing a file that was only read writes nothing, in any process."""
    held = LOCK.raw.acquire(timeout=_EXIT_WAIT)
    try:
        entries = [e for e in FILES.values() if e.remote is not None]
        entries += [h.entry for h in _INHERITED if h.entry.remote is not None]
        for entry in entries:
            entry.datasets.clear()
            file, entry.file = entry.file, None
            _close_quietly(file, entry.remote)
    finally:
        if held:
            LOCK.raw.release()


atexit.register(_close_remote_files)
