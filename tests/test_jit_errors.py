"""Errors raised inside oocarr's callbacks reach the caller as themselves: eagerly, under
``jax.grad``, and under jit through ``oocarr.jit`` / ``oocarr.typed_errors``, with nothing of
JAX patched; a plain ``jax.jit`` call raises JAX's own
``JaxRuntimeError``, which names the error and gives it back through ``oocarr.original_error``.
Ctrl-C during a jitted call is a ``KeyboardInterrupt`` (issue 14, item 9; issue 35).

The oracle is the exception type the eager call raises and the text on stderr of a fresh
interpreter, never oocarr's own output.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import oocarr
from oocarr.engine.op import CustomOp
from oocarr.errors import BudgetTooSmallError, InvalidStoreError, OocarrError, ReadOnlyError
from oocarr.jaxlayer import jit_errors

ROOT = pathlib.Path(__file__).resolve().parent.parent


class Boom(Exception):
    """An exception of the user's own, raised by an op's block code."""


class Raising(CustomOp):
    """An op whose loops raise the user's exception, forward or backward."""

    name = "raising"

    def compute_output_shape(self) -> tuple[int, ...]:
        return self.in_shapes[0]

    def forward(self, run) -> None:
        if self.params.get("where") == "forward":
            raise Boom("boom in forward")
        for region, (block,) in run.stream(run.regions(self.output_shape, (2, 2)), run.inputs):
            run.write(region, block)

    def backward(self, run) -> None:
        raise Boom("boom in backward")


raising = oocarr.make_op(Raising)


def _sum2(x):
    return oocarr.sum(x * 2.0)


MODES = {
    "eager": lambda f: f,
    "jit": oocarr.jit,
    "grad": jax.grad,
    "jit-grad": lambda f: oocarr.jit(jax.grad(f)),
    "typed-jit": lambda f: oocarr.typed_errors(jax.jit(f)),
}


def _corrupt_zarr(tmp_path, compression) -> str:
    url = str(tmp_path / "a.zarr")
    oocarr.save(np.ones(2000, "f4"), url, chunks=(1000,), compression=compression)
    (tmp_path / "a.zarr" / "c" / "1").write_bytes(b"garbage" * 10)
    return url


@pytest.mark.parametrize("mode", MODES)
def test_budget_too_small_is_itself(mode):
    x = oocarr.from_numpy(np.ones((50, 20), "f4"))
    fn = MODES[mode](_sum2)
    with oocarr.memory_budget(8), pytest.raises(BudgetTooSmallError) as info:
        fn(x)
    assert isinstance(info.value, OocarrError)
    assert "memory budget of 8 bytes" in str(info.value)


@pytest.mark.parametrize("compression", [None, "zstd"])
@pytest.mark.parametrize("mode", MODES)
def test_corrupt_chunk_is_invalid_store_error_naming_the_url(tmp_path, mode, compression):
    url = _corrupt_zarr(tmp_path, compression)
    with pytest.raises(InvalidStoreError) as info:
        MODES[mode](_sum2)(oocarr.open(url))
    assert info.value.url is not None and url in info.value.url
    assert url in str(info.value)


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_user_exception_from_an_op_comes_back_as_itself(mode):
    x = oocarr.from_numpy(np.ones((4, 4), "f4"))
    fn = MODES[mode](lambda x: oocarr.sum(raising(x, where="forward")))
    with pytest.raises(Boom, match="boom in forward"):
        fn(x)


@pytest.mark.parametrize("mode", ["grad", "jit-grad"])
def test_user_exception_from_a_backward_pass_comes_back_as_itself(mode):
    x = oocarr.from_numpy(np.ones((4, 4), "f4"))
    fn = MODES[mode](lambda x: oocarr.sum(raising(x)))
    with pytest.raises(Boom, match="boom in backward"):
        fn(x)


