"""LeRobot through S3: an imported dataset read from a bucket (frames decoded from range GETs of the
video store's tar members), a LeRobot source imported from a bucket, and an export from a bucket."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("av")
pytest.importorskip("pyarrow")

import shardstore  # noqa: E402
from shardstore.convert.lerobot import check, export_lerobot, import_lerobot  # noqa: E402
from shardstore.storage import FsspecStorage  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from make_lerobot import make_lerobot  # noqa: E402

pytestmark = pytest.mark.s3
CAMS = ("observation.images.front", "observation.images.wrist")


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return Path(make_lerobot(str(tmp_path / "src"), version="v3.0", episodes=3, frames=[8, 6, 8]))


def test_frames_read_from_s3_by_range(
    source: Path,
    tmp_path: Path,
    s3_url: Callable[[str], str],
    upload: Callable[[Any, str], str],
    storage_options: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    local = tmp_path / "ds"
    import_lerobot(str(source), str(local))
    url = upload(local, s3_url("ds"))
    remote = shardstore.episodes(url, storage_options=storage_options)
    here = shardstore.episodes(str(local))
    reads: list[tuple[str, int, int]] = []
    real = FsspecStorage.read_at

    def counted(self: FsspecStorage, path: str, offset: int, size: int) -> bytes:
        reads.append((path, offset, size))
        return real(self, path, offset, size)

    monkeypatch.setattr(FsspecStorage, "read_at", counted)
    for e, t in [(0, 0), (2, 7), (1, 3), (1, 4), (0, 5)]:
        a, b = remote.step(e, t), here.step(e, t)
        for cam in CAMS:
            np.testing.assert_array_equal(a[cam], b[cam])
        np.testing.assert_array_equal(a["action"], b["action"])
    w = remote.window(2, 2, 2, 3)
    np.testing.assert_array_equal(w[CAMS[1]], here.window(2, 2, 2, 3)[CAMS[1]])
    video_reads = [r for r in reads if r[0].startswith("videos-")]
    assert video_reads  # frames came from range reads of the video store's shard
    shard_size = (local / ".videos/videos-000000.tar").stat().st_size
    assert all(size < shard_size for _, _, size in video_reads)  # never the whole shard


def test_import_and_export_with_s3_on_either_side(
    source: Path,
    tmp_path: Path,
    s3_url: Callable[[str], str],
    upload: Callable[[Any, str], str],
    storage_options: dict[str, Any],
) -> None:
    src_url = upload(source, s3_url("src"))
    report = check(src_url, storage_options=storage_options)
    assert report.ok and report.version == "v3.0" and report.videos == 4
    import_lerobot(src_url, str(tmp_path / "ds"), storage_options=storage_options)
    ds_url = upload(tmp_path / "ds", s3_url("ds"))
    out = export_lerobot(ds_url, str(tmp_path / "v21"), version="2.1", storage_options=storage_options)
    assert out.frames == 22 and not out.reencoded and check(str(tmp_path / "v21")).ok


def test_deep_check_from_s3_finds_what_it_finds_locally(
    source: Path, s3_url: Callable[[str], str], upload: Callable[[Any, str], str], storage_options: dict[str, Any]
) -> None:
    """``check lerobot --deep`` on a bucket: every row, stat and packet read through shardstore.storage,
    the same findings as on the local copy (a NaN seeded; the paths differ by their root only)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shardstore.convert.lerobot.deep import check_deep

    data = source / "data/chunk-000/file-000.parquet"
    table = pq.read_table(data)
    action = table.column("action").to_pylist()
    action[3] = [float("nan")] * 6
    table = table.set_column(table.column_names.index("action"), "action", pa.array(action, table.schema.field("action").type))
    pq.write_table(table, data)
    url = upload(source, s3_url("lerobot-deep"))
    here, there = check_deep(str(source)), check_deep(url, storage_options=storage_options)
    assert not there.ok and (there.episodes, there.frames, there.videos) == (here.episodes, here.frames, here.videos)
    strip = lambda r, root: [str(p).replace(root.rstrip("/"), "ROOT") for p in r.problems]  # noqa: E731
    assert strip(there, url) == strip(here, str(source))
    assert any(p.check == "finite" and p.field == "action" and p.frame == 3 for p in there.problems)


def test_lerobot_dataset_from_s3(
    source: Path,
    tmp_path: Path,
    s3_url: Callable[[str], str],
    upload: Callable[[Any, str], str],
    storage_options: dict[str, Any],
) -> None:
    """The drop-in LeRobotDataset over a bucket gives the local one's items, batches included."""
    torch = pytest.importorskip("torch")
    from shardstore.lerobot_dataset import LeRobotDataset

    local = tmp_path / "ds"
    import_lerobot(str(source), str(local))
    url = upload(local, s3_url("ds_loader"))
    deltas = {CAMS[0]: [-0.1, 0.0], "action": [0.0, 0.1, 0.2, 0.3]}
    remote = LeRobotDataset(url, delta_timestamps=deltas, storage_options=storage_options)
    here = LeRobotDataset(local, delta_timestamps=deltas)
    assert len(remote) == len(here) == 22
    picks = [0, 7, 8, 13, 21]
    for a, b in zip(remote.__getitems__(picks), [here[i] for i in picks], strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key] == b[key] if key == "task" else torch.equal(a[key], b[key]), key
