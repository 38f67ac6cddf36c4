"""``cholesky`` of the Array API's ``linalg`` extension (2023.12), out of core for stored matrices.

A stored matrix is factored by a left-looking blocked Cholesky over column blocks
(:class:`oocarr.ops.cholesky.Cholesky`) under the memory budget, into a stored factor; its
gradient (``jax.numpy.linalg.cholesky``'s) is a blocked symmetric solve, out of core too.  A
stack of matrices is factored one matrix at a time; an in-memory array goes to
``jax.numpy.linalg.cholesky``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax.numpy as jnp
import numpy as np

from oocarr.api import creation, manipulation
from oocarr.api.linalg_fit import in_memory, is_complex
from oocarr.errors import InvalidArgumentError, UnsupportedDtypeError
from oocarr.jaxlayer.disk_array import is_disk
from oocarr.jaxlayer.make_op import make_op
from oocarr.ops.cholesky import Cholesky

if TYPE_CHECKING:
    from oocarr.jaxlayer.disk_array import AnyArray

__all__ = ["cholesky"]

_cholesky = make_op(Cholesky)


def _check(shape: tuple[int, ...], dtype: np.dtype) -> None:
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise InvalidArgumentError(
            f"cholesky needs square matrices in the last two axes, got shape {shape}; pass an "
            "(..., n, n) array of symmetric positive-definite matrices"
        )
    if dtype.kind != "f":
        raise UnsupportedDtypeError(
            f"cholesky of a {dtype} array is not defined; cast it to a real floating dtype "
            "first (x.astype('float32') or 'float64')"
        )


def cholesky(x: AnyArray, /, *, upper: bool = False) -> AnyArray:
    """The Cholesky factor of a symmetric positive-definite matrix (of each of a stack).

    ``x = L Lᴴ`` with ``L`` lower triangular, or ``U = Lᴴ`` upper triangular when ``upper``.
    A stored ``x`` larger than the memory budget is factored out of core (left-looking, over
    column blocks sized from the budget, see :mod:`oocarr.ops.cholesky`), reading only its
    lower triangle (as NumPy and LAPACK do; ``jax.numpy`` symmetrises its input, the same for
    a symmetric ``x``), into a stored factor whose other triangle is zero.  The gradient is
    ``jax.numpy.linalg.cholesky``'s (symmetric), streamed too.

    A matrix that is not positive definite gives NaNs in the factor's triangle, as
    ``jax.numpy.linalg.cholesky`` does (NumPy raises ``LinAlgError``).

    Parameters
    ----------
    x : DiskArray or array-like
        Shape ``(..., n, n)``, floating dtype (float16 and bfloat16 computed and returned
        in float32; float64 stays float64, computed in float64 where JAX's x64 mode is on). A
        complex stored matrix is read whole into memory, where it must fit the budget, and
        handed to ``jax.numpy.linalg.cholesky``.
    upper : bool
        Return ``U = Lᵀ`` instead of ``L``.

    Returns
    -------
    DiskArray or jax.Array
        The factor, stored (in scratch) when ``x`` is, else ``jax.numpy``'s result.

    Raises
    ------
    InvalidArgumentError
        When ``x`` has fewer than 2 axes or its matrices are not square.
    UnsupportedDtypeError
        When ``x`` is an integer or boolean stored array.
    BudgetTooSmallError
        When the budget cannot hold the op's smallest blocks (or a complex matrix whole).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.array([[4.0, 2.0], [2.0, 5.0]], "f4"))
    >>> np.asarray(cholesky(x)).tolist()
    [[2.0, 0.0], [1.0, 2.0]]
    >>> np.asarray(cholesky(x, upper=True)).tolist()
    [[2.0, 1.0], [0.0, 2.0]]
    """
    if not is_disk(x) or is_complex(x):  # the blocked factorization is built for real matrices
        return jnp.linalg.cholesky(in_memory("cholesky", x), upper=upper)
    shape = tuple(x.shape)
    _check(shape, np.dtype(x.dtype))
    if len(shape) == 2:
        return _cholesky(x, upper=bool(upper))
    batch, n = shape[:-2], shape[-1]
    dtype = np.dtype(jnp.promote_types(x.dtype, jnp.float32))
    if 0 in batch:
        return creation.zeros(shape, dtype=dtype)
    factors = [_cholesky(x[index], upper=bool(upper)) for index in np.ndindex(*batch)]
    stacked = manipulation.stack(factors)
    return stacked if len(batch) == 1 else manipulation.reshape(stacked, (*batch, n, n))
