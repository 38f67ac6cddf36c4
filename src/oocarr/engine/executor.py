"""Where a plan's tasks run: in this process (the default) or on a Dask distributed cluster.

A plan (:mod:`oocarr.engine.tasks`, :mod:`oocarr.jaxlayer.row_tasks`) is a list of
picklable tasks and a fixed combine order.  Without an executor the engine's
own loops run it here, reading ahead and writing behind.  Inside
``with executor(client):`` (or after ``set_executor(client)``) the streamers
that have a plan send its tasks to the cluster with ``client.map`` (retries
on) and combine the results here, in task order, so the result has the same
bits as the local run.  The executor in force is process-wide, like
:func:`~oocarr.engine.stats.io_stats`: under ``jax.jit`` the op loops run in
JAX's callback threads, and a jitted function traced before the ``with``
block runs on the cluster inside it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from oocarr.errors import (
    ExecutorError,
    InvalidArgumentError,
    MissingDependencyError,
    OocarrError,
    StorageAccessError,
)
from oocarr.store.locator import Locator

from . import progress as shown_progress
from .plan import Buffers, Projection, require
from .stats import IOCounts

__all__ = ["DaskExecutor", "current_executor", "executor", "set_executor"]

RETRIES = 3
"""How many times a task whose worker died is run again elsewhere."""

_lock = threading.Lock()
_stack: list[DaskExecutor | None] = []
_global: DaskExecutor | None = None


class DaskExecutor:
    """Runs tasks on a ``distributed.Client``'s workers, results back in task order.

    Parameters
    ----------
    client : distributed.Client
        A connected client (of a ``LocalCluster`` or a remote scheduler).

    Examples
    --------
    >>> from distributed import Client, LocalCluster   # doctest: +SKIP
    >>> import numpy as np, oocarr
    >>> from oocarr.engine import OOCAlgorithm, Operand
    >>> from oocarr.ops.reductions import Sum
    >>> x = oocarr.save(np.arange(6.0, dtype="f4"), "x.npy")   # doctest: +SKIP
    >>> plan = OOCAlgorithm(Sum((6,))).tasks([Operand(x.store)])   # doctest: +SKIP
    >>> with LocalCluster(n_workers=2) as cluster, Client(cluster) as client:   # doctest: +SKIP
    ...     [float(t) for t in DaskExecutor(client).map(plan.tasks)]
    [15.0]
    """

    def __init__(
        self, client: Any, *, owns_client: bool = False, progress: bool | None = None
    ) -> None:
        self.client = client
        self.owns_client = owns_client
        #: Show a call's progress when :func:`oocarr.progress` is off: ``None`` where standard
        #: error is a terminal, ``True`` always, ``False`` never (not even when it is on).
        self.progress = progress
        self._local: bool | None = None

    def close(self) -> None:
        """Close the client when this executor connected it (from a scheduler address)."""
        if self.owns_client:
            with contextlib.suppress(Exception):
                self.client.close()

    def __repr__(self) -> str:
        return f"DaskExecutor({self.client!r})"

    def task_memory(self) -> int | None:
        """The memory one task may use on the smallest worker: ``memory_limit / nthreads``
        (``None`` where the workers set no limit)."""
        workers = self._workers()
        shares = [
            int(w["memory_limit"]) // max(1, int(w.get("nthreads", 1)))
            for w in workers.values()
            if w.get("memory_limit")
        ]
        return min(shares) if shares else None

    def check_fits(self, projected: int | Projection, what: str) -> None:
        """Raise :class:`~oocarr.errors.BudgetTooSmallError` (through
        :func:`~oocarr.engine.plan.require`) before anything runs when a task of ``what``
        holding ``projected`` (bytes, or their itemised projection) does not fit the workers'
        memory per task."""
        share = self.task_memory()
        if share is None:
            return
        if isinstance(projected, Projection):
            projected = Projection(what, projected.items)
        else:
            projected = Projection(what, (Buffers("one task's planned buffers", 1, projected),))
        require(
            projected,
            share,
            limit="the cluster's workers' memory per task (memory_limit / nthreads)",
            remedy="by giving the workers more memory per thread, or lower the memory budget "
            "(oocarr.memory_budget) so that each task holds less",
        )

    def map(
        self, tasks: Sequence[Any], counts: IOCounts | None = None, what: str = "oocarr"
    ) -> Iterator[Any]:
        """``task.run()`` of every task on the workers, yielded in task order; what the
        workers read is added to ``counts``; each result is released on the cluster once it
        is here, and what is still queued is cancelled when the caller stops early.  A call
        that lasts shows its tasks done of the total (see ``progress`` and
        :mod:`oocarr.engine.progress`)."""
        if not tasks:
            return
        try:
            futures = self.client.map(_run, list(tasks), retries=RETRIES, pure=False)
        except Exception as err:  # the client is closed or the scheduler is gone
            raise ExecutorError(f"could not submit {len(tasks)} tasks to {self}: {err}") from err
        bar = None
        if self.progress is not False:
            show, total = self.progress, len(futures)
            bar = shown_progress.start(
                what, total, counts, unit="task", show=show, delay=PROGRESS_AFTER
            )
        try:
            for future in futures:
                value, worker_counts = self._result(future)
                with contextlib.suppress(Exception):  # a closed client has nothing to release
                    future.release()
                if counts is not None:
                    counts.add(worker_counts)
                if bar is not None:
                    bar.advance()
                yield value
        finally:
            if bar is not None:
                bar.close()
            with contextlib.suppress(Exception):
                self.client.cancel(futures)

    def check_reachable(self, refs: Sequence[Any], what: str) -> None:
        """Refuse, before anything runs, a stored input the workers cannot open: one in this
        process's memory (``memory://``), or one in local scratch when the workers run on
        other hosts (scratch must be shared: ``set_scratch_dir("s3://...")``)."""
        for ref in refs:
            if not isinstance(ref, Locator):
                continue
            protocol = ref.url.split("://", 1)[0] if "://" in ref.url else "file"
            if protocol == "memory":
                raise InvalidArgumentError(
                    f"{what}: {ref.full_url} is in this process's memory (fsspec memory://), "
                    "which the cluster's workers cannot read; save it where they can "
                    "(a shared filesystem, s3://...) or run without oocarr.executor",
                    url=ref.full_url,
                )
            if protocol in ("file", "local") and not self.on_this_host() and _in_scratch(ref):
                raise InvalidArgumentError(
                    f"{what}: {ref.full_url} is in local scratch storage, which workers on "
                    "other hosts cannot read; put scratch where every worker can reach it: "
                    'oocarr.set_scratch_dir("s3://bucket/scratch") (or a shared filesystem)',
                    url=ref.full_url,
                )

    def on_this_host(self) -> bool:
        """Whether every worker runs on this machine (a ``LocalCluster``)."""
        if self._local is None:
            here = {"127.0.0.1", "localhost", "::1", socket.gethostname()}
            with contextlib.suppress(OSError):
                here.add(socket.gethostbyname(socket.gethostname()))
            addresses = self._workers()
            # inproc:// workers are threads of this process
            hosts = {_host(a) for a in addresses if not a.startswith("inproc://")}
            self._local = hosts <= here
        return self._local

    def _result(self, future: Any) -> Any:
        from distributed import CancelledError
        from distributed.comm.core import CommClosedError
        from distributed.scheduler import KilledWorker

        try:
            ok, value, counts = future.result()
        except CancelledError as err:
            raise ExecutorError(
                f"a task on {self} was cancelled before it finished ({err}); nothing was "
                "committed: run the call again"
            ) from err
        except KilledWorker as err:
            raise ExecutorError(
                f"a task on {self} killed every worker that ran it ({err}); nothing was "
                "committed: check the workers' logs (memory limit?) and run the call again"
            ) from err
        except (CommClosedError, TimeoutError) as err:
            raise ExecutorError(
                f"lost the connection to the cluster of {self} ({type(err).__name__}: {err}); "
                "nothing was committed: reconnect the client and run the call again"
            ) from err
        except RuntimeError as err:
            if getattr(self.client, "status", None) not in ("closing", "closed"):
                raise
            raise ExecutorError(
                f"the client {self.client!r} was closed while its tasks ran; nothing was "
                "committed: run the call again with a connected client"
            ) from err
        if not ok:
            raise value
        return value, counts

    def _workers(self) -> dict:
        try:
            return self.client.scheduler_info()["workers"]
        except Exception as err:
            raise ExecutorError(f"cannot reach the scheduler of {self}: {err}") from err


#: Seconds a call runs before its progress is shown.
PROGRESS_AFTER = shown_progress.DELAY


def _run(task: Any) -> tuple[bool, Any, IOCounts]:
    """Run ``task`` on a worker, counting what it reads and the resident memory it adds.  An
    oocarr error (bad data, a budget) is the answer, not a fault: it comes back as a value, so
    the task is not retried; anything else (a storage hiccup) raises, and distributed runs the
    task again."""
    counts = IOCounts()
    before = _reset_peak_rss()
    try:
        return True, task.run(counts), counts
    except StorageAccessError:
        raise  # an endpoint or credential hiccup on this worker: distributed runs it again
    except OocarrError as err:
        return False, err, counts
    finally:
        if before is not None:
            counts.peak_task_bytes = max(0, _status_bytes("VmHWM") - before)


def _reset_peak_rss() -> int | None:
    """Reset this process's peak resident size (Linux: ``clear_refs`` 5) and return the
    resident size now; ``None`` where that cannot be done."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _status_bytes("VmRSS")
    except OSError:
        return None


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise OSError(f"no {field} in /proc/self/status")