def test_stream_sum_value_and_grad_under_jit_raises_budget_error():
    rows = oocarr.from_numpy(np.ones((64, 8), "f4"))
    sse = oocarr.stream_sum(lambda w, rows: jnp.sum((rows @ w) ** 2))
    step = oocarr.jit(jax.value_and_grad(sse))
    with oocarr.memory_budget(8), pytest.raises(BudgetTooSmallError):
        step(jnp.zeros(8), rows)


def test_read_only_update_under_jit_is_read_only_error(tmp_path):
    url = str(tmp_path / "w.npy")
    oocarr.save(np.zeros(3, "f4"), url)
    w = oocarr.open(url)
    with pytest.raises(ReadOnlyError) as info:
        oocarr.jit(lambda w: w.update_(w + 1.0))(w)
    assert url in str(info.value)
    np.testing.assert_array_equal(np.load(url), np.zeros(3, "f4"))


def test_the_runtime_error_is_not_kept_in_the_chain():
    x = oocarr.from_numpy(np.ones((50, 20), "f4"))
    with oocarr.memory_budget(8), pytest.raises(BudgetTooSmallError) as info:
        oocarr.jit(_sum2)(x)
    chain = [info.value.__cause__, info.value.__context__]
    assert not any(isinstance(e, jax.errors.JaxRuntimeError) for e in chain)


def test_other_callbacks_errors_are_left_to_jax():
    def bad(x):
        raise ValueError("not oocarr's")

    f = oocarr.jit(lambda x: jax.experimental.io_callback(bad, jax.ShapeDtypeStruct((), "f4"), x))
    with pytest.raises(jax.errors.JaxRuntimeError, match="not oocarr's"):
        f(jnp.float32(1))


@pytest.mark.parametrize("mode", ["jit", "jit-grad"])
def test_a_plain_jax_jit_raises_jax_s_error_naming_the_oocarr_error(mode):
    x = oocarr.from_numpy(np.ones((50, 20), "f4"))
    fn = jax.jit(_sum2) if mode == "jit" else jax.jit(jax.grad(_sum2))
    with oocarr.memory_budget(8), pytest.raises(jax.errors.JaxRuntimeError) as info:
        fn(x)
    assert "BudgetTooSmallError: the memory budget of 8 bytes" in str(info.value)
    original = oocarr.original_error(info.value)
    assert isinstance(original, BudgetTooSmallError)
    assert "memory budget of 8 bytes" in str(original)
    assert oocarr.original_error(info.value) is None  # given back once


def test_typed_errors_wraps_any_function_and_keeps_the_jitted_one_s_attributes():
    x = oocarr.from_numpy(np.ones((50, 20), "f4"))
    jitted = jax.jit(_sum2)
    step = oocarr.typed_errors(jitted)
    assert step.lower(x).compile() is not None  # a jitted function's own methods

    @oocarr.typed_errors
    def outer(x):
        return jitted(x) + 1.0

    with oocarr.memory_budget(8), pytest.raises(BudgetTooSmallError):
        outer(x)  # traced here, under the small budget
    # (a jitted function keeps the budget it was traced under: a new one for the default)
    assert float(oocarr.typed_errors(jax.jit(lambda x: oocarr.sum(x)))(x)) == 1000.0


def test_errors_kept_for_a_runtime_error_nobody_translates_are_bounded():
    for i in range(3 * jit_errors._MAX_PENDING):
        jit_errors._keep(ValueError(i))
    assert len(jit_errors._pending) <= jit_errors._MAX_PENDING
    jit_errors._pending.clear()


def _python(code: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ if env is None else env,
        cwd=str(ROOT),
    )


STDERR = """
    import jax, numpy as np, oocarr
    from oocarr.errors import OocarrError
    x = oocarr.from_numpy(np.ones((50, 20), "f4"))
    for f, arg in [(oocarr.jit(oocarr.sum), oocarr.open({url!r})),
                   (oocarr.jit(jax.grad(lambda x: oocarr.sum(x * 2.0))), x)]:
        try:
            with oocarr.memory_budget(8 if arg is x else "64MB"):
                f(arg)
        except OocarrError as err:
            print(type(err).__name__)
"""


