"""Any fsspec filesystem (S3 first of all) as ``Storage``: range requests, retried with backoff,
with S3 clients whose every request ends (timeouts, no ``Expect: 100-continue``)."""

from __future__ import annotations

import builtins
import errno
import os
import random
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

from ..errors import MissingExtraError, StorageError
from .base import ByteRange, FileStat, Storage, _not_found, contained_path

#: Ranges closer than this are read as one request: a request costs tens of ms, about what 1 MiB
#: more of data costs.
REMOTE_MERGE_GAP = 1 << 20
#: fsspec protocol -> extra that provides it, for a helpful error when it is missing.
_PROTOCOL_EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "az": "azure", "abfs": "azure"}


#: ``FsspecStorage._fast`` before it is decided.
_UNSET = object()

#: Every live ``FsspecStorage``: a forked child drops their clients and makes its own.
_REMOTE_STORAGES: weakref.WeakSet[FsspecStorage] = weakref.WeakSet()
#: In a forked child: the parent's clients, kept alive so they are never garbage-collected here.
_PARENT_CLIENTS: builtins.list[Any] = []


def _drop_clients_after_fork() -> None:
    """In a forked child: use new clients, and never close the parent's.

    A child shares its parent's sockets and its event loop's epoll instance. When the child lets
    go of the parent's s3fs client, s3fs's finalizer (and garbage collection of the connection
    pool) closes those connections from the child, and the parent's next request on one of them
    hung until its read timeout (15 s; tests/s3/test_read_s3.py reproduces it). So the child keeps
    the parent's clients alive and disarms their finalizers.
    """
    for storage in list(_REMOTE_STORAGES):
        if storage._fs is not None:
            _PARENT_CLIENTS.append(storage._fs)
            storage._fs = None
    for fin in list(getattr(weakref.finalize, "_registry", {})):
        info = fin.peek()
        if info is not None and getattr(info[1], "__qualname__", "") == "S3FileSystem.close_session":
            _PARENT_CLIENTS.append(info[0])
            fin.detach()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_drop_clients_after_fork)


