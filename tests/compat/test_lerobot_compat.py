"""An imported LeRobot dataset with the real megatron-energon: its ``metadataset.yaml`` loads in
Energon's metadataset loader, whose aux store ``videos`` (Energon's ``WebdatasetFileStore`` over the
video store ``.videos/``) gives each mp4 that a step's frame reference names, byte for byte."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.compat
pytest.importorskip("megatron.energon", reason="the compat extra (megatron-energon) is not installed")
pytest.importorskip("av")

import shardstore  # noqa: E402
from shardstore.convert.lerobot import import_lerobot  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from make_lerobot import make_lerobot  # noqa: E402


def test_energon_reads_the_metadataset_and_its_video_store(tmp_path: Path) -> None:
    from megatron.energon import WorkerConfig
    from megatron.energon.metadataset.loader import load_dataset

    src = Path(make_lerobot(str(tmp_path / "src"), version="v3.0", episodes=3, frames=6))
    import_lerobot(str(src), str(tmp_path / "ds"))
    loaded = load_dataset(tmp_path / "ds/metadataset.yaml").get_datasets(
        training=False, split_part="train", worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0)
    )
    store = loaded.datasets[0].aux["videos"]
    view = shardstore.episodes(str(tmp_path / "ds"))
    names = {ref.file for e in range(len(view)) for ref in view[e].steps["observation.images.front"]}
    assert names == {
        "videos/observation.images.front/chunk-000/file-000.mp4",
        "videos/observation.images.front/chunk-000/file-001.mp4",
    }
    for name in names:
        data, _source = store[name]
        assert data == (src / name).read_bytes()
