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
from typing import Any

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
    write_shard(folder / "shard-000001.tar", EnvMeta("magical", "MoveToCorner"), frames, mtime=None)  # PAX headers
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
    assert third.source == {"shard": "shard-000000.tar.zst", "keys": [f"frame_{i:03d}" for i in range(5, 11)]}
    for t, key in enumerate(third.source["keys"]):
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


def test_round_trip_through_splits_and_episode_granularity(task: Path, tmp_path: Path) -> None:
    """Episodes spread over splits, one sample per episode: the export still gives every member back."""
    from shardstore.convert.episode_wds import export_episode_wds, import_episode_wds

    import_episode_wds(task, tmp_path / "ds", granularity="episode", split_ratio="1,1,1")
    names = export_episode_wds(tmp_path / "ds", tmp_path / "back")
    for name in names:
        assert members(tmp_path / "back" / name) == members(task / name)


def test_counter_past_999_and_a_single_shard(tmp_path: Path) -> None:
    shard = tmp_path / "one.tar"
    write_shard(shard, {"benchmark_name": "dmc"}, rollouts(np.random.default_rng(1), [600, 405], (2,), ("acts", "dones")))
    stream = read_episode_wds(shard)
    episodes = list(stream.episodes)
    assert episodes[1].source["keys"][-2:] == ["frame_1003", "frame_1004"]
    write_episode_wds(read_episode_wds(shard), tmp_path / "out")
    assert members(tmp_path / "out" / "one.tar") == members(shard)


def test_a_trajectory_that_never_ends_is_kept_flagged_not_merged(task: Path) -> None:
    write_shard(task / "shard-000000.tar.zst", EnvMeta("m", "t"), rollouts(np.random.default_rng(2), [4, 3])[:-1])
    episodes = list(read_episode_wds(task).episodes)
    assert [(e.length(read_episode_wds(task).schema), e.terminal) for e in episodes] == [
        (4, True), (2, False), (3, True), (5, True),
    ]
    assert episodes[1].metadata["truncated"] is True
    assert episodes[2].source["shard"] == "shard-000001.tar"


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


def test_zstd_of_several_frames(task: Path, tmp_path: Path) -> None:
    """A .tar.zst made of several zstd frames (as parallel compressors write them) reads as one tar."""
    import zstandard

    shard = task / "shard-000000.tar.zst"
    raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(shard.read_bytes())).read()
    cut = len(raw) // 3 + 100  # inside a member
    shard.write_bytes(b"".join(zstandard.ZstdCompressor().compress(p) for p in (raw[:cut], raw[cut:])))
    assert [e.length(read_episode_wds(task).schema) for e in read_episode_wds(task).episodes] == [4, 1, 6, 3, 5]


def test_truncated_zst(task: Path) -> None:
    shard = task / "shard-000000.tar.zst"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) - 40])
    with pytest.raises(TruncatedTarError) as info:
        list(read_episode_wds(task).episodes)
    assert info.value.path == str(shard) and "zstd" in str(info.value)


@pytest.mark.parametrize("where", ["inside", "at a member boundary"])
def test_truncated_tar(task: Path, where: str) -> None:
    """A cut shard never reads as a shorter one: also when it is cut exactly between two members."""
    shard = task / "shard-000001.tar"
    data = shard.read_bytes()
    with tarfile.open(shard) as tar:
        last = tar.getmembers()[-1]
    boundary = last.offset_data + (last.size + 511) // 512 * 512
    shard.write_bytes(data[:5000] if where == "inside" else data[:boundary])
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


