"""The FUSE side of a mount: mfusepy operations over a ``tree.Tree`` (paths in, errno out).

errno lives here only: ``SampleNotFoundError`` becomes ENOENT, any other error EIO and a log line.
Every call that would change something answers EROFS (the kernel already refuses most of them:
the mount is ``ro``).

What keeps round trips and Python work per file low (``FastFUSE`` bypasses mfusepy's generic
wrappers on the hot paths):

- ``getattr`` fills the C ``stat`` directly, behind an LRU of lookups (misses included);
- ``readdir`` feeds libfuse's filler from the listing cursor, and gives full attributes for a
  listing's first entries when the kernel asks (READDIRPLUS): no LOOKUP for files opened next;
- local trees answer ``open`` with no handle (reads find the member by path; RELEASE is answered
  by libfuse alone): members of ``direct_io_min`` bytes or more are opened ``direct_io`` (one copy
  from the shard's page cache into the reader's buffer instead of two, and one READ per reader's
  read), smaller ones ``keep_cache`` and ``noflush``. With ``direct_io_min=0`` they answer ENOSYS
  once instead, after which the kernel opens files itself (no OPEN/RELEASE round trips at all);
- ``read_buf`` hands libfuse the shard's descriptor and offset, and libfuse splices the bytes
  without Python touching them; READs are capped (``max_read``) so that libfuse's splice pipe
  can hold a whole reply (else it falls back to a fresh buffer, a read and a write);
- on S3 an open file reads ahead in a window that doubles (256 KB to 8 MB) while it is read
  sequentially, the next window fetched in the background;
- libfuse's worker threads keep their Python thread state (and so their index connection).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import itertools
import logging
import os
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from .. import nvmeta
from ..errors import SampleNotFoundError, ShardstoreError
from ..membercheck import HEADER_SPAN
from ..storage import ByteRange, LocalStorage, Storage
from .tree import DIR, MultiTree, Node, Page, Tree, blob_names, not_found

try:  # the compiled listing and open/read paths (optional: everything also runs in Python)
    from .. import _fusefast as _fast
except ImportError:  # pragma: no cover - a build without a C compiler
    _fast = None  # type: ignore[assignment]
if os.environ.get("SHARDSTORE_MOUNT_PURE_PYTHON"):  # tests run the Python paths too
    _fast = None  # type: ignore[assignment]

__all__ = ["ShardFS", "fuse_class"]

log = logging.getLogger("shardstore.mount")

DIR_MODE = stat.S_IFDIR | 0o555
FILE_MODE = stat.S_IFREG | 0o444
#: Read-ahead window for remote storage: it starts small and doubles on sequential reads.
MIN_WINDOW = 256 << 10
MAX_WINDOW = 8 << 20
#: Paths whose lookup result (found or not) is kept.
CACHE_SIZE = 16384
#: The kernel may keep names and attributes this long: the dataset cannot change under the mount.
KERNEL_TIMEOUT = 3600.0
#: ``st_blksize``: tools such as ``cp`` read in chunks of this size.
BLKSIZE = 1 << 20
_NS = 1_000_000_000
#: A listing gives full attributes for its first entries when the kernel asks for them
#: (READDIRPLUS), sparing one LOOKUP round trip per file that is then opened; past this many
#: the entries are names only, so a huge folder's listing stays fast and creates no inodes.
PLUS_ENTRIES = 4096
_READDIR_PLUS, _FILL_DIR_PLUS = 1, 2
_CAP_SPLICE_WRITE = 1 << 7  # libfuse's FUSE_CAP_SPLICE_WRITE
#: Members at least this big are opened ``direct_io``: a reader's read becomes one READ (up to
#: ``max_read``) that the kernel copies straight from the shard's page cache into the reader's
#: buffer, instead of 128 KB read-ahead requests copied into the mount's page cache and from there
#: again. Smaller members keep the page cache (repeat reads, small reads, ``mmap``).
DIRECT_IO_MIN = 16 << 20
_PAGE = 4096
_PIPE_MAX_SIZE = "/proc/sys/fs/pipe-max-size"

F = TypeVar("F", bound=Callable[..., Any])


class _Errno(OSError):
    """An errno answer meant for the kernel (not a library error that happens to be an OSError)."""

    def __init__(self, code: int) -> None:
        super().__init__(code, os.strerror(code))


def _fuse_op(fn: F) -> F:
    """Map library errors to errno: not found -> ENOENT, anything else -> EIO and a log line."""

    @functools.wraps(fn)
    def wrapper(self: ShardFS, path: str, *args: Any) -> Any:
        try:
            return fn(self, path, *args)
        except _Errno:
            raise
        except SampleNotFoundError:
            raise _Errno(errno.ENOENT) from None
        except Exception as e:  # noqa: BLE001 - the kernel only understands errno
            log.error("%s %s failed: %s: %s", fn.__name__, path, type(e).__name__, e)
            raise _Errno(errno.EIO) from None

    return wrapper  # type: ignore[return-value]


class _LRU:
    """A small thread-safe LRU map (path -> lookup result)."""

    MISSING = object()

    def __init__(self, size: int) -> None:
        self.size = size
        self.data: OrderedDict[str, Any] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: str) -> Any:
        with self.lock:
            value = self.data.get(key, self.MISSING)
            if value is not self.MISSING:
                self.data.move_to_end(key)
            return value

    def put(self, key: str, value: Any) -> None:
        with self.lock:
            self.data[key] = value
            self.data.move_to_end(key)
            if len(self.data) > self.size:
                self.data.popitem(last=False)


class _Listing:
    """An open folder: a lazy listing, resumed where the kernel's last page ended.

    Entry ``i`` (``.`` and ``..`` first) carries offset ``i + 1``; the kernel asks again with the
    offset of the last entry it kept, so paging through never restarts the query; only a
    ``seekdir`` elsewhere does. Entries come in pages (``tree.Page``: a list of names, or
    one ``bytes`` of NUL-ended names read in C) and are offered a page at a time, from the first
    entry not yet taken; those the filler refused (buffer full) are offered again.
    """

    __slots__ = ("factory", "it", "pos", "page", "start")

    def __init__(self, factory: Callable[[], Iterator[Page]]) -> None:
        self.factory = factory
        self.it: Iterator[Page] | None = None
        self.pos = 0  # entries handed over so far
        self.page: Page = ([], b"")  # the current page, from entry ``start`` on
        self.start = 0

    def seek(self, offset: int) -> None:
        if self.it is not None and offset == self.pos:
            return
        self.it = itertools.chain(iter([([".", ".."], b"\x01\x01")]), self.factory())
        self.pos, self.page, self.start = 0, ([], b""), 0
        while self.pos < offset:
            if self.start >= len(self.page[1]) and not self._next():
                return
            step = min(offset - self.pos, len(self.page[1]) - self.start)
            self.pos += step
            self.start += step

    def _next(self) -> bool:
        assert self.it is not None
        page = next(self.it, None)
        if page is None:
            return False
        if isinstance(page[0], bytes) and self.pos < PLUS_ENTRIES:
            # the first entries go one by one (READDIRPLUS attributes): split once, not per request
            page = (blob_names(page[0]), page[1])
        self.page, self.start = page, 0
        return True

    def fill(self, add: Callable[[list[str] | bytes, bytes, int, int], int], on_dir: Callable[[str], None]) -> None:
        """Offer pages to ``add(names, dirs, start, first_offset)`` (the page's entries from
        ``start`` on, entry ``start`` at ``first_offset``), which returns how many it took, until
        it takes fewer than offered (full) or the listing ends."""
        while True:
            if self.start >= len(self.page[1]) and not self._next():
                return
            names, dirs = self.page
            start = self.start
            taken = add(names, dirs, start, self.pos + 1)
            if b"\x01" in dirs[start : start + taken] and isinstance(names, list):  # C pages hold files only
                for name, is_dir in zip(names[start : start + taken], dirs[start : start + taken], strict=True):
                    if is_dir and name not in (".", ".."):
                        on_dir(name)
            self.pos += taken
            self.start += taken
            if start + taken < len(dirs):
                return


class _LocalFile:
    """An open member on local disk: each read is one ``pread`` of exactly the bytes asked for,
    done by libfuse itself (``read_buf`` hands it the shard's descriptor and offset)."""

    __slots__ = ("fd", "node")

    def __init__(self, fd: int, node: Node) -> None:
        self.fd, self.node = fd, node

    def read(self, offset: int, size: int) -> bytes:
        size = min(size, self.node.size - offset)
        return os.pread(self.fd, size, self.node.offset + offset) if size > 0 else b""

    def close(self) -> None:
        pass


class _RemoteFile:
    """An open member on S3: sequential reads fetch a growing window, the next one in background;
    at most two windows (16 MB) are held per open file, never the whole member."""

    def __init__(self, storage: Storage, shard: str, node: Node, pool: ThreadPoolExecutor) -> None:
        self.storage, self.shard, self.node, self.pool = storage, shard, node, pool
        self.start, self.buf = 0, b""
        self.window = MIN_WINDOW
        self.ahead: tuple[int, Future[bytes]] | None = None
        self.lock = threading.Lock()

    def _fetch(self, offset: int, size: int) -> bytes:
        size = min(size, self.node.size - offset)
        return self.storage.read_range(self.shard, ByteRange(self.node.offset + offset, size))

    def _refill(self, offset: int, want: int) -> None:
        sequential = bool(self.buf) and offset == self.start + len(self.buf)
        if self.ahead is not None and self.ahead[0] == offset:
            self.start, self.buf = offset, self.ahead[1].result()
        else:
            if self.ahead is not None:
                self.ahead[1].cancel()
            self.window = min(self.window * 2, MAX_WINDOW) if sequential else MIN_WINDOW
            self.start, self.buf = offset, self._fetch(offset, max(want, self.window))
        self.ahead = None
        nxt = self.start + len(self.buf)
        if (sequential or self.window > MIN_WINDOW) and nxt < self.node.size:
            self.window = min(self.window * 2, MAX_WINDOW)
            self.ahead = (nxt, self.pool.submit(self._fetch, nxt, self.window))

    def read(self, offset: int, size: int) -> bytes:
        end = min(offset + size, self.node.size)
        out = []
        with self.lock:
            while offset < end:
                if not self.start <= offset < self.start + len(self.buf):
                    self._refill(offset, end - offset)
                piece = self.buf[offset - self.start : end - self.start]
                out.append(piece)
                offset += len(piece)
        return b"".join(out)

    def close(self) -> None:
        if self.ahead is not None:
            self.ahead[1].cancel()
        self.buf = b""


# libfuse's ``struct fuse_buf`` / ``fuse_bufvec`` (one buffer). mfusepy's own ``fuse_bufvec``
# declares ``buf`` as a pointer where libfuse has an inline array, so it cannot be used here.
_BUF_IS_FD, _BUF_FD_SEEK, _BUF_FD_RETRY = 1 << 1, 1 << 2, 1 << 3


class _Buf(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("flags", ctypes.c_int),
        ("mem", ctypes.c_void_p),
        ("fd", ctypes.c_int),
        ("pos", ctypes.c_int64),
    ]


class _BufVec(ctypes.Structure):
    _fields_ = [("count", ctypes.c_size_t), ("idx", ctypes.c_size_t), ("off", ctypes.c_size_t), ("buf", _Buf)]


_libc = ctypes.CDLL(None)
_libc.calloc.restype = ctypes.c_void_p
_libc.calloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]


