"""HostPut places NumPy batches exactly where jax.device_put would (the oracle)."""

import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from oocarr.engine.host_put import HostPut


def _same_as_device_put(arrays, target):
    ours = HostPut(target)(arrays)
    theirs = jax.device_put(arrays, target)
    for a, b, x in zip(ours, theirs, arrays):
        assert isinstance(a, jax.Array)
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.sharding == b.sharding and a.committed == b.committed
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        np.testing.assert_array_equal(np.asarray(a), x.astype(b.dtype))


@pytest.mark.parametrize(
    "dtype", ["float32", "int32", "bool", "uint8", "float16", "float64", "int64", "complex128"]
)
def test_default_device_like_device_put(dtype):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((33, 5)) * 10).astype(dtype)
    y = rng.integers(0, 9, 33).astype(dtype)
    _same_as_device_put((x, y), None)


def test_named_device_and_single_device_sharding():
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    device = jax.devices()[0]
    _same_as_device_put((x,), device)
    _same_as_device_put((x,), jax.sharding.SingleDeviceSharding(device))
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))
    named = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    _same_as_device_put((x,), named)


def test_the_same_shape_again_and_views_and_scalars():
    put = HostPut(None)
    base = np.arange(100, dtype=np.float32).reshape(25, 4)
    for start in (0, 5, 10):
        (a,) = put((base[start : start + 5],))
        np.testing.assert_array_equal(np.asarray(a), base[start : start + 5])
    (s,) = put((np.array(3.5, np.float32),))
    assert s.shape == () and float(s) == 3.5
    (t,) = put((base[:, 1],))  # a strided view
    np.testing.assert_array_equal(np.asarray(t), base[:, 1])


def test_the_default_device_where_the_putter_was_made():
    cpu = jax.devices("cpu")[0]
    with jax.default_device(cpu):
        put = HostPut(None)
    (a,) = put((np.ones(3, np.float32),))
    assert a.devices() == {cpu} and not a.committed


SPLIT_SCRIPT = """
import jax, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from oocarr.engine.host_put import HostPut
mesh = Mesh(np.array(jax.devices()), ("data",))
x = np.arange(64, dtype=np.float32).reshape(16, 4)
for spec in (P("data"), P(None, "data"), P()):
    s = NamedSharding(mesh, spec)
    (a,) = HostPut(s)((x,))
    b = jax.device_put(x, s)
    assert len(jax.devices()) == 2
    assert a.sharding == b.sharding and a.committed == b.committed
    for u, v in zip(a.addressable_shards, b.addressable_shards):
        assert u.device == v.device and u.index == v.index
        np.testing.assert_array_equal(np.asarray(u.data), np.asarray(v.data))
print("ok")
"""


def test_split_over_two_host_devices_like_device_put():
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    done = subprocess.run(
        [sys.executable, "-c", SPLIT_SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
