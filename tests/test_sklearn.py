"""scikit-learn's Array API dispatch on stored arrays: estimators fitted on a ``DiskArray``
(``sklearn.set_config(array_api_dispatch=True)``) give what scikit-learn gives on NumPy.

SciPy reads ``SCIPY_ARRAY_API=1`` once, when its ``_lib._array_api`` is first imported, and
scikit-learn refuses dispatch without it.  In one test process another module may import SciPy
or scikit-learn first (tests/test_stream_sum.py does, and each pytest-xdist worker imports
modules in its own order), and setting the variable here would leak into every later test.  So
the estimators run on stored arrays in a child process started with the variable set: this
file run as a script (``python tests/test_sklearn.py DIR DTYPE...``) fits every case on the
matrices stored in each DTYPE, under a budget that cuts them into several tiles and row panels,
and writes the fitted attributes and outputs to DIR.  One child per JAX precision, both run at
once by a module-scoped fixture that the tests share (one run per xdist worker that runs them).
The oracle is scikit-learn on the NumPy matrices, fitted here in float64.

float64: without ``jax_enable_x64`` oocarr computes in 32 bits, as JAX does, and its namespace
says so (``__array_namespace_info__().dtypes()`` has no float64, as jax.numpy's has none), so
scikit-learn works in float32 on a stored float64 matrix, with no warning, and its results are
float32: checked at float32 tolerances.  With ``JAX_ENABLE_X64=1`` (the second child) the
results of a stored float64 matrix are float64, checked at float64 tolerances.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import traceback

import numpy as np
import pytest

import oocarr

# 1.8: the first scikit-learn whose StandardScaler dispatches (1.7's calls np.sum(x, out=None))
pytest.importorskip("sklearn", minversion="1.8")
pytest.importorskip("scipy", minversion="1.16")

#: Estimators the standard dispatch runs on stored arrays, by case name: (class name, keyword
#: arguments, the target it is fitted on: None for a transformer).
ESTIMATORS = {
    "pca_full": ("PCA", {"n_components": 4, "svd_solver": "full"}, None),
    "pca_covariance_eigh": ("PCA", {"n_components": 4, "svd_solver": "covariance_eigh"}, None),
    "standard_scaler": ("StandardScaler", {}, None),
    "minmax_scaler": ("MinMaxScaler", {}, None),
    "ridge_svd": ("Ridge", {"alpha": 2.0, "solver": "svd"}, "y"),
    "ridge_svd_two_targets": ("Ridge", {"alpha": 2.0, "solver": "svd"}, "y2"),
}
#: Fitted attributes compared, by estimator class.
ATTRIBUTES = {
    "PCA": (
        "components_",
        "explained_variance_",
        "explained_variance_ratio_",
        "singular_values_",
        "mean_",
        "noise_variance_",
    ),
    "StandardScaler": ("mean_", "var_", "scale_"),
    "MinMaxScaler": ("data_min_", "data_max_", "data_range_", "scale_", "min_"),
    "Ridge": ("coef_", "intercept_"),
}
#: A budget that cuts the 500 x 8 matrix into several row panels and tiles.
BUDGET = "32KB"


def matrices() -> dict[str, np.ndarray]:
    """A 500 x 8 matrix with distinct singular values and a non-zero mean, and targets."""
    rng = np.random.default_rng(20261212)
    rotation, _ = np.linalg.qr(rng.standard_normal((8, 8)))
    scales = np.array([9.0, 7.0, 5.5, 4.0, 3.0, 2.0, 1.2, 0.6])
    x = rng.standard_normal((500, 8)) * scales @ rotation + np.linspace(-3.0, 4.0, 8)
    coef = rng.standard_normal((8, 2))
    y2 = x @ coef + np.array([1.5, -0.5]) + 0.1 * rng.standard_normal((500, 2))
    return {"x": x, "y": y2[:, 0].copy(), "y2": y2}


# ----------------------------------------------------------------------------
# Fits: in the child on stored arrays under the dispatch, here on NumPy for the oracle
# ----------------------------------------------------------------------------
def fit(case: str, arrays: dict) -> dict:
    """``case``'s estimator fitted on ``arrays`` (``matrices()``'s, stored or not): its fitted
    attributes and what it outputs on the matrix (``transform`` and ``inverse_transform``, or
    ``predict``)."""
    from sklearn.decomposition import PCA
    from sklearn.linear_model import Ridge
    from sklearn.preprocessing import MinMaxScaler, StandardScaler

    classes = {"PCA": PCA, "StandardScaler": StandardScaler, "MinMaxScaler": MinMaxScaler}
    classes["Ridge"] = Ridge
    cls, kwargs, target = ESTIMATORS[case]
    estimator, x = classes[cls](**kwargs), arrays["x"]
    if target is None:
        outputs = {"transform": estimator.fit(x).transform(x)}
        outputs["inverse_transform"] = estimator.inverse_transform(outputs["transform"])
    else:
        outputs = {"predict": estimator.fit(x, arrays[target]).predict(x)}
    return {name: getattr(estimator, name) for name in ATTRIBUTES[cls]} | outputs


def _fit_on_stored(folder: pathlib.Path, dtypes: list[str]) -> None:
    """The child: every case fitted on the matrices stored in each of ``dtypes``, under the
    dispatch; writes each case's values (``CASE-DTYPE.npz``, with the outputs' types) or its
    traceback (``errors.json``) to ``folder``."""
    import sklearn

    errors = {}
    for dtype in dtypes:
        stored = {name: oocarr.from_numpy(a.astype(dtype)) for name, a in matrices().items()}
        for case in ESTIMATORS:
            try:
                with sklearn.config_context(array_api_dispatch=True), oocarr.memory_budget(BUDGET):
                    found = fit(case, stored)
                kinds = [f"{name}:{type(value).__name__}" for name, value in found.items()]
                values = {name: np.asarray(value) for name, value in found.items()}
                np.savez(folder / f"{case}-{dtype}.npz", types=np.array(kinds), **values)
            except Exception:
                errors[f"{case}-{dtype}"] = traceback.format_exc()
    (folder / "errors.json").write_text(json.dumps(errors))


# ----------------------------------------------------------------------------
# The tests
# ----------------------------------------------------------------------------
#: The children, by JAX precision: their environment and the dtypes of the stored matrices.
PRECISIONS = {
    "x64-off": ({"JAX_ENABLE_X64": "0"}, ("float32", "float64")),
    "x64-on": ({"JAX_ENABLE_X64": "1"}, ("float64",)),
}


@pytest.fixture(scope="module")
def dispatched(tmp_path_factory) -> dict[str, pathlib.Path]:
    """The children's output folders, by JAX precision; both children run at once."""
    folders, children = {}, []
    for precision, (env, dtypes) in PRECISIONS.items():
        folder = folders[precision] = tmp_path_factory.mktemp(f"sklearn-{precision}")
        (folder / "scratch").mkdir()
        child_env = {**os.environ, **env, "SCIPY_ARRAY_API": "1"}
        child_env["OOCARR_SCRATCH_DIR"] = str(folder / "scratch")
        command = [sys.executable, __file__, str(folder), *dtypes]
        children.append(subprocess.Popen(command, env=child_env, stderr=subprocess.PIPE))
    for child in children:
        _, stderr = child.communicate(timeout=240)
        assert child.returncode == 0, stderr.decode()[-4000:]
    for folder in folders.values():
        assert not any((folder / "scratch").iterdir())  # the child's results were deleted
    return folders