def _new_bufvec(size: int) -> _BufVec:
    """A zeroed ``fuse_bufvec`` from libc's heap: libfuse frees it (and a memory buffer) with
    ``free`` after the reply. Room is left for fields newer libfuse versions append."""
    address = _libc.calloc(1, ctypes.sizeof(_BufVec) + 64)
    if not address:
        raise MemoryError("calloc failed")
    vec = _BufVec.from_address(address)
    vec.count, vec.buf.size = 1, size
    return vec


def max_read(pipe_max_size: int | None = None) -> int:
    """The largest READ to ask the kernel for: the largest power of two up to 1 MB whose reply
    libfuse can splice.

    libfuse splices a reply from a descriptor through a pipe it sizes to the reply plus three
    pages, which ``F_SETPIPE_SZ`` rounds up to a power of two pages; past
    ``/proc/sys/fs/pipe-max-size`` (1 MB by default; CAP_SYS_RESOURCE would lift it) that fails,
    and libfuse reads the range into a fresh buffer and writes it instead, for good on that
    thread: two more copies and a page fault per page. So a 1 MB READ never splices by default.
    """
    if pipe_max_size is None:
        try:
            with open(_PIPE_MAX_SIZE, "rb") as f:
                pipe_max_size = int(f.read())
        except (OSError, ValueError):
            pipe_max_size = 1 << 20
    size = 1 << 20
    while size > 32 * _PAGE:
        pages = -(-(size + 3 * _PAGE + 16) // _PAGE)
        if _PAGE << (pages - 1).bit_length() <= pipe_max_size:
            break
        size //= 2
    return size


class ShardFS:
    """The mount's operations (mfusepy calls them; ``FastFUSE`` calls the ``*_into`` ones)."""

    use_ns = True

    def __init__(self, tree: Tree | MultiTree, direct_io_min: int = DIRECT_IO_MIN) -> None:
        self.tree = tree
        self.cache = _LRU(CACHE_SIZE)
        self.files: dict[int, _LocalFile | _RemoteFile] = {}
        self.dirs: dict[int, _Listing] = {}
        self.handles = itertools.count(1)
        self.pool = ThreadPoolExecutor(8, thread_name_prefix="shardstore-readahead")
        self.fds: dict[tuple[int, int], int] = {}  # (tree, shard) -> descriptor of a local shard
        self.fd_lock = threading.Lock()
        #: local shards: reads find the member by path, no per-open state
        self.by_path = all(isinstance(t.dataset.storage, LocalStorage) for t in tree.all_trees())
        self.direct_io_min = max(0, direct_io_min)
        #: OPEN, READ and RELEASE of local members answered in C (``_fusefast``), from a table of
        #: the members the kernel looked up (``stat_into`` registers them)
        self.c_files = self.by_path and _fast is not None and self.direct_io_min > 0
        #: else ENOSYS to OPEN: the kernel then never asks again (so nothing is opened direct_io)
        self.zero_open = self.by_path and not self.c_files
        self.max_read = max_read()
        if self.by_path:
            # no per-open state to drop: libfuse answers RELEASE without calling Python
            self.release = None  # type: ignore[assignment]
        self.uid, self.gid = os.getuid(), os.getgid()
        self._mtimes: dict[tuple[int, int], int] = {}
        self._default_mtime = time.time_ns()
        try:
            index_stat = tree.all_trees()[0].dataset.storage.stat(f"{nvmeta.META_DIR}/{nvmeta.INDEX_SQLITE}")
            if index_stat.mtime is not None:
                self._default_mtime = int(index_stat.mtime * _NS)
        except ShardstoreError:
            pass

    def _source(self, path: str) -> Tree:
        tree = self.tree.source(path)
        if tree is None:
            raise not_found(path)
        return tree

    def node(self, path: str) -> Node:
        """The node at ``path`` through the LRU cache (misses are cached too)."""
        hit = self.cache.get(path)
        if hit is _LRU.MISSING:
            try:
                hit = self.tree.lookup(path)
            except SampleNotFoundError:
                hit = None
            self.cache.put(path, hit)
        if hit is None:
            raise not_found(path)
        return hit  # type: ignore[no-any-return]

    def thread_started(self) -> None:
        """A new FUSE worker thread: its index connection reads through SQLite's bounded page
        cache rather than mapping the whole file. A mapping per worker thread would make the
        mount's resident size grow towards (threads x index size) as listings touch the index."""
        for tree in self.tree.all_trees():
            tree.index.disable_mmap()

    # ----- attributes ------------------------------------------------------------------------------
    def _shard_mtime(self, tree: Tree, shard: int) -> int:
        key = (id(tree), shard)
        mtime = self._mtimes.get(key)
        if mtime is None:
            try:
                st = tree.dataset.storage.stat(tree.shard_names[shard])
                mtime = int(st.mtime * _NS) if st.mtime is not None else self._default_mtime
            except ShardstoreError:
                mtime = self._default_mtime
            self._mtimes[key] = mtime
        return mtime

    def _member_mtime(self, tree: Tree, node: Node) -> int:
        """The tar header's mtime on local disk, the shard's elsewhere.

        Locally this reads the headers before the member's data (``HEADER_SPAN`` bytes, one
        pread: the member's own header ends where its data starts) and first checks that they
        name the member (``Dataset.verify_member``, ``StaleIndexError`` -> EIO): a shard rewritten
        with its size and mtime kept never serves another member's bytes. On S3 a rewrite changes
        the ETag, which the shard check compares."""
        storage = tree.dataset.storage
        self._check_member(tree, node)
        if isinstance(storage, LocalStorage) and node.offset >= 512:
            pre = min(node.offset, HEADER_SPAN)
            span = storage.read_range(tree.shard_names[node.shard], ByteRange(node.offset - pre, pre))
            ds = tree.dataset
            ds.verify_member(ds.shard_of(node.shard, node.name), node.name, node.offset, node.size, span)
            field = span[-376 : -376 + 12]
            try:
                if field[0] & 0x80:  # base-256
                    return int.from_bytes(field[1:], "big") * _NS
                return int(field.split(b"\0", 1)[0].strip() or b"x", 8) * _NS
            except (ValueError, IndexError):
                pass
        return self._shard_mtime(tree, node.shard)

    def _attrs(self, path: str) -> tuple[int, int, int]:
        """(mode, size, mtime in ns) of ``path``."""
        node = self.node(path)
        if node.is_dir:
            tree = self.tree.source(path) if node.shard >= 0 else None
            mtime = self._shard_mtime(tree, node.shard) if tree is not None else self._default_mtime
            return DIR_MODE, 0, mtime
        return FILE_MODE, node.size, self._member_mtime(self._source(path), node)

    @_fuse_op
    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        mode, size, mtime = self._attrs(path)
        return {
            "st_mode": mode, "st_nlink": 1, "st_size": size, "st_blocks": (size + 511) // 512,
            "st_blksize": BLKSIZE, "st_uid": self.uid, "st_gid": self.gid,
            "st_mtime": mtime, "st_ctime": mtime, "st_atime": mtime,
        }

    @_fuse_op
    def stat_into(self, path: str, st: Any) -> None:
        """``getattr`` straight into a zeroed C ``struct stat``."""
        mode, size, mtime = self._attrs(path)
        st.st_mode, st.st_nlink, st.st_size = mode, 1, size
        st.st_blocks, st.st_blksize = (size + 511) // 512, BLKSIZE
        st.st_uid, st.st_gid = self.uid, self.gid
        sec, nsec = divmod(mtime, _NS)
        for ts in (st.st_mtimespec, st.st_ctimespec, st.st_atimespec):
            ts.tv_sec, ts.tv_nsec = sec, nsec
        if self.c_files and mode == FILE_MODE:
            self._register(path)

    def _register(self, path: str) -> None:
        """Tell the C open where member ``path`` lies: the kernel opens a file only after looking
        it up, so its OPEN, READs and RELEASE then run without Python. A shard that fails its
        check is not registered: opening its members goes through Python and fails there."""
        node = self.node(path)
        tree = self._source(path)
        try:
            self._check_member(tree, node)
            fd = self._shard_fd(tree, node.shard)
        except (ShardstoreError, OSError):
            return
        assert _fast is not None
        _fast.register(path.encode("utf-8", "surrogateescape"), fd, node.offset, node.size, node.size >= self.direct_io_min)

    # ----- folders -----------------------------------------------------------------------------------
    @_fuse_op
    def opendir(self, path: str) -> int:
        if not self.node(path).is_dir:
            raise _Errno(errno.ENOTDIR)
        fh = next(self.handles)
        self.dirs[fh] = _Listing(functools.partial(self.tree.listdir_pages, path))
        return fh

    @_fuse_op
    def readdir_into(self, path: str, fh: int, offset: int, add: Callable[[list[str] | bytes, bytes, int, int], int]) -> None:
        """Page ``offset`` of open folder ``fh`` into libfuse's buffer via ``add`` (see ``_Listing.fill``)."""
        listing = self.dirs.get(fh)
        if listing is None:
            raise _Errno(errno.EBADF)
        listing.seek(offset)
        base = path.rstrip("/")
        # subfolders are few, and their lookups can be dear in filtered views: remember them
        listing.fill(add, lambda name: self.cache.put(f"{base}/{name}", DIR))

    def readdir_with_offset(self, path: str, offset: int, fh: int) -> Iterator[tuple[str, int, int]]:
        """mfusepy's generic path (``FastFUSE`` uses ``readdir_into``)."""
        out: list[tuple[str, int, int]] = []

        def add(names: list[str] | bytes, dirs: bytes, start: int, first: int) -> int:
            if isinstance(names, bytes):
                names = blob_names(names)
            take = min(len(dirs) - start, 256 - len(out))
            out.extend((names[start + i], DIR_MODE if dirs[start + i] else FILE_MODE, first + i) for i in range(take))
            return take

        self.readdir_into(path, fh, offset, add)
        return iter(out)

    @_fuse_op
    def releasedir(self, path: str, fh: int) -> int:
        self.dirs.pop(fh, None)
        return 0

    # ----- files -------------------------------------------------------------------------------------
    @_fuse_op
    def open_member(self, path: str, flags: int) -> tuple[int, bool]:
        """(handle, direct_io) for opening ``path``.

        Local trees give handle 0 (reads find the member by path), ``direct_io`` for members of
        ``direct_io_min`` bytes or more; with ``direct_io_min=0`` they answer ENOSYS instead: the
        kernel then opens files itself, without asking again (no OPEN and RELEASE round trips).
        Remote trees keep per-open state for read-ahead."""
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC):
            raise _Errno(errno.EROFS)
        node = self.node(path)
        if node.is_dir:
            raise _Errno(errno.EISDIR)
        tree = self._source(path)
        self._check_member(tree, node)
        if self.zero_open:
            raise _Errno(errno.ENOSYS)
        direct = 0 < self.direct_io_min <= node.size
        if self.by_path:
            return 0, direct
        fh = next(self.handles)
        storage = tree.dataset.storage
        if isinstance(storage, LocalStorage):  # a metadataset mixing local and remote datasets
            self.files[fh] = _LocalFile(self._shard_fd(tree, node.shard), node)
            return fh, direct
        self.files[fh] = _RemoteFile(storage, tree.shard_names[node.shard], node, self.pool)
        return fh, False

    def open(self, path: str, flags: int) -> int:
        """mfusepy's generic path (``FastFUSE`` uses ``open_member`` and sets the open flags)."""
        return self.open_member(path, flags)[0]

    @staticmethod
    def _check_member(tree: Tree, node: Node) -> None:
        """The member's shard has the size and mtime (ETag) it had at prepare (checked once per
        shard), and the member's range lies inside it: else ``StaleIndexError`` or
        ``IndexCorruptError`` (EIO), never a short read reported as success."""
        ds = tree.dataset
        ds.check_range(ds.shard_of(node.shard, node.name), node.offset, node.size, node.name)

    def _shard_fd(self, tree: Tree, tar_file_id: int) -> int:
        key = (id(tree), tar_file_id)
        fd = self.fds.get(key)
        if fd is None:
            with self.fd_lock:
                fd = self.fds.get(key)
                if fd is None:
                    path = tree.dataset.storage.local_path(tree.shard_names[tar_file_id])
                    assert path is not None
                    fd = self.fds[key] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        return fd

    def _open_file(self, path: str, fh: int) -> _LocalFile | _RemoteFile:
        f = self.files.get(fh)
        if f is not None:
            return f
        if not self.by_path:
            raise _Errno(errno.EBADF)
        node = self.node(path)  # no handle: the path names the member
        tree = self._source(path)
        self._check_member(tree, node)
        return _LocalFile(self._shard_fd(tree, node.shard), node)

    @_fuse_op
    def read_buf(self, path: str, bufpp: Any, size: int, offset: int, fh: int) -> int:
        """``read`` without copies through Python for local shards: libfuse reads (or splices)
        the range from the shard's descriptor itself; remote data is handed over in C memory."""
        f = self._open_file(path, fh)
        if isinstance(f, _LocalFile):
            size = max(0, min(size, f.node.size - offset))
            vec = _new_bufvec(size)
            vec.buf.flags = _BUF_IS_FD | _BUF_FD_SEEK | _BUF_FD_RETRY
            vec.buf.fd, vec.buf.pos = f.fd, f.node.offset + offset
        else:
            data = f.read(offset, size)
            vec = _new_bufvec(len(data))
            if data:
                vec.buf.mem = _libc.calloc(1, len(data))
                if not vec.buf.mem:
                    raise MemoryError("calloc failed")
                ctypes.memmove(vec.buf.mem, data, len(data))
        ctypes.cast(bufpp, ctypes.POINTER(ctypes.c_void_p))[0] = ctypes.addressof(vec)
        return 0

    @_fuse_op
    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return self._open_file(path, fh).read(offset, size)

    @_fuse_op
    def release(self, path: str, fh: int) -> int:
        f = self.files.pop(fh, None)
        if f is not None:
            f.close()
        return 0

    @_fuse_op
    def statfs(self, path: str) -> dict[str, int]:
        total = files = 0
        for tree in self.tree.all_trees():
            total += sum(tree.dataset.prepared_shard_sizes.values())
            files += sum(tree.dataset.info.shard_counts.values())
        return {
            "f_bsize": 4096, "f_frsize": 4096, "f_blocks": total // 4096, "f_bfree": 0, "f_bavail": 0,
            "f_files": files, "f_ffree": 0, "f_namemax": 255,
        }

    # ----- everything that would change the tree -----------------------------------------------------
    def _read_only(self, path: str, *args: Any) -> int:
        raise _Errno(errno.EROFS)

    write = create = unlink = rmdir = mkdir = mknod = rename = symlink = link = _read_only
    chmod = chown = truncate = utimens = setxattr = removexattr = _read_only

    def init_with_config(self, conn: Any, config: Any) -> None:
        """Let the kernel keep names, attributes and pages: nothing changes under the mount."""
        if conn is not None:
            if conn.capable & _CAP_SPLICE_WRITE:
                conn.want |= _CAP_SPLICE_WRITE  # read replies from a shard's descriptor move by splice()
            conn.max_read = self.max_read  # libfuse refuses to start unless it equals the -o max_read
        if config is not None:
            config.entry_timeout = config.attr_timeout = config.negative_timeout = KERNEL_TIMEOUT
            config.kernel_cache = 1

    def destroy(self, path: str) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


