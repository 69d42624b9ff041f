"""A lean S3 range GET: plain HTTP/1.1 with keep-alive, signed with AWS Signature Version 4 here.

Why: one range GET through s3fs/aiobotocore costs about 1.75 ms of client CPU (event loop hand-off,
botocore's request model, hooks, response parsing), which made random sample reads on a fast S3
server CPU-bound in the client (tools/bench/read.py, "CPU bound" line). A GET of a byte range needs
none of that: one signed request, one response. ``FsspecStorage`` uses this path for range reads
only, and only when everything it needs is known and simple (``fast_reader`` decides: explicit
endpoint with path-style addressing, plain credentials or anonymous); everything else stays on s3fs.

Errors are raised as the exception kinds ``FsspecStorage._retry`` classifies: ``FileNotFoundError``
(404), ``PermissionError`` (403), ``OSError(EINVAL, "range not satisfiable ...")`` (416),
``S3HTTPError`` with a botocore-shaped ``response`` (5xx/429 are transient), and the standard
library's connection and timeout errors (transient), except ``ConnectTimeoutError`` (unreachable).
"""

from __future__ import annotations

import builtins
import datetime
import errno
import hashlib
import hmac
import http.client
import os
import re
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlsplit

#: Payload hash for a request whose body is not signed (a GET has none anyway).
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
#: Idle connections kept per endpoint (more concurrent readers than this just reconnect).
MAX_IDLE = 64
#: Largest error body read to learn the S3 error code; a longer one closes the connection.
_MAX_ERROR_BODY = 64 * 1024
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
_ERROR_CODE = re.compile(rb"<Code>([^<]*)</Code>")

#: Range GETs sent on this path in this process (tests check that the path is really used), and how
#: many of them were sent again because the server had closed an idle keep-alive connection.
stats = {"requests": 0, "resent": 0}
_STATS_LOCK = threading.Lock()


