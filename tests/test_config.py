"""The memory budget settings."""

from __future__ import annotations

import pytest

import oocarr
from oocarr import errors
from oocarr.config import memory_budget_bytes, parse_size


@pytest.mark.parametrize(
    "text, value",
    [
        ("64MB", 64 * 10**6),
        ("64mb", 64 * 10**6),
        ("1GiB", 2**30),
        ("512k", 512_000),
        ("1.5G", 1_500_000_000),
        (4096, 4096),
        ("100", 100),
    ],
)
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("bad", ["lots", "-5MB", 0, "1XB", True])
def test_parse_size_refuses_nonsense(bad):
    with pytest.raises(errors.InvalidArgumentError):
        parse_size(bad)


def test_budget_default_setting_and_context():
    default = memory_budget_bytes()
    assert 64 * 10**6 <= default <= 2 * 10**9
    oocarr.set_memory_budget("100MB")
    try:
        assert oocarr.config()["memory_budget"] == 100 * 10**6
        with oocarr.memory_budget("10MB"):
            assert memory_budget_bytes() == 10 * 10**6
            assert "block" in oocarr.config()["memory_budget_source"]
        assert memory_budget_bytes() == 100 * 10**6
    finally:
        oocarr.set_memory_budget(None)
    assert memory_budget_bytes() == default