def _result(folders, precision: str, case: str, dtype: str) -> dict[str, np.ndarray]:
    folder = folders[precision]
    errors = json.loads((folder / "errors.json").read_text())
    key = f"{case}-{dtype}"
    if key in errors:
        raise AssertionError(f"{key} failed on stored arrays ({precision}):\n{errors[key]}")
    with np.load(folder / f"{key}.npz") as found:
        return dict(found)


def _oracle(case: str, dtype: str = "float64") -> dict[str, np.ndarray]:
    """scikit-learn's fit on the NumPy matrices in ``dtype``, no dispatch."""
    arrays = {name: a.astype(dtype) for name, a in matrices().items()}
    return {name: np.asarray(value) for name, value in fit(case, arrays).items()}


def _up_to_signs(got: dict, want: dict) -> dict:
    """``got``'s PCA components and transform with each component's sign made ``want``'s
    (a component is defined up to its sign; float32 round-off may flip scikit-learn's choice)."""
    signs = np.sign(np.sum(got["components_"] * want["components_"], axis=1))
    signs = signs.astype(got["components_"].dtype)
    return got | {
        "components_": got["components_"] * signs[:, None],
        "transform": got["transform"] * signs,
    }


@pytest.mark.parametrize(
    ("precision", "dtype"),
    [(p, dtype) for p, (_, dtypes) in PRECISIONS.items() for dtype in dtypes],
)
@pytest.mark.parametrize("case", ESTIMATORS)
def test_estimator_on_stored_arrays_matches_numpy(dispatched, case, precision, dtype):
    got = _result(dispatched, precision, case, dtype)
    want = _oracle(case)  # the values: scikit-learn's in float64
    # the dtypes: scikit-learn's on NumPy in the stored dtype, 32-bit where JAX's are
    dtypes = {name: value.dtype for name, value in _oracle(case, dtype).items()}
    if precision == "x64-off":
        dtypes = {name: np.float32 if d == np.float64 else d for name, d in dtypes.items()}
    if case.startswith("pca"):
        got = _up_to_signs(got, want)
    # the fitted attributes and outputs are stored arrays, the namespace's
    kinds = got.pop("types")
    assert all(kind.endswith(":DiskArray") for kind in kinds), kinds
    assert set(got) == set(want)
    for name, value in want.items():
        assert got[name].dtype == dtypes[name], name
        scale = float(np.max(np.abs(value))) or 1.0
        rtol = 1e-9 if got[name].dtype == np.float64 else 2e-4
        np.testing.assert_allclose(got[name], value, rtol=rtol, atol=rtol * scale, err_msg=name)


if __name__ == "__main__":
    _fit_on_stored(pathlib.Path(sys.argv[1]), sys.argv[2:])
