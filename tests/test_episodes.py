"""The episode writer and view: round trips at both granularities, the extra ``steps+1`` row, splits,
windows, refusals, interruption, re-prepare, DataLoader workers."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import shardstore
from shardstore.episodes import Episode, EpisodeWriter, FieldSpec, Schema
from shardstore.episodes import npy as npy_mod
from shardstore.errors import ConfigError, EpisodeFormatError, PathEscapeError

SCHEMA = Schema(
    (
        FieldSpec("observations.pos", "array", "<f4", (3,), path=("observations", "pos"), rows="steps+1"),
        FieldSpec("observations.img", "array", "|u1", (4, 4, 3), path=("observations", "img"), rows="steps+1"),
        FieldSpec("actions", "array", "<i8", ()),
        FieldSpec("rewards", "array", ">f8", ()),  # big-endian stays big-endian
        FieldSpec("frame", "media", "|u1", encoding="png"),
        FieldSpec("lang", "text"),
    ),
    source_format="test",
)


def make_episodes(count: int = 12, seed: int = 0) -> list[Episode]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        n = int(rng.integers(1, 25))
        steps = {
            "observations.pos": rng.random((n + 1, 3), dtype=np.float32),
            "observations.img": rng.integers(0, 255, (n + 1, 4, 4, 3), dtype=np.uint8),
            "actions": rng.integers(-5, 5, n),
            "rewards": rng.random(n).astype(">f8"),
            "frame": [b"\x89PNG\r\n" + bytes([i, t]) * t for t in range(n)],
            "lang": [f"pick up {t} ü" for t in range(n)],
        }
        meta = {"seed": np.int64(100 + i), "ratio": np.float32(0.5), "options": {"k": (1, "a")}, "none": None}
        out.append(Episode(i, steps, meta, terminal=bool(i % 3 == 0), source={"group": f"episode_{i}"}))
    return out


def assert_same(got: Episode, want: Episode) -> None:
    assert got.index == want.index and got.terminal == want.terminal and got.source == want.source
    assert got.metadata.keys() == want.metadata.keys()
    for k, v in want.metadata.items():
        assert type(got.metadata[k]) is type(v) and got.metadata[k] == v
    assert got.steps.keys() == want.steps.keys()
    for name, v in want.steps.items():
        g = got.steps[name]
        if isinstance(v, np.ndarray):
            assert g.dtype == v.dtype and g.shape == v.shape and g.tobytes() == v.tobytes(), name
            assert g.flags.writeable
        else:
            assert g == v, name


@pytest.fixture(scope="module", params=["columns", "step", "episode"])
def written(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Episode]]:
    out = tmp_path_factory.mktemp("ep") / "ds"
    eps = make_episodes()
    with EpisodeWriter(out, granularity=request.param, shard_size=30_000, split_ratio="8,1,1", schema=SCHEMA,
                       source_files={"data/metadata.json": b'{"a": 1}\n', "README": b"x"}) as w:
        for ep in eps:
            w.write(ep)
    assert w.report is not None and w.report.episodes == 12 and w.report.shards > 3
    return out, eps


def test_round_trip_every_episode_and_step(written: tuple[Path, list[Episode]]) -> None:
    out, eps = written
    view = shardstore.episodes(str(out))
    assert len(view) == len(eps) and view.schema == SCHEMA
    seen = set()
    for e in np.random.default_rng(1).permutation(len(view)).tolist():
        got = view[e]
        want = eps[got.index]
        assert_same(got, want)
        assert view.metadata(e).keys() == want.metadata.keys() and view.source(e) == want.source
        seen.add(got.index)
        n = len(want.steps["actions"])
        assert view.lengths[e] == n
        for t in range(n):
            s = view.step(e, t)
            assert s["actions"].dtype == np.int64 and s["actions"] == want.steps["actions"][t]
            assert s["rewards"].dtype.str == ">f8" and s["rewards"].tobytes() == want.steps["rewards"][t, ...].tobytes()
            assert s["observations.img"].tobytes() == want.steps["observations.img"][t].tobytes()
            assert s["frame"] == want.steps["frame"][t] and s["lang"] == want.steps["lang"][t]
            assert (bool(s["is_first"]), bool(s["is_last"]), bool(s["is_terminal"])) == (t == 0, False, False)
        last = view.step(e, n)  # the extra row of steps+1 fields, flagged last
        assert set(last) == {"observations.pos", "observations.img", "is_first", "is_last", "is_terminal"}
        assert last["observations.pos"].tobytes() == want.steps["observations.pos"][n].tobytes()
        assert bool(last["is_last"]) and bool(last["is_terminal"]) == want.terminal
        with pytest.raises(IndexError):
            view.step(e, n + 1)
    assert seen == set(range(len(eps)))


def test_windows_pad_by_repeating_the_edges(written: tuple[Path, list[Episode]]) -> None:
    out, eps = written
    view = shardstore.episodes(str(out))
    for e in range(len(view)):
        want = eps[view.number(e)]
        n = len(want.steps["actions"])
        for t in {0, n // 2, n - 1}:
            w = view.window(e, t, before=3, after=4)
            idx = np.clip(np.arange(t - 3, t + 5), 0, n - 1)
            assert w["is_pad"].tolist() == (np.arange(t - 3, t + 5) != idx).tolist()
            assert w["actions"].tobytes() == want.steps["actions"][idx].tobytes()
            assert w["observations.pos"].tobytes() == want.steps["observations.pos"][idx].tobytes()
            assert w["frame"] == [want.steps["frame"][i] for i in idx]
            assert w["is_first"].tolist() == (idx == 0).tolist() and not w["is_last"].any()


def test_splits_by_ratio_and_from_split_yaml(written: tuple[Path, list[Episode]]) -> None:
    out, eps = written
    by_split = {s: shardstore.open(str(out), split=s).episodes for s in ("train", "val", "test")}
    assert [len(v) for v in by_split.values()] == [10, 1, 1]
    numbers = sorted(v.number(e) for v in by_split.values() for e in range(len(v)))
    assert numbers == list(range(len(eps)))
    assert {by_split["val"].split(0), by_split["test"][0].split} == {"val", "test"}


def test_episode_split_is_kept_and_one_shard_per_episode(tmp_path: Path) -> None:
    eps = make_episodes(6)
    for ep in eps:
        ep.split = "validation" if ep.index % 2 else "train"
    out = tmp_path / "ds"
    with EpisodeWriter(out, shard_size=1, schema=SCHEMA) as w:  # every episode in a shard of its own
        for ep in eps:
            w.write(ep)
    assert sorted(p.name for p in out.glob("*.tar")) == [f"train-00000{i}.tar" for i in range(3)] + [
        f"validation-00000{i}.tar" for i in range(3)
    ]
    view = shardstore.open(str(out), split="validation").episodes
    assert [view[e].index for e in range(len(view))] == [1, 3, 5] and view[0].split == "validation"
    assert view.position(5) == 2 and view.number(2) == 5


def test_source_files_and_schema_kept_through_a_re_prepare(written: tuple[Path, list[Episode]]) -> None:
    out, eps = written
    view = shardstore.episodes(str(out))
    assert view.source_files() == {"README": 1, "data/metadata.json": 9}
    assert view.source_file("data/metadata.json") == b'{"a": 1}\n'
    with pytest.raises(KeyError):
        view.source_file("../index.sqlite")
    shardstore.prepare(str(out), split_parts=["train:.*"], force_overwrite=True, num_workers=1)
    again = shardstore.episodes(str(out))
    assert len(again) == len(eps) and again.source_file("README") == b"x"
    assert_same(again[3], eps[again.number(3)])
    # back to the writer's splits for the other tests of this module
    shardstore.prepare(str(out), split_parts=[f"{s}:{s}-[0-9]+[.]tar$" for s in ("train", "val", "test")],
                       force_overwrite=True, num_workers=1, sample_type="CrudeWebdataset")


def test_schema_is_inferred_and_write_steps_numbers_episodes(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    with EpisodeWriter(out) as w:
        for n in (3, 5):
            w.write_steps({"obs": np.zeros((n + 1, 2), np.float16), "act": np.ones(n, np.int8), "txt": ["a"] * n},
                          terminal=True)
    view = shardstore.open(str(out)).episodes
    assert [f.rows for f in view.schema.fields] == ["steps+1", "steps", "steps"]
    assert [view.number(e) for e in range(2)] == [0, 1] and view[1].steps["obs"].shape == (6, 2)


def test_out_that_holds_a_dataset_is_refused_unless_forced(written: tuple[Path, list[Episode]], tmp_path: Path) -> None:
    out, _ = written
    before = sorted(os.listdir(out))
    with pytest.raises(ConfigError, match="already holds a dataset"):
        EpisodeWriter(out)
    assert sorted(os.listdir(out)) == before
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not empty"):
        EpisodeWriter(other, force=True)
    forced = tmp_path / "forced"
    for count in (5, 2):
        with EpisodeWriter(forced, force=True, schema=SCHEMA) as w:
            for ep in make_episodes(count):
                w.write(ep)
    assert len(shardstore.episodes(str(forced))) == 2
    assert [p for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_bad_episodes_name_episode_and_field_and_leave_nothing(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    eps = make_episodes(3)
    eps[2].steps["actions"] = eps[2].steps["actions"][:-1]
    with pytest.raises(EpisodeFormatError, match=r"episode 2, field 'actions'.*rows"):
        with EpisodeWriter(out, schema=SCHEMA) as w:
            for ep in eps:
                w.write(ep)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(EpisodeFormatError, match="episode 0.*written twice"):
        with EpisodeWriter(out, schema=SCHEMA) as w:
            w.write(make_episodes(1)[0])
            w.write(make_episodes(1)[0])
    with pytest.raises(PathEscapeError):
        with EpisodeWriter(out, schema=SCHEMA, source_files={"../x": b""}) as w:
            w.write(make_episodes(1)[0])
    with pytest.raises(EpisodeFormatError, match="no episodes"):
        EpisodeWriter(out).close()
    assert list(tmp_path.iterdir()) == []


def test_a_killed_writer_leaves_nothing_and_a_rerun_succeeds(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    script = textwrap.dedent(f"""
        import os, signal, sys, numpy as np
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_episodes import SCHEMA, make_episodes
        from shardstore import EpisodeWriter
        w = EpisodeWriter({str(out)!r}, schema=SCHEMA, shard_size=1)
        for ep in make_episodes(4):
            w.write(ep)
        print("written", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL and "written" in proc.stdout, proc.stderr
    assert not out.exists()
    leftovers = sorted(p.name for p in tmp_path.iterdir())  # its lock file and its staging folder
    assert len(leftovers) == 2 and leftovers[0] == ".ds.shardstore-lock", leftovers
    assert leftovers[1].startswith(".ds.shardstore-tmp-")
    with EpisodeWriter(out, schema=SCHEMA) as w:
        for ep in make_episodes(2):
            w.write(ep)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]  # the dead staging folder is gone
    assert len(shardstore.episodes(str(out))) == 2


