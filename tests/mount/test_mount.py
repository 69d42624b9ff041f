"""The FUSE mount, really mounted: byte-equal reads in both layouts and all views, tools
(``find``, ``ls -l``, ``du``, ``cp -r``, ``tar c``), read-only errors, unmounting, the CLI."""

from __future__ import annotations

import errno
import io
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from mount_helpers import MountData, build_dataset, mount_rss, sh

import shardstore
from shardstore.errors import MountError
from shardstore.mount import MountHandle, umount
from shardstore.mount.process import _is_mounted, _server_pids

pytestmark = pytest.mark.mount
ROOT = Path(__file__).resolve().parents[2]
LAYOUTS = ("flat", "samples")


def _views(data: MountData, m: object, layout: str) -> list[str]:
    """Where member ``m`` shows: the root, its shard's folder and its split's folder."""
    rel = data.path_of(m, layout)  # type: ignore[arg-type]
    return [rel, f".by-shard/{m.shard}/{rel}", f".by-split/{data.split_of(m.shard)}/{rel}"]  # type: ignore[attr-defined]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_member_reads_back_byte_equal_in_every_view(
    mount_data: MountData, mounted: Callable[..., MountHandle], layout: str
) -> None:
    mp = Path(mounted(mount_data.path, layout).mountpoint)
    for m in mount_data.members:
        for rel in _views(mount_data, m, layout):
            p = mp / rel
            st = p.stat()
            assert st.st_size == len(m.data), rel
            assert int(st.st_mtime) == m.mtime, rel  # the tar header's mtime
            assert p.read_bytes() == m.data, rel


@pytest.mark.parametrize("layout", LAYOUTS)
def test_find_lists_exactly_the_members_and_their_folders(
    mount_data: MountData, mounted: Callable[..., MountHandle], layout: str
) -> None:
    mp = mounted(mount_data.path, layout).mountpoint
    files = {data_path for m in mount_data.members for data_path in _views(mount_data, m, layout)}
    folders = set(mount_data.folders(layout))
    roots = [""] + [f".by-shard/{s}" for s in mount_data.splits["train"] + mount_data.splits["val"]] + [
        f".by-split/{s}" for s in mount_data.splits
    ]
    expected_dirs = {".", ".by-shard", ".by-split", ".by-shard/shards"} | {
        f"{r}/{f}".strip("/") for r in roots for f in folders | {""} if f"{r}/{f}".strip("/")
    }
    # a view shows only the folders of its own members
    expected_dirs = {d for d in expected_dirs if d in (".", ".by-shard", ".by-split", ".by-shard/shards") or d in roots
                     or any(f.startswith(d + "/") for f in files)}
    out = sh("find . -type f", cwd=mp).splitlines()
    assert sorted(p[2:] for p in out) == sorted(files)
    dirs = sh("find . -type d", cwd=mp).splitlines()
    assert {d[2:] or "." for d in dirs} == expected_dirs
    count = int(sh("find . | wc -l", cwd=mp))
    assert count == len(files) + len(expected_dirs) == 3 * len(mount_data.members) + len(expected_dirs)
    # the root alone (what `find -path './.by-*' -prune` leaves) is the members plus their folders
    root_only = sh("find . -path './.by-*' -prune -o -type f -print", cwd=mp).splitlines()
    assert len(root_only) == len(mount_data.members)


