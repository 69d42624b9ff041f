"""A dataset whose episode index or field tree lies: the episode view checks what it reads (the
first and last keys of every read against the index's numbering, the sample after an episode's
last, the place in its shard) and never follows ``video_store`` out of the dataset."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from hostile_cli import refused

import shardstore
from shardstore.episodes import Episode, EpisodeWriter, FieldSpec, Schema
from shardstore.errors import IndexCorruptError, PathEscapeError

SCHEMA = Schema((FieldSpec("obs", "array", "<f4", (3,)), FieldSpec("act", "array", "<i8", ())), source_format="test")


@pytest.fixture(params=["step", "episode"])
def ds(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    out = tmp_path / "ds"
    rng = np.random.default_rng(0)
    with EpisodeWriter(out, granularity=request.param, shard_size=4000, schema=SCHEMA, split_ratio="1,0,0") as w:
        for i in range(6):
            n = 3 + i
            w.write(Episode(i, {"obs": rng.random((n, 3), dtype=np.float32), "act": np.arange(n)}, {}))
    return out


def _sql(ds: Path, statement: str) -> None:
    db = sqlite3.connect(ds / ".nv-meta" / "episodes.sqlite")
    db.execute(statement)
    db.commit()
    db.close()


def _read_all(ds: Path) -> None:
    view = shardstore.episodes(str(ds))
    for e in range(len(view)):
        view[e]
        view.step(e, 0)


@pytest.mark.parametrize("lie", ["first_index", "fewer samples", "other shard"])
def test_an_index_that_lies_is_caught_on_read(ds: Path, lie: str) -> None:
    db = sqlite3.connect(ds / ".nv-meta" / "episodes.sqlite")
    shards = [r[0] for r in db.execute("SELECT DISTINCT shard FROM episodes ORDER BY shard")]
    db.close()
    if lie == "first_index":
        _sql(ds, "UPDATE episodes SET first_index = first_index + 1 WHERE number = 2")
    elif lie == "fewer samples":
        _sql(ds, "UPDATE episodes SET samples = samples - 1, steps = steps - 1 WHERE number = 3")
    else:
        assert len(shards) > 1
        _sql(ds, f"UPDATE episodes SET shard = '{shards[-1]}' WHERE number = 0")
    with pytest.raises(IndexCorruptError) as e:
        _read_all(ds)
    assert "episode" in str(e.value)


def test_granularity_step_cli(ds: Path, tmp_path: Path) -> None:
    _sql(ds, "UPDATE episodes SET first_index = first_index + 1 WHERE number = 2")
    refused("export", "rlds", ds, tmp_path / "out", expect=("episode 2", "rerun"))


@pytest.mark.parametrize("store", ["../victim/.videos", "/tmp/x/.videos", ".videos\n", "a\\..\\..\\b", ".vid\x00eos"])
def test_video_store_stays_in_the_dataset(ds: Path, store: str) -> None:
    path = ds / ".nv-meta" / "schema.json"
    schema = json.loads(path.read_text())
    schema.setdefault("attrs", {})["video_store"] = store
    path.write_text(json.dumps(schema))
    view = shardstore.episodes(str(ds))
    with pytest.raises(PathEscapeError, match="video_store"):
        assert view.video is None  # never reached: the property refuses
