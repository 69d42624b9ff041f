"""Mount a prepared dataset read-only through FUSE: ``shardstore.mount(...)``, ``shardstore mount``.

What the mount shows is ``tree`` (layouts ``flat`` and ``samples``, ``.by-shard`` and
``.by-split`` views, lazy listings from ``index.sqlite``); how requests are answered is
``fs`` (errno mapping, range reads, S3 read-ahead). This module opens what to mount
(a dataset, or a metadataset YAML: one folder per dataset it names), runs the FUSE loop, and
manages mount points: ``mount`` starts the loop in a fresh process and returns once the mount
answers (a forked daemon would lose s3fs's event-loop thread), ``umount`` ends it, also when
the process died. Start-up time and memory do not depend on the dataset's size.

``shardstore.mount`` is the function; take the rest from the package
(``from shardstore.mount import umount``).
"""

from __future__ import annotations

import ctypes.util
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from types import TracebackType
from typing import Any

from ..dataset import Dataset
from ..errors import ConfigError, MissingExtraError, MountError, ShardstoreError
from ..storage import is_remote_url
from .tree import LAYOUTS, MultiTree, Node, Tree

__all__ = ["LAYOUTS", "MountHandle", "Node", "Tree", "mount", "open_tree", "serve", "umount"]

log = logging.getLogger("shardstore.mount")

#: FUSE worker threads, and idle ones kept (requests take turns on the GIL, but S3 reads and the
#: kernel-side copies of local reads overlap). Setting the idle count also spares libfuse 3.14 a
#: spurious "Ignoring invalid max threads value" message.
MAX_THREADS = 8
_OPTIONS_ENV = "SHARDSTORE_MOUNT_STORAGE_OPTIONS"
_CHILD_MARK = "from shardstore.mount.process import _child_main"
_CHILD_ERROR = "shardstore mount: error: "


# ----- opening what to mount -----------------------------------------------------------------------
def _is_metadataset(url: str) -> bool:
    return url.endswith((".yaml", ".yml"))


def open_tree(
    url: str, layout: str = "flat", storage_options: dict[str, Any] | None = None, split: str | None = None
) -> Tree | MultiTree:
    """The ``Tree`` of a prepared dataset (all shards, or one split's samples at the root), or one
    folder per source of a metadataset."""
    if _is_metadataset(url):
        if split is not None:
            raise ConfigError("a metadataset mounts whole: drop the split (each dataset's are under .by-split)", path=url)
        return _metadataset_tree(url, layout, storage_options)
    _refuse_jsonl(url)
    return Tree(Dataset(url, None, storage_options=storage_options), layout, split)


def _refuse_jsonl(path: str) -> None:
    if path.endswith(".jsonl"):
        raise ConfigError("a JSONL dataset cannot be mounted (read it with shardstore.open or `shardstore cat`)", path=path)


def _metadataset_tree(url: str, layout: str, storage_options: dict[str, Any] | None) -> MultiTree:
    """One folder per distinct dataset the YAML names (in any split, joined ones too), each
    mounted whole (its splits under ``.by-split``), named by the dataset folder's base name."""
    try:
        from .. import metadataset
    except ImportError:
        raise ConfigError("mounting a metadataset YAML needs shardstore.metadataset, missing here", path=url) from None
    trees: dict[str, Tree] = {}
    for path in metadataset.dataset_paths(url, storage_options):
        _refuse_jsonl(path)
        name = re.sub(r"[/\x00]", "_", path.rstrip("/").rsplit("/", 1)[-1]) or "dataset"
        trees[_unique(name, trees)] = Tree(Dataset(path, None, storage_options=storage_options), layout)
    if not trees:
        raise ConfigError("the metadataset names no dataset", path=url)
    return MultiTree(trees)


def _unique(name: str, taken: dict[str, Any]) -> str:
    if name in (".", ".."):
        name = f"_{name}"
    out, i = name, 2
    while out in taken:
        out, i = f"{name}-{i}", i + 1
    return out


# ----- running the FUSE loop ------------------------------------------------------------------------
def _fuse_library() -> str:
    """Point mfusepy at libfuse3 (it picks libfuse2 when both are installed)."""
    path = os.environ.get("FUSE_LIBRARY_PATH")
    if not path:
        for candidate in (
            "/usr/lib/x86_64-linux-gnu/libfuse3.so.3",
            "/usr/lib/aarch64-linux-gnu/libfuse3.so.3",
            "/usr/lib64/libfuse3.so.3",
            "/usr/lib/libfuse3.so.3",
        ):
            if os.path.exists(candidate):
                path = candidate
                break
        else:
            path = ctypes.util.find_library("fuse3") or ""
        if not path:
            raise MissingExtraError("libfuse3 is not installed: apt-get install fuse3 (or your system's fuse3 package)")
        os.environ["FUSE_LIBRARY_PATH"] = path
    return path