def test_npy_parts_equal_np_save() -> None:
    for a in [np.array(True), np.arange(5, dtype="<f4"), np.zeros((2, 3), [("a", "<i4"), ("b", "S3")]), np.array("hé")]:
        buf = io.BytesIO()
        np.save(buf, a, allow_pickle=False)
        assert npy_mod.encode_row(a) == buf.getvalue()
        got = npy_mod.decode(buf.getvalue())
        assert got.dtype == a.dtype and got.shape == a.shape and got.tobytes() == a.tobytes()
    buf = io.BytesIO()
    np.save(buf, np.array([object()], dtype=object), allow_pickle=True)
    with pytest.raises(shardstore.ShardstoreError, match="pickle"):
        npy_mod.decode(buf.getvalue(), "x.npy")


def test_torch_steps_and_windows_with_two_workers(written: tuple[Path, list[Episode]]) -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from shardstore.torch import EpisodeStepDataset

    out, eps = written
    keep = ["actions", "observations.pos", "__episode__", "__step__"]
    ds = EpisodeStepDataset(str(out), window=(2, 3), transform=lambda item: {k: item[k] for k in keep + ["is_pad"]})
    total = sum(len(ep.steps["actions"]) for ep in eps)
    assert len(ds) == total
    loader = DataLoader(ds, batch_size=16, num_workers=2, shuffle=True, generator=torch.Generator().manual_seed(0))
    seen = []
    for batch in loader:
        assert batch["actions"].shape[1:] == (6,) and batch["is_pad"].dtype == torch.bool
        for i in range(len(batch["__step__"])):
            number, t = int(batch["__episode__"][i]), int(batch["__step__"][i])
            n = len(eps[number].steps["actions"])
            idx = np.clip(np.arange(t - 2, t + 4), 0, n - 1)
            assert batch["actions"][i].numpy().tobytes() == eps[number].steps["actions"][idx].tobytes()
            seen.append((number, t))
    assert len(seen) == total and len(set(seen)) == total


