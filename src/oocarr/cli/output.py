"""Formatting shared by the commands: sizes, shapes, dtypes, aligned fields and JSON."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

import click
import numpy as np

from oocarr.engine.progress import human_bytes

__all__ = ["human_bytes", "fmt_shape", "fmt_dtype", "plain", "echo_json", "echo_fields"]


def fmt_shape(shape: Sequence[int] | None) -> str:
    """``'(1000, 32)'``, ``'()'`` for a scalar, ``'-'`` for none.

    Examples
    --------
    >>> fmt_shape([1000, 32]), fmt_shape([7]), fmt_shape(None)
    ('(1000, 32)', '(7,)', '-')
    """
    if shape is None:
        return "-"
    return str(tuple(int(s) for s in shape))


def fmt_dtype(dtype: Any) -> str:
    """A dtype's name, with ``big-endian`` when it is stored so; text passes through.

    Examples
    --------
    >>> fmt_dtype(np.dtype(">f8")), fmt_dtype(np.dtype("<i2")), fmt_dtype("string")
    ('float64 big-endian', 'int16', 'string')
    """
    if dtype is None:
        return "-"
    if not isinstance(dtype, np.dtype):
        return str(dtype)
    big = dtype.itemsize > 1 and dtype.byteorder == ">"
    return dtype.name + (" big-endian" if big else "")


def plain(value: Any) -> Any:
    """JSON-able data with non-finite floats as the strings ``"NaN"``, ``"Infinity"``,
    ``"-Infinity"`` (strict JSON has no such numbers), tuples as lists, dtypes as names.

    Examples
    --------
    >>> plain({"a": (1, float("nan")), "b": np.dtype("f4")})
    {'a': [1, 'NaN'], 'b': 'float32'}
    """
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.dtype):
        return value.name
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


_FLAT_LIST = re.compile(r"\[\s+([^\[\]{}\"]*?)\s+\]")


def echo_json(value: Any) -> None:
    """Print ``value`` as indented, strict JSON on standard output, lists of numbers on one line.

    Examples
    --------
    >>> echo_json({"shape": [2, 3], "attrs": {"names": ["a", "b"]}})
    {
      "shape": [2, 3],
      "attrs": {
        "names": [
          "a",
          "b"
        ]
      }
    }
    """
    text = json.dumps(plain(value), indent=2, allow_nan=False)
    flat = _FLAT_LIST.sub(lambda m: f"[{', '.join(v.strip() for v in m[1].split(','))}]", text)
    click.echo(flat)


def echo_fields(rows: Iterable[tuple[str, Any]]) -> None:
    """Print ``name  value`` lines with the values aligned; a multi-line value is indented.

    Examples
    --------
    >>> echo_fields([("shape", "(2, 3)"), ("attrs", "a: 1\\nb: 2")])
    shape  (2, 3)
    attrs  a: 1
           b: 2
    """
    rows = list(rows)
    width = max((len(name) for name, _ in rows), default=0)
    for name, value in rows:
        lines = str(value).splitlines() or [""]
        click.echo(f"{name:<{width}}  {lines[0]}".rstrip())
        for line in lines[1:]:
            click.echo(f"{'':<{width}}  {line}".rstrip())
