"""Hostile LeRobot datasets: path templates that leave the dataset or allocate (a 400M-wide field),
attribute access in a template, split names carrying YAML, a FIFO and a symlink in meta/, an mp4
whose sample table claims 50M frames, a video of another resolution than info.json says, v3.0
time ranges that copy another episode's, non-numeric fps and shapes. One CLI run per class under
1 GB of address space (hostile_cli), the rest through the Python API."""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
import threading
from pathlib import Path

import pytest
from hostile_cli import ROOT, refused, run

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("av")
yaml = pytest.importorskip("yaml")
sys.path.insert(0, str(ROOT / "tools"))
from make_lerobot import make_lerobot  # noqa: E402

from shardstore.convert.lerobot import check, export_lerobot, import_lerobot  # noqa: E402
from shardstore.convert.lerobot.deep import check_deep  # noqa: E402
from shardstore.errors import LeRobotFormatError  # noqa: E402

CAMERA = "observation.images.front"
BAD_PATHS = {
    "absolute": "/tmp/hostile-{episode_index:06d}.parquet",
    "dotdot": "../../hostile/{episode_chunk}/{episode_index}.parquet",
    "backslash": "data\\chunk-{episode_chunk:03d}\\{episode_index:06d}.parquet",
    "newline": "data/chunk-{episode_chunk:03d}/x\n{episode_index:06d}.parquet",
    "nul": "data/chunk-{episode_chunk:03d}/\x00{episode_index:06d}.parquet",
    "wide": "data/chunk-{episode_chunk:03d}/{episode_index:0400000000d}.parquet",
    "attribute": "data/{episode_chunk.__class__}/{episode_index:06d}.parquet",
    "conversion": "data/{episode_chunk!r}/{episode_index:06d}.parquet",
}


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("lerobot")
    opts = {"episodes": 4, "frames": 6, "cameras": {CAMERA: "h264"}, "image": False}
    return {v: Path(make_lerobot(str(root / v), version=v, **opts)) for v in ("v2.1", "v3.0")}


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _edit_info(src: Path, **changes: object) -> None:
    path = src / "meta" / "info.json"
    info = json.loads(path.read_text())
    info.update(changes)
    path.write_text(json.dumps(info))


def test_templates_are_filled_only_with_plain_fields_and_stay_inside(sources: dict[str, Path], tmp_path: Path) -> None:
    for route, template in BAD_PATHS.items():
        for key in ("data_path", "video_path"):
            src = _copy(sources["v2.1"], tmp_path / f"{route}-{key}")
            if key == "video_path":
                template = template.replace(".parquet", "/{video_key}.mp4")
            _edit_info(src, **{key: template})
            with pytest.raises(LeRobotFormatError) as e:
                import_lerobot(str(src), str(tmp_path / "out"))
            assert "info.json" in str(e.value) and not (tmp_path / "out").exists(), (route, key, e.value)
    assert not list(Path("/tmp").glob("hostile-*"))


@pytest.mark.parametrize("route", ["wide", "dotdot"])
def test_cli_refuses_a_template(sources: dict[str, Path], tmp_path: Path, route: str) -> None:
    src = _copy(sources["v2.1"], tmp_path / "src")
    _edit_info(src, data_path=BAD_PATHS[route])
    refused("import", "lerobot", src, tmp_path / "out", "--quiet", expect="info.json")


def test_split_names_carrying_yaml_are_refused(sources: dict[str, Path], tmp_path: Path) -> None:
    """A split name that holds a newline and YAML never reaches metadataset.yaml or split.yaml."""
    src = _copy(sources["v2.1"], tmp_path / "src")
    _edit_info(src, splits={"train:\n    path: /etc\n  x": "0:4"})
    refused("import", "lerobot", src, tmp_path / "out", "--quiet", expect="split name")
    assert not (tmp_path / "out").exists()