def test_export_replaces_only_an_earlier_export_and_only_with_force(task: Path, tmp_path: Path) -> None:
    from shardstore.errors import ConfigError, PathEscapeError

    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep").write_text("x")
    with pytest.raises(ConfigError, match="not empty"):
        write_episode_wds(read_episode_wds(task), tmp_path / "out")
    assert (tmp_path / "out" / "keep").read_text() == "x"
    write_episode_wds(read_episode_wds(task), tmp_path / "exp")
    with pytest.raises(ConfigError, match="force"):
        write_episode_wds(read_episode_wds(task), tmp_path / "exp")
    assert write_episode_wds(read_episode_wds(task), tmp_path / "exp", compress=False, force=True) == [
        "shard-000000.tar", "shard-000001.tar",
    ]
    assert sorted(p.name for p in (tmp_path / "exp").iterdir()) == ["shard-000000.tar", "shard-000001.tar"]
    # a shard name from the dataset's own files never leaves OUT
    stream = read_episode_wds(task)
    shards = [{**sh, "name": "../escaped.tar"} if sh["name"] == "shard-000001.tar" else sh for sh in stream.schema.attrs["shards"]]
    evil = Schema(stream.schema.fields, stream.schema.source_format, attrs={**stream.schema.attrs, "shards": shards})
    eps = [e if e.source["shard"] != "shard-000001.tar" else
           type(e)(e.index, e.steps, e.metadata, e.terminal, source={**e.source, "shard": "../escaped.tar"})
           for e in stream.episodes]
    with pytest.raises(PathEscapeError):
        write_episode_wds(EpisodeStream(evil, eps), tmp_path / "evil")
    assert not (tmp_path / "escaped.tar").exists() and not (tmp_path / "evil").exists()


# ----- import into prepared datasets, export back ------------------------------------------------------
@pytest.mark.parametrize("granularity", ["columns", "step"])
def test_import_then_read_at_random_and_export_every_member(task: Path, tmp_path: Path, granularity: str) -> None:
    import shardstore
    from shardstore.convert.episode_wds import export_episode_wds, import_episode_wds

    report = import_episode_wds(task, tmp_path / "ds", granularity=granularity)
    assert [(r.episodes, r.steps) for r in report.datasets] == [(5, 19)]
    view = shardstore.episodes(tmp_path / "ds")
    src = {**dict(members(task / "shard-000000.tar.zst")), **dict(members(task / "shard-000001.tar"))}
    rng = np.random.default_rng(0)
    for _ in range(20):
        e = int(rng.integers(len(view)))
        t = int(rng.integers(view.lengths[e]))
        source = view.source(e)
        step = view.step(e, t)
        key = source["keys"][t]
        shard_members = dict(members(task / source["shard"]))
        for f in ("acts", "dones", "obs", "next_obs", "rews"):
            assert step[f] == shard_members[f"{key}.{f}.pickle"]
        assert bool(step["is_last"]) == (t == view.lengths[e] - 1)
    for e in rng.permutation(len(view)).tolist():  # whole episodes, in random order
        episode = view[e]
        source = episode.source
        shard_members = dict(members(task / source["shard"]))
        for f in ("acts", "dones", "frame", "next_obs", "obs", "rews"):
            assert episode.steps[f] == [shard_members[f"{key}.{f}.pickle"] for key in source["keys"]]
        assert episode.terminal and episode.metadata == {}
    assert len(src) > 0
    assert view.source_file(f"shard-000000.tar.zst/{META_MEMBER}") == dict(members(task / "shard-000000.tar.zst"))[META_MEMBER]
    meta_yaml = (tmp_path / "ds" / ".nv-meta" / "dataset.yaml").read_text()
    assert "subflavors:" in meta_yaml and "MoveToCorner" in meta_yaml
    names = export_episode_wds(tmp_path / "ds", tmp_path / "back")
    for name in names:
        assert members(tmp_path / "back" / name) == members(task / name)
    if granularity == "columns":  # the pickles are values in blobs.bin: a decode leaves them bytes
        first = shardstore.open(str(tmp_path / "ds"), decode=True)[0]
        assert sorted(k for k in first if not k.startswith("__")) == ["blobs.bin", "steps.npy"]
        assert isinstance(first["blobs.bin"], bytes) and first["steps.npy"]["is_first"][0]
        return
    # layout 1: the samples decode like any dataset's pickle parts: only with the opt-in, through safepickle
    from shardstore.errors import PickleNotAllowedError

    with pytest.raises(PickleNotAllowedError):
        shardstore.open(str(tmp_path / "ds"), decode=True)[0]
    first = shardstore.open(str(tmp_path / "ds"), decode=True, allow_pickle=True)[0]
    want = pickle.loads(dict(members(task / "shard-000000.tar.zst"))["frame_000.obs.pickle"])
    assert first["obs.pickle"].dtype == np.uint8 and np.array_equal(first["obs.pickle"], want)


