"""The Array API's ``linalg`` extension (2023.12) for stored arrays: ``oocarr.linalg``, also the
``linalg`` attribute of the Array API namespace (``x.__array_namespace__().linalg``).

Matrices are the last two axes of an array; leading axes are a batch (a stack of matrices), as
the standard says.  How each function runs, and what it needs in memory:

- **streams** (a composition of oocarr's streamed, differentiable ops; any size, under the
  memory budget, under ``jax.jit`` and ``jax.grad``): ``matmul``, ``tensordot``,
  ``matrix_transpose``, ``vecdot``, ``outer``, ``cross``, ``diagonal``, ``trace``,
  ``vector_norm`` (every ``ord``), ``matrix_norm`` (``ord`` ``"fro"``, 1, -1, ``inf``,
  ``-inf``; 2, -2 and ``"nuc"`` reduce the singular values, as ``svdvals`` gives them);
- **TSQR-based** (a tall-and-skinny matrix streams a panel of rows at a time, its n × n R
  factor in memory; differentiable): ``qr`` (Q by direct TSQR, orthonormal to ε),
  ``svd``, ``svdvals`` (stacks too, one matrix at a time), ``lstsq`` (NumPy's signature);
- **out-of-core blocked** (square matrices larger than the budget; differentiable, their
  gradients out of core too): ``cholesky`` (left-looking over column blocks), ``solve``,
  ``inv``, ``det``, ``slogdet`` (LU with partial pivoting over column panels);
- **must fit in memory** (one matrix at a time, refused with ``BudgetTooSmallError`` naming
  its size when it does not fit the budget): ``eigh``, ``eigvalsh``, ``pinv``,
  ``matrix_rank``, ``matrix_power``.

docs/linalg.md is the user's page.

Examples
--------
>>> import numpy as np, oocarr.linalg
>>> x = oocarr.from_numpy(np.array([[3.0, 0.0], [4.0, 1.0]], "f4"))
>>> float(oocarr.linalg.vector_norm(x[:, 0])), float(oocarr.linalg.trace(x))
(5.0, 4.0)
"""

from oocarr.api.linalg import (
    cross,
    diagonal,
    matmul,
    matrix_norm,
    matrix_transpose,
    outer,
    tensordot,
    trace,
    vecdot,
    vector_norm,
)
from oocarr.api.linalg_cholesky import cholesky
from oocarr.api.linalg_fit import EighResult, eigh, eigvalsh, matrix_power, matrix_rank, pinv
from oocarr.api.linalg_lu import SlogdetResult, det, inv, slogdet, solve
from oocarr.api.linalg_tsqr import QRResult, SVDResult, lstsq, qr, svd, svdvals

__all__ = [
    "EighResult",
    "QRResult",
    "SVDResult",
    "SlogdetResult",
    "cholesky",
    "cross",
    "det",
    "diagonal",
    "eigh",
    "eigvalsh",
    "inv",
    "lstsq",
    "matmul",
    "matrix_norm",
    "matrix_power",
    "matrix_rank",
    "matrix_transpose",
    "outer",
    "pinv",
    "qr",
    "slogdet",
    "solve",
    "svd",
    "svdvals",
    "tensordot",
    "trace",
    "vecdot",
    "vector_norm",
]
