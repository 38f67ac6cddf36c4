"""The page-store contract (:class:`oocarr.store.testing.DriverTests`), run once against every
registered driver configuration, as a third-party driver package runs it against its own.
"""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from oocarr.store.testing import BUILT_IN_TARGETS, DriverTests


def _h5_contiguous(url: str, data: np.ndarray) -> None:
    import h5py

    path, _, name = url.partition("#")
    with h5py.File(path, "a") as f:
        f.create_dataset(name, data=data)


class Conformance(DriverTests):
    """The suite as the built-in configurations run it: copies go to the test driver too."""

    copy_targets = {
        **BUILT_IN_TARGETS,
        "testmem": lambda _dir, name: f"mem://{uuid.uuid4().hex}/{name}",
    }


class TestMemmapNpy(Conformance):
    driver = "memmap"
    unsupported_dtypes = ("bfloat16",)


class TestMemmapRaw(Conformance):
    driver = "memmap"
    create_kwargs = {"driver": "memmap"}

    def make_url(self, directory, name):
        return str(directory / f"{name}.bin")

    def open_kwargs(self, shape=None, dtype=None):
        return {**super().open_kwargs(), "shape": shape, "dtype": dtype}


class TestHDF5Chunked(Conformance):
    driver = "hdf5"

    def make_url(self, directory, name):
        return str(directory / f"{name}.h5") + "#/group/data"


class TestHDF5Contiguous(Conformance):
    driver = "hdf5"
    native_writer = staticmethod(_h5_contiguous)

    def make_url(self, directory, name):
        return str(directory / "shared.h5") + f"#/g/{name}"


class TestFsspecMemory(Conformance):
    driver = "fsspec"
    cross_process = False

    def make_url(self, directory, name):
        return f"memory://oocarr-{uuid.uuid4().hex}/{name}.zarr"


class TestFsspecLocal(Conformance):
    driver = "fsspec"


class TestFsspecV2(Conformance):
    driver = "fsspec"
    create_kwargs = {"zarr_format": 2, "compression": "blosc"}
    unsupported_dtypes = ("bfloat16",)


class TestFsspecSharded(Conformance):
    driver = "fsspec"
    create_kwargs = {"shards": "auto", "compression": "zstd"}


class TestFsspecS3Sharded(Conformance):
    driver = "fsspec"
    slow_storage = True

    @pytest.fixture(autouse=True)
    def _on_s3(self, s3_server):
        self.create_kwargs = {
            "storage_options": s3_server,
            "shards": "auto",
            "compression": "blosc",
        }

    def make_url(self, directory, name):
        return f"s3://oocarr-test/{uuid.uuid4().hex}/{name}.zarr"


class TestFsspecS3(Conformance):
    driver = "fsspec"
    slow_storage = True

    @pytest.fixture(autouse=True)
    def _on_s3(self, s3_server):
        self.create_kwargs = {"storage_options": s3_server}

    def make_url(self, directory, name):
        return f"s3://oocarr-test/{uuid.uuid4().hex}/{name}.zarr"


class TestTestmem(Conformance):
    driver = "testmem"
    cross_process = False

    def make_url(self, directory, name):
        return f"mem://{uuid.uuid4().hex}/{name}"