def test_ls_l_du_cp_and_tar_work(mount_data: MountData, mounted: Callable[..., MountHandle], tmp_path: Path) -> None:
    mp = Path(mounted(mount_data.path).mountpoint)
    listing = sh("ls -l img/cat", cwd=mp)
    cat = [m for m in mount_data.members if m.name.startswith("img/cat/")]
    for m in cat:
        line = next(row for row in listing.splitlines() if row.endswith(" " + m.name.rsplit("/", 1)[1]))
        assert line.startswith("-r--r--r--") and f" {len(m.data)} " in line
    total = sum(len(m.data) for m in mount_data.members)
    assert int(sh("du -s --apparent-size --block-size=1 --exclude='.by-*' .", cwd=mp).split()[0]) == total
    assert int(sh("du -sk big", cwd=mp).split()[0]) >= 5 * 1024  # st_blocks are real

    dest = tmp_path / "copy"
    sh(f"cp -r {mp}/img {mp}/big {mp}/pax {dest.parent}/ 2>&1 && mkdir -p {dest} && cp -r {mp}/ünïcode {dest}/")
    for m in mount_data.members:
        if m.name.startswith(("img/", "big/", "pax/")):
            assert (dest.parent / m.name).read_bytes() == m.data
        if m.name.startswith("ünïcode/"):
            assert (dest / m.name).read_bytes() == m.data

    tar_bytes = subprocess.run(["tar", "c", "--exclude=.by-*", "."], cwd=mp, check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        got = {ti.name.removeprefix("./"): tar.extractfile(ti).read() for ti in tar if ti.isfile()}  # type: ignore[union-attr]
        assert all(not ti.name.startswith("/") and ".." not in ti.name.split("/") for ti in tar)
    assert got == {m.name: m.data for m in mount_data.members}


def test_python_open_seek_read(mount_data: MountData, mounted: Callable[..., MountHandle]) -> None:
    mp = Path(mounted(mount_data.path).mountpoint)
    blob = next(m for m in mount_data.members if m.name == "big/blob.bin")
    with open(mp / blob.name, "rb") as f:
        for offset, size in ((0, 10), (4_000_000, 100_000), (len(blob.data) - 5, 100), (123, 0), (len(blob.data) + 10, 5)):
            f.seek(offset)
            assert f.read(size) == blob.data[offset : offset + size]
        f.seek(-3, os.SEEK_END)
        assert f.read() == blob.data[-3:]
    with open(mp / "plain1.txt", "rb") as f:  # an empty member
        assert f.read() == b""


@pytest.mark.parametrize(
    "action",
    [
        lambda mp: open(mp / "top0.txt", "wb"),
        lambda mp: open(mp / "top0.txt", "ab"),
        lambda mp: open(mp / "new-file.txt", "wb"),
        lambda mp: os.mkdir(mp / "newdir"),
        lambda mp: os.unlink(mp / "top0.txt"),
        lambda mp: os.rename(mp / "top0.txt", mp / "top1.txt"),
        lambda mp: os.rmdir(mp / "img"),
        lambda mp: os.truncate(mp / "top0.txt", 0),
        lambda mp: os.chmod(mp / "top0.txt", 0o777),
        lambda mp: os.symlink("top0.txt", mp / "link"),
        lambda mp: os.utime(mp / "top0.txt", (1, 1)),
    ],
    ids=["write", "append", "create", "mkdir", "unlink", "rename", "rmdir", "truncate", "chmod", "symlink", "utime"],
)
def test_changes_fail_with_erofs(mount_data: MountData, mounted: Callable[..., MountHandle], action: Callable[[Path], object]) -> None:
    mp = Path(mounted(mount_data.path).mountpoint)
    with pytest.raises(OSError) as e:
        action(mp)
    assert e.value.errno == errno.EROFS
    assert (mp / "top0.txt").read_bytes() == next(m.data for m in mount_data.members if m.name == "top0.txt")


def test_missing_names_are_enoent_and_nothing_escapes(mount_data: MountData, mounted: Callable[..., MountHandle]) -> None:
    mp = Path(mounted(mount_data.path).mountpoint)
    for rel in ("nope.txt", "img/cat/999.jpg", "img/cow", ".by-shard/shards/none.tar", ".by-split/test", "top0.jpg/x"):
        with pytest.raises(OSError) as e:
            os.stat(mp / rel)
        assert e.value.errno in (errno.ENOENT, errno.ENOTDIR), rel
    assert os.path.realpath(mp / "img" / ".." / "..") == str(mp.parent)  # `..` is the kernel's, never ours


def test_unsafe_member_names_are_not_listed(fuse: None, tmp_path: Path, mounted: Callable[..., MountHandle]) -> None:
    ds = tmp_path / "unsafe"
    (ds / "s").mkdir(parents=True)
    with tarfile.open(ds / "s" / "a.tar", "w", format=tarfile.PAX_FORMAT) as tar:
        for name in ("/abs/evil.txt", "../up.txt", "./dot/x.txt", "a//b.txt", "ok.txt"):
            info = tarfile.TarInfo(name)
            info.size = 2
            tar.addfile(info, io.BytesIO(b"hi"))
    shardstore.prepare(str(ds), split_ratio="1,0,0", num_workers=1)
    for layout in LAYOUTS:
        mp = Path(mounted(ds, layout).mountpoint)
        found = sh("find . -path './.by-*' -prune -o -print", cwd=mp).split()
        # "a//b.txt" leaves an empty folder "a": its one member has an empty name component
        ok = ["./ok.txt"] if layout == "flat" else ["./ok", "./ok/txt"]
        assert sorted(found) == sorted([".", "./a", *ok]), found
        tar_names = subprocess.run(["tar", "c", "."], cwd=mp, check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(tar_names)) as tar:
            assert all(not n.startswith("/") and ".." not in n.split("/") for n in tar.getnames())


def test_a_changed_shard_gives_eio_and_a_log_line(fuse: None, tmp_path: Path, mounted: Callable[..., MountHandle]) -> None:
    data = build_dataset(tmp_path / "ds")
    handle = mounted(data.path)
    shard = data.path / "shards/part-000002.tar"
    os.truncate(shard, 1024)
    with pytest.raises(OSError) as e:
        (Path(handle.mountpoint) / "plain2.txt").read_bytes()
    assert e.value.errno == errno.EIO
    log = Path(handle.log_path).read_text()  # type: ignore[arg-type]
    assert "StaleIndexError" in log and "part-000002.tar" in log


def test_unmount_leaves_no_process_and_context_manager(mount_data: MountData, fuse: None, tmp_path: Path) -> None:
    with shardstore.mount(mount_data.path, tmp_path / "m", layout="samples", mkdir=True) as handle:
        pid = handle.pid
        assert handle.mounted and (tmp_path / "m" / "top0" / "txt").read_bytes() == b"caption top0"
    assert not _is_mounted(str(tmp_path / "m"))
    assert not os.path.exists(f"/proc/{pid}")
    handle.unmount()  # idempotent


def test_unmount_while_a_file_is_open_is_lazy(mount_data: MountData, fuse: None, tmp_path: Path) -> None:
    handle = shardstore.mount(mount_data.path, tmp_path / "m", mkdir=True)
    f = open(Path(handle.mountpoint) / "big/blob.bin", "rb")
    try:
        assert f.read(4)
        handle.unmount(timeout=2)
        assert not handle.mounted
    finally:
        f.close()
    assert handle.process is not None and handle.process.poll() is not None


def test_mount_errors_are_typed(mount_data: MountData, fuse: None, tmp_path: Path) -> None:
    with pytest.raises(shardstore.ShardstoreError, match="layout"):
        shardstore.mount(mount_data.path, tmp_path / "m", layout="tree")
    with pytest.raises(shardstore.ShardstoreError, match="not a prepared dataset|no .nv-meta|exited"):
        shardstore.mount(tmp_path, tmp_path / "m2", mkdir=True)
    assert not _is_mounted(str(tmp_path / "m2"))
    with shardstore.mount(mount_data.path, tmp_path / "m3", mkdir=True):
        with pytest.raises(shardstore.ShardstoreError, match="already a mount point"):
            shardstore.mount(mount_data.path, tmp_path / "m3")
    with pytest.raises(shardstore.ShardstoreError, match="not a FUSE mount point"):
        umount(tmp_path / "m3")


def _cli(*args: object) -> subprocess.CompletedProcess[str]:
    """``shardstore ARGS``; a ``mount`` gets ``--mkdir`` (the tests mount on fresh paths)."""
    extra = ["--mkdir"] if args[:1] == ("mount",) else []
    return subprocess.run(
        [sys.executable, "-m", "shardstore.cli", *map(str, args), *extra], capture_output=True, text=True, timeout=120
    )


def test_cli_mount_detaches_and_umount_ends_it(mount_data: MountData, fuse: None, tmp_path: Path) -> None:
    mp = tmp_path / "cli"
    done = _cli("mount", mount_data.path, mp, "--layout", "samples")
    assert done.returncode == 0, done.stderr
    assert "unmount with: shardstore umount" in done.stdout
    pids = _server_pids(str(mp))
    assert len(pids) == 1
    assert (mp / "plain2" / "txt").read_bytes() == b"two"
    done = _cli("umount", mp)
    assert done.returncode == 0, done.stderr
    assert not _is_mounted(str(mp))
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{pids[0]}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _server_pids(str(mp))
    done = _cli("umount", mp)
    assert done.returncode == 1 and "not a FUSE mount point" in done.stderr


def test_cli_umount_after_the_mount_process_died(mount_data: MountData, fuse: None, tmp_path: Path) -> None:
    mp = tmp_path / "dead"
    mp.mkdir()  # the user's folder: it stays after the unmount
    assert _cli("mount", mount_data.path, mp, "-q").returncode == 0
    [pid] = _server_pids(str(mp))
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _server_pids(str(mp)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _is_mounted(str(mp))  # the kernel keeps a dead FUSE mount
    with pytest.raises(OSError) as e:
        os.listdir(mp)
    assert e.value.errno in (errno.ENOTCONN, errno.ECONNABORTED)
    done = _cli("umount", mp)
    assert done.returncode == 0, done.stderr
    assert not _is_mounted(str(mp)) and os.listdir(mp) == []


def test_cli_mount_reports_errors(fuse: None, tmp_path: Path) -> None:
    done = _cli("mount", tmp_path / "nothing-here", tmp_path / "m")
    assert done.returncode == 1 and done.stderr.startswith("shardstore: error:")
    assert not _is_mounted(str(tmp_path / "m"))


@pytest.mark.parametrize(("option", "direct"), [("1M", True), ("0", False), ("1.5 MiB", True), ("64M", False)])
def test_cli_mount_direct_io_min(mount_data: MountData, fuse: None, tmp_path: Path, option: str, direct: bool) -> None:
    """``--direct-io-min SIZE`` reaches the mount: the 3 MB and 5 MB members are opened direct_io
    (shared mmap then fails with ENODEV, the documented cost) only when SIZE is at most theirs."""
    import mmap

    mp = tmp_path / "dio"
    done = _cli("mount", mount_data.path, mp, "-q", "--direct-io-min", option)
    assert done.returncode == 0, done.stderr
    try:
        for m in (m for m in mount_data.members if len(m.data) >= 3 << 20):
            fd = os.open(mp / mount_data.path_of(m, "flat"), os.O_RDONLY)
            try:
                assert os.pread(fd, len(m.data) + 1, 0) == m.data
                if direct:
                    with pytest.raises(OSError) as e:
                        mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
                    assert e.value.errno == errno.ENODEV
                else:
                    with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as mapped:
                        assert mapped[:] == m.data
            finally:
                os.close(fd)
    finally:
        assert _cli("umount", mp).returncode == 0


def test_cli_mount_direct_io_min_rejects_bad_sizes(tmp_path: Path) -> None:
    for bad in ("lots", "-1M", "12Q"):
        done = _cli("mount", tmp_path / "ds", tmp_path / "m", "--direct-io-min", bad)
        assert done.returncode == 2 and "--direct-io-min" in done.stderr, (bad, done.stderr)
    assert not _is_mounted(str(tmp_path / "m"))


def _tiny_dataset(root: Path, shards: int, per_shard: int) -> None:
    """``shards`` x ``per_shard`` samples of one 10-byte part, written fast with tarfile."""
    (root / "parts").mkdir(parents=True)
    payload = b"0123456789"
    for s in range(shards):
        with tarfile.open(root / "parts" / f"t-{s:04d}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
            for i in range(per_shard):
                info = tarfile.TarInfo(f"k{s:04d}{i:07d}.bin")
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    shardstore.prepare(str(root), split_ratio="1,0,0", num_workers=1)


@pytest.mark.slow
def test_larger_dataset_mounts_fast_and_small(fuse: None, tmp_path: Path, mounted: Callable[..., MountHandle]) -> None:
    """A 40,000-sample dataset: ready and a full sorted `ls | head` well under a second, RSS small.

    tools/bench/mount.py runs the same check at 256,000 samples.
    """
    _tiny_dataset(tmp_path / "big", 8, 5000)
    t0 = time.perf_counter()
    handle = mounted(tmp_path / "big")
    ready = time.perf_counter() - t0
    t0 = time.perf_counter()
    head = sh(f"ls {handle.mountpoint} | head -3").split()
    listed = time.perf_counter() - t0
    assert head == ["k00000000000.bin", "k00000000001.bin", "k00000000002.bin"]
    assert int(sh(f"ls -f {handle.mountpoint} | wc -l")) == 40_000 + 4  # . .. .by-shard .by-split
    rss = mount_rss(handle.pid)  # type: ignore[arg-type]
    assert ready < 3.0 and listed < 1.0, (ready, listed)
    assert rss < 100 * 2**20, rss


def test_remote_read_ahead_grows_on_sequential_reads(mount_data: MountData) -> None:
    """The S3 reader's window: few range requests for a sequential read, exact bytes for seeks."""
    from concurrent.futures import ThreadPoolExecutor

    from shardstore.mount.fs import MAX_WINDOW, MIN_WINDOW, _RemoteFile
    from shardstore.mount.tree import Node
    from shardstore.storage import ByteRange, LocalStorage

    class Counting(LocalStorage):
        def __init__(self, root: str) -> None:
            super().__init__(root)
            self.requests: list[int] = []

        def read_range(self, path: str, rng: ByteRange) -> bytes:
            self.requests.append(rng.size)
            return super().read_range(path, rng)

    blob = next(m for m in mount_data.members if m.name == "big/blob.bin")
    ds = shardstore.open(str(mount_data.path), split=None)
    shard, rng = ds.member_range(blob.name)
    storage = Counting(str(mount_data.path))
    with ThreadPoolExecutor(2) as pool:
        f = _RemoteFile(storage, shard, Node(False, rng.size, 0, rng.offset), pool)
        got = b"".join(f.read(off, 128 * 1024) for off in range(0, rng.size, 128 * 1024))
        assert got == blob.data
        assert len(storage.requests) <= 8 and max(storage.requests) <= MAX_WINDOW  # not one per 128 KB read
        storage.requests.clear()
        for off in (4_000_000, 10, 2_000_000):
            assert f.read(off, 1000) == blob.data[off : off + 1000]
        assert storage.requests[0] == MIN_WINDOW  # a seek starts over with a small window
        f.close()


def test_metadataset_yaml_mounts_one_folder_per_dataset(
    fuse: None, make_shards: Callable[..., Path], tmp_path: Path, mounted: Callable[..., MountHandle]
) -> None:
    roots = {}
    for name, n in (("ds_a", 6), ("ds_b", 4)):
        roots[name] = make_shards(shards=2, samples=n, name=name)
        shardstore.prepare(str(roots[name]), split_ratio="1,1,0", num_workers=1)
    yaml = tmp_path / "meta.yaml"
    yaml.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n"
        "  train:\n    blend:\n      - {weight: 1, path: ds_a}\n      - {weight: 2, path: ds_b}\n"
        "  val:\n    path: ds_a\n"
    )
    for layout in LAYOUTS:
        mp = Path(mounted(yaml, layout).mountpoint)
        assert sorted(os.listdir(mp)) == ["ds_a", "ds_b"]
        for name, root in roots.items():
            ds = shardstore.open(str(root), split=None)
            assert sorted(os.listdir(mp / name / ".by-split")) == ["test", "train", "val"]
            for key in ds.keys():
                sample = ds.get(key)
                for part in sample.parts:
                    rel = f"{key}.{part}" if layout == "flat" else f"{key}/{part}"
                    assert (mp / name / rel).read_bytes() == sample[part]
                    assert (mp / name / ".by-shard" / sample.shard / rel).read_bytes() == sample[part]


def test_cli_mount_foreground_serves_until_unmounted(mount_data: MountData, fuse: None, tmp_path: Path) -> None:
    mp = tmp_path / "fg"
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardstore.cli", "mount", str(mount_data.path), str(mp), "--foreground", "--mkdir"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not _is_mounted(str(mp)):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.02)
        assert (mp / "plain2.txt").read_bytes() == b"two"
        assert _cli("umount", mp).returncode == 0
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_split_view_hides_the_samples_split_yaml_excludes(fuse: None, tmp_path: Path, mounted: Callable[..., MountHandle]) -> None:
    data = build_dataset(tmp_path / "ds")
    split_yaml = data.path / ".nv-meta" / "split.yaml"
    split_yaml.write_text(split_yaml.read_text().replace("exclude: []", "exclude:\n- shards/part-000002.tar/plain2"))
    for layout in LAYOUTS:
        mp = Path(mounted(data.path, layout).mountpoint)
        name = "plain2.txt" if layout == "flat" else "plain2"
        assert name not in os.listdir(mp / ".by-split" / "val")
        assert not (mp / ".by-split" / "val" / name).exists()
        assert (mp / name).exists() and (mp / ".by-shard/shards/part-000002.tar" / name).exists()
        assert ("plain1.txt" if layout == "flat" else "plain1") in os.listdir(mp / ".by-split" / "val")


@pytest.mark.parametrize("direct_io_min", [1 << 20, 0])
def test_large_members_read_back_equal_direct_io_or_cached(
    mount_data: MountData, mounted: Callable[..., MountHandle], direct_io_min: int
) -> None:
    """Members of ``direct_io_min`` bytes or more are opened direct_io (opens answered in C): any
    read size, offset and the end read back exactly; ``MAP_SHARED`` mmap is refused there (the
    documented cost), and works on members kept in the page cache."""
    import mmap

    mp = Path(mounted(mount_data.path, direct_io_min=direct_io_min).mountpoint)
    big = [m for m in mount_data.members if len(m.data) >= 1 << 20]
    assert len(big) == 2
    for m in big:
        path = mp / mount_data.path_of(m, "flat")
        fd = os.open(path, os.O_RDONLY)
        try:
            for size in (1 << 20, 4097, 3 << 20):
                chunks, pos = [], 0
                while chunk := os.pread(fd, size, pos):
                    chunks.append(chunk)
                    pos += len(chunk)
                assert b"".join(chunks) == m.data, (m.name, size)
            assert os.pread(fd, 100, len(m.data) - 10) == m.data[-10:]
            assert os.pread(fd, 100, len(m.data) + 5) == b""
            if direct_io_min:
                with pytest.raises(OSError) as e:
                    mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
                assert e.value.errno == errno.ENODEV
                with mmap.mmap(fd, 0, access=mmap.ACCESS_COPY) as mapped:  # MAP_PRIVATE works
                    assert mapped[-1000:] == m.data[-1000:]
            else:
                with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as mapped:
                    assert mapped[:] == m.data
        finally:
            os.close(fd)


def test_pure_python_paths_list_and_read_the_same(
    mount_data: MountData, mounted: Callable[..., MountHandle], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the compiled helper (``_fusefast``) the mount lists and reads the same."""
    monkeypatch.setenv("SHARDSTORE_MOUNT_PURE_PYTHON", "1")
    mp = Path(mounted(mount_data.path).mountpoint)
    for m in mount_data.members:
        assert (mp / mount_data.path_of(m, "flat")).read_bytes() == m.data
    found = sh(f"find {mp} -path '{mp}/.by-*' -prune -o -type f -print | wc -l")
    assert int(found) == len(mount_data.members)


def test_a_dataset_opened_on_a_split_mounts_that_split(prepared: Path, mounted: Callable[..., MountHandle]) -> None:
    """``mount(open(..., split=S))`` shows S's samples at the root (issue 10); the views keep every shard."""
    ds = shardstore.open(str(prepared), split="test")
    handle = mounted(ds)
    root = os.listdir(handle.mountpoint)
    keys = {name.split(".", 1)[0] for name in root if not name.startswith(".")}
    assert keys == set(ds.keys()) and len(keys) == 25
    assert len(root) == 25 * 3 + 2  # jpg, txt, json each, and .by-shard/.by-split
    shards = os.listdir(os.path.join(handle.mountpoint, ".by-shard", "parts"))
    assert len(shards) == 4
    whole = mounted(str(prepared), split=None)
    assert len(os.listdir(whole.mountpoint)) == 100 * 3 + 2
    with pytest.raises(shardstore.ShardstoreError, match="no split 'nope' to mount"):
        mounted(str(prepared), split="nope")


def test_a_missing_mount_point_is_refused_and_mkdir_makes_the_last_component_only(
    mount_data: MountData, fuse: None, tmp_path: Path
) -> None:
    """As mount(8), fusermount3 and ratarmount (issue 26, point 4)."""
    missing = tmp_path / "no" / "such" / "mnt"
    done = subprocess.run([sys.executable, "-m", "shardstore", "mount", str(mount_data.path), str(missing)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "no such folder" in done.stderr
    assert "--mkdir" in done.stderr and not (tmp_path / "no").exists()
    with pytest.raises(MountError, match="parent folder does not exist"):
        shardstore.mount(mount_data.path, missing, mkdir=True)
    assert not (tmp_path / "no").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(MountError, match="not a folder"):
        shardstore.mount(mount_data.path, tmp_path / "file", mkdir=True)
    made = tmp_path / "made"
    assert _cli("mount", mount_data.path, made, "-q").returncode == 0  # _cli adds --mkdir
    assert _is_mounted(str(made)) and (made / "top0.txt").read_bytes() == b"caption top0"
    assert _cli("umount", made, "-q").returncode == 0
    assert not made.exists()  # made by --mkdir, removed by the unmount
    kept = tmp_path / "kept"
    kept.mkdir()
    with shardstore.mount(mount_data.path, kept, mkdir=True):
        pass
    assert kept.is_dir()  # a folder the user made stays