def _host(address: str) -> str:
    """``"tcp://10.0.0.5:8786"`` → ``"10.0.0.5"`` (IPv6 brackets removed)."""
    rest = address.split("://", 1)[-1]
    return rest.rsplit(":", 1)[0].strip("[]")


def _in_scratch(ref: Locator) -> bool:
    from oocarr.store.scratch import resolve_scratch_dir

    scratch = os.path.realpath(resolve_scratch_dir())
    path = os.path.realpath(ref.url.split("://", 1)[-1])
    return path == scratch or path.startswith(scratch + os.sep)


def _as_executor(client: Any, progress: bool | None = None) -> DaskExecutor | None:
    if client is None or isinstance(client, DaskExecutor):
        return client
    try:
        from distributed import Client
    except ImportError as err:  # pragma: no cover - the dask extra is missing
        raise MissingDependencyError(
            "oocarr.executor needs Dask distributed: pip install 'oocarr[dask]'"
        ) from err
    if isinstance(client, str):
        return DaskExecutor(_connect(Client, client), owns_client=True, progress=progress)
    if not isinstance(client, Client):
        raise InvalidArgumentError(
            f"oocarr.executor takes a distributed.Client (or a scheduler address), "
            f"got {type(client).__name__}"
        )
    return DaskExecutor(client, progress=progress)