def test_tar_writer_writes_what_tarfile_writes(tmp_path: Path) -> None:
    import tarfile

    from shardstore.episodes.tarwriter import TarWriter

    def ours(members: list[tuple[str, bytes]], path: Path) -> bytes:
        w = TarWriter(open(path, "wb"), mtime=1_700_000_000)
        for name, data in members:
            w.write(name, data)
        w.close()
        return path.read_bytes()

    def theirs(members: list[tuple[str, bytes]], path: Path) -> bytes:
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode, info.uname, info.gname = len(data), 1_700_000_000, 0o444, "bigdata", "bigdata"
                tar.addfile(info, io.BytesIO(data))
        return path.read_bytes()

    plain = [("e00000000_s000000.actions.npy", b"x" * 700), ("e00000000_s000000.is_first.npy", b""),
             ("e00000000_s000000.lang.txt", "é".encode())]
    assert ours(plain, tmp_path / "a.tar") == theirs(plain, tmp_path / "b.tar")  # byte for byte
    long = [*plain, ("e00000001_s000000." + "long" * 30 + ".txt", b"gnu long name")]
    ours(long, tmp_path / "c.tar")
    with tarfile.open(tmp_path / "c.tar") as tar:
        assert [(m.name, tar.extractfile(m).read()) for m in tar] == long  # type: ignore[union-attr]


