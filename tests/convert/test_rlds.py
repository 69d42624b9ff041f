"""RLDS without TensorFlow: read a TFDS folder into episodes (every value as written), write it
back (the same bytes), and refuse bad input with a one-line error naming file, record and field."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rlds_source import LAYOUT, META_SPECS, STEP_SPECS, example_bytes, framed, make_episode, write_rlds_source

from shardstore.convert.rlds import read_rlds, write_rlds
from shardstore.convert.rlds.tfrecord import iter_records, parse_example
from shardstore.errors import ConfigError, EpisodeFormatError, TFRecordFormatError


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, dict[str, list[dict[str, Any]]]]:
    root = tmp_path / "robo" / "1.0.0"
    return root, write_rlds_source(root)


def assert_episode_equals(ep: Any, want: dict[str, Any]) -> None:
    """Every step field and metadata value of ``ep`` is the source's, with features.json's dtype."""
    for s in STEP_SPECS:
        name = s.path.split("/", 1)[1]
        if name in ("is_first", "is_last", "is_terminal"):
            continue
        name = name.replace("/", ".")
        got = ep.steps[name]
        if s.kind == "tensor":
            assert got.dtype == np.dtype(s.dtype) and got.shape == want[s.path].shape, name
            np.testing.assert_array_equal(got, want[s.path])
        else:
            assert list(got) == list(want[s.path]), name
    assert ep.terminal == bool(want["steps/is_terminal"][-1])
    meta = ep.metadata["episode_metadata"]
    assert meta["episode_id"] == want["episode_metadata/episode_id"] and isinstance(
        meta["episode_id"], np.int64
    )
    assert meta["file_path"] == want["episode_metadata/file_path"]
    np.testing.assert_array_equal(meta["calib"], want["episode_metadata/calib"])
    assert meta["calib"].dtype == np.float32


def test_read_matches_source(source: tuple[Path, dict[str, list[dict[str, Any]]]]) -> None:
    root, values = source
    stream = read_rlds(str(root))
    assert stream.count == sum(len(v) for v in values.values())
    assert "features.json" in stream.source_files and "dataset_info.json" in stream.source_files
    fields = {f.name: f for f in stream.schema.fields}
    assert fields["observation.image"].kind == "media" and fields["observation.image"].encoding == "png"
    assert fields["observation.wrist"].encoding == "jpeg" and fields["observation.wrist"].shape == (8, 8, 3)
    assert fields["action"].dtype == "<i2" and fields["action"].shape == (2, 2)
    assert fields["observation.state"].path == ("observation", "state")
    assert "is_first" not in fields and stream.schema.source_format == "rlds"
    episodes = list(stream.episodes)
    flat = [(split, i, v) for split, eps in values.items() for i, v in enumerate(eps)]
    assert len(episodes) == len(flat)
    for ep, (split, _, want) in zip(episodes, flat, strict=True):
        assert ep.split == split
        ep.validate(stream.schema)
        assert_episode_equals(ep, want)
    # where each episode came from: (shard, record)
    src = episodes[3].source
    assert src == {
        "split": "train",
        "shard": "robo-train.tfrecord-00002-of-00003",
        "shard_index": 2,
        "record": 0,
    }


def test_read_one_split(source: tuple[Path, dict[str, list[dict[str, Any]]]]) -> None:
    root, values = source
    stream = read_rlds(str(root), split="val")
    episodes = list(stream.episodes)
    assert stream.count == len(episodes) == len(values["val"]) and {e.split for e in episodes} == {"val"}
    with pytest.raises(Exception, match="no split 'test'"):
        read_rlds(str(root), split="test")


def test_round_trip_is_byte_identical(
    source: tuple[Path, dict[str, list[dict[str, Any]]]], tmp_path: Path
) -> None:
    root, _ = source
    out = tmp_path / "back" / "1.0.0"
    write_rlds(read_rlds(str(root)), str(out))
    names = sorted(p.name for p in root.iterdir())
    assert sorted(p.name for p in out.iterdir()) == names
    for name in names:
        if name == "dataset_info.json":
            assert json.loads((out / name).read_text()) == json.loads((root / name).read_text())
        else:
            assert (out / name).read_bytes() == (root / name).read_bytes(), name
    # and once more from the export: byte-stable
    again = tmp_path / "again" / "1.0.0"
    write_rlds(read_rlds(str(out)), str(again))
    assert all((again / n).read_bytes() == (out / n).read_bytes() for n in names)


def test_export_replaces_atomically(
    source: tuple[Path, dict[str, list[dict[str, Any]]]], tmp_path: Path
) -> None:
    root, _ = source
    out = tmp_path / "o" / "1.0.0"
    out.mkdir(parents=True)
    (out / "old.txt").write_text("old")

    def failing():  # an export that fails mid-way leaves the old folder as it was
        stream = read_rlds(str(root))
        for i, ep in enumerate(stream.episodes):
            if i == 2:
                raise RuntimeError("killed")
            yield ep

    with pytest.raises(ConfigError, match="not empty and holds no RLDS folder"):
        write_rlds(read_rlds(str(root)), str(out), force=True)  # never replaces what is not RLDS
    (out / "old.txt").unlink()
    write_rlds(read_rlds(str(root)), str(out))  # an empty folder is fine
    (out / "old.txt").write_text("old")
    stream = read_rlds(str(root))
    stream.episodes = failing()
    with pytest.raises(RuntimeError):
        write_rlds(stream, str(out), force=True)
    assert (out / "old.txt").exists() and (out / "features.json").exists()
    assert [p.name for p in out.parent.iterdir()] == ["1.0.0"]  # no staging left behind
    with pytest.raises(ConfigError, match="already holds an RLDS folder; pass force=True"):
        write_rlds(read_rlds(str(root)), str(out))
    write_rlds(read_rlds(str(root)), str(out), force=True)
    assert not (out / "old.txt").exists() and (out / "features.json").exists()


# ----- bad input -------------------------------------------------------------------------------
SHARD = "robo-train.tfrecord-00000-of-00003"


def read_all(root: Path) -> None:
    for _ in read_rlds(str(root)).episodes:
        pass


def one_line(e: pytest.ExceptionInfo[BaseException]) -> str:
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def corrupt(root: Path, offset: int) -> None:
    p = root / SHARD
    data = bytearray(p.read_bytes())
    data[offset] ^= 0x40
    p.write_bytes(bytes(data))


def second_record(root: Path) -> int:
    with open(root / SHARD, "rb") as f:
        return [r.offset for r in iter_records(f, SHARD)][1]


def test_length_crc_mismatch(source: tuple[Path, Any]) -> None:
    root, _ = source
    at = second_record(root)
    corrupt(root, at + 1)
    with pytest.raises(TFRecordFormatError) as e:
        read_all(root)
    msg = one_line(e)
    assert SHARD in msg and "record 1" in msg and f"offset {at}" in msg and "length CRC" in msg


def test_payload_crc_mismatch(source: tuple[Path, Any]) -> None:
    root, _ = source
    at = second_record(root)
    corrupt(root, at + 30)
    with pytest.raises(TFRecordFormatError) as e:
        read_all(root)
    msg = one_line(e)
    assert SHARD in msg and "record 1" in msg and "payload CRC" in msg


def test_truncated_last_record(source: tuple[Path, Any]) -> None:
    root, _ = source
    p = root / SHARD
    at = second_record(root)
    p.write_bytes(p.read_bytes()[:-7])
    with pytest.raises(TFRecordFormatError) as e:
        read_all(root)
    msg = one_line(e)
    assert SHARD in msg and "record 1" in msg and "truncated" in msg
    p.write_bytes(p.read_bytes()[: at + 5])  # inside the header
    with pytest.raises(TFRecordFormatError, match="truncated record: the file ends 5 bytes into"):
        read_all(root)


def rewrite_shard(root: Path, payloads: list[bytes]) -> None:
    (root / SHARD).write_bytes(b"".join(framed(p) for p in payloads))


def episode_values(n: int = 3) -> dict[str, Any]:
    return make_episode(np.random.default_rng(1), n, 0, terminal=True)


def test_record_not_an_example(source: tuple[Path, Any]) -> None:
    root, _ = source
    good = example_bytes(episode_values(), STEP_SPECS + META_SPECS)
    for bad, why in (
        (b'{"json": "not a proto"}', "not a tf.train.Example"),
        (b"\x08\x96\x01", "not a tf.train.Example"),
    ):
        rewrite_shard(root, [good, bad])
        with pytest.raises(TFRecordFormatError) as e:
            read_all(root)
        msg = one_line(e)
        assert SHARD in msg and "record 1" in msg and why in msg


@pytest.mark.parametrize(
    ("flag", "steps", "words"),
    [
        ("steps/is_first", [True, True, False], "is_first is set on steps [0, 1]"),
        ("steps/is_first", [False, False, False], "is_first is set on steps []"),
        ("steps/is_last", [False, True, False], "is_last is set on steps [1]"),
        ("steps/is_terminal", [False, True, False], "is_terminal is set on steps [1]"),
    ],
)
def test_flag_rules(source: tuple[Path, Any], flag: str, steps: list[bool], words: str) -> None:
    root, _ = source
    v = episode_values()
    v[flag] = np.array(steps)
    rewrite_shard(root, [example_bytes(v, STEP_SPECS + META_SPECS)] * 2)
    with pytest.raises(EpisodeFormatError) as e:
        read_all(root)
    msg = one_line(e)
    assert SHARD in msg and "record 0" in msg and f"field '{flag}'" in msg and words in msg


def test_field_missing_on_some_steps(source: tuple[Path, Any]) -> None:
    root, _ = source
    v = episode_values()
    v["steps/observation/wrist"] = v["steps/observation/wrist"][:2]
    rewrite_shard(root, [example_bytes(v, STEP_SPECS + META_SPECS)] * 2)
    with pytest.raises(TFRecordFormatError) as e:
        read_all(root)
    msg = one_line(e)
    assert "record 0" in msg and "field 'steps/observation/wrist'" in msg and "2 steps where" in msg
    # a field absent altogether
    rewrite_shard(
        root, [example_bytes(v, [s for s in STEP_SPECS + META_SPECS if s.path != "steps/action"])] * 2
    )
    with pytest.raises(TFRecordFormatError, match=r"record 0, field 'steps/action'.*field missing"):
        read_all(root)


def test_counts_disagree_with_shard_lengths(source: tuple[Path, Any]) -> None:
    root, _ = source
    info = json.loads((root / "dataset_info.json").read_text())
    info["splits"][0]["shardLengths"][0] = "3"
    (root / "dataset_info.json").write_text(json.dumps(info))
    with pytest.raises(TFRecordFormatError) as e:
        read_all(root)
    msg = one_line(e)
    assert SHARD in msg and "2 records where dataset_info.json's shardLengths says 3" in msg


def test_wrong_list_kind_and_range(source: tuple[Path, Any]) -> None:
    root, _ = source
    v = episode_values()
    specs = [
        s if s.path != "steps/counter" else type(s)(s.path, "tensor", "float32")
        for s in STEP_SPECS + META_SPECS
    ]
    rewrite_shard(root, [example_bytes(v, specs)] * 2)
    with pytest.raises(
        TFRecordFormatError, match=r"field 'steps/counter'.*a float_list where .* uint8 needs a int64_list"
    ):
        read_all(root)
    v["steps/counter"] = np.array([1, 2, 300])  # does not fit uint8
    rewrite_shard(root, [example_bytes(v, STEP_SPECS + META_SPECS)] * 2)
    with pytest.raises(TFRecordFormatError, match=r"field 'steps/counter'.*out of the range of uint8"):
        read_all(root)


def test_parse_example_rejects_foreign_fields() -> None:
    # field 2 of a message the Example does not have: a different message that happens to parse
    payload = b"\x12\x03abc"
    with pytest.raises(TFRecordFormatError, match="record 4.*fields an Example has not"):
        parse_example(payload, "x.tfrecord", 4)
    assert struct.calcsize("<QI") == 12
    assert LAYOUT["train"][0] == [3, 1]


def test_export_of_another_format(tmp_path: Path) -> None:
    """Episodes from elsewhere: features.json from the schema, metadata TFDS cannot type as JSON
    text, ``episodes_per_shard`` records a shard, all in split train."""
    from shardstore.episodes import Episode, EpisodeStream, FieldSpec, Schema

    schema = Schema(
        (
            FieldSpec("observations.pos", "array", "<f8", (3,), ("observations", "pos")),
            FieldSpec("actions", "array", "<i4", ()),
            FieldSpec("frame", "media", "|u1", (), encoding="png"),
        ),
        source_format="minari",
    )
    rng = np.random.default_rng(0)
    from rlds_source import encode_image

    eps = [
        Episode(
            i,
            {
                "observations.pos": rng.random((n, 3)).astype(np.float32).astype(np.float64),
                "actions": rng.integers(-9, 9, n).astype(np.int32),
                "frame": [encode_image(np.full((2, 2, 3), t, np.uint8), "png") for t in range(n)],
            },
            {"seed": np.int64(i), "options": [1, "a"], "none": None},
            terminal=i == 1,
        )
        for i, n in enumerate([2, 3, 1, 4, 2])
    ]
    out = tmp_path / "m" / "1.0.0"
    info = write_rlds(EpisodeStream(schema, iter(eps)), str(out), name="minari_x", episodes_per_shard=2)
    assert info["splits"][0]["shardLengths"] == ["2", "2", "1"] and info["name"] == "minari_x"
    back = list(read_rlds(str(out)).episodes)
    for a, b in zip(back, eps, strict=True):
        np.testing.assert_array_equal(a.steps["observations.pos"], b.steps["observations.pos"])
        assert a.steps["actions"].dtype == np.int32 and a.steps["frame"] == b.steps["frame"]
        assert a.terminal == b.terminal and a.metadata["seed"] == b.metadata["seed"]
        assert json.loads(a.metadata["options"]) == [1, "a"] and json.loads(a.metadata["none"]) is None


def test_killed_export_leaves_out_as_it_was(source: tuple[Path, Any], tmp_path: Path) -> None:
    """SIGKILL in the middle of an export: OUT keeps the old folder, the next export removes the
    dead process's staging folder."""
    import os
    import signal
    import subprocess
    import sys
    import textwrap

    root, _ = source
    out = tmp_path / "k" / "1.0.0"
    write_rlds(read_rlds(str(root)), str(out))
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    script = textwrap.dedent(f"""
        import sys, time
        from shardstore.convert.rlds import read_rlds, write_rlds
        stream = read_rlds({str(root)!r})
        episodes = stream.episodes
        def slow():
            for i, ep in enumerate(episodes):
                if i == 3:
                    print("writing", flush=True)
                    time.sleep(60)
                yield ep
        stream.episodes = slow()
        write_rlds(stream, {str(out)!r}, force=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert any(".shardstore-tmp-" in p.name for p in out.parent.iterdir())  # the dead one's staging
    write_rlds(read_rlds(str(root)), str(out), force=True)
    assert [p.name for p in out.parent.iterdir()] == ["1.0.0"]
