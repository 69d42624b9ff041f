"""Issue 9 point 3: a re-prepare is crash-safe and atomic for readers, and one at a time.

A real ``shardstore prepare --force-overwrite`` is stopped at chosen moments with
``SHARDSTORE_TEST_PAUSE_AT`` (metaswap.pause_point), then killed (SIGKILL) or interrupted
(SIGINT, restored to its default in the child: a background job would inherit it ignored). Each
time the dataset must read, byte for byte, either all the old samples or all the new ones, and a
later ``check`` must leave nothing behind. Readers in other processes hammer a dataset during
repeated re-prepares; two prepares at once: one wins, the other fails with one clean line.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from escape_helpers import write_tar

import shardstore
from shardstore import metaswap

BIN = Path(sys.executable).parent / "shardstore"
Samples = dict[str, dict[str, bytes]]


def _shard(path: Path, prefix: str, n: int = 12) -> Samples:
    members, want = {}, {}
    for i in range(n):
        key = f"{prefix}{i:03d}"
        txt, bin_ = f"{key} text".encode(), os.urandom(300 + 37 * i)
        members.update({f"{key}.txt": txt, f"{key}.bin": bin_})
        want[key] = {"txt": txt, "bin": bin_}
    write_tar(path, members)
    return want


@pytest.fixture
def reprepared(tmp_path: Path) -> tuple[Path, Samples, Samples]:
    """A dataset prepared with shards a and b (old); then shard c is added (new = a, b, c)."""
    ds = tmp_path / "ds"
    old = {**_shard(ds / "parts" / "a.tar", "a"), **_shard(ds / "parts" / "b.tar", "b")}
    shardstore.prepare(str(ds), split_ratio="1,0,0", num_workers=1)
    new = {**old, **_shard(ds / "parts" / "c.tar", "c")}
    return ds, old, new


def read_everything(path: Path) -> Samples:
    """Every sample by position, and each again by key and by member name: all must agree."""
    ds = shardstore.open(str(path), split=None)
    got: Samples = {}
    for sample in ds:
        got[sample["__key__"]] = {k: v for k, v in sample.items() if not k.startswith("__")}
    for key, parts in got.items():
        by_key = ds.get(key)
        assert {k: v for k, v in by_key.items() if not k.startswith("__")} == parts
        assert ds.read_file(f"{key}.bin") == parts["bin"]
    return got


def old_or_new(path: Path, old: Samples, new: Samples) -> str:
    got = read_everything(path)
    if got == old:
        return "old"
    assert got == new, f"neither the old nor the new samples: {sorted(got)[:5]}..."
    return "new"


def leftovers(path: Path) -> list[str]:
    """What a prepare left beside .nv-meta; not the scans an interrupted one keeps for the next run
    (.nv-meta.resume-*, tests/test_scale_resume.py)."""
    return sorted(
        p.name for p in path.iterdir()
        if (p.name.startswith(".nv-meta.") or ".tmp" in p.name) and not p.name.startswith(".nv-meta.resume-")
    )


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Python then installs its KeyboardInterrupt handler


@pytest.fixture
def start_prepare(tmp_path: Path) -> Iterator[Any]:
    """``start_prepare(ds, stage, **env) -> (proc, marker)``: a CLI prepare paused at ``stage``.
    Every process (and its scan workers) is killed at the end of the test."""
    procs: list[subprocess.Popen[str]] = []

    def start(ds: Path, stage: str | None, *args: str, **env: str) -> tuple[subprocess.Popen[str], Path]:
        marker = tmp_path / f"paused-{len(procs)}"
        environ = {**os.environ, "SHARDSTORE_TEST_PAUSE_MARKER": str(marker), **env}
        if stage is not None:
            environ["SHARDSTORE_TEST_PAUSE_AT"] = stage
        proc = subprocess.Popen(
            [str(BIN), "prepare", str(ds), "--non-interactive", "--no-progress", "--split-ratio", "1,0,0",
             "--force-overwrite", "--num-workers", "1", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
            env=environ, preexec_fn=_default_sigint, start_new_session=True,
        )
        procs.append(proc)
        return proc, marker

    yield start
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)


def wait_for(marker: Path, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "prepare never reached its pause point"
        time.sleep(0.01)


STAGES = {  # stage -> which index a reader sees while prepare waits there, and after it is killed
    "locked": "old",
    "staged": "old",
    "idx-placed": "old",  # c.tar.idx is in place: the old index does not name c
    "before-swap": "old",
    "swapped": "new",  # the old generation is now under the staging name, not yet removed
    "cleaned": "new",
}


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["kill", "ctrl-c"])
@pytest.mark.parametrize("stage", list(STAGES))
def test_interrupted_reprepare_leaves_the_old_or_the_new_index(
    reprepared: tuple[Path, Samples, Samples], start_prepare: Any, stage: str, sig: signal.Signals
) -> None:
    ds, old, new = reprepared
    proc, marker = start_prepare(ds, stage)
    wait_for(marker, proc)
    assert old_or_new(ds, old, new) == STAGES[stage]  # a reader while prepare is stopped there
    os.killpg(proc.pid, sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode != 0
    assert "Traceback" not in err
    assert old_or_new(ds, old, new) == STAGES[stage]  # and after it died
    res = subprocess.run([str(BIN), "check", str(ds)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    if sig == signal.SIGKILL and stage not in ("locked", "cleaned"):
        assert "repaired: removed .nv-meta.tmp-" in res.stdout  # the staging (or old) folder it left
    assert leftovers(ds) == []
    assert old_or_new(ds, old, new) == STAGES[stage]
    proc2, _ = start_prepare(ds, None)
    assert proc2.wait(timeout=60) == 0, proc2.communicate()
    assert old_or_new(ds, old, new) == "new" and leftovers(ds) == []


def test_killed_between_the_renames_of_the_fallback_swap_is_restored(
    reprepared: tuple[Path, Samples, Samples], start_prepare: Any
) -> None:
    """Without RENAME_EXCHANGE the swap is two renames; a crash between them leaves no .nv-meta
    but the complete old one aside: ``check`` (or the next prepare) renames it back."""
    ds, old, new = reprepared
    proc, marker = start_prepare(ds, "fallback-between-renames", SHARDSTORE_RENAME_EXCHANGE="0")
    wait_for(marker, proc)
    assert not (ds / ".nv-meta").exists() and metaswap.swap_in_progress(str(ds))
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    res = subprocess.run([str(BIN), "check", str(ds)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "repaired: restored .nv-meta from .nv-meta.old-" in res.stdout
    assert old_or_new(ds, old, new) == "old" and leftovers(ds) == []


def test_fallback_swap_completes(reprepared: tuple[Path, Samples, Samples], start_prepare: Any) -> None:
    ds, old, new = reprepared
    proc, _ = start_prepare(ds, None, SHARDSTORE_RENAME_EXCHANGE="0")
    assert proc.wait(timeout=60) == 0, proc.communicate()
    assert old_or_new(ds, old, new) == "new" and leftovers(ds) == []


def test_two_prepares_one_wins_the_other_fails_cleanly(
    reprepared: tuple[Path, Samples, Samples], start_prepare: Any
) -> None:
    ds, old, new = reprepared
    first, marker = start_prepare(ds, "staged")
    wait_for(marker, first)
    second, _ = start_prepare(ds, None)
    _, err = second.communicate(timeout=60)
    assert second.returncode == 1
    (line,) = err.strip().splitlines()
    assert line.startswith("shardstore: error:") and "another prepare is running on this dataset" in line
    assert f"pid {first.pid}" in line
    res = subprocess.run([str(BIN), "check", str(ds)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "another prepare is running on this dataset" in res.stdout, res.stdout + res.stderr
    assert len(list(ds.glob(".nv-meta.tmp-*"))) == 1  # a live prepare's staging folder is left alone
    os.killpg(first.pid, signal.SIGKILL)  # a dead holder does not keep the lock
    first.communicate(timeout=30)
    third, _ = start_prepare(ds, None)
    assert third.wait(timeout=60) == 0, third.communicate()
    assert old_or_new(ds, old, new) == "new" and leftovers(ds) == []


def test_two_prepares_racing(reprepared: tuple[Path, Samples, Samples], start_prepare: Any) -> None:
    """Unpaused, started together: each ends with success or the one-line lock error, never a traceback."""
    ds, old, new = reprepared
    procs = [start_prepare(ds, None)[0] for _ in range(3)]
    results = [(p.wait(timeout=60), p.communicate()[1]) for p in procs]
    assert any(rc == 0 for rc, _ in results)
    for rc, err in results:
        assert rc == 0 or ("another prepare is running" in err and len(err.strip().splitlines()) == 1), err
    assert old_or_new(ds, old, new) == "new" and leftovers(ds) == []


# ----- readers during re-prepares ---------------------------------------------------------------------
def _reader(path: str, layouts: list[Samples], stop: Any, out: Any) -> None:
    os.nice(10)  # the readers yield the cores to the re-prepares they race (2 cores, 3 readers)
    passes = errors = wrong = 0
    first_error = ""
    while not stop.is_set():
        try:
            got = read_everything(Path(path))
            if got not in layouts:
                wrong += 1
            passes += 1
        except Exception as e:  # noqa: BLE001 - counted and reported, the test asserts there are none
            errors += 1
            first_error = first_error or f"{type(e).__name__}: {e}"
    out.put((passes, errors, wrong, first_error))


def test_readers_see_no_error_and_no_wrong_byte_during_reprepares(reprepared: tuple[Path, Samples, Samples]) -> None:
    """Three reader processes read every sample (by position, key and name) in a loop while the
    dataset is re-prepared again and again, alternating two layouts (a excluded or not: every
    tar_file_id and the counts differ, so an index mixed of two generations would read wrong bytes).
    At least 3 s and 8 re-prepares (more time on a loaded machine, at most 60 s)."""
    ds, old, new = reprepared
    without_a = {k: v for k, v in new.items() if not k.startswith("a")}
    ctx = multiprocessing.get_context("fork")
    out, stop = ctx.Queue(), ctx.Event()
    readers = [ctx.Process(target=_reader, args=(str(ds), [old, new, without_a], stop, out)) for _ in range(3)]
    for r in readers:
        r.start()
    reprepares, t0 = 0, time.monotonic()
    try:
        while (reprepares < 8 or time.monotonic() - t0 < 3) and time.monotonic() - t0 < 60:
            exclude = "a.tar" if reprepares % 2 == 0 else None
            # in a process of its own, as a user's re-prepare runs: threads that earlier tests left in
            # this one (Energon's watchdogs) would slow it down for their GIL, not for the readers
            args = [str(BIN), "prepare", str(ds), "--split-ratio", "1,0,0", "--num-workers", "1",
                    "--force-overwrite", "--non-interactive", "--quiet"] + (["--exclude", exclude] if exclude else [])
            subprocess.run(args, check=True, capture_output=True, timeout=120)
            reprepares += 1
        stop.set()
        results = [out.get(timeout=60) for _ in readers]
    finally:
        stop.set()
        for r in readers:
            r.join(timeout=30)
            if r.is_alive():
                r.kill()
    assert reprepares >= 8
    assert all(p >= 1 for p, _, _, _ in results), results
    assert [(e, w) for _, e, w, _ in results] == [(0, 0)] * 3, results
    assert leftovers(ds) == []


def test_a_reader_keeps_its_generation_across_a_reprepare(reprepared: tuple[Path, Samples, Samples]) -> None:
    """Opened before a re-prepare that changes the layout, a Dataset keeps reading its own index
    (its positions keep their meaning); one opened after reads the new one."""
    ds, old, new = reprepared
    before = shardstore.open(str(ds), split=None)
    shardstore.prepare(str(ds), split_ratio="1,0,0", num_workers=1, force_overwrite=True, exclude="a.tar")
    after = shardstore.open(str(ds), split=None)  # b is tar_file_id 0 now, 1 before
    assert len(before) == len(old) and len(after) == len(new) - 12
    assert {s["__key__"]: s["bin"] for s in before} == {k: v["bin"] for k, v in old.items()}
    assert before.get("b003")["bin"] == old["b003"]["bin"] and after.get("b003")["bin"] == new["b003"]["bin"]
    assert before.read_file("b004.bin") == old["b004"]["bin"] and after.read_file("c004.bin") == new["c004"]["bin"]


def test_a_symlinked_nv_meta_is_replaced_and_its_target_left_whole(reprepared: tuple[Path, Samples, Samples]) -> None:
    ds, old, new = reprepared
    kept = ds.parent / "elsewhere-meta"
    (ds / ".nv-meta").rename(kept)
    os.symlink(kept, ds / ".nv-meta")
    shardstore.prepare(str(ds), split_ratio="1,0,0", num_workers=1, force_overwrite=True)
    assert not (ds / ".nv-meta").is_symlink() and old_or_new(ds, old, new) == "new"
    assert (kept / ".info.json").exists() and (kept / "index.uuid").exists() and (kept / "index.sqlite").exists()
    assert leftovers(ds) == []


def test_leftovers_of_other_processes_are_removed_under_the_lock(reprepared: tuple[Path, Samples, Samples]) -> None:
    """A stale fallback leftover beside a complete .nv-meta, a dead process's staging folder and an
    unlocked lock file: the next prepare removes them all and says so in its report."""
    ds, old, new = reprepared
    (ds / ".nv-meta.old-otherhost-1-abc").mkdir()
    dead = ds / f".nv-meta.tmp-{metaswap.HOST}-999999999-abc"  # no such pid
    dead.mkdir()
    (dead / "index.uuid").write_text("x")
    (ds / ".nv-meta.lock").write_text("pid 1 on nowhere since then")
    report = shardstore.prepare(str(ds), split_ratio="1,0,0", num_workers=1, force_overwrite=True)
    assert leftovers(ds) == [] and old_or_new(ds, old, new) == "new"
    assert sum("left by an interrupted prepare" in p for p in report.problems) == 2


def test_a_closed_storage_pins_again_only_the_same_layout(reprepared: tuple[Path, Samples, Samples]) -> None:
    """Closing releases the pinned folder; reading again pins the current generation, and refuses
    one whose shards differ (the reader's positions would mean other samples)."""
    ds, old, new = reprepared
    reader = shardstore.open(str(ds), split=None)
    reader.storage.close()
    shardstore.prepare(str(ds), split_ratio="1,0,0", num_workers=1, force_overwrite=True, exclude="c.tar")  # same layout
    assert reader.storage.read(".nv-meta/split.yaml") and reader[13]["bin"] == old["b001"]["bin"]
    reader.storage.close()
    shardstore.prepare(str(ds), split_ratio="1,0,0", num_workers=1, force_overwrite=True)  # c added
    with pytest.raises(shardstore.errors.StaleIndexError, match="while it was closed"):
        reader.storage.read(".nv-meta/split.yaml")


def test_a_reader_waits_through_the_fallback_swap(reprepared: tuple[Path, Samples, Samples], start_prepare: Any) -> None:
    """Between the two renames of the fallback swap there is no .nv-meta: a reader that opens then
    waits for the second rename instead of failing ("not a prepared dataset")."""
    ds, old, new = reprepared
    proc, marker = start_prepare(ds, "fallback-between-renames", SHARDSTORE_RENAME_EXCHANGE="0")
    wait_for(marker, proc)
    got: list[Any] = []
    reader = threading.Thread(target=lambda: got.append(len(shardstore.open(str(ds), split=None))))
    reader.start()
    time.sleep(0.3)
    assert got == []  # still waiting
    os.killpg(proc.pid, signal.SIGKILL)  # stopped where it was: do its second rename by hand
    proc.communicate(timeout=30)
    (staging,) = ds.glob(".nv-meta.tmp-*")
    staging.rename(ds / ".nv-meta")
    reader.join(timeout=30)
    assert got == [len(new)]
    assert subprocess.run([str(BIN), "check", str(ds)], capture_output=True, timeout=60).returncode == 0
    assert old_or_new(ds, old, new) == "new" and leftovers(ds) == []
