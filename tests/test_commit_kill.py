"""Imports and exports commit like prepare (``episodes/staging.py``): OUT is at every instant the
complete old dataset or the complete new one, whenever the writer is killed (``kill -9`` at the
commit's pause points and at seeded random moments), and what a killed run leaves is removed by the
next run or by ``shardstore check``. A multi-task import commits all its tasks or none."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from episode_datasets import write_episode_dataset
from make_episode_wds import rollouts, write_shard

import shardstore

ROOT = Path(__file__).resolve().parent.parent
#: Files that differ between two runs writing the same episodes (a new index id, the shards' mtimes).
_VOLATILE = {".nv-meta/index.uuid", ".nv-meta/shardstore.json"}


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), SOURCE_DATE_EPOCH="1600000000", **extra)
    for name in ("SHARDSTORE_TEST_PAUSE_AT", "SHARDSTORE_TEST_PAUSE_MARKER", "SHARDSTORE_RENAME_EXCHANGE"):
        if name not in extra:
            env.pop(name, None)
    return env


def _cmd(*args: object) -> list[str]:
    return [sys.executable, "-m", "shardstore.cli", *map(str, args)]


def _run(*args: object, ok: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(_cmd(*args), env=_env(**env), capture_output=True, text=True, timeout=300)
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


def fingerprint(folder: Path) -> dict[str, str] | None:
    """Every regular file below ``folder`` with the hash of its bytes (None: no folder)."""
    if not folder.is_dir():
        return None
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_file() and rel not in _VOLATILE:
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _episode_source(folder: Path, lengths: list[int], seed: int) -> Path:
    """One task of the episode-frame layout, written with webdataset's TarWriter."""
    write_shard(folder / "shard-000000.tar", {}, rollouts(np.random.default_rng(seed), lengths, (2,)))
    return folder


def _dataset(path: Path, episodes: int) -> Path:
    return write_episode_dataset(path, episodes, [3 + e for e in range(episodes)], seed=episodes)


