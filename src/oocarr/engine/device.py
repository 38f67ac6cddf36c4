"""The engine's own CPU device: block functions run on it, off the user's dispatch path.

oocarr's callbacks run compiled block functions while the XLA program that
called them waits.  On JAX's own CPU client, whose dispatch is asynchronous
by default, a block function dispatched from a callback can queue behind
work that waits for that callback, and a jitted step interleaved with eager
JAX work hangs.  The engine therefore computes on a CPU client of its own,
made here with synchronous dispatch: a block function runs to completion in
the thread that calls it, whatever the user's program is doing, and JAX's
own client, its configuration and its dispatch mode stay as the user left
them.  JAX compiles and runs functions for any device it is handed, so the
engine only puts its inputs on this device (:func:`put`) and compiles for it
(:func:`sharding`).
"""

from __future__ import annotations

import threading
from typing import Any

import jax
import numpy as np

from .host_put import HostPut

__all__ = ["engine_device", "sharding", "put", "on_engine"]

_lock = threading.Lock()
_device: Any = None
_sharding: Any = None


def engine_device() -> jax.Device:
    """The engine's CPU device (its client is made, with synchronous dispatch, on first use).

    Not one of ``jax.devices()``: the user's own devices and client are untouched.

    Examples
    --------
    >>> engine_device().platform
    'cpu'
    >>> engine_device() in jax.devices()
    False
    """
    global _device, _sharding
    if _device is None:
        with _lock:
            if _device is None:
                from jaxlib import xla_client  # (what jax._src.lib re-exports)

                # xla_client's constructor, not _jax's: it also registers the CPU custom
                # calls (LAPACK's, for jnp.linalg), as JAX's own CPU client does
                client = xla_client.make_cpu_client(asynchronous=False)
                # jaxlib's stub leaves the client's type unresolved (Client?)
                devices = client.local_devices()  # type: ignore[attr-defined]
                _sharding = jax.sharding.SingleDeviceSharding(devices[0])
                _device = devices[0]
    return _device


def sharding() -> jax.sharding.SingleDeviceSharding:
    """The sharding that places a whole array on :func:`engine_device`.

    Examples
    --------
    >>> sharding().device_set == {engine_device()}
    True
    """
    engine_device()
    return _sharding


def on_engine(value: Any) -> bool:
    """Whether ``value`` is a ``jax.Array`` already on :func:`engine_device`.

    Examples
    --------
    >>> on_engine(np.ones(2)), on_engine(put(np.ones(2)))
    (False, True)
    """
    return isinstance(value, jax.Array) and value.sharding == sharding()


def put(value: Any) -> jax.Array:
    """``value`` (a NumPy array, a scalar or any ``jax.Array``) on :func:`engine_device`.

    An aligned NumPy array is used without a copy, through the direct transfer
    of :class:`~oocarr.engine.host_put.HostPut` (``jax.device_put`` to a
    sharding spent about 100 µs of Python per tile, 40% of a 128 MiB
    ``stream_sum``); a Python scalar is put once and reused; an array on
    another device (the user's) is copied through the host.

    Examples
    --------
    >>> x = put(np.arange(3.0, dtype=np.float32))
    >>> x.devices() == {engine_device()}, np.asarray(x).tolist()
    (True, [0.0, 1.0, 2.0])
    """
    if on_engine(value):
        return value
    if type(value) is np.ndarray:
        return _host_put()((value,))[0]
    if type(value) in (int, float, bool, complex):
        key = (type(value), value)
        found = _scalars.get(key)
        if found is None:
            if len(_scalars) >= _MAX_SCALARS:
                _scalars.clear()
            found = _scalars[key] = jax.device_put(value, sharding())
        return found
    if isinstance(value, jax.Array):
        value = np.asarray(value)
    return jax.device_put(value, sharding())


_MAX_SCALARS = 256
#: Python scalars already on the engine's device (weakly typed, as ``jax.device_put`` makes
#: them), by type and value: engine arrays are immutable, so one serves every call.
_scalars: dict[tuple[type, Any], jax.Array] = {}
_put: HostPut | None = None


def _host_put() -> HostPut:
    global _put
    if _put is None:
        _put = HostPut(sharding())
    return _put
