"""Resumable prepare: a prepare killed (SIGKILL of the parent, Ctrl-C) at a chosen point and run
again with the same arguments reuses the shard scans it had saved, scans only the rest (counted by
the report's ``scanned``/``reused``), and writes exactly what an uninterrupted prepare writes;
a finished prepare leaves nothing of it behind (shardstore/resume.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from index_snapshot import written

BIN = Path(sys.executable).with_name("shardstore")
SHARDS = 6
ARGS = ("--split-ratio", "2,1,1", "--sample-type", "CrudeWebdataset", "--non-interactive", "--no-progress",
        "--force-overwrite", "--num-workers", "1")


def extra_files(ds: Path) -> list[str]:
    return sorted(p.name for p in ds.iterdir() if p.name.startswith(".nv-meta."))


def saved_scans(ds: Path) -> int:
    return sum(1 for p in ds.glob(".nv-meta.resume-*/*.json"))


@pytest.fixture
def pair(make_shards: Callable[..., Path], tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """Shards to interrupt prepare on, and what an uninterrupted prepare of a copy wrote."""
    ds = make_shards(shards=SHARDS, samples=12)
    ref = tmp_path / "reference"
    shutil.copytree(ds, ref)
    assert run(ref).returncode == 0
    return ds, written(ref)


def run(ds: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN), "prepare", str(ds), *ARGS, "--json", *extra], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)


@pytest.fixture
def interrupt(tmp_path: Path) -> Iterator[Callable[..., None]]:
    """``interrupt(ds, stage, sig)``: start a CLI prepare, wait until it pauses at ``stage``
    (SHARDSTORE_TEST_PAUSE_AT), send ``sig`` to the prepare process alone, wait for its end."""
    procs: list[subprocess.Popen[str]] = []

    def start(ds: Path, stage: str, sig: signal.Signals = signal.SIGKILL, *extra: str) -> None:
        marker = tmp_path / f"paused-{len(procs)}"
        env = {**os.environ, "SHARDSTORE_TEST_PAUSE_AT": stage, "SHARDSTORE_TEST_PAUSE_MARKER": str(marker)}
        proc = subprocess.Popen([str(BIN), "prepare", str(ds), *ARGS, *extra], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        procs.append(proc)
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, f"prepare never reached {stage}"
            time.sleep(0.01)
        if sig == signal.SIGINT:  # Ctrl-C: the pause is a sleep, so the handler runs at once
            os.kill(proc.pid, sig)
        else:
            os.kill(int(marker.read_text().split()[1]), sig)  # the parent, as written at the pause
        proc.communicate(timeout=60)
        assert proc.returncode != 0

    yield start
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


# stage -> shards saved when prepare is killed there (so the rerun scans SHARDS minus that)
POINTS = {
    "locked": 0,  # before the first shard
    "saved-2": 2,  # mid-scan
    "index-build": SHARDS,  # every shard scanned, the index being loaded
    "before-swap": SHARDS,  # during the commit
}


@pytest.mark.parametrize("stage", list(POINTS))
def test_killed_prepare_resumes(pair: tuple[Path, dict[str, Any]], interrupt: Any, stage: str) -> None:
    ds, expected = pair
    interrupt(ds, stage)
    assert saved_scans(ds) == POINTS[stage]
    res = run(ds)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert (report["scanned"], report["reused"]) == (SHARDS - POINTS[stage], POINTS[stage])
    assert written(ds) == expected
    assert extra_files(ds) == []  # neither the staging folder nor the saved scans stay


def test_ctrl_c_keeps_the_scans_and_no_resume_starts_over(pair: tuple[Path, dict[str, Any]], interrupt: Any) -> None:
    ds, expected = pair
    interrupt(ds, "saved-3", signal.SIGINT)
    assert saved_scans(ds) == 3
    res = run(ds, "--no-resume")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["scanned"] == SHARDS
    assert written(ds) == expected and extra_files(ds) == []


def test_a_changed_shard_is_scanned_again(pair: tuple[Path, dict[str, Any]], interrupt: Any) -> None:
    ds, _ = pair
    interrupt(ds, "saved-4")
    first = ds / "parts" / "data-000000.tar"
    os.utime(first, (1_600_000_000, 1_600_000_000))  # same bytes, another mtime: not the scanned shard
    res = run(ds)
    assert res.returncode == 0, res.stderr
    assert (json.loads(res.stdout)["scanned"], json.loads(res.stdout)["reused"]) == (3, 3)


def test_other_arguments_do_not_reuse_and_clean_the_old_scans(pair: tuple[Path, dict[str, Any]], interrupt: Any) -> None:
    ds, _ = pair
    interrupt(ds, "saved-2")
    (old,) = [p.name for p in ds.glob(".nv-meta.resume-*")]
    res = subprocess.run([str(BIN), "prepare", str(ds), "--split-ratio", "1,0,0", "--non-interactive", "--json",
                          "--force-overwrite", "--num-workers", "1"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["scanned"] == SHARDS
    assert any(old in p for p in report["problems"]) and extra_files(ds) == []


def test_scans_of_another_host_are_left_alone(pair: tuple[Path, dict[str, Any]]) -> None:
    """Two machines sharing the filesystem: a fresh folder of another host is not this host's."""
    ds, _ = pair
    theirs = ds / ".nv-meta.resume-otherhost-0123456789abcdef"
    theirs.mkdir()
    assert run(ds).returncode == 0
    assert theirs.is_dir()
    old = time.time() - 8 * 24 * 3600  # a week old: stale, removed
    os.utime(theirs, (old, old))
    assert run(ds).returncode == 0
    assert not theirs.exists() and extra_files(ds) == []