class S3HTTPError(Exception):
    """An S3 error answer; ``response`` has botocore's shape, so retry classification reads it."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.response = {"ResponseMetadata": {"HTTPStatusCode": status}, "Error": {"Code": code}}


class ConnectTimeoutError(TimeoutError):
    """Connecting took longer than the connect timeout (named like botocore's: not retried again)."""


# ----- signing ----------------------------------------------------------------------------------------
def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


class Signer:
    """AWS SigV4 for S3 requests without a signed body. The signing key is derived once per
    (secret, date, region) -- the four HMACs are most of the signing cost."""

    def __init__(self, region: str, service: str = "s3") -> None:
        self.region = region
        self.service = service
        self._key_cache: tuple[tuple[str, str], bytes] | None = None

    def signing_key(self, secret: str, date: str) -> bytes:
        cached = self._key_cache
        if cached is not None and cached[0] == (secret, date):
            return cached[1]
        k = _hmac(("AWS4" + secret).encode(), date)
        for part in (self.region, self.service, "aws4_request"):
            k = _hmac(k, part)
        self._key_cache = ((secret, date), k)
        return k

    def sign(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        access_key: str,
        secret: str,
        amz_date: str,
        payload_hash: str = UNSIGNED_PAYLOAD,
        query: str = "",
    ) -> str:
        """The ``Authorization`` value for a request whose (lower-case) ``headers`` are all signed;
        ``path`` is already URI-encoded (S3 encodes it once) and ``query`` already canonical."""
        names = sorted(headers)
        canonical_headers = "".join(f"{n}:{' '.join(headers[n].split())}\n" for n in names)
        signed = ";".join(names)
        canonical = "\n".join((method, path, query, canonical_headers, signed, payload_hash))
        date = amz_date[:8]
        scope = f"{date}/{self.region}/{self.service}/aws4_request"
        to_sign = "\n".join(("AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()))
        signature = hmac.new(self.signing_key(secret, date), to_sign.encode(), hashlib.sha256).hexdigest()
        return f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={signed}, Signature={signature}"


# ----- connections --------------------------------------------------------------------------------------
class _Pool:
    """Idle keep-alive connections to one endpoint, shared by all threads of this process."""

    def __init__(self) -> None:
        self.idle: builtins.list[http.client.HTTPConnection] = []
        self.lock = threading.Lock()


#: (scheme, host, port) -> idle connections of this process.
_POOLS: dict[tuple[str, str, int], _Pool] = {}
_POOLS_LOCK = threading.Lock()
#: In a forked child: the parent's connections, kept alive so the child never closes its sockets.
_PARENT_POOLS: builtins.list[Any] = []


#: Threads for concurrent range GETs, kept for the process: starting 32 threads for every
#: ``read_ranges`` call cost more than the GETs of a small batch.
_EXECUTOR: Any = None
_EXECUTOR_WORKERS = 32


def map_concurrent(fn: Callable[[Any], Any], items: builtins.list[Any]) -> builtins.list[Any]:
    """``[fn(x) for x in items]`` on the process's reader threads (the first error is raised)."""
    global _EXECUTOR
    if _EXECUTOR is None:
        from concurrent.futures import ThreadPoolExecutor

        with _POOLS_LOCK:
            if _EXECUTOR is None:
                _EXECUTOR = ThreadPoolExecutor(_EXECUTOR_WORKERS, thread_name_prefix="shardstore-s3")
    return list(_EXECUTOR.map(fn, items))


def _reset_after_fork() -> None:
    """A forked child shares its parent's sockets: it keeps them referenced (never closed from
    here) and opens its own; the parent's reader threads do not exist in the child."""
    global _POOLS_LOCK, _EXECUTOR
    _EXECUTOR = None
    _PARENT_POOLS.append(dict(_POOLS))
    _POOLS.clear()
    _POOLS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def _pool(key: tuple[str, str, int]) -> _Pool:
    pool = _POOLS.get(key)
    if pool is None:
        with _POOLS_LOCK:
            pool = _POOLS.setdefault(key, _Pool())
    return pool


# ----- the reader -------------------------------------------------------------------------------------
Credentials = tuple[str, str, str | None]


class S3RangeReader:
    """Range GETs against one path-style S3 endpoint. Thread-safe: each request takes an idle
    connection from the process's pool (or opens one) and gives it back when the answer is read."""

    def __init__(
        self,
        endpoint: str,
        region: str,
        credentials: Callable[[], Credentials] | None,
        connect_timeout: float,
        read_timeout: float,
    ) -> None:
        parts = urlsplit(endpoint)
        self.scheme = parts.scheme
        self.hostname = parts.hostname or ""
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        default_port = self.port == (443 if self.scheme == "https" else 80)
        self.host = self.hostname if default_port else f"{self.hostname}:{self.port}"
        if ":" in self.hostname:  # IPv6 literal
            self.host = f"[{self.hostname}]" if default_port else f"[{self.hostname}]:{self.port}"
        self.credentials = credentials
        self.signer = Signer(region)
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout

    # -- connections
    def _key(self) -> tuple[str, str, int]:
        return (self.scheme, self.hostname, self.port)

    def _connect(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        conn = cls(self.hostname, self.port, timeout=self.connect_timeout)
        try:
            conn.connect()
        except TimeoutError as e:
            raise ConnectTimeoutError(f"connecting to {self.host} timed out after {self.connect_timeout} s") from e
        assert conn.sock is not None
        conn.sock.settimeout(self.read_timeout)
        return conn

    def _acquire(self) -> tuple[http.client.HTTPConnection, bool]:
        pool = _pool(self._key())
        with pool.lock:
            if pool.idle:
                return pool.idle.pop(), True
        return self._connect(), False

    def _release(self, conn: http.client.HTTPConnection) -> None:
        pool = _pool(self._key())
        with pool.lock:
            if len(pool.idle) < MAX_IDLE:
                pool.idle.append(conn)
                return
        conn.close()

    # -- requests
    def _headers(self, path: str, offset: int, end: int) -> dict[str, str]:
        amz_date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        signed = {"host": self.host, "x-amz-content-sha256": UNSIGNED_PAYLOAD, "x-amz-date": amz_date}
        headers = {"Range": f"bytes={offset}-{end - 1}"}
        if self.credentials is None:  # anonymous: unsigned
            return {**headers, "Host": self.host}
        access_key, secret, token = self.credentials()
        if token:
            signed["x-amz-security-token"] = token
        headers["Authorization"] = self.signer.sign("GET", path, signed, access_key, secret, amz_date)
        return {**headers, **signed}

    def get_range(self, bucket: str, key: str, offset: int, size: int) -> bytes:
        """``size`` bytes of ``bucket/key`` from ``offset`` (fewer if the object ends sooner)."""
        path = "/" + quote(f"{bucket}/{key}", safe="/~")
        end = offset + size
        headers = self._headers(path, offset, end)
        conn, reused = self._acquire()
        try:
            resp = self._send(conn, path, headers)
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            conn.close()
            if not reused:
                raise
            # An idle keep-alive connection the server had closed: once more on a new one (a GET is idempotent).
            conn = self._connect()
            with _STATS_LOCK:
                stats["resent"] += 1
            resp = self._send(conn, path, headers)
        try:
            data = self._body(conn, resp, offset, end)
        except BaseException:
            conn.close()
            raise
        return data

    def _send(self, conn: http.client.HTTPConnection, path: str, headers: dict[str, str]) -> http.client.HTTPResponse:
        with _STATS_LOCK:
            stats["requests"] += 1
        conn.putrequest("GET", path, skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items():
            conn.putheader(name, value)
        conn.endheaders()
        return conn.getresponse()

    def _body(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse, offset: int, end: int) -> bytes:
        status = resp.status
        if status in (200, 206):
            content_range = resp.getheader("Content-Range")
            if content_range is None:
                if status == 206:
                    raise S3HTTPError(status, "BadResponse", "206 answer without Content-Range")
                # The server ignored the Range header and sends the whole object: read up to the end
                # of the range, then drop the connection (the rest of the body is never read).
                data = resp.read(end)
                conn.close()
                return data[offset:end]
            m = _CONTENT_RANGE.fullmatch(content_range.strip())
            if m is None or int(m.group(1)) != offset:
                raise S3HTTPError(status, "BadResponse", f"answer for the wrong range (Content-Range: {content_range})")
            data = resp.read()
            self._finish(conn, resp)
            return data[: end - offset]
        body = resp.read(_MAX_ERROR_BODY + 1)
        if len(body) > _MAX_ERROR_BODY:
            conn.close()
        else:
            self._finish(conn, resp)
        found = _ERROR_CODE.search(body)
        code = found.group(1).decode(errors="replace") if found else ""
        what = f"HTTP {status}{' ' + code if code else ''}"
        if status == 404:
            raise FileNotFoundError(errno.ENOENT, f"no such object ({what})")
        if status == 403:
            raise PermissionError(errno.EACCES, f"access denied ({what})")
        if status == 416:
            raise OSError(errno.EINVAL, f"range not satisfiable ({what})")
        raise S3HTTPError(status, code, what)

    def _finish(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        """Back to the pool if the server keeps the connection open, else closed."""
        if resp.will_close:
            conn.close()
        else:
            self._release(conn)


# ----- when to use it ---------------------------------------------------------------------------------
#: storage_options keys this path understands (anything else, e.g. ``requester_pays``,
#: ``version_aware``, ``s3_additional_kwargs`` for SSE-C, ``profile``: s3fs path).
_KNOWN_OPTIONS = frozenset({"key", "secret", "token", "anon", "endpoint_url", "client_kwargs", "config_kwargs",
                            "use_listings_cache", "skip_instance_cache", "default_block_size", "default_fill_cache",
                            "default_cache_type", "listings_expiry_time", "max_paths", "asynchronous", "loop"})
_KNOWN_CLIENT_KWARGS = frozenset({"endpoint_url", "region_name"})
#: botocore Config fields that change nothing about a plain range GET.
_KNOWN_CONFIG = frozenset({"connect_timeout", "read_timeout", "max_pool_connections", "response_checksum_validation",
                           "request_checksum_calculation", "http_session_cls", "retries", "tcp_keepalive",
                           "user_agent", "user_agent_extra", "region_name", "s3"})


def _endpoint(options: dict[str, Any]) -> str | None:
    client_kwargs = options.get("client_kwargs") or {}
    endpoint = options.get("endpoint_url") or client_kwargs.get("endpoint_url")
    endpoint = endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if not endpoint:
        return None
    parts = urlsplit(str(endpoint))
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path.strip("/") or parts.query:
        return None
    return str(endpoint)


def _region(options: dict[str, Any]) -> str:
    config = options.get("config_kwargs") or {}
    return str(
        (options.get("client_kwargs") or {}).get("region_name")
        or config.get("region_name")
        or os.environ.get("AWS_DEFAULT_REGION")
        or os.environ.get("AWS_REGION")
        or "us-east-1"
    )


def _credentials(options: dict[str, Any]) -> Callable[[], Credentials] | None | bool:
    """A callable giving (key, secret, token); None for anonymous; False when unknown."""
    if options.get("anon"):
        return None
    key, secret = options.get("key"), options.get("secret")
    if key or secret or options.get("token"):
        if not (key and secret):
            return False
        frozen = (str(key), str(secret), options.get("token") or None)
        return lambda: frozen
    try:
        import botocore.session
    except ImportError:
        return False
    creds = botocore.session.get_session().get_credentials()
    if creds is None:
        return False

    def current() -> Credentials:  # refreshable credentials (roles) refresh here when due
        f = creds.get_frozen_credentials()
        return (f.access_key, f.secret_key, f.token or None)

    return current


def fast_reader(protocol: str, options: dict[str, Any], connect_timeout: float, read_timeout: float) -> S3RangeReader | None:
    """The lean range reader for these s3fs options, or None when s3fs must do it: not S3, turned
    off (``SHARDSTORE_S3_FAST=0``), real AWS (no endpoint given: virtual-hosted addressing, region
    redirects), or any option this path does not implement."""
    if protocol not in ("s3", "s3a") or os.environ.get("SHARDSTORE_S3_FAST", "1").strip().lower() in ("0", "false", "no"):
        return None
    if not set(options) <= _KNOWN_OPTIONS:
        return None
    client_kwargs = options.get("client_kwargs") or {}
    config = options.get("config_kwargs") or {}
    if not set(client_kwargs) <= _KNOWN_CLIENT_KWARGS or not set(config) <= _KNOWN_CONFIG:
        return None
    s3_config = config.get("s3") or {}
    if set(s3_config) - {"addressing_style"} or s3_config.get("addressing_style", "path") not in ("path", "auto"):
        return None
    endpoint = _endpoint(options)
    if endpoint is None:
        return None
    creds = _credentials(options)
    if creds is False:
        return None
    return S3RangeReader(endpoint, _region(options), creds or None, connect_timeout, read_timeout)  # type: ignore[arg-type]
