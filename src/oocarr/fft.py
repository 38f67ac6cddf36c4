"""The Array API's ``fft`` extension over stored arrays: ``oocarr.fft.fft(x)``.

The functions live in :mod:`oocarr.api.fft`; this is their face, as the standard names the
extension's namespace.  Transforms run along axes whose lines fit the memory budget, streamed
over the other axes, are differentiable and work under ``jax.jit``; an axis whose one line
does not fit the budget is refused with :class:`~oocarr.errors.BudgetTooSmallError`.
docs/fft.md is the user's page.

Examples
--------
>>> import numpy as np, oocarr
>>> import oocarr.fft
>>> x = oocarr.from_numpy(np.array([[0.0, 1.0, 0.0, -1.0]] * 3, "f4"))
>>> y = oocarr.fft.fft(x)
>>> y.shape, y.dtype, np.asarray(y)[0].imag.tolist()
((3, 4), dtype('complex64'), [0.0, -2.0, 0.0, 2.0])
>>> np.asarray(oocarr.fft.ifft(y)).real.tolist()[0]
[0.0, 1.0, 0.0, -1.0]
"""

from oocarr.api.fft import (
    fft,
    fftfreq,
    fftn,
    fftshift,
    hfft,
    ifft,
    ifftn,
    ifftshift,
    ihfft,
    irfft,
    irfftn,
    rfft,
    rfftfreq,
    rfftn,
)

__all__ = [
    "fft",
    "ifft",
    "fftn",
    "ifftn",
    "rfft",
    "irfft",
    "rfftn",
    "irfftn",
    "hfft",
    "ihfft",
    "fftfreq",
    "rfftfreq",
    "fftshift",
    "ifftshift",
]
