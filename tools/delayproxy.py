"""A TCP proxy that adds latency (this kernel has no netem) and, for HTTP, counts and breaks requests.

Real S3 answers a small GET in tens of milliseconds; a server on 127.0.0.1 answers in one or two.
Put this proxy between a client and the local S3 server to see what latency does to a workload:
every chunk of bytes is held ``delay_ms`` before it is passed on, in each direction, without
limiting throughput (chunks are timestamped on arrival and released in order). A request/response
round trip therefore costs about ``2 * delay_ms`` more.

With ``http=True`` (the default) the proxy also reads the request heads going to the server, so
it can list the requests that passed (method, path, Range) and inject real faults into the next
ones: ``inject("reset", 2)`` resets the TCP connection of the next 2 matching requests,
``inject(503, 3)`` answers the next 3 with ``503 SlowDown``. Request bodies with a
Content-Length are passed through; a chunked body ends parsing for that connection.

Python::

    from delayproxy import DelayProxy
    with DelayProxy("127.0.0.1:9000", delay_ms=20) as proxy:
        opts = {..., "endpoint_url": proxy.endpoint}
        ...
        print(proxy.count("GET"))

CLI (runs until Ctrl-C / SIGTERM; prints the endpoint first, counts at exit)::

    python tools/delayproxy.py --target 127.0.0.1:9000 --delay-ms 20
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

_CHUNK = 256 * 1024
_MAX_HEAD = 64 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class Request:
    """One HTTP request that reached the proxy."""

    method: str
    path: str
    range: str | None
    connection: int
    faulted: str | None = None
    #: ``time.monotonic()`` when the request head reached the proxy.
    time: float = 0.0


@dataclasses.dataclass
class _Fault:
    kind: str  # "reset" or an HTTP status code as text
    remaining: int
    methods: frozenset[str]


def _parse_target(target: str | tuple[str, int]) -> tuple[str, int]:
    if isinstance(target, tuple):
        return target
    text = target.split("://", 1)[-1].rstrip("/")
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


class _DelayedWriter:
    """Writes chunks to ``writer`` ``delay`` seconds after they were queued, in order."""

    def __init__(self, writer: asyncio.StreamWriter, delay: float) -> None:
        self.writer, self.delay = writer, delay
        self.queue: asyncio.Queue[tuple[float, bytes | None]] = asyncio.Queue()
        self.task = asyncio.ensure_future(self._run())

    def put(self, data: bytes | None) -> None:
        self.queue.put_nowait((time.monotonic() + self.delay, data))

    async def _run(self) -> None:
        while True:
            due, data = await self.queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if data is None:
                with contextlib.suppress(OSError, RuntimeError):
                    if self.writer.can_write_eof():
                        self.writer.write_eof()
                return
            self.writer.write(data)
            await self.writer.drain()


class DelayProxy:
    """The proxy, run on its own event loop in a background thread (``start``/``stop`` or ``with``)."""

    def __init__(
        self,
        target: str | tuple[str, int],
        delay_ms: float = 0.0,
        *,
        listen: tuple[str, int] = ("127.0.0.1", 0),
        http: bool = True,
    ) -> None:
        self.target = _parse_target(target)
        self.delay = delay_ms / 1000.0
        self.listen = listen
        self.http = http
        self.connections = 0
        self._requests: list[Request] = []
        self._faults: collections.deque[_Fault] = collections.deque()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    # ----- control (from any thread) -----------------------------------------------------------
    @property
    def endpoint(self) -> str:
        return f"http://{self.listen[0]}:{self.port}"

    def start(self) -> DelayProxy:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="delayproxy", daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._open(), loop).result(timeout=10)
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        loop = self._loop
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._close(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
        loop.close()
        self._loop = None

    def __enter__(self) -> DelayProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def inject(self, fault: str | int, count: int = 1, methods: Sequence[str] = ("GET",)) -> None:
        """Break the next ``count`` requests whose method is in ``methods``.

        ``fault="reset"`` resets their TCP connection (the client sees ECONNRESET); an HTTP status
        (e.g. ``503``) answers them with that status and an S3 error body, then closes.
        """
        if not self.http:
            raise ValueError("faults need http=True")
        with self._lock:
            self._faults.append(_Fault(str(fault), count, frozenset(m.upper() for m in methods)))

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    @property
    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._requests)

    def count(self, method: str | None = None) -> int:
        """How many requests (of ``method``) passed since the start or the last ``reset_counts``."""
        return sum(1 for r in self.requests if method is None or r.method == method.upper())

    def reset_counts(self) -> None:
        with self._lock:
            self._requests.clear()
            self.connections = 0

    # ----- the loop side ---------------------------------------------------------------------
    async def _open(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.listen[0], self.listen[1])
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _take_fault(self, method: str) -> str | None:
        with self._lock:
            for f in self._faults:
                if f.remaining > 0 and method in f.methods:
                    f.remaining -= 1
                    kind = f.kind
                    while self._faults and self._faults[0].remaining <= 0:
                        self._faults.popleft()
                    return kind
        return None

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)  # type: ignore[arg-type]
        with self._lock:
            self.connections += 1
            conn_id = self.connections
        swriter: asyncio.StreamWriter | None = None
        children: list[asyncio.Future[Any]] = []
        try:
            sreader, swriter = await asyncio.open_connection(*self.target)
            to_server = _DelayedWriter(swriter, self.delay)
            to_client = _DelayedWriter(cwriter, self.delay)
            up = self._client_to_server(creader, cwriter, to_server, conn_id) if self.http else _pump(creader, to_server)
            pumps = [asyncio.ensure_future(up), asyncio.ensure_future(_pump(sreader, to_client))]
            children = [*pumps, to_server.task, to_client.task]
            await asyncio.gather(*pumps)
            await asyncio.gather(to_server.task, to_client.task)
        except (ConnectionError, OSError, asyncio.IncompleteReadError, _Abort, asyncio.CancelledError):
            pass
        finally:
            for child in children:
                child.cancel()
            for w in (cwriter, swriter):
                if w is not None:
                    with contextlib.suppress(Exception):
                        w.close()
            await asyncio.gather(*children, return_exceptions=True)
            self._tasks.discard(task)  # type: ignore[arg-type]

    async def _client_to_server(
        self, reader: asyncio.StreamReader, cwriter: asyncio.StreamWriter, out: _DelayedWriter, conn_id: int
    ) -> None:
        """Forward requests one by one, reading each head to record it and maybe break it."""
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as e:
                if e.partial:
                    out.put(e.partial)
                out.put(None)
                return
            except asyncio.LimitOverrunError:
                await _pump(reader, out)  # not HTTP as we know it: just relay
                return
            method, path, headers = _parse_head(head)
            fault = self._take_fault(method)
            with self._lock:
                self._requests.append(Request(method, path, headers.get("range"), conn_id, fault, time.monotonic()))
            if fault is not None:
                await self._break(fault, cwriter)
                raise _Abort()
            out.put(head)
            if headers.get("transfer-encoding", "").lower() == "chunked":
                await _pump(reader, out)  # body framing we don't follow: relay the rest raw
                return
            remaining = int(headers.get("content-length", "0") or 0)
            while remaining > 0:
                data = await reader.read(min(remaining, _CHUNK))
                if not data:
                    out.put(None)
                    return
                remaining -= len(data)
                out.put(data)

    async def _break(self, fault: str, cwriter: asyncio.StreamWriter) -> None:
        if fault == "reset":
            sock = cwriter.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            cwriter.transport.abort()
            return
        status = int(fault)
        code = {503: "SlowDown", 500: "InternalError", 502: "BadGateway", 504: "GatewayTimeout"}.get(status, "Error")
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>injected by delayproxy</Message></Error>"
        ).encode()
        if self.delay:
            await asyncio.sleep(self.delay)
        cwriter.write(
            f"HTTP/1.1 {status} {code}\r\nContent-Type: application/xml\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n".encode() + body
        )
        with contextlib.suppress(Exception):
            await cwriter.drain()


class _Abort(Exception):
    """A fault was injected: end this connection."""


async def _pump(reader: asyncio.StreamReader, out: _DelayedWriter) -> None:
    while True:
        data = await reader.read(_CHUNK)
        if not data:
            out.put(None)
            return
        out.put(data)


def _parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    method = parts[0].upper() if parts else ""
    path = parts[1] if len(parts) > 1 else ""
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return method, path, headers


@contextlib.contextmanager
def delay_proxy(target: str | tuple[str, int], delay_ms: float = 0.0, *, process: bool = False) -> Iterator[Any]:
    """``with delay_proxy(endpoint, 20) as p: p.endpoint``.

    ``process=True`` runs the proxy in a child process (the CLI), so its work does not share this
    process's GIL with the client being measured; it then offers only ``endpoint`` and ``port``.
    """
    if not process:
        with DelayProxy(target, delay_ms) as proxy:
            yield proxy
        return
    host, port = _parse_target(target)
    proc = subprocess.Popen(
        [sys.executable, __file__, "--target", f"{host}:{port}", "--delay-ms", str(delay_ms), "--quiet"],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode().strip()
        if not line.startswith("http://"):
            raise RuntimeError(f"delayproxy did not start (exit code {proc.poll()})")
        yield _ProcessProxy(line, int(line.rsplit(":", 1)[1]), proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclasses.dataclass(frozen=True)
class _ProcessProxy:
    endpoint: str
    port: int
    pid: int


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", required=True, help="HOST:PORT (or http://HOST:PORT) to forward to")
    p.add_argument("--delay-ms", type=float, default=20.0, help="delay added in each direction (default %(default)s)")
    p.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT to listen on (port 0: any free port)")
    p.add_argument("--raw", action="store_true", help="plain TCP: do not read HTTP request heads")
    p.add_argument("--quiet", action="store_true", help="no request counts at exit")
    args = p.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    proxy = DelayProxy(args.target, args.delay_ms, listen=(host or "127.0.0.1", int(port)), http=not args.raw)
    proxy.start()
    print(proxy.endpoint, flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    proxy.stop()
    if not args.quiet:
        by_method = collections.Counter(r.method for r in proxy.requests)
        print(f"connections: {proxy.connections}, requests: {dict(by_method)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