def test_metadataset_yaml_is_written_by_pyyaml(sources: dict[str, Path], tmp_path: Path) -> None:
    src = _copy(sources["v2.1"], tmp_path / "src")
    _edit_info(src, splits={"train": "0:3", "val_1": "3:4"})
    import_lerobot(str(src), str(tmp_path / "out"))
    doc = yaml.safe_load((tmp_path / "out" / "metadataset.yaml").read_text())
    assert doc["splits"] == {s: {"path": ".", "split_part": s, "aux": {"videos": ".videos"}} for s in ("train", "val_1")}


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_meta_files_that_are_not_regular_are_skipped(sources: dict[str, Path], tmp_path: Path, kind: str) -> None:
    src = _copy(sources["v2.1"], tmp_path / "src")
    extra = src / "meta" / "notes.jsonl"
    if kind == "fifo":
        os.mkfifo(extra)
    else:
        (tmp_path / "id_rsa").write_text("SECRET KEY")
        extra.symlink_to(tmp_path / "id_rsa")
    done = threading.Event()
    result: list[object] = []

    def work() -> None:
        try:
            with pytest.warns(UserWarning, match="notes.jsonl"):
                result.append(import_lerobot(str(src), str(tmp_path / "out")))
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            result.append(e)
        done.set()

    threading.Thread(target=work, daemon=True).start()
    assert done.wait(60), "the import hangs on a FIFO in meta/"
    assert not isinstance(result[0], BaseException), result[0]
    kept = [p for p in (tmp_path / "out" / ".nv-meta").rglob("*") if p.is_file()]
    assert all(b"SECRET KEY" not in p.read_bytes() for p in kept)


def test_cli_does_not_hang_on_a_fifo_in_meta(sources: dict[str, Path], tmp_path: Path) -> None:
    src = _copy(sources["v2.1"], tmp_path / "src")
    os.mkfifo(src / "meta" / "episodes_stats.jsonl.fifo")
    res = run("import", "lerobot", src, tmp_path / "out", "--quiet")
    assert res.returncode == 0 and "skipped" in res.stderr, res.stderr


def _one_video(src: Path) -> Path:
    return sorted(src.glob("videos/**/*.mp4"))[0]


def test_an_mp4_whose_sample_table_claims_50m_frames(sources: dict[str, Path], tmp_path: Path) -> None:
    src = _copy(sources["v2.1"], tmp_path / "src")
    video = _one_video(src)
    data = bytearray(video.read_bytes())
    at = data.find(b"stts")
    struct.pack_into(">I", data, at + 12, 50_000_000)  # the first entry's sample count
    video.write_bytes(bytes(data))
    res = run("check", "lerobot", src)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "50000000 frames" in res.stdout + res.stderr
    refused("import", "lerobot", src, tmp_path / "out", "--quiet", expect=("50000000 frames", video.name))


def test_a_video_of_another_resolution(sources: dict[str, Path], tmp_path: Path) -> None:
    src = _copy(sources["v2.1"], tmp_path / "src")
    info = json.loads((src / "meta" / "info.json").read_text())
    info["features"][CAMERA]["shape"] = [16, 16, 3]
    (src / "meta" / "info.json").write_text(json.dumps(info))
    refused("import", "lerobot", src, tmp_path / "out", "--quiet", expect=("32x32", "16x16", CAMERA))


def test_a_v30_time_range_that_copies_another_episodes(sources: dict[str, Path], tmp_path: Path) -> None:
    src = _copy(sources["v3.0"], tmp_path / "src")
    path = sorted(src.glob("meta/episodes/**/*.parquet"))[0]
    table = pq.read_table(path)
    rows = table.to_pylist()
    pre = f"videos/{CAMERA}/"
    rows[1][pre + "from_timestamp"] = rows[0][pre + "from_timestamp"]
    rows[1][pre + "to_timestamp"] = rows[0][pre + "to_timestamp"]
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)
    report = check(str(src))
    assert any(p.check == "spans" and "overlaps" in p.message for p in report.problems), report.lines()
    with pytest.raises(LeRobotFormatError):
        import_lerobot(str(src), str(tmp_path / "out"))


@pytest.mark.parametrize(("key", "value"), [("fps", "fast"), ("fps", float("nan")), ("fps", -1), ("chunks_size", "2")])
def test_numbers_that_are_not(sources: dict[str, Path], tmp_path: Path, key: str, value: object) -> None:
    src = _copy(sources["v2.1"], tmp_path / "src")
    _edit_info(src, **{key: value})
    with pytest.raises(LeRobotFormatError, match=key):
        import_lerobot(str(src), str(tmp_path / "out"))


def _set_episode_field(src: Path, version: str, key: str, value: int) -> None:
    """Episode 1's ``key`` in the episodes table (v2.1's jsonl, v3.0's parquet) set to ``value``."""
    if version == "v2.1":
        path = src / "meta" / "episodes.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        rows[1][key] = value
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return
    path = sorted(src.glob("meta/episodes/**/*.parquet"))[0]
    table = pq.read_table(path)
    rows = table.to_pylist()
    rows[1][key] = value
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)


