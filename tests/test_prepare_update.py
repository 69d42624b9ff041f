"""``prepare --update``: after shards are appended (also between existing ones), changed and
removed, an update scans only the new and changed shards and writes exactly what a full prepare
of the same shards writes (tables with their rowids, ``.info.json``, ``split.yaml``, ``.tar.idx``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from index_snapshot import written

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from make_dataset import make_dataset  # noqa: E402

BIN = Path(sys.executable).with_name("shardstore")
COMMON = ("--non-interactive", "--no-progress", "--num-workers", "1", "--json")
FULL = ("--split-ratio", "1,0,0", "--sample-type", "CrudeWebdataset", "--force-overwrite")


def prepare(ds: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN), "prepare", str(ds), *COMMON, *args], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def full_prepare_of(ds: Path, tmp: Path) -> dict[str, Any]:
    """What a full prepare of the shards now in ``ds`` writes (on a copy without ``.nv-meta``)."""
    copy = tmp / f"full-{len(list(tmp.iterdir()))}"
    shutil.copytree(ds, copy, ignore=shutil.ignore_patterns(".nv-meta", "*.idx"))
    res = prepare(copy, *FULL)
    assert res.returncode == 0, res.stderr
    return written(copy)


def update(ds: Path, *args: str) -> dict[str, Any]:
    res = prepare(ds, "--update", *args)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """Six shards to take from; the dataset starts with four of them."""
    make_dataset(str(tmp_path / "source"), shards=6, samples=8, min_kb=0, max_kb=1)
    return tmp_path / "source"


def test_update_after_append_change_and_remove(source: Path, tmp_path: Path) -> None:
    ds, full = tmp_path / "ds", tmp_path / "full"
    full.mkdir()
    (ds / "parts").mkdir(parents=True)
    for i in (0, 1, 3, 4):
        shutil.copy2(source / f"parts/data-{i:06d}.tar", ds / "parts")
    assert prepare(ds, *FULL).returncode == 0
    uuid0 = (ds / ".nv-meta/index.uuid").read_bytes()

    # appended: one shard between existing ones (the ids after it move), one at the end
    for i in (2, 5):
        shutil.copy2(source / f"parts/data-{i:06d}.tar", ds / "parts")
    report = update(ds)
    assert (report["scanned"], report["shards"], report["samples"]) == (2, 6, 48)
    assert written(ds) == full_prepare_of(ds, full)
    assert (ds / ".nv-meta/index.uuid").read_bytes() != uuid0

    # nothing changed: nothing scanned, same index
    before = written(ds)
    assert update(ds)["scanned"] == 0 and written(ds) == before

    # changed: shard 3 rewritten with other samples
    make_dataset(str(tmp_path / "other"), shards=4, samples=5, seed=7, min_kb=0, max_kb=1)
    shutil.copy(tmp_path / "other/parts/data-000003.tar", ds / "parts/data-000003.tar")
    report = update(ds)
    assert (report["scanned"], report["samples"]) == (1, 45)
    assert written(ds) == full_prepare_of(ds, full)

    # removed: an error naming the shard, the index untouched; then --drop-missing
    before = written(ds)
    (ds / "parts/data-000001.tar").unlink()
    res = prepare(ds, "--update")  # COMMON has --json: the error is JSON on stdout (issue 26)
    assert res.returncode == 1 and res.stderr == "" and res.stdout.count("\n") == 1
    error = json.loads(res.stdout)["error"]["message"]
    assert "data-000001.tar" in error and "--drop-missing" in error
    assert written(ds) == before
    report = update(ds, "--drop-missing")
    assert (report["scanned"], report["shards"]) == (0, 5)
    assert any("data-000001.tar" in p for p in report["problems"])
    assert written(ds) == full_prepare_of(ds, full)


def test_update_split_rules(source: Path, tmp_path: Path) -> None:
    """Ratio: indexed shards keep their split, new ones are cut by the ratio among themselves;
    regexes: as a full prepare; neither: a new shard joins the split of the shard before it."""
    ds = tmp_path / "ds"
    (ds / "parts").mkdir(parents=True)
    for i in (0, 1, 2):
        shutil.copy2(source / f"parts/data-{i:06d}.tar", ds / "parts")
    assert prepare(ds, "--split-ratio", "1,1,1").returncode == 0
    shutil.copy2(source / "parts/data-000003.tar", ds / "parts")
    update(ds)  # no split options: joins the split of data-000002 (test)
    import yaml

    splits = yaml.safe_load((ds / ".nv-meta/split.yaml").read_text())["split_parts"]
    assert splits == {"train": ["parts/data-000000.tar"], "val": ["parts/data-000001.tar"],
                      "test": ["parts/data-{000002..000003}.tar"]}
    for i in (4, 5):
        shutil.copy2(source / f"parts/data-{i:06d}.tar", ds / "parts")
    update(ds, "--split-ratio", "1,1,0")
    splits = yaml.safe_load((ds / ".nv-meta/split.yaml").read_text())["split_parts"]
    assert splits["train"] == ["parts/data-000000.tar", "parts/data-000004.tar"]
    assert splits["val"] == ["parts/data-000001.tar", "parts/data-000005.tar"]
    update(ds, "--split-parts", "train:parts/data-00000[0-3].tar", "--split-parts", "val:parts/data-00000[45].tar")
    splits = yaml.safe_load((ds / ".nv-meta/split.yaml").read_text())["split_parts"]
    assert splits == {"train": ["parts/data-{000000..000003}.tar"], "val": ["parts/data-{000004..000005}.tar"]}


def test_update_needs_a_prepared_dataset(source: Path) -> None:
    res = prepare(source, "--update")
    assert res.returncode == 1 and "not a prepared dataset" in json.loads(res.stdout)["error"]["message"]
