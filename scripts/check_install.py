"""Check an installed oocarr (run from outside the source tree): the core and all three drivers.

Used by ``scripts/test.sh`` on a plain, non-editable install.
"""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np

import oocarr


def main() -> int:
    where = os.path.dirname(oocarr.__file__)
    assert "site-packages" in where, f"oocarr was imported from {where}, not an install"
    import oocarr_drivers

    for package in (oocarr, oocarr_drivers):  # PEP 561: the inline types are installed
        marker = os.path.join(os.path.dirname(package.__file__), "py.typed")
        assert os.path.isfile(marker), f"{marker} is missing from the install"
    drivers = oocarr.available_drivers()
    assert {"memmap", "hdf5", "fsspec"} <= set(drivers), drivers
    data = np.arange(60, dtype=np.float32).reshape(6, 10)
    with tempfile.TemporaryDirectory() as tmp:
        for url in ("a.npy", "a.h5#/g/x", "a.zarr", "memory://check/a.zarr"):
            full = url if "://" in url else os.path.join(tmp, url)
            stored = oocarr.save(data, full)
            assert np.array_equal(oocarr.to_numpy(oocarr.open(full)), data), url
            print(f"ok  {stored.store.name:7s} {url}")
    print(f"oocarr {oocarr.__version__} installed at {where} with drivers {', '.join(drivers)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