def test_to_dict_decodes_pickles_only_with_the_opt_in(task: Path, tmp_path: Path) -> None:
    import shardstore
    from shardstore.convert.episode_wds import import_episode_wds
    from shardstore.errors import PickleNotAllowedError

    import_episode_wds(task, tmp_path / "ds")
    view = shardstore.episodes(tmp_path / "ds")
    with pytest.raises(PickleNotAllowedError, match="allow_pickle"):
        view.to_dict()
    frames = [pickle.loads(data) for name, data in members(task / "shard-000001.tar") if name.endswith(".obs.pickle")]
    d = view.to_dict(episodes=[3, 4], allow_pickle=True)
    assert d["obs"].shape == (8, 3, 8, 8) and d["obs"].dtype == np.uint8
    assert np.array_equal(d["obs"], np.stack(frames))
    assert d["dones"].tolist() == [False, False, True, False, False, False, False, True]
    assert d["acts"].shape == (8, 2) and np.array_equal(d["next_obs"][:-1][d["dones"][:-1] == 0], d["obs"][1:][d["dones"][:-1] == 0])
    sliced = view.to_dict(episodes=slice(3, None), allow_pickle=True)
    assert all(np.array_equal(sliced[k], d[k]) for k in d)
    everything = view.to_dict(allow_pickle=True)
    assert len(everything["dones"]) == 19 and int(everything["dones"].sum()) == 5


def test_to_dict_of_npy_episodes(tmp_path: Path) -> None:
    import shardstore
    from shardstore.episodes import Episode, EpisodeWriter

    rng = np.random.default_rng(7)
    eps = [Episode(i, {"observations": rng.random((n + 1, 2), dtype=np.float32), "actions": rng.integers(0, 3, n)})
           for i, n in enumerate((3, 4))]
    with EpisodeWriter(tmp_path / "ds") as w:
        for ep in eps:
            w.write(ep)
    d = shardstore.episodes(tmp_path / "ds").to_dict()  # arrays: no opt-in needed
    assert np.array_equal(d["obs"], np.concatenate([eps[0].steps["observations"][:3], eps[1].steps["observations"][:4]]))
    assert np.array_equal(d["next_obs"], np.concatenate([eps[0].steps["observations"][1:], eps[1].steps["observations"][1:]]))
    assert d["dones"].tolist() == [False, False, True, False, False, False, True]
    assert d["acts"].tolist() == eps[0].steps["actions"].tolist() + eps[1].steps["actions"].tolist()


def test_multitask_import_blend_yaml_draws_each_task_uniformly(tmp_path: Path) -> None:
    import collections
    import itertools
    import math

    import shardstore
    from shardstore.convert.episode_wds import import_episode_wds

    rng = np.random.default_rng(8)
    sizes = {("demos", "magical", "a"): [2], ("demos", "magical", "b"): [3, 4], ("random", "dmc", "c"): [9, 9, 9]}
    for names, lengths in sizes.items():
        write_shard(tmp_path.joinpath("src", *names, "s.tar.zst"), EnvMeta(*names[1:]), rollouts(rng, lengths, (1,)))
    report = import_episode_wds(tmp_path / "src", tmp_path / "out", blend_yaml=True)
    assert report.blend_yaml == str(tmp_path / "out" / "blend.yaml")
    assert [r.steps for r in report.datasets] == [2, 7, 27]
    md = shardstore.open_metadataset(report.blend_yaml)
    n, k = 3000, 3
    got = list(itertools.islice(md.iter(shuffle=True, seed=1), n))
    counts = collections.Counter(s["__subflavors__"]["task"] for s in got)
    tol = 4.5 * math.sqrt(n * (1 / k) * (1 - 1 / k))  # binomial: 4.5 standard deviations
    assert all(abs(counts[t] - n / k) <= tol for t in "abc"), (counts, tol)
    assert {s["__subflavors__"]["data_type"] for s in got} == {"demos", "random"}
    # the same blend in Python
    dss = [shardstore.open(r.path) for r in report.datasets]
    mixed = shardstore.interleave(dss, seed=2, restart=True, nominal_length=n)
    counts = collections.Counter(s["__source__"] for s in mixed.iter(shuffle=True))
    assert all(abs(counts[i] - n / k) <= tol for i in range(k)), (counts, tol)


