"""A small stored chunk that inflates to a gigabyte (a decompression bomb, or a corrupt file)
raises the corrupt-chunk error after at most one chunk of memory, in a fresh process."""

from __future__ import annotations

import sys
import textwrap

import pytest

from subprocess_rss import run_script

pytestmark = [
    pytest.mark.memory,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status"),
]

#: Zeros a bomb inflates to: 1 GiB, from about a megabyte stored.
BOMB = textwrap.dedent(
    """
    import zlib

    def bomb(wbits, total=2**30):
        c = zlib.compressobj(1, zlib.DEFLATED, wbits)
        block = bytes(64 << 20)
        return b"".join([c.compress(block) for _ in range(total // len(block))] + [c.flush()])
    """
)

SCRIPT = BOMB + textwrap.dedent(
    """
    import json, os, sys
    import numpy as np
    import oocarr
    from oocarr import errors

    kind, root = sys.argv[1], sys.argv[2]
    if kind in ("zarr-gzip", "zarr-zstd"):
        codec = kind.split("-")[1]
        path = os.path.join(root, "a.zarr")
        oocarr.save(np.zeros(2000, "f4"), path, chunks=(1000,), compression=codec)
        if codec == "gzip":
            data = bomb(31)
        else:
            import zstandard
            c = zstandard.ZstdCompressor(level=1, write_content_size=True)
            data = c.compress(bytes(2**30))
        with open(os.path.join(path, "c", "0"), "wb") as f:
            f.write(data)
        url = path
    else:
        import h5py
        path = os.path.join(root, "a.h5")
        shuffle = kind == "hdf5-gzip-shuffle"
        with h5py.File(path, "w") as f:
            ds = f.create_dataset("x", (2000,), "f4", chunks=(1000,), compression="gzip",
                                  shuffle=shuffle)
            ds[...] = 1.0
            mask = 0
            data = bomb(15)
            ds.id.write_direct_chunk((0,), data, mask)
        url = path + "#/x"
    x = oocarr.open(url)
    x.store[1000:1010]                   # an intact chunk: every path warmed up
    del data
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")                     # the peak mark restarts from here
    with open("/proc/self/status") as f:
        baseline = int(next(l for l in f if l.startswith("VmRSS")).split()[1]) * 1024
    try:
        x.store[0:10]
        outcome = "no error"
    except errors.InvalidStoreError as err:
        outcome = "InvalidStoreError: " + str(err)
    print(json.dumps({"growth": peak_rss() - baseline, "outcome": outcome}))
    """
)


@pytest.mark.parametrize("kind", ["zarr-gzip", "zarr-zstd", "hdf5-gzip", "hdf5-gzip-shuffle"])
def test_a_decompression_bomb_raises_within_one_chunk_of_memory(tmp_path, kind):
    report = run_script(SCRIPT, kind, str(tmp_path))
    assert report["outcome"].startswith("InvalidStoreError"), report["outcome"]
    assert "more than the 4000 bytes" in report["outcome"] or "corrupt" in report["outcome"]
    growth = report["growth"]
    print(f"{kind}: peak RSS growth {growth / 2**20:.1f} MiB")
    assert growth < 32 * 2**20, f"{kind}: a 4000-byte chunk's bomb took {growth / 2**20:.0f} MiB"