def _kill_at(args: list[object], stage: str, marker: Path, **env: str) -> None:
    """Run the command until it reaches the pause point ``stage``, then ``kill -9`` it."""
    proc = subprocess.Popen(
        _cmd(*args), env=_env(SHARDSTORE_TEST_PAUSE_AT=stage, SHARDSTORE_TEST_PAUSE_MARKER=str(marker), **env),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert proc.poll() is None, f"ended before {stage}: {proc.stderr.read() if proc.stderr else ''}"
            assert time.monotonic() < deadline, f"never reached {stage}"
            time.sleep(0.02)
    finally:
        proc.kill()
        proc.wait()
    marker.unlink()


def _siblings(out: Path) -> list[str]:
    """What is beside ``out`` but its export report (``OUT.report.json``, ``.txt``)."""
    return sorted(p.name for p in out.parent.iterdir() if p.name != out.name and not p.name.startswith(f"{out.name}.report."))


@pytest.fixture
def sources(tmp_path: Path) -> tuple[Path, Path]:
    return (_episode_source(tmp_path / "src" / "old", [2, 3], 1), _episode_source(tmp_path / "src" / "new", [4, 1, 2], 2))


@pytest.mark.parametrize(
    ("exchange", "stage", "after"),
    [
        ("1", "output-staged", "old"),
        ("1", "output-swapped", "new"),
        ("0", "output-fallback-between-renames", None),
        ("0", "output-swapped", "new"),
    ],
)
def test_import_force_killed_at_each_step_of_its_commit(
    sources: tuple[Path, Path], tmp_path: Path, exchange: str, stage: str, after: str | None
) -> None:
    """With RENAME_EXCHANGE, OUT is old before the swap and new after it; with the two-rename
    fallback (``SHARDSTORE_RENAME_EXCHANGE=0``) a kill between the renames leaves no OUT but the old
    one aside, which ``shardstore check`` puts back. A killed run leaves no complete dataset deleted."""
    out = tmp_path / "work" / "ds"
    old, new = sources
    _run("import", "episode-wds", new, out)
    prints = {"new": fingerprint(out)}
    _run("import", "episode-wds", old, out, "--force")
    prints["old"] = fingerprint(out)
    assert prints["old"] != prints["new"]
    _kill_at(["import", "episode-wds", new, out, "--force"], stage, tmp_path / "marker", SHARDSTORE_RENAME_EXCHANGE=exchange)
    if after is None:
        assert not out.exists()  # the one moment without OUT, where the exchange is unavailable
        aside = [n for n in _siblings(out) if ".shardstore-old-" in n]
        assert len(aside) == 1 and fingerprint(out.parent / aside[0]) == prints["old"]
        check = _run("check", out)
        assert "repaired: restored the output folder" in check.stdout
        assert fingerprint(out) == prints["old"] and _siblings(out) == []
        return
    assert fingerprint(out) == prints[after]
    assert _siblings(out)  # what the killed run left: its staging or aside folder, its lock file
    _run("import", "episode-wds", old, out, "--force")  # the next run removes it
    assert fingerprint(out) == prints["old"] and _siblings(out) == []


def _random_kills(
    args_of: list[list[object]], out: Path, prints: list[dict[str, str] | None], seed: int, kills: int
) -> None:
    """Run ``args_of[i % 2]`` (writing ``prints[i % 2]`` at ``out``) and kill it at a seeded random
    moment of its run, ``kills`` times; after each kill OUT must be what it was or what the run writes.
    Then a whole run: OUT is new and nothing else is left."""
    rng = random.Random(seed)
    t0 = time.monotonic()
    _run(*args_of[0])
    seconds = time.monotonic() - t0
    assert fingerprint(out) == prints[0]
    for i in range(1, kills + 1):
        before, target = fingerprint(out), prints[i % 2]
        proc = subprocess.Popen(_cmd(*args_of[i % 2]), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3, 1.1) * seconds)
        proc.kill()
        proc.wait()
        assert fingerprint(out) in (before, target), f"kill {i}: OUT is neither the old nor the new dataset"
    _run(*args_of[1])
    assert fingerprint(out) == prints[1] and _siblings(out) == []