@pytest.mark.compat
def test_subflavors_reach_energon(task: Path, tmp_path: Path) -> None:
    """The real Energon reads the imported dataset.yaml: its factory and every sample carry the subflavors."""
    pytest.importorskip("megatron.energon")
    from megatron.energon import (
        Cooker,
        DefaultTaskEncoder,
        WorkerConfig,
        get_loader,
        get_val_dataset,
        stateless,
    )
    from megatron.energon.dataset_config import get_dataset_from_config

    from shardstore.convert.episode_wds import import_episode_wds

    import_episode_wds(task, tmp_path / "ds")
    want = {"data_type": "demos", "benchmark": "magical", "task": "MoveToCorner"}
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    assert get_dataset_from_config(tmp_path / "ds", split_part="train", training=False, worker_config=wc).subflavors == want

    @stateless
    def cook(raw: dict) -> dict:
        return {"key": raw["__key__"], "subflavors": raw["__subflavors__"]}

    class Raw(DefaultTaskEncoder):
        decoder = None
        cookers = [Cooker(cook)]

    ds = get_val_dataset(tmp_path / "ds", split_part="train", worker_config=wc, batch_size=None, task_encoder=Raw())
    got = list(get_loader(ds))
    assert len(got) == 5 and all(s["subflavors"] == want for s in got)  # a sample per episode (19 steps)


# ----- the command line ---------------------------------------------------------------------------
def _cli(*args: object) -> Any:
    from click.testing import CliRunner

    from shardstore.cli import main

    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_cli_import_info_export(task: Path, tmp_path: Path) -> None:
    import json

    r = _cli("import", "episode-wds", task, tmp_path / "ds", "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert (got["format"], got["path"], got["episodes"]) == ("episode-wds", str(tmp_path / "ds"), 5)
    assert got["extras"]["datasets"][0]["episodes"] == 5 and got["extras"]["datasets"][0]["subflavors"]["task"] == "MoveToCorner"
    r = _cli("info", tmp_path / "ds")
    assert r.exit_code == 0 and f"{__name__}.EnvMeta (not loaded)" in r.output and "task=MoveToCorner" in r.output
    r = _cli("export", "episode-wds", tmp_path / "ds", tmp_path / "back", "--no-compress")
    assert r.exit_code == 0, r.output
    assert members(tmp_path / "back" / "shard-000000.tar") == members(task / "shard-000000.tar.zst")
    r = _cli("export", "episode-wds", tmp_path / "ds", tmp_path / "back")
    assert r.exit_code == 1 and "--force" in r.output
    assert _cli("export", "episode-wds", tmp_path / "ds", tmp_path / "back", "--force").exit_code == 0


def test_cli_refused_pickle_names_the_place_and_writes_nothing(task: Path, tmp_path: Path) -> None:
    frames = rollouts(np.random.default_rng(9), [2])
    frames[0]["rews"] = EnvMeta("a", "b")
    write_shard(task / "shard-000001.tar", {}, frames)
    r = _cli("import", "episode-wds", task, tmp_path / "ds", "--allow-pickle")
    assert r.exit_code == 1
    line = r.output.strip()
    assert "\n" not in line and "shard-000001.tar, member 'frame_000.rews.pickle', offset " in line and "EnvMeta" in line
    assert not (tmp_path / "ds").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".ds")]
    assert _cli("import", "episode-wds", task, tmp_path / "ds").exit_code == 0  # without the opt-in: bytes kept
