"""The episode view over S3 (the rclone test server): an episode dataset written locally and
uploaded reads the same episodes, steps and windows through range GETs, and the index files come
from the cache keyed by ``index.uuid``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import shardstore
from shardstore.episodes import EpisodeWriter

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_episodes import SCHEMA, assert_same, make_episodes  # noqa: E402  (tests/test_episodes.py)

pytestmark = pytest.mark.s3


@pytest.mark.parametrize("granularity", ["columns", "step", "episode"])
def test_episodes_read_on_s3_equal_local(
    granularity: str, tmp_path: Path, upload: Callable[[str, str], str], s3_url: Callable[[str], str],
    storage_options: dict[str, Any],
) -> None:
    local = tmp_path / "ds"
    eps = make_episodes(9, seed=3)
    with EpisodeWriter(local, granularity=granularity, schema=SCHEMA, shard_size=20_000, split_ratio="2,1,0",
                       source_files={"data/metadata.json": b'{"x": 1}'}) as w:
        for ep in eps:
            w.write(ep)
    url = upload(str(local), s3_url("ds"))
    remote = shardstore.episodes(url, storage_options=storage_options)
    assert len(remote) == len(eps) and remote.schema == SCHEMA
    assert remote.source_file("data/metadata.json") == b'{"x": 1}'
    for e in np.random.default_rng(0).permutation(len(remote)).tolist():
        got = remote[e]
        assert_same(got, eps[got.index])
        n = len(eps[got.index].steps["actions"])
        step = remote.step(e, n - 1)
        assert step["actions"] == eps[got.index].steps["actions"][n - 1]
        window = remote.window(e, 0, before=2, after=2)
        assert window["is_pad"].tolist()[:2] == [True, True]
        assert window["frame"][2] == eps[got.index].steps["frame"][0]
    val = shardstore.open(url, split="val", storage_options=storage_options).episodes
    assert 0 < len(val) < len(eps) and all(val.split(e) == "val" for e in range(len(val)))


def test_export_minari_from_s3_equals_the_source(
    tmp_path: Path, upload: Callable[[str, str], str], s3_url: Callable[[str], str], storage_options: dict[str, Any],
) -> None:
    """A Minari import uploaded to S3 exports back (read through range GETs) to the same HDF5 content."""
    pytest.importorskip("h5py")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "convert"))
    import minari_sources
    from minari_sources import h5_tree

    from shardstore.convert.minari import export_minari, import_minari

    src = minari_sources.legacy_hdf5(tmp_path / "legacy-v0", "0.4", episodes=5)
    import_minari(src, tmp_path / "ds", split_ratio="3,1,1")
    url = upload(str(tmp_path / "ds"), s3_url("ds"))
    report = export_minari(url, tmp_path / "back", storage_options=storage_options)
    assert report.episodes == 5 and report.version == "0.4"
    assert h5_tree(tmp_path / "back/data/main_data.hdf5") == h5_tree(src / "data/main_data.hdf5")