class FsspecStorage(Storage):
    """Any fsspec filesystem (S3 first of all). Reads are range requests, retried with backoff."""

    #: Attempts per request before giving up on a transient error (on top of the client's own retries).
    retries = 5
    #: First wait between attempts, in seconds; doubled (with jitter) after each failure.
    backoff = 0.05
    merge_gap = REMOTE_MERGE_GAP

    def __init__(self, root: str, storage_options: dict[str, Any] | None = None) -> None:
        self.protocol = root.split("://", 1)[0]
        self.storage_options = dict(storage_options or {})
        self.root = root.rstrip("/")
        self._fs: Any = None
        self._fast: Any = _UNSET
        self._prefix = self.fs._strip_protocol(self.root).rstrip("/")
        _REMOTE_STORAGES.add(self)

    @property
    def fs(self) -> Any:
        """The fsspec filesystem; a forked child makes its own (s3fs's event loop thread does not
        survive a fork: the parent's client would fail with "not fork-safe" or hang)."""
        if self._fs is None:
            import fsspec

            try:
                self._fs = fsspec.filesystem(self.protocol, **client_options(self.protocol, self.storage_options))
            except ImportError as e:
                extra = _PROTOCOL_EXTRAS.get(self.protocol, self.protocol)
                raise MissingExtraError(
                    f"reading {self.protocol}:// URLs needs an extra: pip install 'shardstore[{extra}]' ({e})",
                    path=self.root,
                ) from e
            except ValueError as e:  # fsspec: "Protocol not known"
                raise StorageError(f"unknown URL protocol {self.protocol}:// ({e})", path=self.root) from e
        return self._fs

    def _fast_reader(self) -> Any:
        """The lean range-GET path (``s3http``) when these options allow it, else None (s3fs)."""
        if self._fast is _UNSET:
            from .s3http import fast_reader

            config = client_options(self.protocol, self.storage_options).get("config_kwargs") or {}
            self._fast = fast_reader(
                self.protocol,
                self.storage_options,
                float(config.get("connect_timeout", S3_CONNECT_TIMEOUT)),
                float(config.get("read_timeout", S3_READ_TIMEOUT)),
            )
        return self._fast

    def __getstate__(self) -> dict[str, Any]:
        return {"root": self.root, "storage_options": self.storage_options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["root"], state["storage_options"])  # type: ignore[misc]

    def _full(self, path: str) -> str:
        """The key of ``path``; ``PathEscapeError`` for a name that would leave the prefix."""
        return f"{self._prefix}/{contained_path(path, self.root)}" if path else self._prefix

    def _retry(self, what: str, path: str, fn: Callable[[], Any], offset: int | None = None) -> Any:
        """``fn()``, retried with exponential backoff on transient errors; errors name ``path`` and ``what``."""
        delay = self.backoff
        for attempt in range(1, self.retries + 1):
            try:
                return fn()
            except FileNotFoundError:
                err = StorageError(f"{what}: no such object", path=self.url(path), offset=offset)
                err.errno = errno.ENOENT
                raise err from None
            except Exception as e:  # noqa: BLE001 - classify below
                if not _transient(e):
                    raise StorageError(f"{what} failed: {_describe(e)}", path=self.url(path), offset=offset) from e
                if attempt == self.retries:
                    raise StorageError(
                        f"{what} failed after {attempt} attempts: {_describe(e)}", path=self.url(path), offset=offset
                    ) from e
                time.sleep(delay * (1 + random.random()))
                delay *= 2
        raise AssertionError("unreachable")

    def stat(self, path: str) -> FileStat:
        info = self._retry("stat", path, lambda: self.fs.info(self._full(path)))
        if info.get("type") == "directory":
            raise _not_found(self.url(path))
        etag = str(info.get("ETag") or info.get("etag") or "").strip('"')
        return FileStat(size=int(info["size"]), mtime=_info_mtime(info), etag=etag or None)

    def read_range(self, path: str, rng: ByteRange) -> bytes:
        if rng.size == 0:  # a zero-length range request is ambiguous across servers: skip it
            return b""
        fast = self._fast_reader()
        if fast is not None:
            bucket, _, key = self._full(path).partition("/")
            fetch: Callable[[], bytes] = lambda: fast.get_range(bucket, key, rng.offset, rng.size)  # noqa: E731
        else:
            fetch = lambda: self.fs.cat_file(self._full(path), start=rng.offset, end=rng.end)  # noqa: E731
        data: bytes = self._retry(f"read of bytes {rng.offset}-{rng.end - 1}", path, fetch, rng.offset)
        if len(data) != rng.size:
            raise StorageError(
                f"short read of bytes {rng.offset}-{rng.end - 1}: got {len(data)} of {rng.size} bytes "
                "(object truncated or replaced since prepare?)",
                path=self.url(path),
                offset=rng.offset,
            )
        return data

    def read(self, path: str) -> bytes:
        """A whole (small) file in one GET; the generic version asks for the size first, and so
        does s3fs unless told to fetch in one piece (it sizes the object to split big ones).
        A missing object raises ``StorageError`` with ``errno.ENOENT``."""
        kw = {"max_concurrency": 1} if self.protocol in ("s3", "s3a") else {}
        data: bytes = self._retry("read", path, lambda: self.fs.cat_file(self._full(path), **kw))
        return data

    def read_ranges(self, requests: Sequence[tuple[str, ByteRange]], max_workers: int = 32) -> builtins.list[bytes]:
        return super().read_ranges(requests, max_workers=max_workers)

    def _read_merged(self, reads: Sequence[tuple[str, ByteRange]], max_workers: int) -> builtins.list[bytes]:
        """All ranges at once on the filesystem's event loop (s3fs: concurrent range GETs).

        A range that fails or comes back short is read again through ``read_range``, which
        retries transient errors with backoff and raises the error that names object and range.
        """
        todo = [i for i, (_, rng) in enumerate(reads) if rng.size]
        if len(todo) > 1 and self._fast_reader() is not None:
            from .s3http import map_concurrent

            return map_concurrent(lambda job: self.read_range(*job), builtins.list(reads))
        if len(todo) <= 1 or not getattr(self.fs, "async_impl", False):
            return super()._read_merged(reads, max_workers)
        results = self.fs.cat_ranges(
            [self._full(reads[i][0]) for i in todo],
            [reads[i][1].offset for i in todo],
            [reads[i][1].end for i in todo],
            on_error="return",
        )
        out = [b""] * len(reads)
        for i, res in zip(todo, results, strict=True):
            path, rng = reads[i]
            ok = isinstance(res, bytes) and len(res) == rng.size
            out[i] = res if ok else self.read_range(path, rng)
        return out

    def list(self, suffixes: tuple[str, ...] = ()) -> list[str]:
        found = self._retry("listing", "", lambda: self.fs.find(self._prefix))
        out = []
        for full in found:
            rel = full[len(self._prefix) + 1 :]
            if rel.startswith(".nv-meta/") or "/.nv-meta/" in rel:
                continue
            if not suffixes or rel.endswith(suffixes):
                out.append(rel)
        return sorted(out)

    def open(self, path: str) -> IO[bytes]:
        f: IO[bytes] = self._retry("open", path, lambda: self.fs.open(self._full(path), "rb", block_size=8 << 20))
        return f

    def exists(self, path: str) -> bool:
        return bool(self._retry("exists", path, lambda: self.fs.isfile(self._full(path))))

    def remove(self, path: str) -> None:
        try:
            self._retry("delete", path, lambda: self.fs.rm_file(self._full(path)))
        except StorageError as e:
            if e.errno != errno.ENOENT:
                raise
        self.fs.invalidate_cache(self._full(path))

    def write_atomic(self, path: str, data: bytes) -> None:
        # A single PUT is atomic on object stores: readers see the old or the new object.
        self._retry("write", path, lambda: self.fs.pipe_file(self._full(path), data))
        self.fs.invalidate_cache(self._full(path))

    def put_file(self, local_path: str, path: str) -> None:
        self._retry("upload", path, lambda: self.fs.put_file(local_path, self._full(path)))
        self.fs.invalidate_cache(self._full(path))
        os.unlink(local_path)


