"""The columns layout (layout 2, ``episodes/columns.py``): a step costs its own bytes, reads find
rows by offset, and what a dataset says about itself is checked before it is used."""

from __future__ import annotations

import io
import os
import shutil
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest
from test_episodes import SCHEMA, assert_same, make_episodes

import shardstore
from shardstore.episodes import Episode, EpisodeWriter, FieldSpec, Schema
from shardstore.errors import DecodeError


def write(out: Path, episodes: list[Episode], **options: object) -> Path:
    with EpisodeWriter(out, schema=SCHEMA, **options) as w:  # type: ignore[arg-type]
        for ep in episodes:
            w.write(ep)
    return out


def test_a_step_costs_its_own_bytes(tmp_path: Path) -> None:
    """1,000 steps of a few floats: the records are 1,000 x their size, plus one header per episode."""
    rng = np.random.default_rng(0)
    eps = [Episode(i, {"obs": rng.random((100, 4), dtype=np.float32), "act": rng.integers(0, 5, 100)}) for i in range(10)]
    with EpisodeWriter(tmp_path / "ds") as w:
        for ep in eps:
            w.write(ep)
    record = 4 * 4 + 8 + 3  # obs, act, the three flags
    shard = tmp_path / "ds/train-000000.tar"
    assert shard.stat().st_size < 1000 * record + 10 * 2048 + 10240
    steps = np.load(io.BytesIO(shardstore.open(str(tmp_path / "ds"))[0]["steps.npy"]))  # what Energon decodes
    assert steps.dtype.itemsize == record and steps["obs"].tobytes() == eps[0].steps["obs"].tobytes()


def test_records_and_values_read_at_once_or_one_after_the_other(tmp_path: Path) -> None:
    """Steps and windows read the same with the episode index's row starts and without them (an
    index written before the table existed)."""
    eps = make_episodes(6, seed=2)
    out = write(tmp_path / "ds", eps)
    old = tmp_path / "old"
    shutil.copytree(out, old)
    db = sqlite3.connect(old / ".nv-meta/episodes.sqlite")
    db.execute("DROP TABLE blob_starts")
    db.commit()
    db.close()
    with_starts, without = shardstore.episodes(str(out)), shardstore.episodes(str(old))
    for e in range(len(eps)):
        n = int(with_starts.lengths[e])
        assert with_starts.index.blob_starts(with_starts.number(e)) is not None
        assert without.index.blob_starts(without.number(e)) is None
        for t in range(n + 1):
            a, b = with_starts.step(e, t), without.step(e, t)
            assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) if isinstance(a[k], np.ndarray) else a[k] == b[k] for k in a)
        wa, wb = with_starts.window(e, n // 2, before=2, after=3), without.window(e, n // 2, before=2, after=3)
        assert wa["frame"] == wb["frame"] and wa["lang"] == wb["lang"] and np.array_equal(wa["rewards"], wb["rewards"])
        assert_same(without[e], eps[without.number(e)])


def test_row_starts_that_disagree_with_the_sample_are_refused(tmp_path: Path) -> None:
    eps = make_episodes(3, seed=4)
    out = write(tmp_path / "ds", eps)
    db = sqlite3.connect(out / ".nv-meta/episodes.sqlite")
    n = len(eps[1].steps["actions"]) + 1
    db.execute("UPDATE blob_starts SET starts = ? WHERE number = 1", (np.full(2 * n + 1, 1 << 40, "<u8").tobytes(),))
    db.execute("UPDATE blob_starts SET starts = ? WHERE number = 2", (np.zeros(3, "<u8").tobytes(),))
    db.commit()
    db.close()
    view = shardstore.episodes(str(out))
    with pytest.raises(DecodeError, match="blobs.bin"):
        view.step(view.position(1), 0)
    with pytest.raises(DecodeError, match="row starts"):
        view.window(view.position(2), 0)
    view.step(view.position(0), 0)  # the others still read
    assert_same(view[view.position(1)], eps[1])  # a whole episode needs no starts


def test_a_tampered_steps_header_is_refused_on_a_whole_episode_read(tmp_path: Path) -> None:
    out = write(tmp_path / "ds", make_episodes(2, seed=5))
    shard = out / "train-000000.tar"
    data = bytearray(shard.read_bytes())
    at = data.index(b"'shape': (")
    data[at + 10] = ord("9") if data[at + 10] != ord("9") else ord("8")  # another row count, same length
    st = shard.stat()
    shard.write_bytes(bytes(data))
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))  # the same size and mtime: prepare's record holds
    view = shardstore.episodes(str(out))
    with pytest.raises(DecodeError, match="steps.npy holds"):
        view[0]
    with pytest.raises(DecodeError, match="steps.npy holds"):  # an episode's first step read checks it too
        shardstore.episodes(str(out)).step(0, 0)


