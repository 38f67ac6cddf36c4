"""The memory budget settings."""

from __future__ import annotations

import pytest

import oocarr
from oocarr import errors
from oocarr.config import memory_budget_bytes, parse_size


@pytest.mark.parametrize(
    "text, value",
    [
        ("64MB", 64 * 10**6),
        ("64mb", 64 * 10**6),
        ("1GiB", 2**30),
        ("512k", 512_000),
        ("1.5G", 1_500_000_000),
        (4096, 4096),
        ("100", 100),
    ],
)
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("bad", ["lots", "-5MB", 0, "1XB", True])
def test_parse_size_refuses_nonsense(bad):
    with pytest.raises(errors.InvalidArgumentError):
        parse_size(bad)


def test_budget_default_setting_and_context():
    default = memory_budget_bytes()
    assert 64 * 10**6 <= default <= 2 * 10**9
    oocarr.set_memory_budget("100MB")
    try:
        assert oocarr.config()["memory_budget"] == 100 * 10**6
        with oocarr.memory_budget("10MB"):
            assert memory_budget_bytes() == 10 * 10**6
            assert "block" in oocarr.config()["memory_budget_source"]
        assert memory_budget_bytes() == 100 * 10**6
    finally:
        oocarr.set_memory_budget(None)
    assert memory_budget_bytes() == default


def test_scratch_can_be_any_driver_url(tmp_path):
    import gc

    import fsspec
    import jax
    import numpy as np

    a = np.arange(24, dtype="f4").reshape(6, 4)
    x = oocarr.save(a, str(tmp_path / "x.npy"))
    memory = fsspec.filesystem("memory")
    oocarr.set_memory_budget("1MB", scratch_dir="memory://oocarr-scratch-test")
    try:
        assert oocarr.config()["scratch_driver"] == "fsspec"
        y, z = x * 2.0, oocarr.from_numpy(a)
        g = jax.grad(lambda v: oocarr.sum(v * v))(x)
        for array in (y, z, g):
            assert array.locator.driver == "fsspec"
            assert array.url.startswith("memory://oocarr-scratch-test/")
        np.testing.assert_array_equal(np.asarray(y), a * 2)
        np.testing.assert_array_equal(np.asarray(g), a * 2)
        gc.collect()  # the intermediate v * v of the gradient's forward pass
        assert len(memory.ls("/oocarr-scratch-test")) == 3
        oocarr.get_driver("fsspec").delete(g.locator)
        del y, z, g
        gc.collect()
        left = memory.find("/oocarr-scratch-test") if memory.exists("/oocarr-scratch-test") else []
        assert left == []
    finally:
        oocarr.set_memory_budget(None)
        oocarr.set_scratch_dir(None)
    assert oocarr.config()["scratch_driver"] == "memmap"


def test_scratch_driver_alone_keeps_the_directory(tmp_path):
    import numpy as np

    oocarr.set_memory_budget(None, scratch_dir=str(tmp_path), scratch_driver="hdf5")
    try:
        y = oocarr.from_numpy(np.ones(5, "f4")) + 1.0
        assert y.locator.driver == "hdf5" and y.locator.url.startswith(str(tmp_path))
        np.testing.assert_array_equal(np.asarray(y), np.full(5, 2.0))
        del y
    finally:
        oocarr.set_scratch_dir(None)
    with pytest.raises(errors.UnknownDriverError):
        oocarr.set_memory_budget(None, scratch_driver="no-such-driver")


@pytest.mark.parametrize("driver", ["hdf5", "fsspec"])
def test_container_scratch_leaves_no_files_behind(tmp_path, driver):
    import gc

    import jax
    import numpy as np

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    a = np.arange(12, dtype="f4").reshape(3, 4)
    oocarr.set_memory_budget(None, scratch_dir=str(scratch), scratch_driver=driver)
    try:
        x = oocarr.from_numpy(a)
        y = x * 2.0
        g = jax.grad(lambda v: oocarr.sum(v * v))(x)
        np.testing.assert_array_equal(np.asarray(y), a * 2)
        np.testing.assert_array_equal(np.asarray(g), a * 2)
        assert len(list(scratch.iterdir())) >= 3
        del x, y, g
        gc.collect()
        assert list(scratch.iterdir()) == []
    finally:
        oocarr.set_scratch_dir(None)