def _connect(client_class: Any, address: str) -> Any:
    """A client of the scheduler at ``address``, or :class:`ExecutorError` saying why not."""
    try:
        return client_class(address, set_as_default=False)
    except (OSError, TimeoutError, ValueError, TypeError) as err:
        raise ExecutorError(
            f"cannot connect to a Dask scheduler at {address!r} ({type(err).__name__}: {err}); "
            "check the address (tcp://host:8786) and that the scheduler is running"
        ) from None


def set_executor(client: Any, *, progress: bool | None = None) -> None:
    """Run plans on ``client``'s cluster from now on (``None``: in this process again),
    outside any :func:`executor` block.

    Parameters
    ----------
    client : distributed.Client, str or None
        A connected client, a scheduler address (``"tcp://host:8786"``), or ``None``.
    progress : bool, optional
        Show each call's tasks done of the total while :func:`oocarr.progress` is off
        (default: when standard error is a terminal); ``False``: never, even when it is on.

    Examples
    --------
    >>> import oocarr
    >>> oocarr.set_executor(None)
    >>> oocarr.current_executor() is None
    True
    """
    global _global
    value = _as_executor(client, progress)
    with _lock:
        previous, _global = _global, value
    if previous is not None and previous is not value:
        previous.close()


@contextlib.contextmanager
def executor(client: Any, *, progress: bool | None = None) -> Iterator[DaskExecutor | None]:
    """Run plans on ``client``'s cluster inside a ``with`` block (in every thread of the
    process while it is open; blocks nest).

    Parameters
    ----------
    client : distributed.Client, str or None
        A connected client, a scheduler address (connected here and closed when the block
        ends), or ``None`` (run here).
    progress : bool, optional
        Show each call's tasks done of the total while :func:`oocarr.progress` is off
        (default: when standard error is a terminal); ``False``: never, even when it is on.

    Examples
    --------
    >>> import oocarr
    >>> with oocarr.executor(None) as ex:
    ...     ex is None
    True
    """
    value = _as_executor(client, progress)
    with _lock:
        _stack.append(value)
    try:
        yield value
    finally:
        with _lock:
            _stack.reverse()
            _stack.remove(value)  # the innermost entry of this value: blocks may close out of order
            _stack.reverse()
        if value is not None:
            value.close()


def current_executor() -> DaskExecutor | None:
    """The executor in force (``None``: tasks run in this process).

    Examples
    --------
    >>> import oocarr
    >>> oocarr.current_executor() is None
    True
    """
    with _lock:
        return _stack[-1] if _stack else _global
