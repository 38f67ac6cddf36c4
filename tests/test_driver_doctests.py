"""Run the examples in the drivers' docstrings (the drivers live outside ``src``, where pytest's
``--doctest-modules`` does not look)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import oocarr_drivers

MODULES = sorted(m.name for m in pkgutil.iter_modules(oocarr_drivers.__path__))


@pytest.mark.parametrize("name", MODULES)
def test_driver_docstring_examples(name):
    module = importlib.import_module(f"oocarr_drivers.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
