"""Bad input to `shardstore prepare`, each through the real CLI: one line on stderr naming the file
(and the byte offset where there is one), a non-zero exit, and the earlier .nv-meta (and .tar.idx
files) byte for byte as they were, with no staging folder left behind."""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent / "shardstore"
MakeShards = Callable[..., Path]


def run(path: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN), "prepare", str(path), "--non-interactive", "--no-progress", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def snapshot(path: Path) -> dict[str, bytes]:
    """Every file of .nv-meta and every .tar.idx, by relative path (the state that must not change)."""
    files = {}
    for p in sorted(path.rglob("*")):
        rel = p.relative_to(path)
        if rel.parts[0].startswith(".nv-meta."):  # a staging folder (checked by leftovers())
            continue
        if p.is_file() and (rel.parts[0] == ".nv-meta" or p.name.endswith(".tar.idx")):
            files[str(rel)] = p.read_bytes()
    return files


def leftovers(path: Path) -> list[str]:
    """What a prepare left beside .nv-meta; not the scans an interrupted one keeps for the next run
    (.nv-meta.resume-*, tests/test_scale_resume.py)."""
    return sorted(
        p.name for p in path.iterdir()
        if (p.name.startswith(".nv-meta.") or ".tmp" in p.name) and not p.name.startswith(".nv-meta.resume-")
    )


@pytest.fixture
def prepared_ds(make_shards: MakeShards) -> tuple[Path, dict[str, bytes]]:
    """4 prepared shards of 5 samples, and the snapshot of what prepare wrote."""
    path = make_shards(shards=4, samples=5, min_kb=0, max_kb=2)
    res = run(path, "--split-ratio", "8,1,1", "--sample-type", "CrudeWebdataset")
    assert res.returncode == 0, res.stderr
    snap = snapshot(path)
    assert ".nv-meta/index.sqlite" in snap and "parts/data-000000.tar.idx" in snap
    return path, snap


def fails_cleanly(path: Path, before: dict[str, bytes], *words: str, args: tuple[str, ...] = ()) -> str:
    """Re-prepare (forced) and check the failure; returns the error line."""
    res = run(path, "--split-ratio", "1,1,1", "--force-overwrite", *args)
    assert res.returncode != 0
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr  # one line, no traceback
    line = lines[0]
    assert line.startswith("shardstore: error: ")
    for w in words:
        assert w in line, line
    assert res.stdout == ""
    assert snapshot(path) == before  # byte for byte
    assert leftovers(path) == []
    return line


