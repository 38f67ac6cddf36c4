"""The driver registry: drivers found by URL in one place, imported only when a URL needs them,
added at run time with ``register_driver`` or by a distribution's entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import h5py
import numpy as np
import pytest

import oocarr
from oocarr import errors
from oocarr.store import registry
from oocarr.store.registry import guess_driver

FRESH_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np
    import oocarr

    case, d = sys.argv[1], sys.argv[2]
    data = np.arange(12, dtype="float32").reshape(3, 4)
    if case == "npy":
        np.save(os.path.join(d, "a.npy"), data)
        got = oocarr.open(os.path.join(d, "a.npy")).store[0:1]
    elif case == "raw":
        data.tofile(os.path.join(d, "a.bin"))
        x = oocarr.open(os.path.join(d, "a.bin"), driver="memmap", shape=(3, 4), dtype="float32")
        got = x.store[0:1]
    else:
        np.save(os.path.join(d, "a.npy"), data)
        got = oocarr.to_numpy(oocarr.sum(oocarr.open(os.path.join(d, "a.npy"))))
    loaded = [m for m in ("h5py", "fsspec", "zarr") if m in sys.modules]
    print(json.dumps({"values": np.asarray(got).tolist(), "loaded": loaded}))
    """
)


@pytest.mark.parametrize("case", ["npy", "raw", "sum"])
def test_a_local_npy_or_raw_file_imports_no_other_driver(case, tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", FRESH_SCRIPT, case, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    data = np.arange(12, dtype="float32").reshape(3, 4)
    expected = data.sum() if case == "sum" else data[0:1]
    np.testing.assert_array_equal(np.asarray(result["values"]), expected)
    assert result["loaded"] == []


def test_an_hdf5_member_opens_by_suffix(tmp_path):
    path = tmp_path / "a.h5"
    data = np.arange(20, dtype=">i4").reshape(4, 5)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=(2, 5))
        f.create_dataset("g/y", data=data.T.astype("f8"))
    for inner in ("x", "g/y"):
        with h5py.File(path, "r") as f:
            expected = f[inner][()]
        x = oocarr.open(f"{path}#/{inner}")
        assert x.store.name == "hdf5"
        np.testing.assert_array_equal(oocarr.to_numpy(x), expected)
        x.store.close()


@pytest.fixture
def scoped_registrations(monkeypatch):
    """Drivers registered inside a test are forgotten after it."""
    monkeypatch.setattr(registry, "_registered", dict(registry._registered))
    yield
    monkeypatch.undo()
    registry.refresh()


def test_register_driver_by_class_and_by_string(tmp_path, scoped_registrations):
    from mem_driver import MemoryArray

    registry.register_driver("mem-by-class", MemoryArray)
    registry.register_driver("npy-by-string", "oocarr_drivers.memmap:MemmapArray")
    assert {"mem-by-class", "npy-by-string"} <= set(registry.available_drivers())
    assert registry.get_driver("mem-by-class") is MemoryArray

    data = np.linspace(0, 1, 7)
    path = str(tmp_path / "a.npy")
    oocarr.save(data, path, driver="npy-by-string")
    np.testing.assert_array_equal(np.load(path), data)
    back = oocarr.open(path, driver="npy-by-string")
    np.testing.assert_array_equal(back.store[2:5], data[2:5])

    url = f"mem://registry-test/{os.getpid()}/a"
    oocarr.save(data, url, driver="mem-by-class")
    np.testing.assert_array_equal(oocarr.to_numpy(oocarr.open(url, driver="mem-by-class")), data)


def test_a_bad_registration_names_the_driver_and_spares_the_others(tmp_path, scoped_registrations):
    registry.register_driver("no-module", "no_such_module_for_oocarr:Driver")
    registry.register_driver("no-class", "oocarr_drivers.memmap:NoSuchClass")
    registry.register_driver("no-colon", "oocarr_drivers.memmap")
    with pytest.raises(errors.MissingDependencyError, match="'no-module'.*pip install"):
        registry.get_driver("no-module")
    with pytest.raises(errors.UnknownDriverError, match="'no-class'"):
        registry.get_driver("no-class")
    with pytest.raises(errors.UnknownDriverError, match="'no-colon'"):
        oocarr.open(str(tmp_path / "a.npy"), driver="no-colon")
    np.save(tmp_path / "a.npy", np.arange(3))
    np.testing.assert_array_equal(oocarr.to_numpy(oocarr.open(str(tmp_path / "a.npy"))), [0, 1, 2])


def test_a_spec_mapping_is_imported_only_when_it_claims(tmp_path, scoped_registrations):
    asked = []

    def can_open(container, inner, storage_options):
        asked.append(container)
        return container.endswith(".npy2")

    spec = {"driver": "no_such_module_for_oocarr:Driver", "can_open": can_open}
    registry.register_driver("lazy", spec)
    np.save(tmp_path / "a.npy", np.arange(3))
    assert guess_driver(str(tmp_path / "a.npy")).name == "memmap"
    assert asked == [str(tmp_path / "a.npy")]
    with pytest.raises(errors.MissingDependencyError, match="'lazy'"):
        guess_driver(str(tmp_path / "a.npy2"))
    with pytest.raises(errors.UnknownDriverError, match="'typo'.*unknown keys"):
        registry.register_driver("typo", {"driver": "m:X", "suffix": ".x"})
        registry.get_driver("typo")


