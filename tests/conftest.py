"""Shared fixtures: one ``Backend`` per registered driver configuration, an S3 API on
loopback, and the test-suite driver registered with ``register_driver``."""

from __future__ import annotations

import itertools
import os
import pathlib
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import oocarr
from oocarr.store import registry

HERE = pathlib.Path(__file__).parent


def _register_test_driver() -> None:
    """Register the test driver at run time, as a user would with ``register_driver``.

    Only this process sees it: its arrays live in this process's memory, so no
    subprocess test uses it (tests/test_registry.py checks a real entry point).
    """
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    registry.register_driver("testmem", "mem_driver:MemoryArray")


_register_test_driver()

# Scratch arrays of the whole run go to one directory, checked empty at the end.
SCRATCH = pathlib.Path(__import__("tempfile").mkdtemp(prefix="oocarr-test-scratch-"))
os.environ["OOCARR_SCRATCH_DIR"] = str(SCRATCH)


@pytest.fixture(scope="session", autouse=True)
def scratch_is_left_empty():
    """Nothing oocarr writes to scratch outlives the test session."""
    yield
    import gc

    from oocarr.store import scratch

    gc.collect()
    scratch.remove_tracked()
    left = sorted(p.name for p in SCRATCH.iterdir())
    assert left == [], f"scratch files left behind: {left[:5]}"
    SCRATCH.rmdir()


@pytest.fixture(scope="session")
def s3_server():
    """An S3 API (moto's server mode) on 127.0.0.1, with one bucket; stopped after the session."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    options = {
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
        "use_listings_cache": False,
    }
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
    fs.call_s3("create_bucket", Bucket="oocarr-test")
    yield options
    server.stop()


@dataclass
class Backend:
    """One way of storing arrays: a driver plus a configuration of it."""

    id: str
    make_url: Callable[[str], str]
    create_kwargs: dict[str, Any] = field(default_factory=dict)
    chunked: bool = True
    cross_process: bool = True
    native_maker: Callable[[str, np.ndarray], None] | None = None
    unsupported: tuple[str, ...] = ()

    _counter = itertools.count()

    def url(self, name: str = "a") -> str:
        return self.make_url(f"{name}{next(self._counter)}")

    def supports(self, dtype: Any) -> bool:
        return np.dtype(dtype).name not in self.unsupported

    def store(self, data: np.ndarray, *, chunks=None, attrs=None, mode: str = "r+"):
        """Store ``data`` on this backend and return an open BlockedArray."""
        url = self.url()
        if self.native_maker is not None:
            self.native_maker(url, data)
            return oocarr.open(url, mode, **self.open_kwargs(data)).store
        kwargs = dict(self.create_kwargs)
        if chunks is not None and self.chunked:
            kwargs["chunks"] = chunks
        return oocarr.save(data, url, attrs=attrs, mode=mode, **kwargs).store

    def open_kwargs(self, data):
        return {k: v for k, v in self.create_kwargs.items() if k in ("driver", "storage_options")}


def _h5_contiguous(url: str, data: np.ndarray) -> None:
    import h5py

    path, _, name = url.partition("#")
    with h5py.File(path, "a") as f:
        f.create_dataset(name, data=data)


def make_backends(tmp: pathlib.Path, s3_options: dict | None) -> list[Backend]:
    def local(suffix):
        return lambda name: str(tmp / f"{name}{suffix}")

    backends = [
        Backend("memmap-npy", local(".npy"), chunked=False, unsupported=("bfloat16",)),
        Backend("memmap-raw", local(".bin"), {"driver": "memmap"}, chunked=False),
        Backend(
            "hdf5-chunked",
            lambda n: str(tmp / f"{n}.h5") + "#/group/data",
            unsupported=("bfloat16",),
        ),
        Backend(
            "hdf5-contiguous",
            lambda n: str(tmp / "shared.h5") + f"#/g/{n}",
            chunked=False,
            native_maker=_h5_contiguous,
            unsupported=("bfloat16",),
        ),
        Backend(
            "fsspec-memory",
            lambda n: f"memory://oocarr-{uuid.uuid4().hex}/{n}.zarr",
            cross_process=False,
        ),
        Backend("fsspec-local", local(".zarr")),
        Backend(
            "fsspec-v2",
            local(".zarr"),
            {"zarr_format": 2, "compression": "blosc"},
            unsupported=("bfloat16",),
        ),
        Backend("fsspec-sharded", local(".zarr"), {"shards": "auto", "compression": "zstd"}),
        Backend("testmem", lambda n: f"mem://{uuid.uuid4().hex}/{n}", cross_process=False),
    ]
    if s3_options is not None:
        backends.append(
            Backend(
                "fsspec-s3",
                lambda n: f"s3://oocarr-test/{uuid.uuid4().hex}/{n}.zarr",
                {"storage_options": s3_options},
            )
        )
        backends.append(
            Backend(
                "fsspec-s3-sharded",
                lambda n: f"s3://oocarr-test/{uuid.uuid4().hex}/{n}.zarr",
                {"storage_options": s3_options, "shards": "auto", "compression": "blosc"},
            )
        )
    return backends


BACKEND_IDS = [
    "memmap-npy",
    "memmap-raw",
    "hdf5-chunked",
    "hdf5-contiguous",
    "fsspec-memory",
    "fsspec-local",
    "fsspec-v2",
    "fsspec-sharded",
    "fsspec-s3",
    "fsspec-s3-sharded",
    "testmem",
]


@pytest.fixture(params=BACKEND_IDS)
def backend(request, tmp_path) -> Backend:
    needs_s3 = request.param.startswith("fsspec-s3")
    s3 = request.getfixturevalue("s3_server") if needs_s3 else None
    return next(b for b in make_backends(tmp_path, s3) if b.id == request.param)
