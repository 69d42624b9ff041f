"""The smaller hardening points of issue 9 (point 7): non-UTF-8 member names, a part repeated in
one sample, the scan worker count, one-line CLI errors, positions that are not ints, Ctrl-C.

(The mount's side, phantom entries of names with a NUL, is in tests/mount/test_mount_stale.py;
Energon's own behaviour on non-UTF-8 names is pinned in tests/compat/test_hardening_compat.py.)
"""

from __future__ import annotations

import io
import multiprocessing.context
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import shardstore
from shardstore.cli import main
from shardstore.errors import ConfigError, StorageError, TarFormatError
from shardstore.filestores import IndexedTarStore
from shardstore.prepare import worker_count


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), 1_700_000_000
    tar.addfile(info, io.BytesIO(data))


def cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def one_line_error(code: int, err: str, *words: str) -> None:
    assert code == 1 and err.startswith("shardstore: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and all(w in err for w in words), err


# ----- non-UTF-8 member names ------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["latin-1 ustar", "pax hdrcharset=BINARY"])
def test_non_utf8_member_names_fail_prepare_with_one_line(tmp_path: Path, kind: str) -> None:
    """SQLite text is UTF-8, and Energon's prepare fails on such a name too (a UnicodeEncodeError
    traceback, pinned in the compat test): a clean error naming shard, bytes and offset."""
    root = tmp_path / "ds"
    (root / "s").mkdir(parents=True)
    if kind == "latin-1 ustar":
        tar = tarfile.open(root / "s/a.tar", "w", format=tarfile.USTAR_FORMAT, encoding="latin-1")
    else:  # tarfile writes hdrcharset=BINARY for a name that is not valid UTF-8
        tar = tarfile.open(root / "s/a.tar", "w", format=tarfile.PAX_FORMAT)
    with tar:
        _add(tar, "ok.txt", b"fine")
        _add(tar, "caf\udce9.txt" if kind != "latin-1 ustar" else "caf\u00e9.txt", b"named in latin-1")
    raw = (root / "s/a.tar").read_bytes()
    assert b"caf\xe9.txt" in raw and (b"hdrcharset=BINARY" in raw) == (kind != "latin-1 ustar")
    for workers in (1, 2):
        with pytest.raises(TarFormatError, match=r"a\.tar, offset \d+: member name b'caf\\xe9\.txt' is not UTF-8"):
            shardstore.prepare(str(root), split_ratio="1,0,0", num_workers=workers)
    code, _, err = cli("prepare", str(root), "--split-ratio", "1,0,0", "--non-interactive")
    one_line_error(code, err, "a.tar", "not UTF-8")
    assert not (root / ".nv-meta").exists()


# ----- a part repeated within one sample ---------------------------------------------------------------
def test_a_repeated_part_reads_as_its_last_copy_everywhere(tmp_path: Path) -> None:
    """``get`` always gave the last copy (later members overwrite earlier ones, as in Energon's
    sample reader and ``tar -x``); member reads gave the first. All agree on the last now."""
    root = tmp_path / "ds"
    (root / "s").mkdir(parents=True)
    with tarfile.open(root / "s/a.tar", "w") as tar:
        for name, data in [("a.txt", b"first"), ("a.jpg", b"img"), ("a.txt", b"second!"), ("b.txt", b"bee")]:
            _add(tar, name, data)
    shardstore.prepare(str(root), split_ratio="1,0,0", num_workers=1)
    ds = shardstore.open(str(root))
    assert ds.get("a")["txt"] == ds[0]["txt"] == ds.get_many(["a"])[0]["txt"] == b"second!"
    assert ds.read_file("a.txt") == b"second!"
    store = IndexedTarStore(str(root))
    assert store["a.txt"] == store.get_many(["a.txt", "b.txt"])[0] == b"second!"
    store.dataset.index.use_name_table()  # the name table answers alike
    assert store["a.txt"] == b"second!"
    assert cli("cat", str(root), "a.txt")[1] == "second!"


# ----- scan workers ------------------------------------------------------------------------------------
def test_worker_count_is_capped_by_shards_and_cores() -> None:
    cores = os.cpu_count() or 1
    assert worker_count(2000, 4, local=True) == 4
    assert worker_count(2000, 10_000, local=True) == 4 * cores
    assert worker_count(None, 3, local=True) == min(3, cores)
    for bad in (0, -5):  # refused, not clamped (issue 26): a typo must not pass silently
        with pytest.raises(ConfigError, match="num_workers"):
            worker_count(bad, 3, local=True)
    assert worker_count(2000, 10_000, local=False) == max(64, 4 * cores)


def test_num_workers_2000_starts_no_more_processes_than_shards(
    make_shards: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = make_shards(shards=4, samples=5)  # type: ignore[operator]
    started = []
    real = multiprocessing.context.ForkProcess.start

    def counting_start(self: multiprocessing.context.ForkProcess) -> None:
        started.append(self)
        real(self)

    monkeypatch.setattr(multiprocessing.context.ForkProcess, "start", counting_start)
    code, out, err = cli("prepare", str(path), "--split-ratio", "1,0,0", "--num-workers", "2000", "--non-interactive")
    assert code == 0, err
    assert 1 <= len(started) <= 4


# ----- one-line CLI errors -------------------------------------------------------------------------------
def test_bad_split_parts_regex_is_a_config_error(make_shards: object) -> None:
    path = make_shards(shards=2, samples=3)  # type: ignore[operator]
    with pytest.raises(ConfigError, match="invalid split part regex"):
        shardstore.prepare(str(path), split_parts=["train:parts/(data"])
    code, _, err = cli("prepare", str(path), "--split-parts", "train:(", "--non-interactive")
    one_line_error(code, err, "split part regex", "'('")


def test_info_and_check_on_a_shard_file(prepared: Path) -> None:
    shard = str(prepared / "parts/data-000000.tar")
    for command in ("info", "check", "ls"):
        code, _, err = cli(command, shard)
        one_line_error(code, err, "data-000000.tar", "not a folder")


def test_unknown_url_protocol(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="unknown URL protocol nope://"):
        shardstore.open("nope://bucket/ds")
    for args in (["info", "nope://b/ds"], ["ls", "nope://b/ds"], ["cat", "nope://b/ds", "a.txt"], ["check", "nope://b/ds"]):
        code, _, err = cli(*args)
        one_line_error(code, err, "nope://", "unknown URL protocol")


# ----- positions -----------------------------------------------------------------------------------------
def test_positions_must_be_ints(prepared: Path) -> None:
    ds = shardstore.open(str(prepared))
    with pytest.raises(TypeError, match=r"positions are int, not str: look keys up with ds.get\(key\)"):
        ds["s00000_000001"]
    for bad in (True, False, 1.0, None, b"1"):
        with pytest.raises(TypeError, match=f"not {type(bad).__name__}"):
            ds[bad]  # type: ignore[index]
    with pytest.raises(TypeError, match="not bool"):
        ds.get_many([True])
    with pytest.raises(TypeError, match="keys are str, not int"):
        ds.get(1)  # type: ignore[arg-type]
    assert ds[np.int64(3)] == ds[3] and ds.locate(np.uint8(2)).position == 2  # type: ignore[arg-type]


# ----- Ctrl-C ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("workers", ["1", "2"])
def test_ctrl_c_exits_130_with_one_line_and_no_process_left(make_shards: object, workers: str) -> None:
    """SIGINT to the whole process group, as a terminal sends it, while prepare is inside a scan:
    a FIFO among the shards holds the scan (a reader blocks on it) until the test says so."""
    path = make_shards(shards=3, samples=5)  # type: ignore[operator]
    fifo = path / "parts" / "data-000001b.tar"
    os.mkfifo(fifo)
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardstore.cli", "prepare", str(path), "--split-ratio", "1,0,0",
         "--num-workers", workers, "--non-interactive"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    writer = -1
    try:
        deadline = time.monotonic() + 30
        while writer < 0:  # opening the FIFO's write end succeeds once a scan has it open to read
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            try:
                writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                time.sleep(0.01)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, (out, err)
        assert err == "shardstore: interrupted\n", err
        assert "Aborted" not in err and "worker" not in err
        assert not (path / ".nv-meta").exists()
        time.sleep(0.1)
        with pytest.raises(ProcessLookupError):  # no worker of the group is left
            os.killpg(proc.pid, 0)
    finally:
        if writer >= 0:
            os.close(writer)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
