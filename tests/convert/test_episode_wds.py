"""The episode-frame WebDataset layout (``convert/episode_wds``): shards written here with
webdataset's ``TarWriter`` as the research code writes them (plain and zstd), read into episodes,
written back member for member; bad input named by shard, member and offset."""

from __future__ import annotations

import io
import os
import pickle
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from shardstore.convert.episode_wds import META_MEMBER, find_tasks, read_episode_wds, write_episode_wds
from shardstore.episodes.model import EpisodeStream, FieldSpec, Schema
from shardstore.errors import EpisodeFormatError, TruncatedTarError, UnsafePickleError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from make_episode_wds import rollouts, write_shard  # noqa: E402


class EnvMeta:
    """The test's own class in the metadata pickle: like the research code's gym spaces, nothing
    outside this test can load it."""

    def __init__(self, benchmark: str, task: str) -> None:
        self.benchmark = benchmark
        self.task = task
        self.obs_space = np.zeros((3, 8, 8), dtype=np.uint8)


class _System:
    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (self.command,))


def members(path: Path) -> list[tuple[str, bytes]]:
    """Every member of a shard, in order, with its bytes (zstd decompressed)."""
    raw = path.read_bytes()
    if path.name.endswith(".zst"):
        import zstandard

        raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw), read_across_frames=True).read()
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar.getmembers() if m.isfile()]  # type: ignore[union-attr]


@pytest.fixture
def task(tmp_path: Path) -> Path:
    """One task folder of the research layout: a zstd shard (3 trajectories) and a plain one
    (2 trajectories, the second step of which lacks ``infos``)."""
    rng = np.random.default_rng(0)
    folder = tmp_path / "src" / "demos" / "magical" / "MoveToCorner"
    write_shard(folder / "shard-000000.tar.zst", EnvMeta("magical", "MoveToCorner"), rollouts(rng, [4, 1, 6]))
    frames = rollouts(rng, [3, 5])
    del frames[1]["infos"]
    write_shard(folder / "shard-000001.tar", EnvMeta("magical", "MoveToCorner"), frames)
    return folder


def test_read_cuts_episodes_at_dones_and_keeps_bytes(task: Path) -> None:
    stream = read_episode_wds(task)
    schema = stream.schema
    assert schema.source_format == "episode-wds"
    assert schema.names == ["acts", "dones", "frame", "infos", "next_obs", "obs", "rews"]
    assert all(f.kind == "media" and f.encoding == "pickle" for f in schema.fields)
    assert schema.attrs["subflavors"] == {"data_type": "demos", "benchmark": "magical", "task": "MoveToCorner"}
    episodes = list(stream.episodes)
    assert [e.length(schema) for e in episodes] == [4, 1, 6, 3, 5]
    assert all(e.terminal and "truncated" not in e.metadata for e in episodes)
    assert [e.index for e in episodes] == list(range(5))
    src = {name: data for name, data in members(task / "shard-000000.tar.zst")}
    third = episodes[2]
    assert third.metadata["source"] == {"shard": "shard-000000.tar.zst", "keys": [f"frame_{i:03d}" for i in range(5, 11)]}
    for t, key in enumerate(third.metadata["source"]["keys"]):
        for f in schema.names:
            assert third.steps[f][t] == src[f"{key}.{f}.pickle"]
    assert episodes[3].steps["infos"][1] == b""  # the step without infos
    # the metadata member: bytes kept beside the steps, its foreign class named, never loaded
    assert stream.source_files[f"shard-000000.tar.zst/{META_MEMBER}"] == src[META_MEMBER]
    shards = schema.attrs["shards"]
    assert [s["name"] for s in shards] == ["shard-000000.tar.zst", "shard-000001.tar"]
    assert [s["compression"] for s in shards] == ["zstd", ""]
    assert shards[0]["metadata_classes"] == [f"{__name__}.EnvMeta"]


def test_allow_pickle_records_dtypes_and_shapes(task: Path) -> None:
    schema = read_episode_wds(task, allow_pickle=True).schema
    assert (schema["obs"].dtype, schema["obs"].shape) == ("|u1", (3, 8, 8))
    assert (schema["acts"].dtype, schema["acts"].shape) == ("<i8", (2,))
    assert (schema["rews"].dtype, schema["rews"].shape) == ("<f4", ())
    assert (schema["infos"].dtype, schema["infos"].shape) == ("", ())  # a dict: no array


