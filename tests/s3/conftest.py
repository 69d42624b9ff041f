"""The S3 test servers (tools/s3server.py: rclone's ``serve s3``, moto, Ceph's radosgw) and helpers.

One server per test session, one bucket, one prefix per test. When the server cannot be had the
tests skip and say why; under CI (``CI=true``) they fail instead, since CI must run them.
"""

from __future__ import annotations

import json
import os
import re
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import s3server  # noqa: E402

BUCKET = "shardstore-test"


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _unavailable(kind: str, why: str) -> NoReturn:
    message = f"S3 test server ({kind}) unavailable: {why}"
    if _in_ci():
        pytest.fail(message + " -- CI must run the S3 tests", pytrace=False)
    pytest.skip(message)


def _start(kind: str, tmp: Path) -> s3server.S3Server:
    try:
        import s3fs  # noqa: F401
    except ImportError as e:
        _unavailable(kind, f"s3fs is not installed (pip install 'shardstore[s3]'): {e}")
    try:
        return s3server.start(tmp / f"{kind}-root", buckets=[BUCKET], kind=kind)
    except s3server.Unavailable as e:
        _unavailable(kind, str(e))


@pytest.fixture(scope="session")
def _index_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Index files downloaded from a server stay inside the session's temp (``SHARDSTORE_CACHE``)."""
    old = os.environ.get("SHARDSTORE_CACHE")
    os.environ["SHARDSTORE_CACHE"] = str(tmp_path_factory.mktemp("shardstore-cache"))
    yield
    if old is None:
        os.environ.pop("SHARDSTORE_CACHE", None)
    else:
        os.environ["SHARDSTORE_CACHE"] = old


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory, _index_cache: None) -> Iterator[s3server.S3Server]:
    """rclone ``serve s3`` with bucket ``shardstore-test``, for the whole session."""
    server = _start("rclone", tmp_path_factory.mktemp("s3"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[s3server.S3Server]:
    """moto's standalone server (slow, AWS-faithful: 206 answers, AWS error codes)."""
    server = _start("moto", tmp_path_factory.mktemp("moto"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def rgw_server(tmp_path_factory: pytest.TempPathFactory, _index_cache: None) -> Iterator[s3server.S3Server]:
    """Ceph's RADOS Gateway with bucket ``shardstore-test``: production S3 code (206 answers, AWS
    error codes, multipart ETags). Starting its one-node cluster costs 2-3 s, once per session."""
    server = _start("rgw", tmp_path_factory.mktemp("rgw"))
    yield server
    server.stop()


@pytest.fixture
def storage_options(s3_server: s3server.S3Server) -> dict[str, Any]:
    """What ``shardstore.open``/``prepare`` need to reach the test server."""
    return s3_server.storage_options()


@pytest.fixture
def s3_url(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """``s3_url("ds")`` -> ``s3://shardstore-test/<this test>/ds``: a prefix no other test uses."""
    test = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name).strip("-")[:80]

    def make(prefix: str = "") -> str:
        base = f"s3://{BUCKET}/{test}"
        return f"{base}/{prefix.strip('/')}" if prefix else base

    return make


@pytest.fixture
def upload(s3_server: s3server.S3Server) -> Callable[[str | os.PathLike[str], str], str]:
    """``upload(local_folder, "s3://bucket/prefix")``: copy every file of the folder; returns the URL."""

    def run(local: str | os.PathLike[str], url: str) -> str:
        return s3_server.upload(local, url)

    return run


@pytest.fixture
def s3fs_client(s3_server: s3server.S3Server) -> Any:
    """A separate s3fs client (no shared cache with the storage under test), to change objects behind its back."""
    return s3_server.filesystem()


@pytest.fixture
def msc_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str, dict[str, Any]], str]:
    """``msc_profile(endpoint, storage_options) -> name``: an MSC (Multi-Storage Client) config with
    one S3 profile on the test bucket at ``endpoint``, MSC_CONFIG pointing at it (inherited by the
    processes a test starts, a mount's too). A new name each call: MSC caches clients by profile."""

    def make(endpoint: str, opts: dict[str, Any]) -> str:
        name = f"t{uuid.uuid4().hex[:10]}"
        cfg = tmp_path / f"msc_config-{name}.json"
        cfg.write_text(json.dumps({"profiles": {name: {
            "storage_provider": {"type": "s3", "options": {"base_path": "shardstore-test", "endpoint_url": endpoint, "region_name": "us-east-1"}},
            "credentials_provider": {"type": "S3Credentials", "options": {"access_key": opts["key"], "secret_key": opts["secret"]}},
        }}}))
        monkeypatch.setenv("MSC_CONFIG", str(cfg))
        return name

    return make
