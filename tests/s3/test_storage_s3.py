"""``FsspecStorage`` over S3 against the shared conformance suite, on rclone, moto and Ceph's radosgw.

rclone (the suite's server) answers range GETs with 200 + Content-Range; moto and radosgw answer
206 and use AWS's error codes: the same assertions must hold on all three. Then what only S3 has: the
client defaults shardstore sets, transient faults (through a real fault-injecting proxy) and
their retry with backoff.
"""

from __future__ import annotations

import contextlib
import itertools
import pickle
import re
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from storage_conformance import MakeStorage, StorageTests

from shardstore.errors import StorageError
from shardstore.storage import (
    S3_CONNECT_TIMEOUT,
    S3_READ_TIMEOUT,
    ByteRange,
    FsspecStorage,
    client_options,
    open_storage,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from delayproxy import DelayProxy  # noqa: E402

pytestmark = pytest.mark.s3
_counter = itertools.count()


def _maker(server: Any, bucket: str) -> MakeStorage:
    fs = server.filesystem()

    def make(files: dict[str, bytes]) -> FsspecStorage:
        prefix = f"{bucket}/conf-{next(_counter)}-{time.monotonic_ns()}"
        if files:
            fs.pipe({f"{prefix}/{name}": data for name, data in files.items()})
        storage = open_storage(f"s3://{prefix}", server.storage_options())
        assert isinstance(storage, FsspecStorage)
        return storage

    return make


class TestS3StorageRclone(StorageTests):
    @pytest.fixture
    def make_storage(self, s3_server: Any) -> MakeStorage:
        return _maker(s3_server, "shardstore-test")

    def test_no_local_path(self, storage: FsspecStorage) -> None:
        assert storage.local_path("a.tar") is None
        assert storage.url("a.tar").startswith("s3://shardstore-test/")

    def test_etag_is_the_md5_of_a_single_put(self, storage: FsspecStorage) -> None:
        import hashlib

        from storage_conformance import DATA

        assert storage.stat("a.tar").etag == hashlib.md5(DATA).hexdigest()


class TestS3StorageMoto(StorageTests):
    @pytest.fixture
    def make_storage(self, moto_server: Any) -> MakeStorage:
        return _maker(moto_server, "shardstore-test")


class TestS3StorageRgw(StorageTests):
    @pytest.fixture
    def make_storage(self, rgw_server: Any) -> MakeStorage:
        return _maker(rgw_server, "shardstore-test")

    def test_a_range_read_is_answered_206(self, storage: FsspecStorage, rgw_server: Any) -> None:
        """AWS answers a range GET with 206 Partial Content (rclone: 200); shardstore reads the same
        bytes from either answer."""
        from storage_conformance import DATA

        bucket, key = storage.url("a.tar")[len("s3://"):].split("/", 1)
        got = rgw_server.client().get_object(Bucket=bucket, Key=key, Range="bytes=1000-1099")
        assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
        assert got["ContentRange"] == f"bytes 1000-1099/{len(DATA)}"
        assert got["Body"].read() == DATA[1000:1100] == storage.read_range("a.tar", ByteRange(1000, 100))


# ----- client defaults -------------------------------------------------------------------------------
def test_client_defaults_do_not_override_the_callers(s3_server: Any) -> None:
    storage = FsspecStorage("s3://shardstore-test/x", s3_server.storage_options())
    config = storage.fs.config_kwargs if hasattr(storage.fs, "config_kwargs") else {}
    assert config["max_pool_connections"] == 64
    assert config["response_checksum_validation"] == "when_required"
    mine = s3_server.storage_options()
    mine["config_kwargs"]["max_pool_connections"] = 7
    storage = FsspecStorage("s3://shardstore-test/x", mine)
    assert storage.fs.config_kwargs["max_pool_connections"] == 7
    assert storage.storage_options == mine  # what is pickled to workers: the caller's options


def test_client_waits_are_bounded_by_default_and_callers_may_change_them(s3_server: Any) -> None:
    storage = FsspecStorage("s3://shardstore-test/x", s3_server.storage_options())
    config = storage.fs.config_kwargs
    assert (config["connect_timeout"], config["read_timeout"]) == (S3_CONNECT_TIMEOUT, S3_READ_TIMEOUT)
    assert config["http_session_cls"].__name__ == "BoundedAIOHTTPSession"
    copy = pickle.loads(pickle.dumps(storage.fs))  # the class travels by reference, as a module attribute
    assert copy.config_kwargs["http_session_cls"] is config["http_session_cls"]
    mine = s3_server.storage_options()
    mine["config_kwargs"]["read_timeout"] = 120
    assert FsspecStorage("s3://shardstore-test/x", mine).fs.config_kwargs["read_timeout"] == 120


class SilentPeer:
    """A TCP server that accepts connections and never answers; it reads what is sent (recording
    it) unless ``reads=False``, in which case the client's send buffer fills and its writes stall."""

    def __init__(self, reads: bool = True) -> None:
        self.reads = reads
        self.received = bytearray()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._conns: list[socket.socket] = []
        self.endpoint = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            if self.reads:
                threading.Thread(target=self._drain, args=(conn,), daemon=True).start()

    def _drain(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := conn.recv(1 << 16):
                self.received += chunk

    def close(self) -> None:
        self._sock.close()
        for conn in self._conns:
            conn.close()


def _within(seconds: float, fn: Any) -> BaseException | None:
    """Run ``fn`` in a thread; the exception it raised, or a test failure if it is still running
    after ``seconds`` (so a regression fails here instead of hanging the suite)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            fn()
            outcome.append(None)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            outcome.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"still waiting after {seconds} s: a request without a bound")
    return outcome[0]


def _silent_storage(peer: SilentPeer) -> FsspecStorage:
    opts = {"key": "k", "secret": "s", "endpoint_url": peer.endpoint, "skip_instance_cache": True,
            "config_kwargs": {"connect_timeout": 1, "read_timeout": 1, "retries": {"total_max_attempts": 1}}}
    storage = FsspecStorage("s3://bucket/ds", opts)
    storage.fs.retries = 1  # s3fs's own retry loop
    storage.retries, storage.backoff = 2, 0.01
    return storage


class BodyFirstPeer:
    """An S3 endpoint that answers a request only once it has read the whole body, and never sends
    ``100 Continue``; its first PUT fails with a 500. That is what rclone ``serve s3`` does with a
    PUT it fails before reading it (a race creating the same new folders): its handler closes the
    request body before answering, and Go's ``Body.Close`` first reads the rest of the body."""

    def __init__(self) -> None:
        self.heads: list[bytes] = []
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self._sock.accept()
                threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as f, contextlib.suppress(OSError):
            while True:
                lines = []
                while (line := f.readline()) not in (b"\r\n", b""):
                    lines.append(line)
                if not lines:
                    return
                head = b"".join(lines)
                length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
                f.read(int(length.group(1)) if length else 0)  # the body first, as Go's Body.Close
                self.heads.append(head)
                if head.startswith(b"PUT ") and sum(h.startswith(b"PUT ") for h in self.heads) == 1:
                    body = b"<Error><Code>InternalError</Code><Message>file does not exist</Message></Error>"
                    conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/xml\r\n"
                                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                else:
                    conn.sendall(b'HTTP/1.1 200 OK\r\nETag: "0"\r\nContent-Length: 0\r\n\r\n')

    def close(self) -> None:
        self._sock.close()


def test_a_put_the_server_answers_only_after_its_body_is_retried_not_stuck() -> None:
    """The CI hang: botocore sends every PUT with ``Expect: 100-continue``; aiohttp then withholds
    the body until ``100 Continue`` comes, with no timeout, while rclone, failing the PUT, waited
    for the body before answering. Each waited for the other, forever. Without the header the body
    goes out at once, the 500 comes back and the PUT is retried."""
    peer = BodyFirstPeer()
    try:
        storage = _silent_storage(peer)
        assert _within(30, lambda: storage.write_atomic("nested/.nv-meta/index.uuid", b"0123")) is None
        puts = [h for h in peer.heads if h.startswith(b"PUT ")]
        assert len(puts) == 2 and all(b"expect:" not in h.lower() for h in puts)
    finally:
        peer.close()


@pytest.mark.parametrize("op", ["write", "read"])
def test_a_server_that_never_answers_fails_the_request_instead_of_hanging(op: str) -> None:
    """A silent server: writes, like reads, end in a timeout error after the read timeout (aiohttp
    started that timeout only once a body was sent, and with ``Expect: 100-continue`` it was never
    sent), retried, then a ``StorageError`` naming the object."""
    peer = SilentPeer()
    try:
        storage = _silent_storage(peer)
        t0 = time.monotonic()
        if op == "write":
            err = _within(30, lambda: storage.write_atomic(".nv-meta/split.yaml", b"split_parts: {}\n"))
        else:
            err = _within(30, lambda: storage.read_range("a.tar", ByteRange(0, 10)))
        assert isinstance(err, StorageError), err
        assert "after 2 attempts" in str(err) and "Timeout" in str(err)
        assert ("split.yaml" if op == "write" else "a.tar") in str(err)
        assert time.monotonic() - t0 < 20  # two attempts of 1 s timeouts; slack for a loaded machine
        heads = bytes(peer.received).split(b"\r\n\r\n")[0].lower()
        assert heads.startswith(b"put " if op == "write" else b"get ")
        assert b"expect:" not in bytes(peer.received).lower()
    finally:
        peer.close()


def test_an_upload_the_server_stops_reading_fails_instead_of_hanging(monkeypatch: pytest.MonkeyPatch) -> None:
    """aiohttp has no timeout on writing a body: a peer that stops reading would stall an upload
    for good. A body must go out at ``S3_MIN_UPLOAD_RATE`` on average (made fast here)."""
    import shardstore.storage.remote as storage_module

    monkeypatch.setattr(storage_module, "S3_MIN_UPLOAD_RATE", 16 << 20)  # 8 MiB: 0.5 s more
    peer = SilentPeer(reads=False)
    try:
        storage = _silent_storage(peer)
        storage.retries = 1
        err = _within(30, lambda: storage.write_atomic("big.bin", bytes(8 << 20)))
        assert isinstance(err, StorageError) and "Timeout" in str(err), err
    finally:
        peer.close()


def test_reads_objects_uploaded_with_checksums(s3_server: Any, s3_url: Any) -> None:
    """boto3 >= 1.36 uploads with a CRC32 that rclone sends back with every ranged GET; with
    botocore's default validation every range read of such an object fails."""
    import s3fs

    opts = s3_server.storage_options()
    del opts["config_kwargs"]  # a plain client: checksums on upload, validation on download
    url = s3_url("crc")
    uploader = s3fs.S3FileSystem(**client_options("s3", opts), skip_instance_cache=True)  # bounded waits only
    uploader.pipe_file(url[5:] + "/obj.bin", b"0123456789" * 100)
    storage = open_storage(url, opts)
    assert storage.read_range("obj.bin", ByteRange(5, 10)) == b"5678901234"


def test_sees_objects_replaced_by_another_client(s3_server: Any, s3_url: Any, s3fs_client: Any) -> None:
    """No listing cache: a stat after someone else's upload sees the new size at once."""
    url = s3_url("other")
    key = url[5:] + "/shard.tar"
    s3fs_client.pipe_file(key, b"x" * 100)
    storage = open_storage(url, s3_server.storage_options())
    assert storage.list() == ["shard.tar"]
    assert storage.stat("shard.tar").size == 100
    s3fs_client.pipe_file(key, b"x" * 50)
    s3fs_client.pipe_file(url[5:] + "/second.tar", b"y")
    assert storage.stat("shard.tar").size == 50
    assert storage.list() == ["second.tar", "shard.tar"]


# ----- transient faults, for real: a proxy resets connections or answers 503 -------------------------
@pytest.fixture
def faulty(s3_server: Any, s3_url: Any) -> Iterator[tuple[DelayProxy, FsspecStorage]]:
    """A storage whose requests go through a fault-injecting proxy, with the client's own retries
    turned off so that shardstore's retry is what is tested."""
    url = s3_url("faults")
    s3_server.filesystem().pipe_file(url[5:] + "/obj.bin", bytes(range(256)) * 64)
    with DelayProxy(s3_server.endpoint) as proxy:
        opts = s3_server.storage_options(proxy.endpoint)
        opts["config_kwargs"]["retries"] = {"total_max_attempts": 1}
        opts["skip_instance_cache"] = True
        storage = FsspecStorage(url, opts)
        storage.fs.retries = 1  # s3fs's own retry loop
        yield proxy, storage


@pytest.fixture
def backoffs(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits shardstore's retry loop makes (recorded, then really waited)."""
    import shardstore.storage.remote as storage_module

    waits: list[float] = []
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(storage_module.time, "sleep", sleep)
    return waits


@pytest.mark.parametrize("fault", ["reset", 503, 500])
def test_transient_faults_are_retried_with_backoff(
    faulty: tuple[DelayProxy, FsspecStorage], fault: Any, backoffs: list[float]
) -> None:
    proxy, storage = faulty
    storage.read_range("obj.bin", ByteRange(0, 1))  # warm the connection pool
    proxy.reset_counts()
    proxy.inject(fault, 3)
    assert storage.read_range("obj.bin", ByteRange(1000, 24)) == (bytes(range(256)) * 64)[1000:1024]
    gets = [r for r in proxy.requests if r.method == "GET"]
    assert [r.faulted for r in gets] == [str(fault)] * 3 + [None]
    assert all(r.range == "bytes=1000-1023" for r in gets)
    # aiohttp itself retries a request once when a reused keep-alive connection is reset
    assert len(backoffs) == 3 if fault != "reset" else 1 <= len(backoffs) <= 3
    assert backoffs == sorted(backoffs) and backoffs[0] >= storage.backoff
    if len(backoffs) == 3:
        assert backoffs[2] >= 4 * storage.backoff  # exponential


@pytest.mark.parametrize("fault", ["reset", 503])
def test_persistent_faults_fail_naming_object_and_range(faulty: tuple[DelayProxy, FsspecStorage], fault: Any) -> None:
    proxy, storage = faulty
    proxy.inject(fault, 100)
    with pytest.raises(StorageError) as info:
        storage.read_range("obj.bin", ByteRange(4096, 100))
    msg = str(info.value)
    assert "obj.bin" in msg and "bytes 4096-4195" in msg and f"after {storage.retries} attempts" in msg
    assert info.value.offset == 4096


def test_read_ranges_retries_only_the_failed_ranges(faulty: tuple[DelayProxy, FsspecStorage]) -> None:
    proxy, storage = faulty
    data = bytes(range(256)) * 64
    storage.read_range("obj.bin", ByteRange(0, 1))
    storage.merge_gap = 0  # one GET per range
    proxy.reset_counts()
    proxy.inject(503, 2)
    ranges = [ByteRange(i * 1000, 10) for i in range(12)]
    assert storage.read_ranges([("obj.bin", r) for r in ranges]) == [data[r.offset : r.end] for r in ranges]
    assert proxy.count("GET") == 12 + 2


def test_not_found_is_not_retried(faulty: tuple[DelayProxy, FsspecStorage]) -> None:
    proxy, storage = faulty
    proxy.reset_counts()
    with pytest.raises(StorageError) as info:
        storage.read_range("nope.bin", ByteRange(0, 10))
    assert "no such object" in str(info.value) and "nope.bin" in str(info.value)
    assert proxy.count("GET") == 1


def test_default_client_retries_absorb_short_outages(s3_server: Any, s3_url: Any) -> None:
    """With the client's default retries on, a couple of 503s never reach shardstore at all."""
    url = s3_url("defaults")
    s3_server.filesystem().pipe_file(url[5:] + "/obj.bin", b"z" * 100)
    with DelayProxy(s3_server.endpoint) as proxy:
        storage = FsspecStorage(url, {**s3_server.storage_options(proxy.endpoint), "skip_instance_cache": True})
        proxy.inject(503, 2)
        assert storage.read_range("obj.bin", ByteRange(0, 10)) == b"z" * 10
        assert proxy.count("GET") == 3