def serve(
    url: str, mountpoint: str, layout: str = "flat", storage_options: dict[str, Any] | None = None,
    direct_io_min: int | None = None, split: str | None = None,
) -> None:
    """Mount ``url`` at ``mountpoint`` and serve requests in this process until it is unmounted.

    Opens the dataset (and its index) first, so every error is raised before anything is mounted.
    ``direct_io_min``: see ``mount``.
    """
    tree = open_tree(url, layout, storage_options, split)
    _fuse_library()
    try:
        import mfusepy
    except (ImportError, OSError) as e:
        raise MissingExtraError(f"mounting needs mfusepy and libfuse3: pip install 'shardstore[mount]' ({e})") from e
    from .fs import DIRECT_IO_MIN, ShardFS, fuse_class

    fs = ShardFS(tree, DIRECT_IO_MIN if direct_io_min is None else direct_io_min)
    log.info("serving %s at %s (%s layout)", url, mountpoint, layout)
    threads: dict[str, int] = {"max_idle_threads": MAX_THREADS}
    if (mfusepy.fuse_version_major, mfusepy.fuse_version_minor) >= (3, 12):  # older libfuse 3 lacks the option
        threads["max_threads"] = MAX_THREADS
    try:
        fuse_class(mfusepy)(
            fs, mountpoint, foreground=True, ro=True, default_permissions=True, fsname="shardstore", subtype="shardstore",
            max_read=fs.max_read, **threads,
        )
    except RuntimeError as e:
        raise MountError(f"FUSE failed with code {e}", path=mountpoint) from None


def _child_main() -> None:
    """Entry point of the mount process: ``argv`` = url, mount point, layout, direct_io_min ("" for
    the default), split ("" for every shard)."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s shardstore mount: %(levelname)s %(message)s")
    url, mountpoint, layout, direct, split = sys.argv[1:6]
    options = json.loads(os.environ.pop(_OPTIONS_ENV, "null"))
    try:
        serve(url, mountpoint, layout, options, int(direct) if direct else None, split or None)
    except ShardstoreError as e:
        print(f"{_CHILD_ERROR}{e}", file=sys.stderr, flush=True)
        sys.exit(1)


# ----- mount points ------------------------------------------------------------------------------------
def _canonical(path: str | os.PathLike[str]) -> str:
    """An absolute path whose parent is resolved, without touching the (maybe dead) mount point."""
    path = os.path.abspath(os.fspath(path))
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def _mounted_fuse() -> set[str]:
    """Mount points of FUSE file systems, from /proc/self/mountinfo."""
    out = set()
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            if fields[sep + 1].startswith("fuse"):
                out.add(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
    return out


def _is_mounted(mountpoint: str) -> bool:
    return mountpoint in _mounted_fuse()


def _server_pids(mountpoint: str) -> list[int]:
    """Processes serving ``mountpoint`` (started by ``mount``), found by their command line."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if len(argv) > 4 and _CHILD_MARK.encode() in argv[2] and os.fsdecode(argv[4]) == mountpoint:
            pids.append(int(entry))
    return pids


def _fusermount(mountpoint: str, lazy: bool) -> subprocess.CompletedProcess[str]:
    flags = ["-u", "-z"] if lazy else ["-u"]
    for tool in ("fusermount3", "fusermount"):
        try:
            return subprocess.run([tool, *flags, mountpoint], capture_output=True, text=True, timeout=30)
        except FileNotFoundError:
            continue
    return subprocess.run(["umount", *(["-l"] if lazy else []), mountpoint], capture_output=True, text=True, timeout=30)


def _wait_gone(pids: Iterable[int], timeout: float) -> list[int]:
    """Wait for processes to end (reaping our own children); returns those still alive."""
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive:
        still = []
        for pid in alive:
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    continue
            except ChildProcessError:
                pass
            if _pid_alive(pid):
                still.append(pid)
        alive = still
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    return alive


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"  # a zombie has finished
    except (OSError, IndexError):
        return False