def _info_mtime(info: dict[str, Any]) -> float | None:
    """Modification time from an fsspec ``info()`` dict (s3fs: ``LastModified``), or None."""
    value = info.get("mtime", info.get("LastModified", info.get("last_modified")))
    timestamp = getattr(value, "timestamp", None)
    if callable(timestamp):
        return float(timestamp())
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


#: Exception class names (anywhere in the cause chain) that mean "try again": dropped connections
#: and timeouts of aiohttp, botocore and the standard library.
_TRANSIENT_NAMES = (
    "ServerDisconnected", "ClientOSError", "ClientPayloadError", "ConnectionClosed",
    "ReadTimeout", "ResponseStreaming", "IncompleteRead", "ProtocolError",
)
#: Nothing answered at all (wrong endpoint, server down): the client has already retried
#: connecting with its own backoff (botocore: 5 attempts), so retrying that again only multiplies
#: the wait before the user learns the endpoint is wrong.
_UNREACHABLE_NAMES = ("ConnectionRefusedError", "ClientConnectorError", "ConnectTimeoutError")
#: S3 error codes that mean "try again".
_TRANSIENT_CODES = ("SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling", "ThrottlingException")
#: errno values s3fs gives 5xx answers (EBUSY: 503/SlowDown, EREMOTEIO: 500/InternalError).
_TRANSIENT_ERRNOS = frozenset({errno.EBUSY, getattr(errno, "EREMOTEIO", errno.EIO), errno.ECONNRESET, errno.ETIMEDOUT})