@pytest.mark.parametrize("media", [False, True])
def test_a_step_of_an_episode_the_index_places_at_another_ones_sample_is_refused(tmp_path: Path, media: bool) -> None:
    """Episodes 0 and 1 swapped in ``episodes.sqlite`` (same length): an episode's first step read
    checks the sample's key, once; later steps of it read the range alone."""
    rng = np.random.default_rng(6)
    steps = lambda: {"obs": rng.random((4, 3), dtype=np.float32),  # noqa: E731
                     **({"img": [rng.bytes(100) for _ in range(4)]} if media else {})}
    fields = [FieldSpec("obs", "array", "<f4", (3,))] + ([FieldSpec("img", "media", "|u1", encoding="png")] if media else [])
    with EpisodeWriter(tmp_path / "ds", schema=Schema(tuple(fields))) as w:
        for i in range(3):
            w.write(Episode(i, steps()))
    db = sqlite3.connect(tmp_path / "ds/.nv-meta/episodes.sqlite")
    db.execute("UPDATE episodes SET first_index = 1 - first_index WHERE number IN (0, 1)")
    db.commit()
    db.close()
    view = shardstore.episodes(str(tmp_path / "ds"))
    for e in (view.position(0), view.position(1)):
        with pytest.raises(DecodeError, match="first member is b'e0000000"):
            view.step(e, 2)
        with pytest.raises(DecodeError, match="first member is"):
            view.window(e, 1, after=1)
    assert view.step(view.position(2), 3)["is_last"]


def test_a_value_the_row_before_wrote_is_stored_once(tmp_path: Path) -> None:
    """A next observation equal to the following step's observation (the episode-frame layout's
    ``next_obs``) lies once in blobs.bin; steps, windows and episodes read it back at every row."""
    from shardstore.episodes import FieldSpec, Schema

    frames = [bytes([i]) * 300 for i in range(11)]
    schema = Schema((FieldSpec("obs", "media", "|u1", encoding="pickle"), FieldSpec("next_obs", "media", "|u1", encoding="pickle")))
    ep = Episode(0, {"obs": frames[:10], "next_obs": frames[1:]})
    with EpisodeWriter(tmp_path / "ds", schema=schema) as w:
        w.write(ep)
    blobs = shardstore.open(str(tmp_path / "ds"))[0]["blobs.bin"]
    assert len(blobs) < 11 * 300 + 10 * 100  # 11 distinct frames and 10 record copies, not 20 frames
    view = shardstore.episodes(str(tmp_path / "ds"))
    for t in range(10):
        step = view.step(0, t)
        assert step["obs"] == frames[t] and step["next_obs"] == frames[t + 1]
        w = view.window(0, t, before=1, after=1)
        assert w["obs"] == [frames[max(0, min(9, k))] for k in (t - 1, t, t + 1)]
    assert_same(view[0], ep)


def test_sample_windows_read_only_the_rows_they_reach_and_equal_layout_1(tmp_path: Path) -> None:
    """``sample`` (LeRobot's delta windows) of layout 2 reads rows ``lo .. hi`` as a window does
    (not the whole episode) and gives what layout 1 gives, pads and ``steps+1`` rows included."""
    eps = make_episodes(5, seed=7)
    new, old = (shardstore.episodes(str(write(tmp_path / g, eps, granularity=g))) for g in ("columns", "step"))
    offsets = {"observations.pos": [-3, 0, 2], "actions": list(range(4)), "frame": [-1, 0]}
    calls = []
    rows = new._column_rows
    new._column_rows = lambda e, lo, hi: calls.append(hi - lo) or rows(e, lo, hi)  # type: ignore[method-assign]
    for ep in eps:
        e, n = new.position(ep.index), len(ep.steps["actions"])
        for t in {0, n // 2, n - 1}:
            a, b = new.sample(e, t, offsets), old.sample(old.position(ep.index), t, offsets)
            assert a.keys() == b.keys()
            for k in a:
                assert np.array_equal(a[k], b[k]) if isinstance(a[k], np.ndarray) else a[k] == b[k], k
            assert calls[-1] <= 7  # t - 3 .. t + 3 at most


def test_the_layout_reads_benchmark_runs_on_both_layouts(tmp_path: Path) -> None:
    """tools/bench/layout_reads.py, on tiny data: a figure per dataset and read."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools" / "bench"))
    from layout_reads import run

    eps = make_episodes(4, seed=8)
    a, b = (str(write(tmp_path / g, eps, granularity=g)) for g in ("columns", "step"))
    figures = run(a, b, samples=40, repeat=1)
    for name in (a, b):
        assert set(figures[name]) == {"step", "window16", "episode"}
        assert all(f["median_us"] > 0 and f["reads"] > 0 for f in figures[name].values())


@pytest.mark.parametrize("starts", [b"abc", "text", 5], ids=["odd-bytes", "text", "integer"])
def test_row_starts_that_are_no_table_of_offsets_are_refused(tmp_path: Path, starts: object) -> None:
    """A damaged ``blob_starts`` row of ``episodes.sqlite`` (bytes not a multiple of 8, or not bytes)
    is a ``DecodeError`` naming the index and the episode; step and window reads ended with numpy's
    ``buffer size must be a multiple of element size`` or a bare ``TypeError``."""
    out = write(tmp_path / "ds", make_episodes(2, seed=9))
    db = sqlite3.connect(out / ".nv-meta/episodes.sqlite")
    db.execute("UPDATE blob_starts SET starts = ?", (starts,))
    db.commit()
    db.close()
    view = shardstore.episodes(str(out))
    for read in (lambda: view.step(0, 1), lambda: view.window(0, 1, after=1)):
        with pytest.raises(DecodeError, match="episodes.sqlite.*episode 0.*row starts"):
            read()
