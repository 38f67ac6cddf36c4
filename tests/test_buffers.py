"""BufferPool: buffers come back only when nothing (JAX included) uses them."""

import gc

import jax
import jax.numpy as jnp
import numpy as np

from oocarr.store.buffers import ALIGNMENT, BufferPool


def test_a_buffer_returns_only_after_its_last_view_dies():
    pool = BufferPool(keep=2)
    a = pool.empty((64, 32), np.float32)
    view = a[3:9, ::2]
    del a
    assert pool.free == 0
    del view
    assert pool.free == 1


def test_a_buffer_jax_uses_without_copying_is_not_handed_out_again():
    pool = BufferPool(keep=2)
    a = pool.empty((256, 256), np.float32)
    a[:] = np.arange(256, dtype=np.float32)
    on_device = jax.device_put(a)
    del a
    b = pool.empty((256, 256), np.float32)
    b[:] = -1.0  # must not show in the array JAX holds
    expected = np.broadcast_to(np.arange(256, dtype=np.float32), (256, 256))
    np.testing.assert_array_equal(np.asarray(on_device), expected)
    assert float(jnp.sum(on_device)) == float(expected.sum())
    del on_device, b
    gc.collect()
    assert pool.free == 2


def test_reused_memory_is_aligned_and_the_pool_keeps_at_most_keep():
    pool = BufferPool(keep=1)
    arrays = [pool.empty((100,), np.float64) for _ in range(3)]
    addresses = {a.ctypes.data for a in arrays}
    assert all(address % ALIGNMENT == 0 for address in addresses)
    del arrays
    assert pool.free == 1
    again = pool.empty((50,), np.float64)  # a smaller request reuses the larger buffer
    assert again.ctypes.data in addresses
    bigger = pool.empty((1000,), np.float64)  # nothing free fits: a new buffer
    assert bigger.ctypes.data not in addresses
    assert bigger.shape == (1000,) and bigger.flags.c_contiguous


def test_buffers_of_a_collected_pool_are_simply_freed():
    pool = BufferPool(keep=2)
    a = pool.empty((8,), np.int32)
    del pool
    a[:] = 7  # still valid memory
    assert a.sum() == 56
    del a
