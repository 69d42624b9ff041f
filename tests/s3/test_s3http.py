"""The lean S3 range-GET path (``shardstore.storage.s3http``): really used, signed so that rclone,
moto and radosgw accept it, the same answers and errors as the s3fs path, retries through a real
fault-injecting proxy, and the fallbacks to s3fs (``SHARDSTORE_S3_FAST=0``, unusual options)."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from shardstore.errors import StorageError
from shardstore.storage import ByteRange, FsspecStorage, s3http

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from delayproxy import DelayProxy  # noqa: E402

pytestmark = pytest.mark.s3
DATA = bytes(range(256)) * 64


def _storage(server: Any, url: str, **extra: Any) -> FsspecStorage:
    server.filesystem().pipe_file(url[5:] + "/obj.bin", DATA)
    return FsspecStorage(url, {**server.storage_options(), "skip_instance_cache": True, **extra})


def _no_s3fs_reads(monkeypatch: pytest.MonkeyPatch, storage: FsspecStorage) -> None:
    def refuse(*a: Any, **k: Any) -> Any:
        raise AssertionError("s3fs read used instead of the fast path")

    monkeypatch.setattr(storage.fs, "cat_file", refuse)
    monkeypatch.setattr(storage.fs, "cat_ranges", refuse)


def test_signature_example_from_aws_docs() -> None:
    """AWS's documented GET Object example (SigV4, ``bytes=0-9``, empty payload hash)."""
    headers = {
        "host": "examplebucket.s3.amazonaws.com",
        "range": "bytes=0-9",
        "x-amz-content-sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "x-amz-date": "20130524T000000Z",
    }
    auth = s3http.Signer("us-east-1").sign(
        "GET", "/test.txt", headers, "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "20130524T000000Z", payload_hash=headers["x-amz-content-sha256"],
    )
    assert auth == (
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
    )


