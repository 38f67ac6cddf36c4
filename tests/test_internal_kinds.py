"""Only storage drivers are drivers: the engine's own array kinds (``view``, ``fused``) are
neither listed, guessed nor loaded, yet their locators still reopen through the registry,
in this process and in a fresh one that has not imported the engine."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from importlib import metadata

import numpy as np
import pytest

import oocarr
from oocarr import errors
from oocarr.engine.fused import FusedArray, Leaf, deposit, forget, fused_locator
from oocarr.ops.elementwise import BINARY
from oocarr.store import registry
from oocarr.store.registry import guess_driver
from oocarr.store.views import RegionView

INTERNAL = ("view", "fused")
#: What ``tests/conftest.py`` registers with ``register_driver``, at least.
TEST_DRIVERS = {"testmem"}

DATA = np.arange(12, dtype="float32").reshape(3, 4)


def storage_entry_points() -> set[str]:
    """The ``oocarr.drivers`` entry points' names, read without the registry."""
    return {ep.name for ep in metadata.entry_points(group=registry.ENTRY_POINT_GROUP)}


@pytest.fixture
def scoped_registrations(monkeypatch):
    """Drivers registered (or entry points added) inside a test are forgotten after it."""
    monkeypatch.setattr(registry, "_registered", dict(registry._registered))
    yield monkeypatch
    monkeypatch.undo()
    registry.refresh()


@pytest.fixture
def stored(tmp_path):
    return oocarr.save(DATA, str(tmp_path / "a.npy"))


@pytest.fixture
def view(stored):
    """The store of ``stored[1:3, 1:]``: a region of the stored array."""
    store = stored[1:3, 1:].store
    assert isinstance(store, RegionView) and store.locator.driver == "view"
    return store, DATA[1:3, 1:]


@pytest.fixture
def fused(stored):
    """A fused array ``stored * 2``, its ``2`` a constant written into the locator."""
    doubled = Leaf.stored(stored.locator, DATA.shape), Leaf.const(np.float32(2))
    locator = fused_locator(BINARY["multiply"], list(doubled), DATA.shape, "float32")
    store = FusedArray.open(locator, "r")
    assert store.locator.driver == "fused"
    yield store, DATA * 2
    store.close()


@pytest.fixture
def fused_with_slot(stored):
    """A fused array ``stored + w`` whose ``w`` lives in this process (a slot)."""
    weight = np.linspace(0, 1, DATA.size, dtype="float32").reshape(DATA.shape)
    deposit("internal-kinds-test", [weight])
    leaves = [Leaf.stored(stored.locator, DATA.shape)]
    leaves.append(Leaf.slot("internal-kinds-test", 0, DATA.shape, "float32"))
    store = FusedArray.open(fused_locator(BINARY["add"], leaves, DATA.shape, "float32"), "r")
    yield store, DATA + weight
    store.close()
    forget("internal-kinds-test")


# ----------------------------------------------------------------------------------------------
# Listed, guessed, loaded: storage drivers only
# ----------------------------------------------------------------------------------------------


def test_available_drivers_are_the_entry_points_storage_drivers():
    eps = storage_entry_points()
    assert {"memmap", "hdf5", "fsspec"} <= eps
    assert not eps & set(INTERNAL)
    # the storage drivers registered at run time (conftest's, other tests' and doctests')
    registered = set(registry._registered)
    assert registered >= TEST_DRIVERS and not registered & set(INTERNAL)
    assert registry.available_drivers() == sorted(eps | registered)
    assert oocarr.available_drivers() == registry.available_drivers()


def test_load_drivers_loads_storage_drivers_only():
    loaded = registry.load_drivers()
    assert set(loaded) == set(registry.available_drivers())
    assert not {cls.__name__ for cls in loaded.values()} & {"RegionView", "FusedArray"}


def test_internal_kinds_still_resolve_by_name():
    assert registry.get_driver("view") is RegionView
    assert registry.get_driver("fused") is FusedArray
    registry.refresh()  # forgotten and found again
    assert registry.get_driver("view") is RegionView
    assert registry.get_driver("fused") is FusedArray


def test_register_array_kind_is_not_exported_at_the_top():
    assert not hasattr(oocarr, "register_array_kind")
    assert "register_array_kind" not in oocarr.__all__


@pytest.mark.parametrize(
    "url",
    ["a.weird", "plain-dir", "s3://b/x", "", '{"leaves": [], "program": []}', "view", "fused"],
)
def test_guess_driver_never_answers_an_internal_kind(url, tmp_path, monkeypatch):
    # even if an internal kind claimed every URL, it would not be asked
    for cls in (RegionView, FusedArray):
        monkeypatch.setattr(cls, "can_open", classmethod(lambda cls, c, i, o: True))
        monkeypatch.setattr(cls, "can_list", classmethod(lambda cls, c, o: True))
    (tmp_path / "plain-dir").mkdir()
    url = str(tmp_path / url) if url == "plain-dir" else url
    for listing in (False, True):
        try:
            found = guess_driver(url, listing=listing)
        except errors.UnknownDriverError as err:
            known = str(err).split("known suffixes: " if not listing else "list containers: ")
            assert "view" not in known[1] and "fused" not in known[1]
        else:
            assert found.name in registry.available_drivers()
            assert found.name not in INTERNAL