def tar_bytes(members: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def header_offsets(path: Path) -> list[int]:
    with tarfile.open(path) as tar:
        return [m.offset for m in tar]


# --------------------------------------------------------------------------------------------------
# Broken shards


def test_truncated_tar(prepared_ds: tuple[Path, dict[str, bytes]]) -> None:
    path, before = prepared_ds
    shard = path / "parts" / "data-000002.tar"
    offsets = header_offsets(shard)
    data = shard.read_bytes()
    shard.write_bytes(data[: offsets[7] + 700])  # inside member 7's data
    line = fails_cleanly(path, before, str(shard), f"offset {offsets[7]}", "end of the file")
    assert "TruncatedTarError" not in line


def test_truncated_inside_a_header(prepared_ds: tuple[Path, dict[str, bytes]]) -> None:
    path, before = prepared_ds
    shard = path / "parts" / "data-000001.tar"
    offsets = header_offsets(shard)
    shard.write_bytes(shard.read_bytes()[: offsets[4] + 300])
    fails_cleanly(path, before, str(shard), f"offset {offsets[4]}", "inside a tar header")


def test_corrupt_header_checksum_mid_file(prepared_ds: tuple[Path, dict[str, bytes]]) -> None:
    path, before = prepared_ds
    shard = path / "parts" / "data-000003.tar"
    offsets = header_offsets(shard)
    data = bytearray(shard.read_bytes())
    data[offsets[9] + 3] ^= 0x41  # a byte of the name: the stored checksum no longer fits
    shard.write_bytes(bytes(data))
    fails_cleanly(path, before, str(shard), f"offset {offsets[9]}", "checksum")


def test_not_a_tar(prepared_ds: tuple[Path, dict[str, bytes]]) -> None:
    path, before = prepared_ds
    shard = path / "parts" / "data-000001.tar"
    shard.write_bytes(b"<html>this was a download error page, not a tar</html>\n" * 40)
    fails_cleanly(path, before, str(shard), "offset 0", "not a tar file")


def test_gzipped_tar_named_tar(prepared_ds: tuple[Path, dict[str, bytes]]) -> None:
    import gzip

    path, before = prepared_ds
    shard = path / "parts" / "data-000001.tar"
    shard.write_bytes(gzip.compress(shard.read_bytes()))
    fails_cleanly(path, before, str(shard), "offset 0", "gzip")


def test_empty_shard_without_members(prepared_ds: tuple[Path, dict[str, bytes]]) -> None:
    path, before = prepared_ds
    shard = path / "parts" / "data-000002.tar"
    shard.write_bytes(tar_bytes([]))  # a valid tar: only the end-of-archive blocks
    fails_cleanly(path, before, str(shard), "no sample")


def test_shard_with_only_skipped_members(prepared_ds: tuple[Path, dict[str, bytes]]) -> None:
    path, before = prepared_ds
    shard = path / "parts" / "data-000002.tar"
    shard.write_bytes(tar_bytes([("README", b"x"), ("__meta__/a.json", b"{}")]))
    fails_cleanly(path, before, str(shard), "no sample")


def test_zero_byte_shard(prepared_ds: tuple[Path, dict[str, bytes]]) -> None:
    path, before = prepared_ds
    shard = path / "parts" / "data-000000.tar"
    shard.write_bytes(b"")
    fails_cleanly(path, before, str(shard), "offset 0", "empty")


def test_new_broken_shard_does_not_touch_the_rest(prepared_ds: tuple[Path, dict[str, bytes]]) -> None:
    """The broken shard comes last in the order: the first four were scanned (and their .tar.idx
    staged) before the failure, and still nothing changed."""
    path, before = prepared_ds
    (path / "parts" / "data-000009.tar").write_bytes(b"\0" * 100)
    fails_cleanly(path, before, "data-000009.tar")


# --------------------------------------------------------------------------------------------------
# Duplicate keys


def test_duplicate_key_across_shards(prepared_ds: tuple[Path, dict[str, bytes]]) -> None:
    path, before = prepared_ds
    shutil.copy(path / "parts" / "data-000001.tar", path / "parts" / "data-000001-copy.tar")
    line = fails_cleanly(path, before, "duplicate sample key", "'s00001_000000'")
    # both places: the first shard and the copy, each with sample index and offset
    assert "parts/data-000001.tar (sample 0, offset 0)" in line
    assert "parts/data-000001-copy.tar (sample 0, offset 0)" in line


def test_duplicate_key_later_in_the_same_shard(prepared_ds: tuple[Path, dict[str, bytes]]) -> None:
    path, before = prepared_ds
    shard = path / "parts" / "data-000002.tar"
    shard.write_bytes(tar_bytes([("a.jpg", b"1"), ("a.txt", b"2"), ("b.jpg", b"3"), ("a.json", b"4")]))
    line = fails_cleanly(path, before, "duplicate sample key 'a'")
    assert line.count("parts/data-000002.tar") >= 2
    assert "(sample 0, offset 0)" in line and "(sample 2, offset 3072)" in line


# --------------------------------------------------------------------------------------------------
# .nv-meta that cannot be written


def _can_unshare_mount() -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    res = subprocess.run(["unshare", "--mount", "true"], capture_output=True)
    return res.returncode == 0


def _in_readonly_bind(target: Path, path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a private mount namespace where ``target`` is bind-mounted read-only
    (the mount vanishes with the process, even if the test dies)."""
    cmd = [str(BIN), "prepare", str(path), "--non-interactive", "--no-progress", *args]
    script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", str(target), *cmd],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def _check_unwritable(res: subprocess.CompletedProcess[str], path: Path, before: dict[str, bytes], *words: str) -> None:
    assert res.returncode != 0
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardstore: error: "), res.stderr
    for w in words:
        assert w in lines[0], lines[0]
    assert snapshot(path) == before
    assert leftovers(path) == []


@pytest.mark.skipif(not _can_unshare_mount(), reason="needs root and mount namespaces (unshare --mount)")
def test_read_only_dataset_folder(prepared_ds: tuple[Path, dict[str, bytes]]) -> None:
    path, before = prepared_ds
    res = _in_readonly_bind(path, path, "--split-ratio", "1,1,1", "--force-overwrite")
    _check_unwritable(res, path, before, "cannot write .nv-meta", "Read-only file system", str(path))


@pytest.mark.skipif(not _can_unshare_mount(), reason="needs root and mount namespaces (unshare --mount)")
def test_read_only_nv_meta_mount(prepared_ds: tuple[Path, dict[str, bytes]]) -> None:
    """The folder is writable but .nv-meta itself is a read-only mount: it cannot be replaced."""
    path, before = prepared_ds
    res = _in_readonly_bind(path / ".nv-meta", path, "--split-ratio", "1,1,1", "--force-overwrite")
    _check_unwritable(res, path, before, "cannot replace .nv-meta", str(path / ".nv-meta"))


@pytest.fixture
def immutable() -> Iterator[Callable[[Path], None]]:
    """``chattr +i`` a path (root cannot write it either); undone after the test."""
    done: list[Path] = []

    def make(p: Path) -> None:
        res = subprocess.run(["chattr", "+i", str(p)], capture_output=True, text=True)
        if res.returncode != 0:
            pytest.skip(f"chattr +i is not supported here: {res.stderr.strip()}")
        done.append(p)

    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    yield make
    for p in done:
        subprocess.run(["chattr", "-i", str(p)], check=False)


def test_immutable_nv_meta(prepared_ds: tuple[Path, dict[str, bytes]], immutable: Callable[[Path], None]) -> None:
    path, before = prepared_ds
    immutable(path / ".nv-meta")
    res = run(path, "--split-ratio", "1,1,1", "--force-overwrite")
    _check_unwritable(res, path, before, "cannot replace .nv-meta", "Operation not permitted")


def test_immutable_dataset_folder(prepared_ds: tuple[Path, dict[str, bytes]], immutable: Callable[[Path], None]) -> None:
    path, before = prepared_ds
    immutable(path)
    res = run(path, "--split-ratio", "1,1,1", "--force-overwrite")
    _check_unwritable(res, path, before, "cannot write .nv-meta")


def test_nv_meta_is_a_regular_file(make_shards: MakeShards) -> None:
    path = make_shards(shards=2, samples=3, min_kb=0, max_kb=1)
    (path / ".nv-meta").write_bytes(b"a user's file that happens to have this name")
    before = {".nv-meta": (path / ".nv-meta").read_bytes()}
    res = run(path, "--split-ratio", "1,1,1")
    assert res.returncode != 0
    (line,) = res.stderr.strip().splitlines()
    assert "is not a folder" in line and str(path / ".nv-meta") in line
    assert {".nv-meta": (path / ".nv-meta").read_bytes()} == before
    assert not list(path.rglob("*.tar.idx"))
    assert leftovers(path) == []


# --------------------------------------------------------------------------------------------------
# Interrupted prepare


def _blocking_shard_dataset(prepared_ds: tuple[Path, dict[str, bytes]]) -> Path:
    """A FIFO named like a shard, last in order: opening it blocks, so the scan stops there for as
    long as the test wants, after the real shards were scanned."""
    path, _ = prepared_ds
    os.mkfifo(path / "parts" / "data-000009.tar")
    return path


def _default_signals() -> None:
    """In the child before it runs: the default SIGINT and SIGTERM dispositions. A suite started
    in the background from a non-interactive shell (`make test &`, nohup, some CI runners) runs
    with SIGINT ignored, children inherit that, and Python then installs no Ctrl-C handler: the
    test's SIGINT would be ignored and the prepare left running."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _start(path: Path, workers: str) -> subprocess.Popen[str]:
    """The prepare to interrupt, started the way a background run starts it (SIGINT ignored in
    this process), so the test holds in the foreground and in `make test &` alike."""
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return subprocess.Popen(
            [str(BIN), "prepare", str(path), "--non-interactive", "--no-progress", "--split-ratio", "1,1,1",
             "--force-overwrite", "--num-workers", workers],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            preexec_fn=_default_signals,
        )
    finally:
        signal.signal(signal.SIGINT, old)


def _wait_for_staged_scans(path: Path, proc: subprocess.Popen[str], n: int) -> None:
    """Until the staging folder holds the .tar.idx of the ``n`` real shards (the scan is then at the FIFO)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        staged = [p for d in path.glob(".nv-meta.tmp-*") for p in d.rglob("*.tar.idx")]
        if len(staged) >= n:
            time.sleep(0.2)
            return
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("prepare never reached the blocking shard")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "kill"])
@pytest.mark.parametrize("workers", ["1", "2"])
def test_interrupted_prepare(prepared_ds: tuple[Path, dict[str, bytes]], sig: signal.Signals, workers: str) -> None:
    path = _blocking_shard_dataset(prepared_ds)
    before = prepared_ds[1]
    proc = _start(path, workers)
    try:
        _wait_for_staged_scans(path, proc, 4)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert "Traceback" not in err
    assert snapshot(path) == before
    assert leftovers(path) == []


def test_killed_prepare_leftovers_are_removed_by_the_next(prepared_ds: tuple[Path, dict[str, bytes]]) -> None:
    """SIGKILL cannot be cleaned up in the process: the old .nv-meta is intact, and the next prepare
    on this host removes the dead process's staging folder."""
    path = _blocking_shard_dataset(prepared_ds)
    before = prepared_ds[1]
    proc = _start(path, "1")
    try:
        _wait_for_staged_scans(path, proc, 4)
        proc.kill()
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert snapshot(path) == before
    assert len(list(path.glob(".nv-meta.tmp-*"))) == 1
    os.unlink(path / "parts" / "data-000009.tar")
    res = run(path, "--split-ratio", "1,1,1", "--force-overwrite")
    assert res.returncode == 0, res.stderr
    assert leftovers(path) == []


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(c) for c in f.read().split()]


#: ``openat``'s system call number, as /proc/PID/syscall shows it.
_OPENAT = {"x86_64": "257", "aarch64": "56"}.get(os.uname().machine) if sys.platform == "linux" else None


def _in_open(pid: int) -> bool:
    """The process sits in ``openat`` (a scan worker blocked opening the FIFO shard)."""
    try:
        with open(f"/proc/{pid}/syscall") as f:
            return f.read().split()[0] == _OPENAT
    except (OSError, IndexError):
        return False


@pytest.mark.skipif(_OPENAT is None, reason="finds the worker through /proc/PID/syscall (Linux on x86-64 or aarch64)")
def test_killed_worker_is_a_clear_error(prepared_ds: tuple[Path, dict[str, bytes]]) -> None:
    """A scan worker killed mid-scan (SIGKILL, as the OOM killer does) fails prepare within seconds,
    naming the shard it held and the signal; no hang (multiprocessing.Pool waited forever for the
    lost shard), no worker left behind, the earlier .nv-meta intact."""
    path = _blocking_shard_dataset(prepared_ds)
    before = prepared_ds[1]
    proc = _start(path, "2")
    try:
        _wait_for_staged_scans(path, proc, 4)
        deadline = time.monotonic() + 30
        while not (holders := [c for c in _children(proc.pid) if _in_open(c)]):
            assert time.monotonic() < deadline, "no worker is blocked on the FIFO shard"
            time.sleep(0.05)
        workers = _children(proc.pid)
        assert len(holders) == 1 and len(workers) == 2, workers
        os.kill(holders[0], signal.SIGKILL)
        killed = time.monotonic()
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1 and took < 10, (proc.returncode, took)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"shardstore: error: {path / 'parts' / 'data-000009.tar'}: "), lines[0]
    assert f"was killed by signal SIGKILL (pid {holders[0]})" in lines[0]
    for pid in workers:  # both reaped by prepare: not even a zombie is left
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert snapshot(path) == before
    assert leftovers(path) == []