_pinned: set[int] = set()


def _pin_thread_state() -> bool:
    """Give this (libfuse worker) thread a Python thread state for good.

    ctypes makes a thread state for each callback on a foreign thread and drops it afterwards,
    and with it everything in ``threading.local``: the index's per-thread SQLite connection
    would be reopened on every request. One extra ``PyGILState_Ensure`` that is never released
    keeps the state (one per worker thread, as for a Python thread). True the first time.
    """
    ident = threading.get_ident()
    if ident in _pinned:
        return False
    _pinned.add(ident)
    ctypes.pythonapi.PyGILState_Ensure()
    return True


def fuse_class(mfusepy: Any) -> type:
    """mfusepy's ``FUSE`` with fast ``getattr`` and ``readdir`` (libfuse 3 signatures), whose
    worker threads keep their Python thread state."""

    _HAS_NOFLUSH = any(f[0] == "noflush" for f in mfusepy.fuse_file_info._fields_)

    class FastFUSE(mfusepy.FUSE):  # type: ignore[misc, name-defined]
        def _wrapper(self, func: Any, *args: Any, **kwargs: Any) -> Any:
            if _pin_thread_state():
                try:
                    self.operations.thread_started()
                except Exception as e:  # noqa: BLE001 - a worker must serve even so
                    log.warning("setting up a FUSE worker thread: %s", e)
            return super()._wrapper(func, *args, **kwargs)

        def getattr_fuse_3(self, path: bytes, buf: Any, fip: Any) -> int:
            ctypes.memset(buf, 0, ctypes.sizeof(mfusepy.c_stat))
            self.operations.stat_into(path.decode(self.encoding, self.errors), buf.contents)
            return 0

        def __init__(self, operations: ShardFS, mountpoint: str, **kwargs: Any) -> None:
            if not operations.c_files:
                super().__init__(operations, mountpoint, **kwargs)
                return
            real_main = mfusepy.fuse_main_real
            kept: list[Any] = []

            def main(argc: Any, argv: Any, ops: Any, size: Any, ctx: Any) -> Any:
                kept.extend(_install_c_files(mfusepy, ops.contents))
                return real_main(argc, argv, ops, size, ctx)

            mfusepy.fuse_main_real = main  # the one moment the operations table exists
            try:
                super().__init__(operations, mountpoint, **kwargs)
            finally:
                mfusepy.fuse_main_real = real_main

        def readdir_fuse_3(self, path: bytes, buf: Any, filler: Any, offset: int, fip: Any, flags: int) -> int:
            dir_st, file_st, full_st = mfusepy.c_stat(), mfusepy.c_stat(), mfusepy.c_stat()
            dir_st.st_mode, file_st.st_mode = DIR_MODE, FILE_MODE
            kinds = (ctypes.pointer(file_st), ctypes.pointer(dir_st))
            full, full_size = ctypes.pointer(full_st), ctypes.sizeof(full_st)
            encoding, errors = self.encoding, self.errors
            folder = path.decode(encoding, errors)
            base = folder.rstrip("/")
            ops = self.operations
            plus = flags & _READDIR_PLUS
            fast = _fast
            c_args: tuple[int, int, int, int] = (
                ctypes.cast(filler, ctypes.c_void_p).value or 0, buf or 0, ctypes.addressof(file_st), ctypes.addressof(dir_st),
            )

            def add_one(name: str, is_dir: int, off: int) -> int:
                if plus and 2 < off <= PLUS_ENTRIES:
                    # with attributes: the kernel then needs no LOOKUP for this name
                    ctypes.memset(full, 0, full_size)
                    try:
                        ops.stat_into(f"{base}/{name}", full_st)
                    except OSError:
                        pass
                    else:
                        return filler(buf, name.encode(encoding, errors), full, off, _FILL_DIR_PLUS)  # type: ignore[no-any-return]
                return filler(buf, name.encode(encoding, errors), kinds[is_dir], off, 0)  # type: ignore[no-any-return]

            def add(names: list[str] | bytes, dirs: bytes, start: int, first: int) -> int:
                """Entries ``start..`` of a page, entry ``start`` at offset ``first``; how many taken."""
                i, n = start, len(dirs)
                if plus or fast is None:  # the entries given attributes, one call each
                    end = n if fast is None else min(n, start + max(0, PLUS_ENTRIES + 1 - first))
                    listed = blob_names(names) if i < end and isinstance(names, bytes) else names
                    while i < end:
                        if add_one(listed[i], dirs[i], first + i - start):  # type: ignore[arg-type]
                            return i - start
                        i += 1
                if i < n and fast is not None:  # names only: the whole rest of the page in one C call
                    filler_address, buf_address, file_address, dir_address = c_args
                    if isinstance(names, bytes):  # NUL-ended names read in C, all files
                        i += fast.fill_blob(filler_address, buf_address, names, i, n, first + i - start, file_address)
                    else:
                        encoded = [name.encode(encoding, errors) for name in names[i:]]
                        i += fast.fill(filler_address, buf_address, encoded, dirs[i:], first + i - start, file_address, dir_address)
                return i - start

            ops.readdir_into(folder, fip.contents.fh, offset, add)
            return 0

        def open(self, path: bytes, fip: Any) -> int:
            fi = fip.contents
            fi.fh, direct = self.operations.open_member(path.decode(self.encoding, self.errors), fi.flags)
            if direct:
                fi.direct_io = 1
            else:
                fi.keep_cache = 1  # as the kernel's own open would: the pages stay valid
            if _HAS_NOFLUSH:
                fi.noflush = 1  # no FLUSH round trip on close
            return 0

    return FastFUSE