@pytest.mark.parametrize("kind", ["rclone", "moto", "rgw"])
def test_fast_path_is_used_and_signed_right(kind: str, request: pytest.FixtureRequest, s3_url: Any,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    server = request.getfixturevalue({"rclone": "s3_server", "moto": "moto_server", "rgw": "rgw_server"}[kind])
    storage = _storage(server, s3_url(kind))
    server.filesystem().pipe_file(s3_url(kind)[5:] + "/dir with space/ü+x.bin", DATA[:100])
    _no_s3fs_reads(monkeypatch, storage)
    before = _asked()
    assert storage.read_range("obj.bin", ByteRange(1000, 24)) == DATA[1000:1024]
    assert storage.read_at("obj.bin", len(DATA) - 5, 5) == DATA[-5:]
    assert storage.read_range("dir with space/ü+x.bin", ByteRange(10, 20)) == DATA[10:30]
    ranges = [ByteRange(i * 1000, 10) for i in range(12)]
    storage.merge_gap = 0
    assert storage.read_ranges([("obj.bin", r) for r in ranges]) == [DATA[r.offset : r.end] for r in ranges]
    assert _asked() - before == 3 + 12
    assert storage.read_range("obj.bin", ByteRange(5, 0)) == b""
    assert _asked() - before == 3 + 12  # no request for an empty range


def _asked() -> int:
    """Requests sent, not counting one sent again after the server closed an idle connection (the
    session's servers close idle connections while other tests run: once in CI, 16 for 15)."""
    return s3http.stats["requests"] - s3http.stats["resent"]


@pytest.mark.parametrize("kind", ["rclone", "rgw"])
def test_wrong_secret_is_refused(kind: str, request: pytest.FixtureRequest, s3_url: Any) -> None:
    """The servers do check the signature: a wrong secret is a 403, not retried."""
    server = request.getfixturevalue({"rclone": "s3_server", "rgw": "rgw_server"}[kind])
    _storage(server, s3_url(kind))
    bad = FsspecStorage(s3_url(kind), {**server.storage_options(), "secret": "wrong", "skip_instance_cache": True})
    assert bad._fast_reader() is not None
    with pytest.raises(StorageError, match="access denied") as info:
        bad.read_range("obj.bin", ByteRange(0, 10))
    assert "obj.bin" in str(info.value)


def test_errors_name_object_and_range(s3_server: Any, s3_url: Any) -> None:
    storage = _storage(s3_server, s3_url())
    with pytest.raises(StorageError) as info:
        storage.read_range("nope.bin", ByteRange(0, 10))
    assert info.value.errno == errno.ENOENT and "nope.bin" in str(info.value)
    with pytest.raises(StorageError, match="range not satisfiable") as info:
        storage.read_range("obj.bin", ByteRange(len(DATA) + 10, 10))
    assert "obj.bin" in str(info.value)
    with pytest.raises(StorageError, match="short read") as info:
        storage.read_range("obj.bin", ByteRange(len(DATA) - 10, 20))
    assert "bytes 16374-16393" in str(info.value)


def test_session_token_is_sent_and_signed(moto_server: Any, s3_url: Any) -> None:
    """Temporary credentials: the token goes out as a signed ``x-amz-security-token`` (moto takes it)."""
    storage = _storage(moto_server, s3_url(), token="FQoGZXIvYXdzEXAMPLETOKEN")
    reader = storage._fast_reader()
    assert reader is not None
    headers = reader._headers("/b/k", 0, 10)
    assert headers["x-amz-security-token"] == "FQoGZXIvYXdzEXAMPLETOKEN"
    assert "x-amz-security-token" in headers["Authorization"].split("SignedHeaders=")[1].split(",")[0]
    assert storage.read_range("obj.bin", ByteRange(0, 10)) == DATA[:10]


def test_anonymous_is_unsigned(moto_server: Any, s3_url: Any) -> None:
    """``anon=True``: no signature at all, on an object made public (public-read ACL)."""
    _storage(moto_server, s3_url())
    try:
        moto_server.client().put_object_acl(Bucket=s3_url()[5:].split("/")[0],
                                            Key=s3_url()[5:].split("/", 1)[1] + "/obj.bin", ACL="public-read")
    except Exception as e:  # noqa: BLE001 - the server has no public objects
        pytest.skip(f"cannot make an object public on this server: {e}")
    storage = FsspecStorage(s3_url(), {"endpoint_url": moto_server.endpoint, "anon": True, "skip_instance_cache": True})
    reader = storage._fast_reader()
    assert reader is not None and "Authorization" not in reader._headers("/b/k", 0, 10)
    assert storage.read_range("obj.bin", ByteRange(100, 10)) == DATA[100:110]


@pytest.mark.parametrize("fault", ["reset", 503, 500])
def test_transient_faults_retried(s3_server: Any, s3_url: Any, fault: Any) -> None:
    url = s3_url()
    s3_server.filesystem().pipe_file(url[5:] + "/obj.bin", DATA)
    with DelayProxy(s3_server.endpoint) as proxy:
        storage = FsspecStorage(url, {**s3_server.storage_options(proxy.endpoint), "skip_instance_cache": True})
        storage.backoff = 0.01
        assert storage._fast_reader() is not None
        proxy.inject(fault, 2)
        assert storage.read_range("obj.bin", ByteRange(1000, 24)) == DATA[1000:1024]
        assert [r.faulted for r in proxy.requests if r.method == "GET"] == [str(fault)] * 2 + [None]
        proxy.inject(503, 100)
        with pytest.raises(StorageError, match=f"after {storage.retries} attempts"):
            storage.read_range("obj.bin", ByteRange(0, 10))


def test_a_reset_idle_connection_is_resent_and_counted(s3_server: Any, s3_url: Any) -> None:
    """A kept-alive connection the server has dropped: the GET goes once more on a new connection,
    at once (no back-off), and ``stats["resent"]`` counts it."""
    url = s3_url()
    s3_server.filesystem().pipe_file(url[5:] + "/obj.bin", DATA)
    with DelayProxy(s3_server.endpoint) as proxy:
        storage = FsspecStorage(url, {**s3_server.storage_options(proxy.endpoint), "skip_instance_cache": True})
        storage.backoff = 60.0  # a back-off would hang the test
        assert storage.read_range("obj.bin", ByteRange(0, 10)) == DATA[:10]
        resent, asked = s3http.stats["resent"], s3http.stats["requests"]
        proxy.inject("reset", 1)
        assert storage.read_range("obj.bin", ByteRange(10, 10)) == DATA[10:20]
        assert (s3http.stats["resent"] - resent, s3http.stats["requests"] - asked) == (1, 2)
        assert [r.faulted for r in proxy.requests if r.method == "GET"] == [None, "reset", None]


def test_fork_child_reads_on_its_own_connections(s3_server: Any, s3_url: Any) -> None:
    storage = _storage(s3_server, s3_url())
    assert storage.read_range("obj.bin", ByteRange(0, 10)) == DATA[:10]
    pid = os.fork()
    if pid == 0:  # child: its own connection; the parent's stays usable
        ok = storage.read_range("obj.bin", ByteRange(10, 10)) == DATA[10:20]
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert storage.read_range("obj.bin", ByteRange(20, 10)) == DATA[20:30]


def test_fallbacks_to_s3fs(s3_server: Any, s3_url: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = _storage(s3_server, s3_url())
    assert storage._fast_reader() is not None
    unusual = [{"requester_pays": True}, {"version_aware": True}, {"s3_additional_kwargs": {"SSECustomerKey": "k"}},
               {"config_kwargs": {"s3": {"addressing_style": "virtual"}}}, {"endpoint_url": None}]
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    for extra in unusual:
        opts = {**s3_server.storage_options(), **extra}
        assert s3http.fast_reader("s3", opts, 5, 15) is None, extra
    monkeypatch.setenv("SHARDSTORE_S3_FAST", "0")
    off = FsspecStorage(s3_url(), {**s3_server.storage_options(), "skip_instance_cache": True})
    assert off._fast_reader() is None
    before = s3http.stats["requests"]
    assert off.read_range("obj.bin", ByteRange(1000, 24)) == DATA[1000:1024]
    assert s3http.stats["requests"] == before
