"""An edit killed outright (SIGKILL) at random moments: the source stays as it was, OUT is absent or
a whole dataset; in place, the dataset is the old one or the new one, never neither. A bounded
loop: a handful of kills spread over one edit's run time, then a clean run."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import shardstore
from shardstore.convert.lerobot import import_lerobot

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from make_lerobot import make_lerobot  # noqa: E402
from tree_digest import tree_digest  # noqa: E402

KILLS = 6


def edit(*args: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "shardstore.cli", "edit", *args, "-q"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def timed(*args: str) -> float:
    t0 = time.perf_counter()
    proc = edit(*args)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()[-2000:]
    return time.perf_counter() - t0


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("crash")
    src = make_lerobot(str(root / "src"), version="v3.0", episodes=6, frames=10, episodes_per_file=3)
    import_lerobot(src, str(root / "store"))
    return root / "store"


def leftovers(parent: Path, name: str) -> list[str]:
    return [n for n in os.listdir(parent) if n.startswith(f".{name}.") and "shardstore-tmp" in n]


def test_killed_edit_leaves_source_whole_and_out_absent_or_complete(store: Path, tmp_path: Path) -> None:
    before = tree_digest(store)
    out = tmp_path / "out"
    full = timed("delete-episodes", str(store), str(out), "--episodes", "1,4")
    assert len(shardstore.episodes(str(out))) == 4
    rng = random.Random(7)
    for _ in range(KILLS):
        os.system(f"rm -rf {out}")  # noqa: S605 - a test's own folder
        proc = edit("delete-episodes", str(store), str(out), "--episodes", "1,4")
        time.sleep(rng.uniform(0.2, full))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert tree_digest(store) == before
        if out.exists():
            assert len(shardstore.episodes(str(out))) == 4
    os.system(f"rm -rf {out}")  # noqa: S605
    timed("delete-episodes", str(store), str(out), "--episodes", "1,4")  # removes a dead run's staging
    assert len(shardstore.episodes(str(out))) == 4
    assert leftovers(tmp_path, "out") == []


def test_killed_in_place_edit_leaves_old_or_new(store: Path, tmp_path: Path) -> None:
    target = tmp_path / "ds"
    os.system(f"cp -a {store} {target}")  # noqa: S605
    full = timed("set-task", str(target), "--in-place", "--task", "wave")
    rng = random.Random(11)
    for k in range(KILLS):
        proc = edit("set-task", str(target), "--in-place", "--task", f"task {k}")
        time.sleep(rng.uniform(0.2, full))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        view = shardstore.episodes(str(target))  # opens: a whole dataset is there
        assert len(view) == 6
        task = view.metadata(0)["tasks"][0]
        assert task == "wave" or task.startswith("task ")