def umount(mountpoint: str | os.PathLike[str], timeout: float = 10.0) -> None:
    """Unmount a shardstore (or any FUSE) mount, also one whose process died; ends its process.

    Tries ``fusermount3 -u``, then a lazy ``-u -z`` (files still open). Raises ``MountError`` if
    nothing is mounted there or unmounting fails.
    """
    mp = _canonical(mountpoint)
    pids = _server_pids(mp)
    if not _is_mounted(mp):
        if pids:  # the mount is gone but its process is not
            _stop(pids, timeout)
            _remove_made(mp)
            return
        raise MountError("not a FUSE mount point", path=mp)
    _detach(mp)
    _stop(pids, timeout)
    _remove_made(mp)


def _made_marker(mp: str) -> str:
    """Where ``mount(..., mkdir=True)`` notes that it made ``mp`` (beside the mount's log), so the
    unmount, in this process or another, removes it again."""
    return _log_path(mp)[: -len(".log")] + ".made"


def _make_mountpoint(mp: str, mkdir: bool) -> None:
    """Refuse a missing mount point as mount(8), fusermount and ratarmount do; with ``mkdir``,
    create its last component only (the parent must exist) and note it for the unmount."""
    if os.path.isdir(mp):
        return
    if os.path.lexists(mp):
        raise MountError("not a folder: a mount point must be an existing empty folder", path=mp)
    if not mkdir:
        raise MountError("no such folder: create the mount point first, or pass --mkdir", path=mp)
    try:
        os.mkdir(mp)
    except FileNotFoundError:
        raise MountError("its parent folder does not exist (--mkdir creates the last component only)", path=mp) from None
    except OSError as e:
        raise MountError(f"cannot create the mount point: {e.strerror}", path=mp) from None
    with open(_made_marker(mp), "w"):
        pass


def _remove_made(mp: str) -> None:
    """After an unmount: remove the mount point if ``--mkdir`` made it (and it is empty)."""
    marker = _made_marker(mp)
    try:  # the serving process and a separate ``umount`` both get here: the first one wins
        os.unlink(marker)
    except FileNotFoundError:
        return
    try:
        os.rmdir(mp)
    except FileNotFoundError:
        pass
    except OSError as e:
        log.warning("could not remove the mount point %s made by --mkdir: %s", mp, e.strerror)


def _detach(mp: str) -> None:
    """``fusermount3 -u``, or lazily (``-z``) when files are still open; the loop then ends."""
    done = _fusermount(mp, lazy=False)
    if done.returncode != 0 and _is_mounted(mp):
        lazy = _fusermount(mp, lazy=True)
        if lazy.returncode != 0 and _is_mounted(mp):
            raise MountError(f"cannot unmount: {done.stderr.strip() or lazy.stderr.strip()}", path=mp)
        log.warning("%s was busy: unmounted lazily (%s)", mp, done.stderr.strip())


def _stop(pids: list[int], timeout: float) -> None:
    """After the unmount the loop ends by itself; a process that hangs on is terminated."""
    alive = _wait_gone(pids, timeout)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in alive:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        alive = _wait_gone(alive, 2.0)
        if not alive:
            return


