"""The fft extension over stored arrays (``oocarr.fft``): values against ``numpy.fft`` and
dtypes against ``jax.numpy.fft`` for every function and norm, float32 and complex64, 1-d to
3-d, ``n``/``s`` padding and cropping, negative axes; gradients against ``jax.grad`` of
``jax.numpy.fft``; under ``jax.jit``; the budget refusal of a line that does not fit; and
streaming many tiles of whole lines under a budget smaller than the array."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import oocarr
import oocarr.fft as offt
from oocarr import errors
from oocarr.api import fft as api_fft

#: Two or three lines of up to 20 complex64 elements a tile: every case spans many tiles.
BUDGET = 3000
#: The one-axis transforms, with whether they take complex input (``rfft`` and ``ihfft``
#: take real input only).
ONE_AXIS = {
    "fft": True,
    "ifft": True,
    "rfft": False,
    "irfft": True,
    "hfft": True,
    "ihfft": False,
}
NORMS = ("backward", "ortho", "forward")


def data(shape, dtype="float32", seed=0):
    """Standard normal values of ``shape`` (complex ones for a complex ``dtype``)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


def close(got, want, like, tol=2e-4):
    """``got`` (a stored result) has ``like``'s shape and dtype (``jax.numpy.fft``'s result)
    and ``want``'s values (``numpy.fft``'s, in float64), within ``tol`` of their scale."""
    assert isinstance(got, oocarr.DiskArray), type(got)
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == tuple(like.shape), (got.shape, like.shape)
    assert got.dtype == like.dtype, (got.dtype, like.dtype)
    scale = max(1.0, float(np.abs(want).max(initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


def check_one(kind, a, path, **kw):
    """``oocarr.fft.<kind>`` of ``a`` stored at ``path`` against NumPy and JAX."""
    x = oocarr.save(a, str(path))
    got = getattr(offt, kind)(x, **kw)
    close(got, getattr(np.fft, kind)(a, **kw), getattr(jnp.fft, kind)(a, **kw))


# -- one axis ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(ONE_AXIS))
def test_one_axis_transforms_every_norm_and_dtype_match_numpy(kind, tmp_path):
    cases = [((17,), -1), ((6, 10), 0), ((4, 5, 6), 1), ((4, 5, 6), -3)]
    dtypes = ["float32", "complex64"] if ONE_AXIS[kind] else ["float32"]
    with oocarr.memory_budget(BUDGET):
        for i, (shape, axis) in enumerate(cases):
            for j, dtype in enumerate(dtypes):
                a = data(shape, dtype, seed=i)
                # every norm on the first two shapes, one each on the others
                for norm in NORMS if i < 2 else NORMS[i + j : i + j + 1]:
                    check_one(kind, a, tmp_path / f"{i}-{dtype}-{norm}.npy", axis=axis, norm=norm)


@pytest.mark.parametrize("kind", list(ONE_AXIS))
def test_one_axis_n_pads_and_crops(kind, tmp_path):
    a = data((5, 9, 4), seed=3)
    with oocarr.memory_budget(BUDGET):
        # shorter and longer than the axis (of 9 and of 4), odd and even
        for n, axis in ((1, 1), (4, 1), (16, 1), (17, 1), (3, -1), (9, -1)):
            check_one(kind, a, tmp_path / f"{n}-{axis}.npy", n=n, axis=axis, norm="ortho")


def test_irfft_default_length_and_round_trips(tmp_path):
    a = data((3, 8, 5), seed=4)
    with oocarr.memory_budget(BUDGET):
        x = oocarr.save(a, str(tmp_path / "a.npy"))
        spectrum = offt.rfft(x, axis=1)
        assert spectrum.shape == (3, 5, 5)
        back = offt.irfft(spectrum, axis=1)  # 2 * (5 - 1) = 8
        close(back, a, a)
        odd = offt.irfft(offt.rfft(x, n=7, axis=1), n=7, axis=1)
        close(odd, np.fft.irfft(np.fft.rfft(a, n=7, axis=1), n=7, axis=1), a[:, :7])
        # hfft inverts ihfft the same way
        close(offt.hfft(offt.ihfft(x, axis=-1), n=5, axis=-1), a, a)


def test_in_memory_inputs_give_stored_results():
    a = data((4, 6), "complex64", seed=5)
    with oocarr.memory_budget(BUDGET):
        for given in (a, jnp.asarray(a)):
            close(offt.fft(given, axis=0), np.fft.fft(a, axis=0), jnp.fft.fft(a, axis=0))


# -- several axes -----------------------------------------------------------------


NDCASES = [
    # shape, s, axes
    ((6, 8), None, None),
    ((4, 5, 6), None, None),
    ((4, 5, 6), None, (0, 2)),
    ((4, 5, 6), None, (-1, -3)),
    ((4, 5, 6), (3, 8), (2, 0)),
    ((4, 5, 6), (-1, 7), (1, 2)),
    ((4, 5, 6), (6, 4), None),  # the last two axes
]


@pytest.mark.parametrize("kind", ["fftn", "ifftn", "rfftn", "irfftn"])
def test_n_dimensional_transforms_match_numpy(kind, tmp_path):
    complex_input = kind in ("fftn", "ifftn", "irfftn")
    with oocarr.memory_budget(BUDGET):
        for i, (shape, s, axes) in enumerate(NDCASES):
            dtype = "complex64" if complex_input and i % 2 else "float32"
            a = data(shape, dtype, seed=10 + i)
            norm = NORMS[i % 3]
            x = oocarr.save(a, str(tmp_path / f"{i}.npy"))
            got = getattr(offt, kind)(x, s=s, axes=axes, norm=norm)
            np_s = None
            if s is not None:  # NumPy has no -1: the axis's own length
                on = axes if axes is not None else range(len(shape) - len(s), len(shape))
                np_s = [shape[ax] if n == -1 else n for n, ax in zip(s, on)]
                axes = list(on)
            want = getattr(np.fft, kind)(a, s=np_s, axes=axes, norm=norm)
            like = getattr(jnp.fft, kind)(a, s=np_s, axes=axes, norm=norm)
            close(got, want, like)


def test_fftn_over_no_axes_is_a_complex_copy_and_fft2_is_fftn():
    a = data((3, 4), seed=20)
    x = oocarr.from_numpy(a)
    close(offt.fftn(x, axes=()), a.astype(np.complex64), jnp.fft.fftn(a, axes=()))
    close(offt.fftn(x, axes=(-2, -1)), np.fft.fft2(a), jnp.fft.fft2(a))


# -- frequencies and shifts --------------------------------------------------------


def test_fftfreq_and_rfftfreq_match_numpy():
    for n in (1, 2, 7, 8, 33):
        for d in (1.0, 0.25, 3):
            got = offt.fftfreq(n, d=d)
            assert isinstance(got, oocarr.DiskArray)
            close(got, np.fft.fftfreq(n, d=d), jnp.fft.fftfreq(n, d=d), 1e-6)
            close(offt.rfftfreq(n, d=d), np.fft.rfftfreq(n, d=d), jnp.fft.rfftfreq(n, d=d), 1e-6)
    assert offt.fftfreq(4, device="cpu").dtype == np.float32
    assert offt.fftfreq(4, dtype="float64").dtype == np.float64
    with pytest.raises(errors.InvalidArgumentError, match="positive"):
        offt.fftfreq(0)
    with pytest.raises(errors.InvalidArgumentError, match="device"):
        offt.rfftfreq(4, device="gpu")


def test_fftfreq_under_jit_is_a_constant():
    got = jax.jit(lambda: offt.fftfreq(6, d=0.5) * 2.0)()
    np.testing.assert_allclose(np.asarray(got), np.fft.fftfreq(6, d=0.5) * 2.0, rtol=1e-6)


def test_fftshift_and_ifftshift_match_numpy(tmp_path):
    a = data((5, 6, 3), seed=21)
    x = oocarr.save(a, str(tmp_path / "a.npy"))
    with oocarr.memory_budget(BUDGET):
        for axes in (None, 0, (1,), (0, 2), (-1, -2), ()):
            for name in ("fftshift", "ifftshift"):
                got = np.asarray(getattr(offt, name)(x, axes=axes))
                np.testing.assert_array_equal(got, getattr(np.fft, name)(a, axes=axes))
        back = offt.ifftshift(offt.fftshift(x, axes=(0, 1)), axes=(0, 1))
        np.testing.assert_array_equal(np.asarray(back), a)
        freqs = np.asarray(offt.fftshift(offt.fftfreq(9)))
        np.testing.assert_allclose(freqs, np.fft.fftshift(np.fft.fftfreq(9)), rtol=1e-6)


# -- gradients and jit -------------------------------------------------------------


def linear_loss(transform, c1, c2, xp):
    """A real loss of every real and imaginary part of ``transform(v)``, with ``xp``'s
    ``sum``, ``real`` and ``imag`` (its gradient is the transform's transpose applied to
    ``c1 + i c2``: every entry checked)."""

    def loss(v):
        y = transform(v)
        if np.dtype(y.dtype).kind != "c":
            return xp.sum(y * c1)
        return xp.sum(xp.real(y) * c1) + xp.sum(xp.imag(y) * c2)

    return loss


@pytest.mark.parametrize("kind", list(ONE_AXIS))
def test_gradients_match_jax_grad_of_jax_numpy(kind, tmp_path):
    rng = np.random.default_rng(30)
    dtypes = ["float32", "complex64"] if ONE_AXIS[kind] else ["float32"]
    # the axis's own length, and n padding (longer) or cropping (shorter), each norm
    cases = [((6, 9), 1, None, "backward"), ((5, 4, 7), -3, 8, "ortho"), ((10,), 0, 6, "forward")]
    cases = cases[:2] if kind in ("fft", "rfft", "irfft") else cases[1:]
    with oocarr.memory_budget(BUDGET):
        for i, (shape, axis, n, norm) in enumerate(cases):
            dtype = dtypes[i % len(dtypes)]
            a = data(shape, dtype, seed=i)
            kw = {"n": n, "axis": axis, "norm": norm}
            out = getattr(jnp.fft, kind)(a, **kw).shape
            c1, c2 = (rng.standard_normal(out).astype(np.float32) for _ in range(2))
            x = oocarr.save(a, str(tmp_path / f"{i}.npy"))
            ours = functools.partial(getattr(offt, kind), **kw)
            theirs = functools.partial(getattr(jnp.fft, kind), **kw)
            got = jax.grad(linear_loss(ours, c1, c2, oocarr))(x)
            want = jax.grad(linear_loss(theirs, c1, c2, jnp))(jnp.asarray(a))
            assert isinstance(got, oocarr.DiskArray)
            close(got, want, want)


def test_gradient_of_a_nonlinear_loss_through_fftn_and_irfftn(tmp_path):
    a = data((4, 6, 5), seed=31)
    x = oocarr.save(a, str(tmp_path / "a.npy"))

    def power(v):
        y = offt.fftn(v, axes=(0, 2), norm="ortho")
        return oocarr.sum(oocarr.abs(y) ** 2 * oocarr.abs(y))

    def power_jnp(v):
        y = jnp.fft.fftn(v, axes=(0, 2), norm="ortho")
        return jnp.sum(jnp.abs(y) ** 2 * jnp.abs(y))

    def round_trip(v):
        return oocarr.sum(offt.irfftn(offt.rfftn(v, s=(8, 4), axes=(1, 2))) ** 2)

    def round_trip_jnp(v):
        return jnp.sum(jnp.fft.irfftn(jnp.fft.rfftn(v, s=(8, 4), axes=(1, 2))) ** 2)

    with oocarr.memory_budget(BUDGET):
        want = jax.grad(power_jnp)(jnp.asarray(a))
        close(jax.grad(power)(x), want, want, 1e-3)
        want = jax.grad(round_trip_jnp)(jnp.asarray(a))
        close(jax.grad(round_trip)(x), want, want, 1e-3)


def test_complex_input_gradient_of_power_matches_jax(tmp_path):
    a = data((5, 8), "complex64", seed=32)
    x = oocarr.save(a, str(tmp_path / "a.npy"))
    with oocarr.memory_budget(BUDGET):
        got = jax.grad(lambda v: oocarr.sum(oocarr.abs(offt.ifft(v, axis=0, n=6)) ** 2))(x)
    want = jax.grad(lambda v: jnp.sum(jnp.abs(jnp.fft.ifft(v, axis=0, n=6)) ** 2))(jnp.asarray(a))
    close(got, want, want)


def test_under_jit_values_and_gradients(tmp_path):
    a = data((7, 12), seed=33)
    x = oocarr.save(a, str(tmp_path / "a.npy"))
    with oocarr.memory_budget(BUDGET):
        got = jax.jit(lambda v: offt.rfft(v * 2.0, axis=0, norm="ortho"))(x)
        close(got, np.fft.rfft(a * 2.0, axis=0, norm="ortho"), jnp.fft.rfft(a, axis=0))
        shifted = jax.jit(lambda v: offt.fftshift(offt.fft(v), axes=1))(x)
        close(shifted, np.fft.fftshift(np.fft.fft(a), axes=1), jnp.fft.fft(a))

        def loss(v):
            return oocarr.sum(offt.irfft(offt.rfft(v, n=16), n=16) ** 2)

        def loss_jnp(v):
            return jnp.sum(jnp.fft.irfft(jnp.fft.rfft(v, n=16), n=16) ** 2)

        got = jax.jit(jax.grad(loss))(x)
        want = jax.grad(loss_jnp)(jnp.asarray(a))
        close(got, want, want)


# -- the budget: streaming, and lines that do not fit ------------------------------


def test_streams_many_tiles_under_a_budget_smaller_than_the_array(tmp_path):
    a = data((64, 256), seed=40)  # 64 KiB in, 128 KiB out
    x = oocarr.save(a, str(tmp_path / "a.npy"))
    budget = 32 * 1024
    with oocarr.memory_budget(budget), oocarr.io_stats() as stats:
        got = offt.fft(x, axis=1)
    close(got, np.fft.fft(a, axis=1), jnp.fft.fft(a, axis=1))
    (site,) = stats.by_site  # one call
    assert site.startswith("fft @ "), site
    counts = stats.by_site[site]
    assert counts.tiles >= 8, counts
    assert counts.bytes_read == a.nbytes  # each line read once
    assert counts.bytes_written == a.size * 8
    with oocarr.memory_budget(budget), oocarr.io_stats() as stats:
        grad = jax.grad(lambda v: oocarr.sum(oocarr.real(offt.rfft(v, axis=0)) ** 2))(x)
    want = jax.grad(lambda v: jnp.sum(jnp.real(jnp.fft.rfft(v, axis=0)) ** 2))(jnp.asarray(a))
    close(grad, want, want)
    rfft = [c.tiles for site, c in stats.by_site.items() if site.startswith("rfft @ ")]
    assert len(rfft) == 2 and min(rfft) >= 8, stats  # forward and backward, many tiles each


def test_a_line_longer_than_the_budget_is_refused_naming_its_length(tmp_path):
    x = oocarr.save(np.zeros((4, 1000), "f4"), str(tmp_path / "a.npy"))
    with oocarr.memory_budget(4096):
        with pytest.raises(errors.BudgetTooSmallError, match="lines of 1000 elements along axis 1"):
            offt.fft(x)
        with pytest.raises(errors.BudgetTooSmallError, match="lines of 1000 elements"):
            offt.rfftn(x)
        with pytest.raises(errors.BudgetTooSmallError, match="lines of 2048 elements"):
            offt.fft(x, n=2048, axis=0)  # padded lines count at their padded length
        close(offt.fft(x, axis=0), np.zeros((4, 1000)), jnp.fft.fft(np.zeros((4, 1000), "f4")))


def test_invalid_arguments_are_refused(tmp_path):
    x = oocarr.save(data((4, 6)), str(tmp_path / "a.npy"))
    z = oocarr.from_numpy(data((4, 6), "complex64"))
    bad = [
        (lambda: offt.rfft(z), "real-valued"),
        (lambda: offt.ihfft(z), "real-valued"),
        (lambda: offt.fft(x, norm="none"), "norm"),
        (lambda: offt.fft(x, n=0), "positive"),
        (lambda: offt.fft(x, axis=2), "out of range"),
        (lambda: offt.irfft(oocarr.from_numpy(np.ones((3, 1), "c8"))), "give n >= 1"),
        (lambda: offt.fftn(x, axes=(0, -2)), "repeat"),
        (lambda: offt.fftn(x, s=(4, 4), axes=(0,)), "one per axis"),
        (lambda: offt.fftn(x, axes=(3,)), "out of range"),
        (lambda: offt.fftn(x, axes=1), "sequence of ints"),
        (lambda: offt.rfftn(x, axes=()), "at least one axis"),
        (lambda: offt.fft(oocarr.from_numpy(np.float32(1.0))), "at least 1 axis"),
        (lambda: offt.fftshift(x, axes=(5,)), "out of range"),
    ]
    for call, message in bad:
        with pytest.raises(errors.InvalidArgumentError, match=message):
            call()


def test_empty_axes_and_the_face_exports_the_api():
    x = oocarr.from_numpy(np.zeros((0, 5), "f4"))
    close(offt.fft(x), np.zeros((0, 5)), jnp.fft.fft(np.zeros((0, 5), "f4")))
    close(offt.rfft(x, axis=0, n=4), np.zeros((3, 5)), jnp.fft.rfft(np.zeros((0, 5)), 4, 0))
    assert set(offt.__all__) == set(api_fft.__all__)
    assert all(getattr(offt, name) is getattr(api_fft, name) for name in offt.__all__)