def test_stderr_holds_only_jax_s_own_log_of_the_failed_callback(tmp_path):
    url = _corrupt_zarr(tmp_path, "zstd")
    proc = _python(STDERR.format(url=url))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert out.split() == ["InvalidStoreError", "BudgetTooSmallError"]
    # JAX logs a failed callback's traceback, as it does for any callback; nothing else
    records = [line for line in err.splitlines() if not line.startswith((" ", "Traceback"))]
    assert all(
        line == "jax.io_callback failed" or "DeferredError" in line or "Error" in line
        for line in records
    ), err
    assert err.count("jax.io_callback failed") == 2


SLOW = """
    import signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in an interactive shell
    import jax, numpy as np, oocarr
    from oocarr.engine.op import CustomOp

    class Slow(CustomOp):
        name = "slow"
        def compute_output_shape(self):
            return self.in_shapes[0]
        def forward(self, run):
            print("started", flush=True)
            time.sleep(60)

    x = oocarr.from_numpy(np.ones((4, 4), "f4"))
    try:
        oocarr.jit(lambda x: oocarr.sum(oocarr.make_op(Slow)(x)))(x)
    except KeyboardInterrupt:
        print("KeyboardInterrupt", flush=True)
        sys.exit(3)
    except BaseException as err:
        print(type(err).__name__, flush=True)
"""


LONG_SUM = """
    import signal, sys, tempfile, os
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import jax, numpy as np, oocarr
    x = oocarr.save(np.ones((40000, 1000), "f4"), os.path.join({tmp!r}, "x.npy"))
    f = oocarr.jit(lambda x: oocarr.sum(x * 2.0))
    with oocarr.memory_budget("64KB"):  # thousands of tiles: many seconds
        print("started", flush=True)
        try:
            f(x)
        except KeyboardInterrupt:
            print("KeyboardInterrupt", flush=True)
            sys.exit(3)
        except BaseException as err:
            print(type(err).__name__, flush=True)
"""


# a child that hangs prints where each of its threads is and exits, instead of outliving the test
WATCHDOG = "import faulthandler; faulthandler.dump_traceback_later(40, exit=True)\n"


@pytest.mark.parametrize("script", ["slow-op", "long-sum"])
def test_ctrl_c_during_a_jitted_call_is_keyboard_interrupt(tmp_path, script):
    code = SLOW if script == "slow-op" else LONG_SUM.format(tmp=str(tmp_path))
    # its own scratch directory: a killed child's files are not the session's leftovers
    env = {**os.environ, "OOCARR_SCRATCH_DIR": str(tmp_path / "scratch")}
    proc = _python(WATCHDOG + textwrap.dedent(code), env=env)
    try:
        assert proc.stdout.readline().strip() == "started"
        time.sleep(0.2 if script == "slow-op" else 1.5)
        start = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert time.monotonic() - start < 20  # not after the 60 s sleep
    assert out.strip() == "KeyboardInterrupt", (out, err)
    assert proc.returncode == 3
    assert "CpuCallback" not in err, err


def test_jax_is_left_alone():
    code = """
        import jax, numpy as np, oocarr
        from jax._src.interpreters import pxla
        execute = pxla.ExecuteReplicated.__call__
        x = oocarr.from_numpy(np.ones((50, 20), "f4"))
        for f in (jax.jit(oocarr.sum), oocarr.jit(oocarr.sum)):
            try:
                with oocarr.memory_budget(8):
                    f(x)
            except Exception as err:
                print(type(err).__name__, pxla.ExecuteReplicated.__call__ is execute)
    """
    proc = _python(code)
    out, err = proc.communicate(timeout=120)
    lines = out.strip().splitlines()
    assert lines == ["JaxRuntimeError True", "BudgetTooSmallError True"], err