def _chain(e: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


def _transient(e: BaseException) -> bool:
    """Errors worth retrying: dropped connections, timeouts, 5xx and throttling answers.

    Not-found, permission and invalid-range errors are not: retrying cannot fix them.
    """
    chain = list(_chain(e))
    if any(type(err).__name__ in _UNREACHABLE_NAMES for err in chain):
        return False
    for err in chain:
        if isinstance(err, (FileNotFoundError, PermissionError)):
            return False
        if isinstance(err, (ConnectionError, TimeoutError)):
            return True
        if any(n in type(err).__name__ for n in _TRANSIENT_NAMES):
            return True
        response = getattr(err, "response", None)
        if isinstance(response, dict):
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
            code = response.get("Error", {}).get("Code", "")
            if int(status) >= 500 or int(status) == 429 or code in _TRANSIENT_CODES:
                return True
        if isinstance(err, OSError) and err.errno in _TRANSIENT_ERRNOS:
            return True
    return False


def _describe(e: BaseException) -> str:
    """A short cause for messages: the exception type and text (or the S3 error code)."""
    if isinstance(e, OSError) and e.errno == errno.EINVAL and "range" in str(e).lower():
        return f"range not satisfiable: the object is shorter than that (truncated or replaced since prepare?) [{e}]"
    return f"{type(e).__name__}: {e}"


#: Seconds an S3 client may take to connect, and may wait in silence for (or within) an answer;
#: past either, botocore raises a timeout error and retries the request.
S3_CONNECT_TIMEOUT = 5.0
S3_READ_TIMEOUT = 15.0
#: An upload whose body goes out slower than this (bytes/s, on average) counts as stuck.
S3_MIN_UPLOAD_RATE = 256 * 1024


def _bounded_http_session() -> type:
    """aiobotocore's HTTP session, changed so that no request can wait forever (made on first use:
    it subclasses an optional extra; ``BoundedAIOHTTPSession`` resolves here when unpickled too).

    - No ``Expect: 100-continue``: botocore puts it on every S3 PUT, and aiohttp then withholds
      the body until ``100 Continue`` arrives, with no timeout at all (its read timeout starts
      only once the body is sent). A server that answers only after reading the body (rclone
      ``serve s3`` failing a PUT: Go's ``Body.Close`` reads the rest first) or not at all hung
      the upload for good. Without the header the body goes out at once and the read timeout
      bounds the wait. SigV4 does not sign ``Expect``; botocore's own (non-aio) client waits
      only 1 s for the ``100`` anyway.
    - A request with a body must finish within connect + read timeout + body size at
      ``S3_MIN_UPLOAD_RATE``: aiohttp has no timeout on writing, so a peer that stops reading
      would stall an upload for good. It fails as a ``ReadTimeoutError`` (retried by botocore).
    """
    cls = globals().get("BoundedAIOHTTPSession")
    if cls is not None:
        return cls  # type: ignore[no-any-return]
    import asyncio

    from aiobotocore.httpsession import AIOHTTPSession
    from botocore.exceptions import ReadTimeoutError

    class BoundedAIOHTTPSession(AIOHTTPSession):  # type: ignore[misc]
        async def send(self, request: Any) -> Any:
            if "Expect" in request.headers:
                del request.headers["Expect"]
            size = int(request.headers.get("Content-Length") or 0)
            if size == 0:
                return await super().send(request)
            timeout = self._timeout
            limit = (timeout.sock_connect or 0) + (timeout.sock_read or 0) + size / S3_MIN_UPLOAD_RATE
            try:
                return await asyncio.wait_for(super().send(request), limit)
            except asyncio.TimeoutError as e:
                raise ReadTimeoutError(endpoint_url=request.url, error=e) from e

    BoundedAIOHTTPSession.__qualname__ = "BoundedAIOHTTPSession"  # pickled by reference, as a module attribute
    globals()["BoundedAIOHTTPSession"] = BoundedAIOHTTPSession
    return BoundedAIOHTTPSession


def __getattr__(name: str) -> Any:
    if name == "BoundedAIOHTTPSession":
        return _bounded_http_session()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def client_options(protocol: str, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """What ``FsspecStorage`` passes to ``fsspec.filesystem(protocol, ...)``: the options given,
    plus shardstore's defaults for S3 (only where the caller set nothing). Public so that other
    clients of the same store (e.g. the test server's helpers) get the same bounded waits.

    - ``use_listings_cache=False``: every ``exists``/``stat`` asks the server, so a shard
      replaced since the last listing is seen (stale-index checks depend on it).
    - ``max_pool_connections=64``: ``read_ranges`` issues many range GETs at once; botocore's
      default pool of 10 would queue them.
    - ``response_checksum_validation="when_required"``: range reads carry no whole-object
      checksum on AWS, but some S3-compatible servers send the whole object's checksum with a
      ranged answer, which botocore >= 1.36 then rejects; shardstore checks its data itself.
    - ``connect_timeout``/``read_timeout`` (``S3_CONNECT_TIMEOUT``/``S3_READ_TIMEOUT``) and
      ``http_session_cls`` (``_bounded_http_session``): every request ends, in an answer or in
      an error that is retried, never in a wait without end.
    """
    out = dict(options or {})
    if protocol not in ("s3", "s3a"):
        return out
    out.setdefault("use_listings_cache", False)
    config = dict(out.get("config_kwargs") or {})
    config.setdefault("max_pool_connections", 64)
    if "AWS_RESPONSE_CHECKSUM_VALIDATION" not in os.environ:
        config.setdefault("response_checksum_validation", "when_required")
    config.setdefault("connect_timeout", S3_CONNECT_TIMEOUT)
    config.setdefault("read_timeout", S3_READ_TIMEOUT)
    config.setdefault("http_session_cls", _bounded_http_session())
    out["config_kwargs"] = config
    return out
