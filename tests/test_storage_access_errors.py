"""A storage client's own errors (botocore's: no route to the endpoint, no credentials) become
``StorageAccessError`` naming the URL and the fix, in the library and in the CLI, for both
drivers that reach object stores through fsspec."""

from __future__ import annotations

import subprocess
import sys

import pytest

import oocarr
from oocarr.errors import StorageAccessError

pytest.importorskip("s3fs")

UNREACHABLE = {
    "key": "a",
    "secret": "b",
    "client_kwargs": {"endpoint_url": "http://127.0.0.1:9"},  # the discard port: refused
    "config_kwargs": {"retries": {"max_attempts": 1}},
    "skip_instance_cache": True,
}


@pytest.mark.parametrize("url", ["s3://nobucket/x.zarr", "s3://nobucket/x.h5#/x"])
def test_an_unreachable_endpoint_is_a_storage_access_error(url):
    with pytest.raises(StorageAccessError, match="EndpointConnectionError") as info:
        oocarr.open(url, storage_options=UNREACHABLE)
    assert isinstance(info.value, OSError)
    assert url.split("#")[0] in str(info.value) and "credentials" in str(info.value)


def test_writing_to_an_unreachable_endpoint_is_a_storage_access_error(tmp_path):
    with pytest.raises(StorageAccessError, match="s3://nobucket/o.zarr"):
        oocarr.save([1.0, 2.0], "s3://nobucket/o.zarr", storage_options=UNREACHABLE)


def test_missing_credentials_in_the_cli_are_one_line(tmp_path):
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    endpoint = 'client_kwargs={"endpoint_url": "http://127.0.0.1:9"}'
    for command in (["inspect", "s3://nobucket/x.zarr"], ["ls", "s3://nobucket/x.zarr"]):
        result = subprocess.run(
            [sys.executable, "-m", "oocarr.cli", *command, "-o", endpoint],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1
        assert "s3://nobucket/x.zarr" in result.stderr and "NoCredentialsError" in result.stderr
