"""The demo job: make a sample HDF5 dataset, open it with oocarr, list, inspect and convert it
with the ``oocarr`` command, convert it to the other drivers and back, check every copy against
h5py tile by tile, and print what happened.

Run it through ``scripts/demo.sh`` (which installs oocarr first), or directly::

    python scripts/demo.py --rows 1000000 --cols 32 --workdir demo-data
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import h5py
import jax
import jax.numpy as jnp
import numpy as np

import oocarr


def make_sample(path: str, rows: int, cols: int) -> None:
    """Write a chunked, gzip-compressed float32 dataset in a nested group with plain h5py."""
    rng = np.random.default_rng(0)
    step = 65536
    chunk_rows = max(1, min(4096, rows))  # h5py refuses chunks longer than the dataset
    with h5py.File(path, "w") as f:
        ds = f.create_dataset(
            "experiment/features",
            shape=(rows, cols),
            dtype="f4",
            chunks=(chunk_rows, cols),
            compression="gzip",
            compression_opts=1,
        )
        ds.attrs["description"] = "synthetic features for the oocarr demo"
        ds.attrs["rows"] = rows
        targets = f.create_dataset(
            "experiment/targets", shape=(rows, 1), dtype="f4", chunks=(chunk_rows, 1)
        )
        w_true = np.linspace(-1, 1, cols, dtype=np.float32)[:, None]
        for start in range(0, rows, step):
            stop = min(rows, start + step)
            block = np.round(rng.standard_normal((stop - start, cols), dtype=np.float32), 3)
            ds[start:stop] = block
            noise = 0.1 * rng.standard_normal((stop - start, 1), dtype=np.float32)
            targets[start:stop] = block @ w_true + noise


def same_as_h5py(copy: oocarr.DiskArray, path: str, name: str) -> bool:
    """Compare a copy with the HDF5 original one tile at a time, h5py reading the original."""
    store = copy.store
    with h5py.File(path, "r") as f:
        original = f[name]
        for idx in store.block_grid():
            region = store.block_region(idx)
            if not np.array_equal(store.read_block(idx), original[region]):
                return False
    return True


def timed_save(source, url: str, **options) -> tuple[oocarr.DiskArray, float]:
    start = time.perf_counter()
    out = oocarr.save(source, url, **options)
    return out, time.perf_counter() - start


def human(nbytes: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if nbytes < 1000 or unit == "GB":
            return f"{nbytes:.1f} {unit}"
        nbytes /= 1000
    return f"{nbytes:.1f} GB"


def least_squares_gradient(path: str, name: str) -> None:
    """jax.jit(jax.grad(...)) of a least-squares loss streamed from the HDF5 file, next to the
    same gradient computed in memory."""
    features = oocarr.open(f"{path}#{name}")
    targets = oocarr.open(f"{path}#/experiment/targets")
    w = jnp.zeros((features.shape[1], 1), jnp.float32)

    def loss(w, x, y):
        return oocarr.mean(oocarr.square(x @ w - y))

    grad = jax.jit(jax.grad(loss))
    start = time.perf_counter()
    with oocarr.memory_budget("32MB"):
        g = grad(w, features, targets)
        budget = oocarr.config()["memory_budget"]
    seconds = time.perf_counter() - start
    with h5py.File(path, "r") as f:
        x_mem, y_mem = jnp.asarray(f[name][:]), jnp.asarray(f["experiment/targets"][:])
    g_ref = jax.grad(lambda w: jnp.mean(jnp.square(x_mem @ w - y_mem)))(w)
    print(
        f"least-squares gradient from HDF5 with jax.jit(jax.grad(...)) in {seconds:.2f} s "
        f"under a {budget / 1e6:.0f} MB budget:\n"
        f"  |g| = {float(jnp.linalg.norm(g)):.6f}  (in memory: "
        f"{float(jnp.linalg.norm(g_ref)):.6f}, max difference "
        f"{float(jnp.max(jnp.abs(g - g_ref))):.2e})"
    )


def run_cli(*args: str) -> None:
    """Run the ``oocarr`` console script installed beside this Python and show its output."""
    command = [os.path.join(os.path.dirname(sys.executable), "oocarr"), *args]
    print(f"$ oocarr {' '.join(args)}", flush=True)
    subprocess.run(command, check=True)


def command_line_tour(source_path: str, name: str, workdir: str) -> None:
    """The same dataset through the ``oocarr`` command: list, inspect, convert with a check."""
    run_cli("ls", source_path)
    run_cli("inspect", f"{source_path}#{name}")
    run_cli(
        "--memory",
        "64MB",
        "convert",
        f"{source_path}#{name}",
        os.path.join(workdir, "features-cli.zarr"),
        "--compression",
        "zstd",
        "--overwrite",
        "--verify",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--cols", type=int, default=32)
    parser.add_argument("--workdir", default=None, help="keep the files here (default: temp dir)")
    args = parser.parse_args()

    workdir = args.workdir or tempfile.mkdtemp(prefix="oocarr-demo-")
    os.makedirs(workdir, exist_ok=True)
    source_path = os.path.join(workdir, "sample.h5")
    name = "/experiment/features"

    print(f"oocarr {oocarr.__version__}; storage drivers: {', '.join(oocarr.available_drivers())}")
    start = time.perf_counter()
    make_sample(source_path, args.rows, args.cols)
    print(f"made {source_path}#{name} with h5py in {time.perf_counter() - start:.1f} s")

    source = oocarr.open(f"{source_path}#{name}")
    info = source.info()
    print(
        f"opened {info['url']}\n"
        f"  driver {info['driver']}, shape {tuple(info['shape'])}, dtype {info['dtype']}, "
        f"chunks {tuple(info['chunks'])}, compression {info['compression']}\n"
        f"  {human(info['nbytes'])} logical, {human(info['stored_nbytes'])} stored, "
        f"attrs {info['attrs']}"
    )

    command_line_tour(source_path, name, workdir)

    steps = [
        ("HDF5 -> .npy (memmap)", source, os.path.join(workdir, "features.npy"), {}),
        (
            "HDF5 -> Zarr v3 (fsspec, zstd)",
            source,
            os.path.join(workdir, "features.zarr"),
            {"compression": "zstd"},
        ),
    ]
    copies = {}
    for label, src, url, options in steps:
        out, seconds = timed_save(src, url, overwrite=True, **options)
        copies[label] = out
        print(
            f"{label:34s} {seconds:6.2f} s  {human(out.nbytes / seconds)}/s  "
            f"stored {human(out.store.stored_nbytes)}"
        )
    back_path = os.path.join(workdir, "roundtrip.h5")
    zarr_copy = copies["HDF5 -> Zarr v3 (fsspec, zstd)"]
    back, seconds = timed_save(
        zarr_copy, f"{back_path}#{name}", compression="gzip:1", overwrite=True
    )
    print(
        f"{'Zarr -> HDF5 (gzip)':34s} {seconds:6.2f} s  {human(back.nbytes / seconds)}/s  "
        f"stored {human(back.store.stored_nbytes)}"
    )

    for label, copy in [*copies.items(), ("Zarr -> HDF5 (gzip)", back)]:
        verdict = "identical" if same_as_h5py(copy, source_path, name) else "DIFFERENT"
        print(f"check {label:34s} {verdict} to the h5py original")
    print(f"attrs carried to the round trip: {back.attrs}")
    least_squares_gradient(source_path, name)
    if args.workdir is None:
        shutil.rmtree(workdir)


if __name__ == "__main__":
    main()