def test_a_distribution_entry_point_still_registers_a_driver(tmp_path, monkeypatch):
    """Third-party packages use entry points: one to the class, one to a spec."""
    dist = tmp_path / "oocarr_eptest-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: oocarr-eptest\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[oocarr.drivers]\n"
        "ep-class = mem_driver:MemoryArray\n"
        "ep-spec = oocarr_drivers.claims:MEMMAP\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.refresh()
    try:
        assert {"ep-class", "ep-spec"} <= set(registry.available_drivers())
        assert registry.get_driver("ep-class").__module__ == "mem_driver"
        data = np.arange(5.0)
        url = f"mem://entry-point/{os.getpid()}/a"
        oocarr.save(data, url, driver="ep-class")
        np.testing.assert_array_equal(oocarr.to_numpy(oocarr.open(url, driver="ep-class")), data)
        path = str(tmp_path / "b.npy")
        oocarr.save(data, path, driver="ep-spec")
        np.testing.assert_array_equal(np.load(path), data)
    finally:
        monkeypatch.undo()
        registry.refresh()
    assert "ep-class" not in registry.available_drivers()


@pytest.fixture
def zarr_dirs(tmp_path):
    group = tmp_path / "g.zarr"
    group.mkdir()
    (group / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group"}')
    v3 = tmp_path / "v3"
    v3.mkdir()
    (v3 / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group"}')
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / ".zarray").write_text("{}")
    plain = tmp_path / "plain"
    plain.mkdir()
    return tmp_path


@pytest.mark.parametrize(
    "url, expected",
    [
        ("x.npy", "memmap"),
        ("file:///tmp/X.NPY", "memmap"),
        ("x.h5#/a", "hdf5"),
        ("x.hdf5#/a", "hdf5"),
        ("s3://bucket/x.h5#/a", "hdf5"),
        ("x.zarr", "fsspec"),
        ("memory://b/x.zarr", "fsspec"),
        ("s3://bucket/x.zarr#/g/a", "fsspec"),
        ("zip://d.zarr::file:///tmp/x.zip", "fsspec"),
        ("{tmp}/v3", "fsspec"),
        ("{tmp}/v2", "fsspec"),
        ("{tmp}/g.zarr/zarr.json", "fsspec"),
        ("{tmp}/g.zarr/member", "fsspec"),
        ("{tmp}/g.zarr/a.npy", "memmap"),
        ("{tmp}/g.zarr/a.h5#/x", "hdf5"),
        ("mem://bucket/x", "testmem"),
    ],
)
def test_guess_driver_picks_the_driver_by_suffix_then_by_content(url, expected, zarr_dirs):
    container, _, inner = url.format(tmp=zarr_dirs).partition("#")
    assert guess_driver(container, f"/{inner}" if inner else "").name == expected


@pytest.mark.parametrize(
    "url", ["a.weird", "zip::file:///tmp/x.zip", "s3://b/x.npy", "{tmp}/plain"]
)
def test_an_unclaimed_url_lists_the_known_suffixes(url, zarr_dirs):
    with pytest.raises(
        errors.UnknownDriverError,
        match=r"known suffixes: \.zarr \(fsspec\), \.h5 \.hdf5 .*\(hdf5\), \.npy \(memmap\)"
        r".*driver=NAME",
    ):
        guess_driver(url.format(tmp=zarr_dirs))


def test_listing_claims_directories_and_names_the_listing_drivers(zarr_dirs):
    assert guess_driver(str(zarr_dirs / "plain"), listing=True).name == "memmap"
    assert guess_driver(str(zarr_dirs / "v3"), listing=True).name == "fsspec"
    assert guess_driver(str(zarr_dirs / "a.h5"), listing=True).name == "hdf5"
    with pytest.raises(
        errors.UnknownDriverError, match="lists 's3://b/x'.*list containers: fsspec, hdf5, memmap"
    ):
        guess_driver("s3://b/x", listing=True)


@pytest.mark.parametrize("name", ["memmap", "hdf5", "fsspec"])
def test_a_built_in_spec_claims_what_its_class_claims(name, zarr_dirs):
    spec = registry._spec(name)
    cls = registry.get_driver(name)
    assert spec.suffixes == cls.suffixes and spec.supports_listing == cls.supports_listing
    urls = ["x.npy", "x.h5", "x.zarr", "memory://b/x.zarr", "s3://b/x.npy", "a.weird"]
    urls += [str(zarr_dirs / p) for p in ("v3", "v2", "plain", "g.zarr/a.npy", "g.zarr/m")]
    for url in urls:
        assert spec.claims(url, "", {}) == cls.can_open(url, "", {}), url
        assert spec.claims(url, "", {}, listing=True) == cls.can_list(url, {}), url


def test_scratch_locators_come_from_the_driver(tmp_path):
    memmap, hdf5, zarr = (registry.get_driver(n) for n in ("memmap", "hdf5", "fsspec"))
    d = str(tmp_path)
    assert memmap.scratch_locator(d, "w", (2,), "float32").url == f"{d}/w.npy"
    raw = memmap.scratch_locator(d, "w", (2, 3), "bfloat16")
    assert raw.url == f"{d}/w.bin" and raw.driver_kwargs["shape"] == [2, 3]
    assert (hdf5.scratch_locator(d, "w", (2,), "f4").url, "/data") == (f"{d}/w.h5", "/data")
    assert hdf5.scratch_locator(d, "w", (2,), "f4").path == "/data"
    assert zarr.scratch_locator("memory://s", "w", None, None).url == "memory://s/w.zarr"


def test_memmap_delete_removes_the_attrs_sidecar(tmp_path):
    memmap = registry.get_driver("memmap")
    loc = memmap.scratch_locator(str(tmp_path), "w", (3,), "bfloat16")
    with memmap.create(loc, (3,), "bfloat16", attrs={"step": 1}) as store:
        store[:] = np.ones(3)
    assert sorted(os.listdir(tmp_path)) == ["w.bin", "w.bin.attrs.json"]
    memmap.delete(loc)
    assert os.listdir(tmp_path) == []