def test_uniform_steps_take_the_fast_path_and_a_tampered_step_is_caught(tmp_path: Path) -> None:
    """Fixed-size steps (layout 1) are cut as a byte matrix; a step whose .npy header differs (same size) is
    not misread: the parser path decodes each step and refuses rows that disagree."""
    from shardstore.errors import DecodeError

    rng = np.random.default_rng(5)
    eps = [Episode(i, {"obs": rng.random((9, 3), dtype=np.float32), "act": rng.integers(0, 9, (8, 2)).astype(np.int16)})
           for i in range(3)]
    out = tmp_path / "ds"
    with EpisodeWriter(out, granularity="step") as w:
        for ep in eps:
            w.write(ep)
    view = shardstore.episodes(str(out))
    calls = []
    original = view._uniform_rows
    view._uniform_rows = lambda *a: calls.append(1) or original(*a)  # type: ignore[method-assign]
    for e in range(3):
        assert_same(view[e], eps[e])
        assert view.window(e, 4, before=2, after=2)["act"].tobytes() == eps[e].steps["act"][2:7].tobytes()
    assert len(calls) == 6
    shard = out / "train-000000.tar"
    data = bytearray(shard.read_bytes())
    at = data.index(b"e00000001_s000003.act.npy")
    descr = data.index(b"'<i2'", at)
    data[descr : descr + 5] = b"'<u2'"
    st = shard.stat()
    shard.write_bytes(bytes(data))
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))  # a rewrite that kept its mtime: only the rows show it
    view = shardstore.episodes(str(out))
    assert_same(view[0], eps[0])
    with pytest.raises(DecodeError, match="rows disagree"):
        view[1]
    assert view.step(1, 3)["act"].dtype == np.uint16