def test_round_trip_gives_every_member_back(task: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    names = write_episode_wds(read_episode_wds(task), out)
    assert names == ["shard-000000.tar.zst", "shard-000001.tar"]
    for name in names:
        assert members(out / name) == members(task / name)
    assert (out / names[0]).read_bytes()[:4] == b"\x28\xb5\x2f\xfd"  # zstd where the source was
    plain = write_episode_wds(read_episode_wds(task), tmp_path / "plain", compress=False)
    assert plain == ["shard-000000.tar", "shard-000001.tar"]
    assert members(tmp_path / "plain" / plain[0]) == members(task / names[0])


def test_counter_past_999_and_a_single_shard(tmp_path: Path) -> None:
    shard = tmp_path / "one.tar"
    write_shard(shard, {"benchmark_name": "dmc"}, rollouts(np.random.default_rng(1), [600, 405], (2,), ("acts", "dones")))
    stream = read_episode_wds(shard)
    episodes = list(stream.episodes)
    assert episodes[1].metadata["source"]["keys"][-2:] == ["frame_1003", "frame_1004"]
    write_episode_wds(read_episode_wds(shard), tmp_path / "out")
    assert members(tmp_path / "out" / "one.tar") == members(shard)


def test_a_trajectory_that_never_ends_is_kept_flagged_not_merged(task: Path) -> None:
    write_shard(task / "shard-000000.tar.zst", EnvMeta("m", "t"), rollouts(np.random.default_rng(2), [4, 3])[:-1])
    episodes = list(read_episode_wds(task).episodes)
    assert [(e.length(read_episode_wds(task).schema), e.terminal) for e in episodes] == [
        (4, True), (2, False), (3, True), (5, True),
    ]
    assert episodes[1].metadata["truncated"] is True
    assert episodes[2].metadata["source"]["shard"] == "shard-000001.tar"


def test_multitask_root(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    for data_type, task_name in (("demos", "a"), ("demos", "b"), ("random", "a")):
        write_shard(tmp_path / data_type / "dmc" / task_name / "s.tar", {}, rollouts(rng, [2], (1,)))
    tasks = find_tasks(tmp_path)
    assert [t.subflavors for t in tasks] == [
        {"data_type": "demos", "benchmark": "dmc", "task": "a"},
        {"data_type": "demos", "benchmark": "dmc", "task": "b"},
        {"data_type": "random", "benchmark": "dmc", "task": "a"},
    ]
    with pytest.raises(EpisodeFormatError, match="3 task folders"):
        read_episode_wds(tmp_path)


def test_first_member_must_be_the_metadata(tmp_path: Path) -> None:
    import webdataset as wds

    shard = tmp_path / "bad.tar"
    with wds.TarWriter(str(shard)) as tw:
        tw.write({"__key__": "frame_000", "dones.pickle": True})
    with pytest.raises(EpisodeFormatError) as info:
        read_episode_wds(shard)
    assert (info.value.path, info.value.member, info.value.offset) == (str(shard), "frame_000.dones.pickle", 0)


def test_truncated_zst(task: Path) -> None:
    shard = task / "shard-000000.tar.zst"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) - 40])
    with pytest.raises(TruncatedTarError) as info:
        list(read_episode_wds(task).episodes)
    assert info.value.path == str(shard) and "zstd" in str(info.value)


def test_truncated_tar(task: Path) -> None:
    shard = task / "shard-000001.tar"
    data = shard.read_bytes()
    shard.write_bytes(data[:5000])
    with pytest.raises(TruncatedTarError) as info:
        list(read_episode_wds(task).episodes)
    assert info.value.path == str(shard)


def test_a_refused_pickle_is_named_by_shard_member_and_offset(task: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    frames = rollouts(np.random.default_rng(4), [3])
    frames[1]["obs"] = _System(f"touch {marker}")
    shard = task / "shard-000001.tar"
    write_shard(shard, EnvMeta("m", "t"), frames)
    episodes = list(read_episode_wds(task).episodes)  # without the opt-in the bytes are just kept
    assert episodes[-1].steps["obs"][1] == pickle.dumps(frames[1]["obs"])
    with pytest.raises(UnsafePickleError) as info:
        list(read_episode_wds(task, allow_pickle=True).episodes)
    assert not marker.exists()
    err = info.value
    assert (err.path, err.member) == (str(shard), "frame_001.obs.pickle") and "system" in err.detail
    raw = shard.read_bytes()
    assert raw[err.offset : err.offset + 512].startswith(b"frame_001.obs.pickle")  # the member's header


def test_dones_needing_a_foreign_class_is_an_error(task: Path) -> None:
    frames = rollouts(np.random.default_rng(5), [2])
    frames[0]["dones"] = EnvMeta("x", "y")
    write_shard(task / "shard-000001.tar", {}, frames)
    with pytest.raises(UnsafePickleError, match="EnvMeta") as info:
        list(read_episode_wds(task).episodes)
    assert info.value.member == "frame_000.dones.pickle"


def test_episodes_of_other_code_are_written_as_new_shards(tmp_path: Path) -> None:
    from shardstore.episodes.model import Episode

    schema = Schema(
        (FieldSpec("obs", "array", "|u1", (2, 2)), FieldSpec("acts", "array", "<f4", ())),
        attrs={"subflavors": {"task": "reach"}},
    )
    rng = np.random.default_rng(6)
    eps = [
        Episode(i, {"obs": rng.integers(0, 9, (n, 2, 2), dtype=np.uint8), "acts": rng.random(n, dtype=np.float32)})
        for i, n in enumerate((3, 2))
    ]
    names = write_episode_wds(EpisodeStream(schema, iter(eps)), tmp_path / "out", compress=True)
    assert names == ["shard-000000.tar.zst"]
    back = read_episode_wds(tmp_path / "out", allow_pickle=True)
    got = list(back.episodes)
    assert [e.length(back.schema) for e in got] == [3, 2]
    import shardstore.safepickle as sp

    for e, want in zip(got, eps, strict=True):
        assert np.array_equal(np.stack([sp.loads(b) for b in e.steps["obs"]]), want.steps["obs"])
        assert [sp.loads(b) for b in e.steps["dones"]] == [False] * (len(want.steps["acts"]) - 1) + [True]
    assert sp.loads(back.source_files[f"shard-000000.tar.zst/{META_MEMBER}"]) == {"task": "reach"}


def test_export_never_overwrites(task: Path, tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep").write_text("x")
    with pytest.raises(EpisodeFormatError, match="exists"):
        write_episode_wds(read_episode_wds(task), tmp_path / "out")
    assert (tmp_path / "out" / "keep").read_text() == "x"