@pytest.mark.parametrize(
    ("version", "key"), [("v2.1", "length"), ("v3.0", "length"), ("v3.0", "dataset_from_index"), ("v2.1", "episode_index")]
)
def test_a_negative_count_in_the_episodes_table(sources: dict[str, Path], tmp_path: Path, version: str, key: str) -> None:
    """A length or row number below 0 is refused where it is read (it sized an array: ``negative
    dimensions are not allowed``, or sliced a table: ``Offset must be non-negative``, no file named)."""
    src = _copy(sources[version], tmp_path / "src")
    _set_episode_field(src, version, key, -3)
    with pytest.raises(LeRobotFormatError, match=f"'{key}' is -3") as e:
        import_lerobot(str(src), str(tmp_path / "out"))
    assert "meta/episodes" in str(e.value)
    assert any(f"{key!r} is -3" in p.message for p in check_deep(str(src)).problems)
    if (version, key) == ("v3.0", "dataset_from_index"):  # one CLI run: the line the user sees
        refused("import", "lerobot", src, tmp_path / "out", "--quiet", expect=(key, "-3", "meta/episodes"))


@pytest.mark.parametrize(("key", "value"), [("from_timestamp", float("nan")), ("to_timestamp", float("inf"))])
def test_a_v30_time_range_that_is_not_a_time(sources: dict[str, Path], tmp_path: Path, key: str, value: float) -> None:
    """A NaN or infinite bound of an episode's video range ended import and check alike with
    ``ValueError: cannot convert float NaN to integer``, naming no file or field."""
    src = _copy(sources["v3.0"], tmp_path / "src")
    path = sorted(src.glob("meta/episodes/**/*.parquet"))[0]
    table = pq.read_table(path)
    rows = table.to_pylist()
    rows[1][f"videos/{CAMERA}/{key}"] = value
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)
    with pytest.raises(LeRobotFormatError, match=key) as e:
        import_lerobot(str(src), str(tmp_path / "out"))
    assert "meta/episodes" in str(e.value) and "episode 1" in str(e.value)
    assert [p.check for p in check(str(src)).problems] == ["meta"]
    if key == "from_timestamp":  # one CLI run: the line the user sees
        refused("import", "lerobot", src, tmp_path / "out", "--quiet", expect=(key, "meta/episodes", "episode 1"))


@pytest.mark.parametrize("fps", ["fast", [10]])
def test_a_video_fps_that_is_not_a_number_is_a_finding_of_check_deep(
    sources: dict[str, Path], tmp_path: Path, fps: object
) -> None:
    """info.json's ``video.fps`` of a camera is only compared by ``check --deep``: a string or a list
    there ended it with ``ValueError: could not convert string to float``, no report."""
    src = _copy(sources["v3.0"], tmp_path / "src")
    info = json.loads((src / "meta" / "info.json").read_text())
    info["features"][CAMERA].setdefault("info", {})["video.fps"] = fps
    (src / "meta" / "info.json").write_text(json.dumps(info))
    found = [p for p in check_deep(str(src)).problems if p.field == "video.fps"]
    assert found and repr(fps) in found[0].message, [str(p) for p in found]
    if fps == "fast":  # one CLI run: a report, not an error line
        res = run("check", "lerobot", src, "--deep")
        assert res.returncode == 1 and "Traceback" not in res.stderr and not res.stderr.startswith("shardstore: error"), res.stderr
        assert "field 'video.fps'" in res.stdout and repr(fps) in res.stdout, res.stdout


@pytest.mark.parametrize(
    "stats", [{"action": {"min": [[1], [1, 2]]}}, {"action": 5}, [1, 2], {"action": {"min": "abc"}}],
    ids=["ragged", "feature-not-an-object", "not-an-object", "text"],
)
def test_v21_episode_stats_that_are_not_numbers(sources: dict[str, Path], tmp_path: Path, stats: object) -> None:
    """An episode's ``stats`` in episodes_stats.jsonl are an object of features, each an object of
    numeric arrays; anything else ended import and check with a bare ``AttributeError`` or numpy's
    ``inhomogeneous shape`` (no file named), or (text) imported and then failed the export."""
    src = _copy(sources["v2.1"], tmp_path / "src")
    path = src / "meta" / "episodes_stats.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[1]["stats"] = stats
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(LeRobotFormatError) as e:
        import_lerobot(str(src), str(tmp_path / "out"))
    assert "episodes_stats.jsonl" in str(e.value) and "episode 1" in str(e.value)
    assert [p.check for p in check(str(src)).problems] == ["meta"]
    if stats == [1, 2]:  # one CLI run: the line the user sees
        refused("import", "lerobot", src, tmp_path / "out", "--quiet", expect=("episodes_stats.jsonl", "episode 1"))