def _flag_mask(mfusepy: Any, *names: str) -> int:
    """The bits of ``fuse_file_info``'s flag word (after ``flags``) that the named fields set."""
    fi = mfusepy.fuse_file_info()
    for name in names:
        if any(f[0] == name for f in fi._fields_):
            setattr(fi, name, 1)
    return ctypes.c_uint32.from_buffer(fi, ctypes.sizeof(ctypes.c_int32)).value


def _install_c_files(mfusepy: Any, ops: Any) -> list[Any]:
    """Point libfuse's open, read_buf and release at ``_fusefast``'s, which fall back to the
    Python callbacks mfusepy put there; returns what must stay alive while the loop runs."""
    assert _fast is not None
    kept = [ops.open, ops.read_buf, ops.release]
    fallbacks = [ctypes.cast(f, ctypes.c_void_p).value or 0 for f in kept]
    fi = mfusepy.fuse_file_info
    _fast.configure(
        fi.fh.offset, ctypes.sizeof(ctypes.c_int32), _flag_mask(mfusepy, "direct_io", "noflush"),
        _flag_mask(mfusepy, "keep_cache", "noflush"), *fallbacks,
    )
    prototypes = {f[0]: f[1] for f in type(ops)._fields_}
    for name, address in zip(("open", "read_buf", "release"), _fast.addresses(), strict=True):
        setattr(ops, name, ctypes.cast(ctypes.c_void_p(address), prototypes[name]))
    return kept
