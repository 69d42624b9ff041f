"""Issue 23, point 2: with the default options an import is no bigger than its source allows (LeRobot
with the videos kept at most 1.3x, low-dimensional Minari at most 2x the HDF5, RLDS at most 1.3x the
TFRecords, the episode-frame layout at most 1.3x its ``.tar.zst`` shards). Sources are the
benchmarks' own (``tools/make_*.py``, ``tools/bench/rlds.py``), smaller; the whole dataset folder is
counted, indexes and kept source files included, so the sources are large enough (0.5 to 3 MB)
that the indexes' fixed pages do not decide."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tools" / "bench"))


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def test_minari_at_most_2x_the_hdf5(tmp_path: Path) -> None:
    pytest.importorskip("minari")
    from make_minari import make_minari

    from shardstore.convert.minari import import_minari

    src = make_minari(tmp_path / "minari", "bench/sizes-v0", 20, 100, (16, 16, 3))
    import_minari("bench/sizes-v0", tmp_path / "ds")
    assert du(tmp_path / "ds") <= 2 * du(src), (du(tmp_path / "ds"), du(src))


def test_lerobot_at_most_1_3x_with_the_videos_kept(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    pytest.importorskip("av")
    from make_lerobot import make_lerobot

    from shardstore.convert.lerobot import import_lerobot

    src = make_lerobot(str(tmp_path / "src"), version="v3.0", episodes=8, frames=100, size=128, image=False)
    import_lerobot(src, str(tmp_path / "ds"))
    assert (tmp_path / "ds/.videos").is_dir()
    assert du(tmp_path / "ds") <= 1.3 * du(Path(src)), (du(tmp_path / "ds"), du(Path(src)))


def test_rlds_at_most_1_3x_the_tfrecords(tmp_path: Path) -> None:
    import rlds as bench_rlds

    from shardstore.convert.rlds import import_rlds

    src = tmp_path / "benchrlds" / "1.0.0"
    bench_rlds.make_source(str(src), 10, 30, 64)  # JPEG frames, state, action, a task text
    import_rlds(str(src), str(tmp_path / "ds"))
    assert du(tmp_path / "ds") <= 1.3 * du(src), (du(tmp_path / "ds"), du(src))


def test_episode_frame_at_most_1_3x_its_shards(tmp_path: Path) -> None:
    from make_episode_wds import rollouts, write_shard

    from shardstore.convert.episode_wds import import_episode_wds

    folder = tmp_path / "src" / "demos" / "bench" / "task"
    write_shard(folder / "shard-000000.tar.zst", {"benchmark_name": "bench"},
                rollouts(np.random.default_rng(0), [50] * 16, (3, 32, 32)))
    import_episode_wds(folder, tmp_path / "ds", num_workers=1)
    assert du(tmp_path / "ds") <= 1.3 * du(folder), (du(tmp_path / "ds"), du(folder))