def test_a_v30_stats_column_without_a_statistic(sources: dict[str, Path], tmp_path: Path) -> None:
    """``stats/<feature>/<stat>`` columns of the episodes table; one named ``stats/action`` ended
    the import with ``ValueError: not enough values to unpack``."""
    src = _copy(sources["v3.0"], tmp_path / "src")
    path = sorted(src.glob("meta/episodes/**/*.parquet"))[0]
    table = pq.read_table(path)
    pq.write_table(table.append_column("stats/action", pa.array([1.0] * table.num_rows)), path)
    refused("import", "lerobot", src, tmp_path / "out", "--quiet", expect=("stats/action", "meta/episodes"))


@pytest.mark.parametrize("features", [("index",), ("timestamp", "frame_index", "episode_index", "index", "task_index")])
def test_a_final_observation_mark_on_a_bookkeeping_column(
    sources: dict[str, Path], tmp_path: Path, features: tuple[str, ...]
) -> None:
    """``rows: steps+1`` (what shardstore's writer puts on a kept final observation) on LeRobot's
    own per-frame columns is not taken: an import that took it cut them a row short, and the
    export of that import failed with ``ValueError: cannot reshape array of size 5 into shape (6,)``."""
    src = _copy(sources["v2.1"], tmp_path / "src")
    info = json.loads((src / "meta" / "info.json").read_text())
    for key in features:
        info["features"][key]["rows"] = "steps+1"
    (src / "meta" / "info.json").write_text(json.dumps(info))
    import_lerobot(str(src), str(tmp_path / "ds"))
    export_lerobot(str(tmp_path / "ds"), str(tmp_path / "out"))
    assert check(str(tmp_path / "out")).ok


def test_a_shape_that_is_not_sizes(sources: dict[str, Path], tmp_path: Path) -> None:
    src = _copy(sources["v2.1"], tmp_path / "src")
    info = json.loads((src / "meta" / "info.json").read_text())
    info["features"]["action"]["shape"] = ["six"]
    (src / "meta" / "info.json").write_text(json.dumps(info))
    refused("import", "lerobot", src, tmp_path / "out", "--quiet", expect=("shape", "action"))


def test_a_parquet_footer_declaring_2_gib(sources: dict[str, Path], tmp_path: Path) -> None:
    src = _copy(sources["v2.1"], tmp_path / "src")
    data = sorted(src.glob("data/**/*.parquet"))[-1]
    raw = bytearray(data.read_bytes())
    struct.pack_into("<I", raw, len(raw) - 8, (1 << 31) - 1)  # the footer's length, before b"PAR1"
    data.write_bytes(bytes(raw))
    with pytest.raises(LeRobotFormatError) as e:
        import_lerobot(str(src), str(tmp_path / "out"))
    assert data.name in str(e.value) and "ArrowInvalid" in str(e.value)  # found by the check before reading
    refused("import", "lerobot", src, tmp_path / "out2", "--quiet", expect=(data.name, "parquet"))


@pytest.mark.parametrize(
    "name", ["meta/a\\..\\..\\hostile.json", "meta/new\nline.json", "../../hostile.json", "/tmp/hostile.json", "meta/\x00.json"]
)
def test_export_refuses_a_kept_file_name_that_is_not_plain(sources: dict[str, Path], tmp_path: Path, name: str) -> None:
    """Kept source files are written back by name on export: the name is the dataset's, so checked."""
    import sqlite3

    ds = tmp_path / "ds"
    import_lerobot(str(sources["v2.1"]), str(ds))
    kept = ds / ".nv-meta" / "source"
    if "\x00" not in name and not name.startswith(("/", "..")):
        (kept / name).write_bytes(b"{}")
    db = sqlite3.connect(ds / ".nv-meta" / "episodes.sqlite")
    db.execute("INSERT INTO source_files VALUES (?, 2)", (name,))
    db.commit()
    db.close()
    refused("export", "lerobot", ds, tmp_path / "out", expect="refused")
    assert not (tmp_path / "out").exists() and not list(tmp_path.rglob("hostile.json"))
