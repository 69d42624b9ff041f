"""Issue 9 point 2: shard discovery follows symlinked folders but visits each real folder once,
and names the link that closed a loop (``ln -s .. DS/parts/loop`` used to list without end)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from escape_helpers import write_tar

import shardstore
from shardstore.errors import LinkLoopWarning
from shardstore.storage import LocalStorage

BIN = Path(sys.executable).parent / "shardstore"


def _looped(tmp_path: Path) -> Path:
    ds = tmp_path / "ds"
    write_tar(ds / "parts" / "a.tar", {"a0.txt": b"a0", "a1.txt": b"a1"})
    write_tar(tmp_path / "disk2" / "b.tar", {"b0.txt": b"b0"})
    os.symlink("..", ds / "parts" / "loop")  # back to ds: a loop
    os.symlink(".", ds / "parts" / "self")  # to its own folder
    os.symlink(tmp_path / "disk2", ds / "more")  # a real folder elsewhere: followed
    os.symlink(tmp_path / "disk2", ds / "parts" / "again")  # the same folder twice: listed once
    return ds


def test_prepare_on_a_symlink_loop_ends_and_names_the_links(tmp_path: Path) -> None:
    ds = _looped(tmp_path)
    res = subprocess.run(
        [str(BIN), "prepare", str(ds), "--non-interactive", "--no-progress", "--split-ratio", "1,0,0", "--json"],
        capture_output=True, text=True, timeout=60,  # the bound: it used to run until memory ran out
    )
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["shards"] == 2 and report["samples"] == 3
    loops = " ".join(report["problems"])
    for link in ("parts/loop", "parts/self", "parts/again"):
        assert link in loops
    assert sorted(s["__key__"] for s in shardstore.open(str(ds))) == ["a0", "a1", "b0"]


def test_listing_visits_each_real_folder_once_under_its_shallowest_name(tmp_path: Path) -> None:
    ds = _looped(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = LocalStorage(str(ds)).list((".tar",))
    assert names == ["more/b.tar", "parts/a.tar"]
    messages = sorted(str(w.message) for w in caught if w.category is LinkLoopWarning)
    assert len(messages) == 3
    assert any(m.endswith("ds/parts/loop: symlink to '..' leads to a folder already listed (the dataset root: a loop); not followed again") for m in messages)


@pytest.mark.parametrize("depth", [1, 5])
def test_a_link_to_an_ancestor_deep_down(tmp_path: Path, depth: int) -> None:
    ds = tmp_path / "ds"
    deep = ds.joinpath(*[f"d{i}" for i in range(depth)])
    write_tar(deep / "x.tar", {"x0.txt": b"x0"})
    os.symlink(os.path.relpath(ds, deep), deep / "up")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert LocalStorage(str(ds)).list((".tar",)) == [f"{'/'.join(f'd{i}' for i in range(depth))}/x.tar"]