def test_unknown_driver_lists_the_storage_drivers_only(tmp_path):
    with pytest.raises(errors.UnknownDriverError) as info:
        oocarr.open(str(tmp_path / "a.npy"), driver="no-such-driver")
    listed = str(info.value).split("installed drivers: ")[1].split(". ")[0].split(", ")
    assert listed == registry.available_drivers()
    assert not set(listed) & set(INTERNAL)


@pytest.mark.parametrize("name", INTERNAL)
def test_a_storage_driver_cannot_take_an_internal_kinds_name(name, scoped_registrations):
    with pytest.raises(errors.InvalidArgumentError, match=rf"'{name}' is reserved.*another name"):
        registry.register_driver(name, "oocarr_drivers.memmap:MemmapArray")
    assert name not in registry.available_drivers()
    assert registry.get_driver(name) in (RegionView, FusedArray)


def test_an_entry_point_with_an_internal_kinds_name_is_ignored(tmp_path, scoped_registrations):
    dist = tmp_path / "oocarr_clash-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: oocarr-clash\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[oocarr.drivers]\nview = mem_driver:MemoryArray\nclash-ok = mem_driver:MemoryArray\n"
    )
    scoped_registrations.syspath_prepend(str(tmp_path))
    registry.refresh()
    assert "view" in storage_entry_points()
    assert "clash-ok" in registry.available_drivers()
    assert "view" not in registry.available_drivers()
    assert registry.get_driver("view") is RegionView


@pytest.mark.parametrize("target", [RegionView, "oocarr.store.views", ""])
def test_an_array_kind_is_registered_by_string(target):
    with pytest.raises(errors.InvalidArgumentError, match="'package.module:Class'"):
        registry.register_array_kind("view", target)
    assert registry.get_driver("view") is RegionView


# ----------------------------------------------------------------------------------------------
# Views and fused arrays still travel by locator
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["view", "fused"])
def test_an_internal_kind_pickles_and_reopens_from_its_locator(kind, request):
    store, expected = request.getfixturevalue(kind)
    back = pickle.loads(pickle.dumps(store))
    assert type(back) is type(store) and back.locator == store.locator
    np.testing.assert_array_equal(back[:], expected)
    back.close()
    with registry.get_driver(store.locator.driver).open(store.locator, "r") as again:
        np.testing.assert_array_equal(again[:], expected)


FRESH_SCRIPT = textwrap.dedent(
    """
    import importlib.util, json, pickle, sys, types
    import numpy as np

    if sys.argv[2] == "bare":
        # a worker that has imported nothing of oocarr but the page-store layer: the
        # ``oocarr`` package itself is stood in for, so its __init__ imports no engine
        found = importlib.util.find_spec("oocarr")
        package = types.ModuleType("oocarr")
        package.__path__ = list(found.submodule_search_locations)
        sys.modules["oocarr"] = package
    from oocarr.store import registry

    before = "oocarr.engine.fused" in sys.modules
    with open(sys.argv[1], "rb") as f:
        store_bytes, locator, expected = pickle.load(f)
    store = pickle.loads(store_bytes)
    got = np.asarray(store[:])
    store.close()
    with registry.get_driver(locator.driver).open(locator, "r") as again:
        reopened = np.asarray(again[:])
    print(json.dumps({
        "fused_imported_before": before,
        "type": type(store).__name__,
        "equal": bool(np.array_equal(got, expected) and np.array_equal(reopened, expected)),
        "drivers": registry.available_drivers(),
    }))
    """
)


@pytest.mark.parametrize("process", ["bare", "oocarr"])
@pytest.mark.parametrize("kind", ["view", "fused", "fused_with_slot"])
def test_an_internal_kind_reopens_in_a_fresh_interpreter(kind, process, request, tmp_path):
    store, expected = request.getfixturevalue(kind)
    locator = store.portable_locator  # a slot's values written in, as for a task sent away
    portable = registry.get_driver(locator.driver).open(locator, "r")
    payload = tmp_path / "payload.pkl"
    payload.write_bytes(pickle.dumps((pickle.dumps(portable), locator, expected)))
    portable.close()
    out = subprocess.run(
        [sys.executable, "-c", FRESH_SCRIPT, str(payload), process],
        capture_output=True,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["equal"]
    assert result["type"] == type(store).__name__
    assert result["fused_imported_before"] == (process == "oocarr")
    assert not set(result["drivers"]) & set(INTERNAL)


@pytest.mark.parametrize("kind", INTERNAL)
def test_a_user_cannot_name_an_internal_kind_as_a_driver(kind, tmp_path):
    path = str(tmp_path / "a.npy")
    np.save(path, np.arange(4.0))
    storage = sorted(ep.name for ep in metadata.entry_points(group="oocarr.drivers"))
    for attempt in (
        lambda: oocarr.open(path, driver=kind),
        lambda: oocarr.save(np.arange(3.0), str(tmp_path / "b.npy"), driver=kind),
        lambda: oocarr.set_scratch_dir(str(tmp_path), driver=kind),
    ):
        with pytest.raises(errors.UnknownDriverError, match=f"unknown driver '{kind}'") as info:
            attempt()
        assert all(name in str(info.value) for name in storage)
        assert not any(f" {k}" in str(info.value).split("installed drivers:")[1] for k in INTERNAL)
    oocarr.set_scratch_dir(None)