def test_import_force_killed_at_random_moments(sources: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "work" / "ds"
    old, new = sources
    prints = []
    for src in sources:
        _run("import", "episode-wds", src, out, "--force")
        prints.append(fingerprint(out))
    _random_kills([["import", "episode-wds", s, out, "--force"] for s in (old, new)], out, prints, seed=20, kills=4)


@pytest.mark.parametrize("fmt", ["minari", "rlds", "lerobot", "episode-wds"])
def test_export_force_killed_at_random_moments(tmp_path: Path, fmt: str) -> None:
    datasets = [_dataset(tmp_path / "a", 2), _dataset(tmp_path / "b", 4)]
    out = tmp_path / "work" / "x"
    prints = []
    rate = ["--fps", "10", "--task", "reach"] if fmt == "lerobot" else []  # the datasets state neither
    for ds in datasets:
        _run("export", fmt, ds, out, "--force", *rate)
        prints.append(fingerprint(out))
    assert prints[0] != prints[1]
    _kill_at(["export", fmt, datasets[0], out, "--force", *rate], "output-swapped", tmp_path / "marker")
    assert fingerprint(out) == prints[0] and _siblings(out)
    _random_kills([["export", fmt, ds, out, "--force", *rate] for ds in datasets], out, prints, seed=sum(map(ord, fmt)), kills=2)


def test_check_removes_what_a_killed_export_left(tmp_path: Path) -> None:
    out = tmp_path / "work" / "x"
    ds = _dataset(tmp_path / "a", 2)
    _kill_at(["export", "lerobot", ds, out, "--fps", "10", "--task", "reach"], "output-staged", tmp_path / "marker")
    assert not out.exists() and len(_siblings(out)) == 2  # its staging folder and lock file
    check = _run("check", "lerobot", out, ok=False)
    assert "removed .x.shardstore-tmp-" in check.stderr and _siblings(out) == []


@pytest.mark.parametrize("command", ["convert", "edit"])
def test_a_killed_conversion_leaves_nothing_the_next_one_keeps(tmp_path: Path, command: str) -> None:
    """``convert`` and ``edit --to`` make a dataset in a scratch folder beside OUT on the way; killed
    (SIGKILL: no ``finally``), they leave it, and the next run of either beside the same OUT
    removes it (its process is gone) as the export's recovery removes its staging folder."""
    ds = _dataset(tmp_path / "a", 3)
    source = tmp_path / "minari-source"
    _run("export", "minari", ds, source)
    out = tmp_path / "work" / "x"
    args = {"convert": ["convert", source, out, "--to", "minari"],
            "edit": ["edit", "delete-episodes", ds, out, "--episodes", "1", "--to", "minari"]}[command]
    _kill_at(args, "output-staged", tmp_path / "marker")
    assert any(".x.shardstore-scratch-" in name for name in _siblings(out)), _siblings(out)
    _run(*args)
    assert _siblings(out) == [] and list(out.rglob("*.hdf5"))  # the Minari dataset, and nothing beside it


def _multitask(root: Path, seed: int, bad: bool = False) -> Path:
    rng = np.random.default_rng(seed)
    for task in ("a", "b"):
        write_shard(root / "demos" / "dmc" / task / "s.tar", {}, rollouts(rng, [2, 3], (2,)))
    if bad:  # the second task's shard ends inside a member
        shard = root / "demos" / "dmc" / "b" / "s.tar"
        shard.write_bytes(shard.read_bytes()[:1500])
    return root


def test_a_multitask_import_commits_all_tasks_or_none(tmp_path: Path) -> None:
    out = tmp_path / "work" / "il"
    bad = _multitask(tmp_path / "bad", 1, bad=True)
    r = _run("import", "episode-wds", bad, out, "--blend-yaml", ok=False)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "shardstore: error:" in r.stderr
    assert not out.exists() and _siblings(out) == []
    _run("import", "episode-wds", _multitask(tmp_path / "good", 2), out, "--blend-yaml")  # the rerun works
    before = fingerprint(out)
    assert before is not None and "blend.yaml" in before and "demos/dmc/b/.nv-meta/dataset.yaml" in before
    r = _run("import", "episode-wds", bad, out, "--blend-yaml", "--force", ok=False)
    assert r.returncode == 1 and fingerprint(out) == before and _siblings(out) == []
    r = _run("import", "episode-wds", _multitask(tmp_path / "good", 2), out, ok=False)
    assert r.returncode == 1 and "--force" in r.stderr  # an earlier import of several tasks is recognised
    _run("import", "episode-wds", _multitask(tmp_path / "other", 3), out, "--force")
    after = fingerprint(out)
    assert after is not None and "blend.yaml" not in after and after != before  # replaced whole
    assert len(shardstore.episodes(str(out / "demos" / "dmc" / "a"))) == 2


def test_a_second_writer_of_the_same_out_is_refused_while_the_first_runs(sources: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "work" / "ds"
    marker = tmp_path / "marker"
    proc = subprocess.Popen(
        _cmd("import", "episode-wds", sources[0], out),
        env=_env(SHARDSTORE_TEST_PAUSE_AT="output-staged", SHARDSTORE_TEST_PAUSE_MARKER=str(marker)),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        while not marker.exists():
            assert proc.poll() is None
            time.sleep(0.02)
        r = _run("import", "episode-wds", sources[1], out, ok=False)
        assert r.returncode == 1 and "another import or export is writing" in r.stderr and f"pid {proc.pid}" in r.stderr
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    _run("import", "episode-wds", sources[1], out)
    assert _siblings(out) == []
