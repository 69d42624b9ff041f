"""The importers on an executor: a real Dask cluster (``distributed.LocalCluster``, two workers)
and a ``ProcessPoolExecutor`` read and encode the episodes, and the dataset is byte for byte the
one a local import writes (shards, episode index, schema, ``.nv-meta`` files, the video store);
every part pickles; a part that fails on a worker gives the local import's error and leaves nothing
behind; the CLI's ``--dask-scheduler`` reaches the cluster."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from rlds_source import write_rlds_source

from shardstore.cli import main
from shardstore.convert.episode_wds import import_episode_wds
from shardstore.convert.episode_wds.layout import read_task
from shardstore.convert.rlds import import_rlds, read_rlds
from shardstore.episodes.parts import PartJob, encode_part
from shardstore.errors import TFRecordFormatError

distributed = pytest.importorskip("distributed", reason="Dask's distributed is not installed (extra dask)")

TOOLS = Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="module")
def cluster() -> Any:
    """A scheduler and two single-thread workers in this process (fast to start; the tasks'
    pickling is tested apart, and across processes by the ProcessPoolExecutor test)."""
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None, silence_logs=40
    ) as c:
        yield c


@pytest.fixture(scope="module")
def executor(cluster: Any) -> Any:
    with distributed.Client(cluster) as client:
        yield client.get_executor()


@pytest.fixture(autouse=True)
def same_mtime(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both imports stamp their tar members with the same time (else a second boundary between
    them would make the bytes differ)."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")


@pytest.fixture(scope="module")
def rlds_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rlds") / "robo" / "1.0.0"
    write_rlds_source(root)
    return root


def dataset_files(root: Path) -> dict[str, bytes]:
    """Every file of a dataset by relative path, but ``index.uuid`` (new for every prepare) and
    the shards' file times in ``shardstore.json``."""
    out: dict[str, bytes] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = str(path.relative_to(root))
        if path.name == "index.uuid":
            continue
        data = path.read_bytes()
        if path.name == "shardstore.json":
            data = json.dumps(_without_mtimes(json.loads(data)), sort_keys=True).encode()
        out[rel] = data
    return out


def _without_mtimes(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_mtimes(v) for k, v in value.items() if k != "mtime"}
    if isinstance(value, list):
        return [_without_mtimes(v) for v in value]
    return value


def assert_same(local: Path, spread: Path) -> None:
    a, b = dataset_files(local), dataset_files(spread)
    assert sorted(a) == sorted(b)
    assert [name for name in a if a[name] != b[name]] == []
    assert any(name.endswith(".tar") for name in a)


def assert_parts_pickle(stream: Any, granularity: str = "step") -> None:
    """Every part's job survives pickling and encodes the same bytes after it."""
    assert stream.parts
    for part in stream.parts:
        job = PartJob(part, stream.schema, granularity, 1_700_000_000)
        back = pickle.loads(pickle.dumps(job))
        here, there = encode_part(job), encode_part(back)
        assert [getattr(e, "members", None) for e in here] == [getattr(e, "members", None) for e in there]
        assert len(here) > 0


def test_rlds_on_a_dask_cluster_equals_the_local_import(rlds_src: Path, executor: Any, tmp_path: Path) -> None:
    """Five TFRecord files, two splits, small shards so that they rotate; episode granularity too."""
    assert_parts_pickle(read_rlds(str(rlds_src)))
    for granularity in ("step", "episode"):
        options = {"shard_size": 3000, "granularity": granularity}
        local = import_rlds(str(rlds_src), str(tmp_path / f"local-{granularity}"), **options)
        spread = import_rlds(str(rlds_src), str(tmp_path / f"dask-{granularity}"), executor=executor, **options)
        assert (spread.episodes, spread.steps, spread.shards, spread.splits) == (
            local.episodes, local.steps, local.shards, local.splits)
        assert local.shards > 2
        assert_same(tmp_path / f"local-{granularity}", tmp_path / f"dask-{granularity}")


def test_rlds_on_a_process_pool_equals_the_local_import(rlds_src: Path, tmp_path: Path) -> None:
    import_rlds(str(rlds_src), str(tmp_path / "local"), shard_size=5000)
    with ProcessPoolExecutor(2) as pool:
        import_rlds(str(rlds_src), str(tmp_path / "pool"), shard_size=5000, executor=pool)
    assert_same(tmp_path / "local", tmp_path / "pool")


def test_a_part_that_fails_on_a_worker_is_the_local_error_and_leaves_nothing(
    rlds_src: Path, executor: Any, tmp_path: Path
) -> None:
    """A bad CRC in record 1 of the third file: the cluster import raises what the local one
    raises (file and record named), and neither leaves OUT or a staging folder behind."""
    src = tmp_path / "src"
    shutil.copytree(rlds_src, src)
    shard = src / "robo-train.tfrecord-00002-of-00003"
    data = bytearray(shard.read_bytes())
    first_length = int.from_bytes(data[:8], "little")
    data[12 + first_length + 4 + 20] ^= 0xFF  # a payload byte of the second record
    shard.write_bytes(bytes(data))
    out = tmp_path / "out"
    errors = []
    for ex in (None, executor):
        with pytest.raises(TFRecordFormatError) as info:
            import_rlds(str(src), str(out), executor=ex)
        errors.append(str(info.value))
        assert not out.exists()
        assert [p.name for p in tmp_path.iterdir() if "shardstore-tmp" in p.name] == []
    assert errors[0] == errors[1]
    assert shard.name in errors[1] and "record 1" in errors[1] and "\n" not in errors[1]


