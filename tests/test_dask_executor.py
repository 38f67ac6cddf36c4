"""Plans run on a Dask distributed cluster (a 2-worker LocalCluster on 127.0.0.1): the same
bits as the local run, errors with their own class, a budget the workers cannot hold refused
before anything runs, a worker killed mid-op survived."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import oocarr
from oocarr.engine import OOCAlgorithm, Operand
from oocarr.errors import BudgetTooSmallError, ExecutorError, InvalidArgumentError
from oocarr.ops.reductions import Sum

distributed = pytest.importorskip("distributed")

BUDGET = 256 * 1024  # several tiles per call, so every call is several tasks


@pytest.fixture(scope="module")
def client():
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            memory_limit="2GiB",
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


def _bits(a) -> bytes:
    a = np.ascontiguousarray(np.asarray(a))
    return a.dtype.str.encode() + str(a.shape).encode() + a.tobytes()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("dist")
    rng = np.random.default_rng(11)
    a = rng.standard_normal((3000, 40)).astype("f4")
    y = rng.standard_normal(3000).astype("f4")
    arrays = {
        "zarr": oocarr.save(a, str(root / "a.zarr"), chunks=(256, 40), compression="zstd"),
        "zarr2": oocarr.save(a, str(root / "a2.zarr"), chunks=(256, 40), zarr_format=2),
        "sharded": oocarr.save(
            a, str(root / "s.zarr"), chunks=(128, 40), shards=(512, 40), compression="zstd"
        ),
        "hdf5": oocarr.save(a, str(root / "a.h5") + "#/a", chunks=(256, 40)),
        "npy": oocarr.save(a, str(root / "a.npy")),
    }
    return a, y, arrays, oocarr.save(y, str(root / "y.zarr"), chunks=(256,))


FORMATS = ["zarr", "zarr2", "sharded", "hdf5", "npy"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_reductions_on_the_cluster_give_the_local_bits(client, data, fmt, monkeypatch):
    a, _, arrays, _ = data
    x = arrays[fmt]
    # a reduction to one tile folds in groups of steps, a task each
    monkeypatch.setattr(oocarr.engine.run, "FOLD_GROUP_BYTES", 64 * 1024)
    with oocarr.memory_budget(BUDGET):
        local = [oocarr.to_numpy(oocarr.sum(x, axis=0)), np.asarray(oocarr.max(x))]
        with (
            oocarr.executor(client),
            oocarr.io_stats() as stats,
            distributed.get_task_stream(client) as ran,
        ):
            remote = [oocarr.to_numpy(oocarr.sum(x, axis=0)), np.asarray(oocarr.max(x))]
    assert len(ran.data) >= 8 and len({t["worker"] for t in ran.data}) == 2
    assert [_bits(r) for r in remote] == [_bits(v) for v in local]
    np.testing.assert_allclose(remote[0], a.sum(axis=0), rtol=1e-5, atol=1e-4)
    assert remote[1] == a.max()
    assert stats.total.bytes_read >= a.nbytes  # what the workers read is counted here


@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
def test_elementwise_outputs_on_the_cluster_give_the_local_bits(client, data, fmt):
    a, _, arrays, _ = data
    x = arrays[fmt]
    with oocarr.memory_budget(BUDGET):
        local = oocarr.to_numpy(oocarr.exp(x * 0.5) + 1.0)
        with oocarr.executor(client):
            remote = oocarr.to_numpy(oocarr.exp(x * 0.5) + 1.0)
    assert _bits(remote) == _bits(local)
    np.testing.assert_allclose(remote, np.exp(a * 0.5) + 1.0, rtol=1e-6)


def test_jitted_stream_sum_gradient_on_the_cluster_gives_the_local_bits(client, data):
    a, y, arrays, ys = data

    def loss(w, x, y):
        return (x @ w - y) ** 2

    mse = oocarr.stream_sum(loss, mean=True)
    step = jax.jit(jax.value_and_grad(mse))
    w = jnp.linspace(-1.0, 1.0, 40, dtype=jnp.float32)
    with oocarr.memory_budget(BUDGET):
        local = step(w, arrays["hdf5"], ys)
        with oocarr.executor(client), distributed.get_task_stream(client) as ran:
            remote = step(w, arrays["hdf5"], ys)
    assert len(ran.data) > 1
    assert _bits(remote[0]) == _bits(local[0])
    assert _bits(remote[1]) == _bits(local[1])
    value, grad = jax.value_and_grad(lambda w: jnp.mean((a @ w - y) ** 2))(w)
    np.testing.assert_allclose(remote[0], value, rtol=1e-5)
    np.testing.assert_allclose(remote[1], grad, rtol=1e-4, atol=1e-5)


def test_a_worker_killed_mid_op_leaves_the_local_bits(client, data):
    a, _, arrays, _ = data
    x = arrays["zarr"]
    with oocarr.memory_budget(BUDGET):
        plan = OOCAlgorithm(Sum(x.shape, axis=1)).tasks([Operand(x.store)])
        local = plan.combine((t.run() for t in plan), np.dtype("f4"))
    assert len(plan.tasks) > 4
    victim = min(client.run(os.getpid).values())
    results = []
    executor = oocarr.engine.executor.DaskExecutor(client)
    for i, tile in enumerate(executor.map(plan.tasks)):
        results.append(tile)
        if i == 0:
            os.kill(victim, signal.SIGKILL)  # its queued tasks go to the other worker
    remote = plan.combine(iter(results), np.dtype("f4"))
    assert _bits(remote) == _bits(local)
    client.wait_for_workers(2, timeout=60)


def test_a_budget_the_workers_cannot_hold_is_refused_before_any_task(data, tmp_path):
    _, _, arrays, _ = data
    with (
        distributed.LocalCluster(
            n_workers=1,
            threads_per_worker=2,
            processes=False,  # in-process transport: no port opened
            dashboard_address="127.0.0.1:0",
            memory_limit="1MiB",  # 512 KiB a task: less than one tile of this array
        ) as cluster,
        distributed.Client(cluster) as small,
    ):
        with oocarr.memory_budget("256MiB"), oocarr.executor(small):
            with pytest.raises(BudgetTooSmallError, match="memory_limit / nthreads"):
                oocarr.sum(arrays["zarr"], axis=0)
        assert small.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)) == 0


def test_errors_in_tasks_keep_their_class(client, tmp_path):
    url = str(tmp_path / "bad.zarr")
    x = oocarr.save(np.ones((512, 8), "f4"), url, chunks=(128, 8), compression="zstd")
    chunk = next(
        os.path.join(d, f) for d, _, fs in os.walk(url) for f in fs if not f.endswith(".json")
    )
    with open(chunk, "wb") as f:
        f.write(b"not zstd at all")
    with oocarr.memory_budget(BUDGET):
        with pytest.raises(oocarr.errors.OocarrError) as here:
            oocarr.sum(x)
        with oocarr.executor(client), pytest.raises(oocarr.errors.OocarrError) as there:
            oocarr.sum(x)
    assert type(there.value) is type(here.value)
    assert chunk.split(os.sep)[-1] in str(there.value) or url in str(there.value)


def test_arrays_the_workers_cannot_reach_are_refused(client):
    x = oocarr.save(np.ones((64, 4), "f4"), "memory://oocarr-dist/x.zarr")
    with oocarr.executor(client), pytest.raises(InvalidArgumentError, match="memory://"):
        oocarr.sum(x)


def test_set_executor_and_bad_arguments(client):
    oocarr.set_executor(client)
    try:
        assert oocarr.current_executor().client is client
        with oocarr.executor(None):
            assert oocarr.current_executor() is None
    finally:
        oocarr.set_executor(None)
    assert oocarr.current_executor() is None
    with pytest.raises(InvalidArgumentError, match="distributed.Client"):
        with oocarr.executor(42):
            pass


def test_a_closed_client_is_a_clear_error(data):
    _, _, arrays, _ = data
    with distributed.LocalCluster(
        n_workers=1, processes=False, dashboard_address="127.0.0.1:0"
    ) as cluster:
        gone = distributed.Client(cluster)
    gone.close()
    with oocarr.memory_budget(BUDGET), oocarr.executor(gone):
        with pytest.raises(ExecutorError):
            oocarr.sum(arrays["zarr"], axis=0)


@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
def test_matmul_and_op_gradients_on_the_cluster_give_the_local_bits(client, data, fmt):
    a, _, arrays, _ = data
    x = arrays[fmt]
    b = np.random.default_rng(3).standard_normal((40, 24)).astype("f4")
    w = jnp.linspace(0.5, 1.5, 40, dtype=jnp.float32)

    def loss(w):
        return oocarr.sum(oocarr.square(x * w))

    with oocarr.memory_budget(BUDGET):
        local = [oocarr.to_numpy(oocarr.matmul(x, b)), jax.jit(jax.grad(loss))(w)]
        with oocarr.executor(client), distributed.get_task_stream(client) as ran:
            remote = [oocarr.to_numpy(oocarr.matmul(x, b)), jax.jit(jax.grad(loss))(w)]
    assert [_bits(r) for r in remote] == [_bits(v) for v in local]
    assert len(ran.data) > 4  # matmul's tiles, the forward's and the backward's ran there
    np.testing.assert_allclose(remote[0], a @ b, rtol=1e-4, atol=1e-4)
    expected = jax.grad(lambda w: jnp.sum(jnp.square(jnp.asarray(a) * w)))(w)
    np.testing.assert_allclose(remote[1], expected, rtol=1e-4)


def _chunk_bytes(root) -> dict[str, bytes]:
    """Every stored file of a Zarr array but its metadata, by relative path."""
    root = pathlib.Path(root)
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith((".z", "zarr.json"))
    }


@pytest.mark.parametrize(
    "layout",
    [
        {"compression": "zstd"},
        {"zarr_format": 2, "compression": "blosc"},
        {"compression": "zstd", "shards": (512, 40)},
    ],
    ids=["v3-zstd", "v2-blosc", "sharded"],
)
def test_save_on_the_cluster_writes_the_local_chunks(client, data, tmp_path, layout):
    a, _, arrays, _ = data
    with oocarr.memory_budget(BUDGET):
        oocarr.save(arrays["hdf5"], str(tmp_path / "local.zarr"), chunks=(128, 40), **layout)
        with (
            oocarr.executor(client),
            oocarr.io_stats() as stats,
            distributed.get_task_stream(client) as ran,
        ):
            oocarr.save(arrays["hdf5"], str(tmp_path / "remote.zarr"), chunks=(128, 40), **layout)
    assert len({t["worker"] for t in ran.data}) == 2  # written by both workers
    assert _chunk_bytes(tmp_path / "remote.zarr") == _chunk_bytes(tmp_path / "local.zarr")
    zarr = pytest.importorskip("zarr")
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "remote.zarr"), mode="r")[:], a)
    assert stats.total.bytes_written == a.nbytes and stats.total.bytes_read == a.nbytes
    assert 0 < stats.total.peak_task_bytes < 2 * 2**30  # measured on the workers


def test_save_to_npy_on_the_cluster_is_written_by_the_workers(client, data, tmp_path):
    """A .npy destination takes parallel writers (each task pwrites its rows in place): no
    message, the workers write, and the file is what NumPy reads back."""
    a, _, arrays, _ = data
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with oocarr.memory_budget(BUDGET), oocarr.executor(client):
            with distributed.get_task_stream(client) as ran:
                oocarr.save(arrays["zarr"], str(tmp_path / "out.npy"))
    assert len({t["worker"] for t in ran.data}) == 2
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), a)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.npy"]  # no temporary file left


def test_save_to_one_writer_storage_runs_here_and_says_so(client, data, tmp_path):
    a, _, arrays, _ = data
    with oocarr.executor(client), pytest.warns(UserWarning, match="takes one writer"):
        out = oocarr.save(arrays["zarr"], str(tmp_path / "out.h5") + "#/x")
    np.testing.assert_array_equal(oocarr.to_numpy(out), a)


def test_a_worker_killed_mid_copy_leaves_the_local_chunks(client, data, tmp_path):
    _, _, arrays, _ = data
    with oocarr.memory_budget(BUDGET):
        oocarr.save(
            arrays["npy"], str(tmp_path / "local.zarr"), chunks=(64, 40), compression="zstd"
        )
    victim = min(client.run(os.getpid).values())
    killed = []

    def advance(nbytes):
        if not killed:
            killed.append(nbytes)
            os.kill(victim, signal.SIGKILL)  # its queued and running tasks go to the other

    cls, locator = oocarr.resolve(str(tmp_path / "remote.zarr"))
    src = arrays["npy"].store
    with oocarr.memory_budget(BUDGET), oocarr.executor(client):
        with cls.create(locator, src.shape, src.dtype, chunks=(64, 40), compression="zstd") as dst:
            oocarr.api.storage.copy_tiles(src, dst, advance=advance)
    assert killed
    assert _chunk_bytes(tmp_path / "remote.zarr") == _chunk_bytes(tmp_path / "local.zarr")
    client.wait_for_workers(2, timeout=60)


def test_cli_convert_and_stats_with_executor(client, data, tmp_path):
    from click.testing import CliRunner

    from oocarr.cli.main import main

    a, _, arrays, _ = data
    src = arrays["zarr"].url
    address = client.scheduler.address
    runner = CliRunner()
    local = runner.invoke(main, ["-m", "1MB", "convert", src, str(tmp_path / "l.zarr")])
    remote = runner.invoke(
        main, ["-m", "1MB", "-x", address, "convert", src, str(tmp_path / "r.zarr")]
    )
    assert local.exit_code == 0 and remote.exit_code == 0, remote.output
    assert _chunk_bytes(tmp_path / "r.zarr") == _chunk_bytes(tmp_path / "l.zarr")
    stats = [
        runner.invoke(main, [*opts, "inspect", "--stats", "--json", src])
        for opts in (["-m", "1MB"], ["-m", "1MB", "--executor", address])
    ]
    assert stats[0].exit_code == 0 and stats[1].exit_code == 0, stats[1].output
    assert json.loads(stats[1].output)["stats"] == json.loads(stats[0].output)["stats"]
    np.testing.assert_allclose(json.loads(stats[1].output)["stats"]["mean"], a.mean(), rtol=1e-5)
    note = runner.invoke(main, ["-x", address, "convert", src, str(tmp_path / "o.h5") + "#/x"])
    assert note.exit_code == 0 and "note:" in note.output and "one writer" in note.output


def test_cli_executor_that_is_not_there_is_a_clear_error(tmp_path, monkeypatch, data):
    from click.testing import CliRunner

    from oocarr.cli.main import main

    monkeypatch.setenv("DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT", "1s")
    import dask

    dask.config.refresh()
    try:
        result = CliRunner().invoke(
            main, ["-x", "tcp://127.0.0.1:9", "inspect", "--stats", data[2]["npy"].url]
        )
    finally:
        monkeypatch.undo()
        dask.config.refresh()
    assert result.exit_code == 2, result.output
    assert "cannot connect to a Dask scheduler at 'tcp://127.0.0.1:9'" in result.output


def test_zarr_in_s3_on_the_cluster_gives_the_local_bits(client, data, s3_server):
    """Sources and destinations in an object store (moto's S3 on 127.0.0.1): every task
    reopens them by locator, storage options included."""
    import s3fs

    a, _, arrays, _ = data
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3_server)
    base = "s3://oocarr-test/dist"
    opts = {"storage_options": s3_server}
    with oocarr.memory_budget(BUDGET):
        x = oocarr.save(
            arrays["npy"], f"{base}/x.zarr", chunks=(256, 40), compression="zstd", **opts
        )
        local = [oocarr.to_numpy(oocarr.sum(x, axis=0)), oocarr.to_numpy(x * 2.0)]
        oocarr.save(x, f"{base}/local.zarr", chunks=(128, 40), shards=(512, 40), **opts)
        with oocarr.executor(client), distributed.get_task_stream(client) as ran:
            remote = [oocarr.to_numpy(oocarr.sum(x, axis=0)), oocarr.to_numpy(x * 2.0)]
            oocarr.save(x, f"{base}/remote.zarr", chunks=(128, 40), shards=(512, 40), **opts)
    assert len(ran.data) > 4
    assert [_bits(r) for r in remote] == [_bits(v) for v in local]
    np.testing.assert_array_equal(remote[1], a * 2.0)
    keys = sorted(k.rsplit("/c/", 1)[1] for k in fs.find(f"{base}/local.zarr") if "/c/" in k)
    assert keys and keys == sorted(
        k.rsplit("/c/", 1)[1] for k in fs.find(f"{base}/remote.zarr") if "/c/" in k
    )
    for key in keys:
        assert fs.cat(f"{base}/remote.zarr/c/{key}") == fs.cat(f"{base}/local.zarr/c/{key}")
    got = oocarr.to_numpy(oocarr.open(f"{base}/remote.zarr", **opts))
    np.testing.assert_array_equal(got, a)


def test_a_copy_whose_client_is_lost_leaves_nothing_at_the_destination(client, data, tmp_path):
    _, _, arrays, _ = data
    address = client.scheduler.address
    other = distributed.Client(address, set_as_default=False)
    closed = []

    def advance(nbytes):
        if not closed:
            closed.append(nbytes)
            other.close()  # the client of this copy goes away mid-copy

    target = tmp_path / "lost.zarr"
    cls, locator = oocarr.resolve(str(target))
    src = arrays["npy"].store
    with oocarr.memory_budget(BUDGET), oocarr.executor(other):
        with pytest.raises(ExecutorError, match="nothing was committed"):
            with cls.create(locator, src.shape, src.dtype, chunks=(64, 40)) as dst:
                oocarr.api.storage.copy_tiles(src, dst, advance=advance)
    assert closed
    with pytest.raises(oocarr.errors.NotFoundError):
        oocarr.open(str(target))


def test_hdf5_in_s3_streams_to_the_workers(client, data, s3_server):
    """An HDF5 file in an object store opens read-only on every worker (by locator, with its
    storage options): op and stream_sum results have the local bits; copies from it to Zarr
    are written by the workers."""
    import s3fs

    a, y, arrays, ys = data
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3_server)
    fs.put(arrays["hdf5"].store.locator.url, "oocarr-test/dist/a.h5")
    x = oocarr.open("s3://oocarr-test/dist/a.h5#/a", storage_options=s3_server)
    mse = oocarr.stream_sum(lambda w, x, y: (x @ w - y) ** 2, mean=True)
    step = jax.jit(jax.value_and_grad(mse))
    w = jnp.linspace(-1.0, 1.0, 40, dtype=jnp.float32)
    with oocarr.memory_budget(4 * BUDGET):  # remote reads hold a fetched batch
        local = [oocarr.to_numpy(oocarr.sum(x, axis=0)), *step(w, x, ys)]
        with oocarr.executor(client), distributed.get_task_stream(client) as ran:
            remote = [oocarr.to_numpy(oocarr.sum(x, axis=0)), *step(w, x, ys)]
    assert len({t["worker"] for t in ran.data}) == 2
    assert [_bits(r) for r in remote] == [_bits(v) for v in local]
    np.testing.assert_allclose(remote[0], a.sum(axis=0), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("scratch", ["fsspec", "memmap"])
def test_op_outputs_in_scratch_are_written_by_the_workers(client, data, tmp_path, scratch):
    """With Zarr scratch (here on local disk; on a real cluster s3://) or .npy scratch, an op's
    output tiles (whole chunks of Zarr) are written by the tasks themselves, not sent back."""
    a, _, arrays, _ = data
    x = arrays["zarr"]
    written_here = []
    original = oocarr.engine.run.OOCAlgorithm._write_tile

    def spy(self, out, region, tile):
        written_here.append(region)
        return original(self, out, region, tile)

    with oocarr.memory_budget(BUDGET):
        local = oocarr.to_numpy(oocarr.exp(x * 0.5))
    try:
        oocarr.set_scratch_dir(str(tmp_path / "scratch"), driver=scratch)
        with pytest.MonkeyPatch.context() as mp, oocarr.memory_budget(BUDGET):
            mp.setattr(oocarr.engine.run.OOCAlgorithm, "_write_tile", spy)
            with oocarr.executor(client), distributed.get_task_stream(client) as ran:
                y = oocarr.exp(x * 0.5)
                assert y.store.locator.driver == scratch
                remote = oocarr.to_numpy(y)
            del y
    finally:
        oocarr.set_scratch_dir(None)
    assert len({t["worker"] for t in ran.data}) == 2
    assert written_here == []
    assert _bits(remote) == _bits(local)
    np.testing.assert_allclose(remote, np.exp(a * 0.5), rtol=1e-6)


def test_a_long_call_shows_its_tasks_progress(client, data, capsys, monkeypatch):
    from oocarr.engine import executor as executor_module

    monkeypatch.setattr(executor_module, "PROGRESS_AFTER", 0.0)
    _, _, arrays, _ = data
    with oocarr.memory_budget(BUDGET):
        with oocarr.executor(client, progress=True):
            oocarr.to_numpy(arrays["zarr"] * 2.0)
        shown = capsys.readouterr().err
        with oocarr.executor(client, progress=False):
            oocarr.to_numpy(arrays["zarr"] * 2.0)
    assert "tasks (" in shown and shown.endswith("\n")
    done, total = shown.strip().rsplit("\r", 1)[-1].split(": ", 1)[1].split(" tasks")[0].split("/")
    assert done == total and int(total) > 1
    assert "test_dask_executor.py:" in shown  # the call site is named
    assert capsys.readouterr().err == ""


def test_softmax_row_panels_run_on_the_workers(client, data, tmp_path):
    """A custom op with independent parts (softmax's row panels) runs a task per panel, each
    writing its panel into the pending output itself, in Zarr scratch and in .npy scratch."""
    a, _, arrays, _ = data
    x = arrays["zarr"]
    with oocarr.memory_budget(BUDGET):
        local = oocarr.to_numpy(oocarr.softmax(x, axis=1))
        try:
            oocarr.set_scratch_dir(str(tmp_path / "scratch"), driver="fsspec")
            with oocarr.executor(client), distributed.get_task_stream(client) as ran:
                y = oocarr.softmax(x, axis=1)
                remote = oocarr.to_numpy(y)
                del y
        finally:
            oocarr.set_scratch_dir(None)
        with oocarr.executor(client), distributed.get_task_stream(client) as npy:
            y = oocarr.softmax(x, axis=1)
            assert y.store.name == "memmap"
            assert _bits(oocarr.to_numpy(y)) == _bits(local)
    for stream in (ran, npy):
        assert len(stream.data) > 2 and len({t["worker"] for t in stream.data}) == 2
    assert _bits(remote) == _bits(local)
    e = np.exp(a - a.max(axis=1, keepdims=True))
    np.testing.assert_allclose(remote, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_softmax_gradient_panels_run_on_the_workers(client, data, monkeypatch):
    """The backward pass of a custom op with independent parts runs a task per row panel;
    the gradient is the local run's bits and jax.numpy's within rounding."""
    a, _, arrays, _ = data
    on_cluster = []
    spread = OOCAlgorithm._custom_backward_on

    def spy(self, *args):
        on_cluster.append(spread(self, *args))
        return on_cluster[-1]

    monkeypatch.setattr(OOCAlgorithm, "_custom_backward_on", spy)
    x = arrays["zarr"]
    c = np.random.default_rng(5).standard_normal(a.shape).astype("f4")

    def loss(x):
        return oocarr.sum(oocarr.softmax(x, axis=1) * c)

    with oocarr.memory_budget(BUDGET):
        local = jax.grad(loss)(x)
        local = oocarr.to_numpy(local)
        with oocarr.executor(client), distributed.get_task_stream(client) as ran:
            remote = oocarr.to_numpy(jax.grad(loss)(x))
    assert on_cluster == [True]
    assert len(ran.data) > 4 and len({t["worker"] for t in ran.data}) == 2
    assert _bits(remote) == _bits(local)
    expected = jax.grad(lambda x: jnp.sum(jax.nn.softmax(x, axis=1) * c))(jnp.asarray(a))
    np.testing.assert_allclose(remote, expected, rtol=1e-4, atol=1e-6)


def test_a_step_fused_here_runs_its_tiles_on_the_cluster(client, data):
    """A jitted step traced without a cluster holds fused arrays (their in-memory operands in
    this process); called again under the cluster, its tasks carry those values with them."""
    a, _, arrays, _ = data
    x = arrays["zarr"]
    w = jnp.linspace(0.5, 1.5, 40, dtype=jnp.float32)
    step = jax.jit(jax.value_and_grad(lambda w: oocarr.sum(oocarr.tanh(x * w) * 2.0)))
    with oocarr.memory_budget(BUDGET):
        local = step(w)
        with oocarr.executor(client), distributed.get_task_stream(client) as ran:
            remote = step(w)
    assert len(ran.data) > 1
    expected = jax.value_and_grad(lambda w: jnp.sum(jnp.tanh(jnp.asarray(a) * w) * 2.0))(w)
    for got, here, want in zip(remote, local, expected):
        np.testing.assert_allclose(np.asarray(got), np.asarray(here), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-4)