class MountHandle:
    """A running mount: ``unmount()`` it, or use it as a context manager."""

    def __init__(self, mountpoint: str, process: subprocess.Popen[bytes] | None, log_path: str | None) -> None:
        self.mountpoint = mountpoint
        self.process = process
        self.log_path = log_path

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def mounted(self) -> bool:
        return _is_mounted(self.mountpoint)

    def unmount(self, timeout: float = 10.0) -> None:
        """Unmount and wait for the mount process to end (idempotent); remove the mount point if
        ``mkdir`` made it."""
        if self.mounted:
            _detach(self.mountpoint)
        proc = self.process
        if proc is None or proc.returncode is not None:
            _remove_made(self.mountpoint)
            return
        try:
            proc.wait(timeout)  # the loop ends by itself once unmounted
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(2.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.returncode == 0 and self.log_path:  # a clean run: its log says nothing more
            try:
                os.unlink(self.log_path)
            except FileNotFoundError:
                pass
        _remove_made(self.mountpoint)

    def __enter__(self) -> MountHandle:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.unmount()

    def __repr__(self) -> str:
        return f"MountHandle({self.mountpoint!r}, pid={self.pid}, mounted={self.mounted})"


def mount(
    dataset: str | os.PathLike[str] | Dataset,
    mountpoint: str | os.PathLike[str],
    layout: str = "flat",
    foreground: bool = False,
    storage_options: dict[str, Any] | None = None,
    *,
    timeout: float = 120.0,
    direct_io_min: int | None = None,
    split: str | None = None,
    mkdir: bool = False,
) -> MountHandle:
    """Mount a prepared dataset (path or URL, a ``Dataset``, or a metadataset YAML) read-only.

    The root shows every shard's samples, or one split's (``split``, or the split of a
    ``Dataset`` opened with one); ``.by-shard`` and ``.by-split`` always show them all.

    Returns once the mount answers requests, with a handle to ``unmount()`` it; the FUSE loop runs
    in a new process (its log: ``handle.log_path``). ``foreground=True`` serves in this process
    instead and returns only after it is unmounted. ``layout`` is ``"flat"`` or ``"samples"``.
    Raises ``MountError`` (with the mount process's last log lines) if mounting fails,
    ``ConfigError`` for an unknown layout.

    ``direct_io_min``: members of local datasets at least this many bytes (default 16 MB,
    ``fs.DIRECT_IO_MIN``) are opened ``direct_io``: large reads run at close to the speed of
    reading the shard directly, but bypass the mount's page cache (each read is a request, small
    reads are slow, ``MAP_SHARED`` ``mmap`` fails with ENODEV). 0 keeps every member in the page
    cache and spares local opens their round trip (the kernel then opens files by itself).

    ``mountpoint`` must be an existing folder (``MountError`` otherwise); ``mkdir=True`` creates
    its last component, removed again by the unmount.
    """
    if layout not in LAYOUTS:
        raise ConfigError(f"unknown layout {layout!r}; choose one of {', '.join(LAYOUTS)}", member="layout", noun="argument")
    if isinstance(dataset, Dataset):
        url = dataset.url
        storage_options = storage_options if storage_options is not None else dataset.storage_options
        split = split if split is not None else dataset.split
    else:
        url = os.fspath(dataset)
    if not is_remote_url(url) and not url.startswith("file://"):
        url = os.path.abspath(url)
    mp = _canonical(mountpoint)
    if _is_mounted(mp):
        raise MountError("already a mount point: unmount it first (`shardstore umount`)", path=mp)
    if foreground:
        _make_mountpoint(mp, mkdir)
        try:
            serve(url, mp, layout, storage_options, direct_io_min, split)
        finally:
            _remove_made(mp)
        return MountHandle(mp, None, None)
    open_tree(url, layout, storage_options, split)  # a dataset that cannot mount fails here, in the caller's words
    _make_mountpoint(mp, mkdir)
    try:
        return _spawn(url, mp, layout, storage_options, timeout, direct_io_min, split)
    except BaseException:
        _remove_made(mp)
        raise


def _spawn(
    url: str, mp: str, layout: str, storage_options: dict[str, Any] | None, timeout: float, direct_io_min: int | None,
    split: str | None,
) -> MountHandle:
    env = dict(os.environ)
    env["FUSE_LIBRARY_PATH"] = _fuse_library()
    env[_OPTIONS_ENV] = json.dumps(storage_options)  # the environment, unlike argv, is private to the user
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    log_path = _log_path(mp)
    with open(log_path, "wb") as logf:
        proc = subprocess.Popen(
            [sys.executable, "-c", f"{_CHILD_MARK}; _child_main()", url, mp, layout,
             "" if direct_io_min is None else str(int(direct_io_min)), split or ""],
            stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, env=env, start_new_session=True, close_fds=True,
        )
    deadline = time.monotonic() + timeout
    delay = 0.002
    while not _is_mounted(mp):
        if proc.poll() is not None:
            raise MountError(f"the mount process exited ({proc.returncode}): {_child_error(log_path)}", path=mp)
        if time.monotonic() > deadline:
            _stop([proc.pid], 2.0)
            raise MountError(f"not mounted after {timeout:.0f} s: {_tail(log_path)}", path=mp)
        time.sleep(delay)
        delay = min(delay * 1.5, 0.05)
    return MountHandle(mp, proc, log_path)


def _log_path(mp: str) -> str:
    """One log file per mount point (overwritten by the next mount there), in a per-user folder."""
    folder = os.path.join(tempfile.gettempdir(), f"shardstore-mount-{os.getuid()}")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    return os.path.join(folder, re.sub(r"[^A-Za-z0-9._-]+", "_", mp.strip("/"))[-150:] + ".log")


def _child_error(path: str) -> str:
    """What the mount process said when it failed: its own one-line error (without the prefix
    that would nest ``shardstore mount: error:`` inside the caller's error), else its last lines."""
    tail = _tail(path)
    return tail.rsplit(_CHILD_ERROR, 1)[1] if _CHILD_ERROR in tail else tail


def _tail(path: str, lines: int = 5) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read().strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"