def test_minari_on_a_dask_cluster_equals_the_local_import(executor: Any, tmp_path: Path) -> None:
    """HDF5 (0.4 layout, a Dict observation, a Text field) and Arrow (one folder per episode)."""
    import minari_sources

    from shardstore.convert.minari import import_minari, read_minari

    hdf5 = minari_sources.legacy_hdf5(tmp_path / "legacy", "0.4", episodes=5)
    arrow = tmp_path / "arrow" / "data"
    _arrow_copy(read_minari(hdf5), arrow)
    for name, src in (("hdf5", hdf5), ("arrow", arrow)):
        assert_parts_pickle(read_minari(src))
        local = import_minari(src, tmp_path / f"local-{name}", split_ratio="3,1,0", shard_size=4000)
        import_minari(src, tmp_path / f"dask-{name}", split_ratio="3,1,0", shard_size=4000, executor=executor)
        assert local.episodes == 5 and local.shards > 2
        assert_same(tmp_path / f"local-{name}", tmp_path / f"dask-{name}")


def test_a_bad_minari_episode_is_named_from_the_worker(executor: Any, tmp_path: Path) -> None:
    """Episode 3 lost its terminations: the worker's error names the file, the episode and the field."""
    import h5py
    import minari_sources

    from shardstore.convert.minari import import_minari
    from shardstore.errors import EpisodeFormatError

    src = minari_sources.legacy_hdf5(tmp_path / "legacy", "0.4", episodes=5)
    with h5py.File(src / "data" / "main_data.hdf5", "a") as f:
        del f["episode_3/terminations"]
    messages = []
    for ex in (None, executor):
        with pytest.raises(EpisodeFormatError) as info:
            import_minari(src, tmp_path / "out", executor=ex)
        messages.append(str(info.value))
        assert not (tmp_path / "out").exists()
        assert [p.name for p in tmp_path.iterdir() if "shardstore-tmp" in p.name] == []
    assert messages[0] == messages[1]
    assert "main_data.hdf5" in messages[1] and "episode 3, field 'terminations'" in messages[1]


def _arrow_copy(stream: Any, data: Path) -> None:
    """The same episodes as a Minari 0.5 Arrow dataset (written by shardstore's own exporter)."""
    from shardstore.convert.minari import write_minari

    write_minari(stream, data.parent, version="0.5", backend="arrow")


@pytest.mark.parametrize("frames", [None, "npy"])
def test_lerobot_on_a_dask_cluster_equals_the_local_import(
    frames: str | None, executor: Any, tmp_path: Path
) -> None:
    """v2.1 (a data file per episode) and v3.0 (two episodes per file): the video store (copied
    by the parent) and, with ``frames="npy"``, frames decoded on the workers."""
    pytest.importorskip("av")
    from make_lerobot import make_lerobot

    from shardstore.convert.lerobot import import_lerobot, read_lerobot

    cameras = {"observation.images.front": "h264"}
    for version in ("v2.1", "v3.0") if frames is None else ("v3.0",):
        src = make_lerobot(str(tmp_path / version), version=version, episodes=3, frames=[5, 4, 6], size=16,
                           cameras=cameras)
        if frames:
            assert_parts_pickle(read_lerobot(src, frames=frames))  # type: ignore[arg-type]
        local = import_lerobot(src, str(tmp_path / f"local-{version}"), frames=frames, shard_size=2000)
        import_lerobot(src, str(tmp_path / f"dask-{version}"), frames=frames, shard_size=2000, executor=executor)
        assert local.steps == 15 and local.shards > 1
        assert_same(tmp_path / f"local-{version}", tmp_path / f"dask-{version}")
        if frames:
            import shardstore

            step = shardstore.episodes(str(tmp_path / f"dask-{version}")).step(2, 3)
            assert step["observation.images.front"].shape == (16, 16, 3)


def test_episode_wds_parts_are_numbered_by_the_parent(executor: Any, tmp_path: Path) -> None:
    """Shards whose episode counts are known only once read: the parent numbers them on."""
    from make_episode_wds import rollouts, write_shard

    rng = np.random.default_rng(0)
    folder = tmp_path / "src"
    write_shard(folder / "shard-000000.tar", {"task": "t"}, rollouts(rng, [4, 1, 6]))
    write_shard(folder / "shard-000001.tar.zst", {"task": "t"}, rollouts(rng, [3, 5]))
    from shardstore.convert.episode_wds import find_tasks

    stream = read_task(find_tasks(folder)[0])
    assert stream.parts and not any(p.numbered for p in stream.parts)
    import_episode_wds(folder, tmp_path / "local", shard_size=3000)
    report = import_episode_wds(folder, tmp_path / "dask", shard_size=3000, executor=executor)
    assert report.datasets[0].episodes == 5
    assert_same(tmp_path / "local", tmp_path / "dask")


def test_cli_import_takes_the_dask_scheduler(rlds_src: Path, cluster: Any, tmp_path: Path) -> None:
    runner = CliRunner()
    local = runner.invoke(main, ["import", "rlds", str(rlds_src), str(tmp_path / "local"), "--json"])
    assert local.exit_code == 0, local.output
    spread = runner.invoke(main, ["import", "rlds", str(rlds_src), str(tmp_path / "dask"), "--json",
                                  "--dask-scheduler", cluster.scheduler_address])
    assert spread.exit_code == 0, spread.output
    assert_same(tmp_path / "local", tmp_path / "dask")
    bad = runner.invoke(main, ["import", "rlds", str(rlds_src), str(tmp_path / "x"), "--executor", "local",
                               "--dask-scheduler", cluster.scheduler_address])
    assert bad.exit_code != 0 and "--dask-scheduler needs --executor dask" in bad.output
    assert not os.path.exists(tmp_path / "x")
