"""prepare: the report, split options, tar-index-only, dataset.yaml handling, carried-over files,
force-overwrite, and the CLI with --json."""

from __future__ import annotations

import io
import json
import os
import sqlite3
import subprocess
import sys
import tarfile
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

import shardstore
from shardstore.errors import ConfigError, DatasetNotPreparedError
from shardstore.index.taridx import read_offsets
from shardstore.nvmeta import brace_expand
from shardstore.prepare import PrepareReport

BIN = Path(sys.executable).parent / "shardstore"
MakeShards = Callable[..., Path]


@pytest.fixture
def ds(make_shards: MakeShards) -> Path:
    """10 small shards (parts/data-000000.tar ...) of 4 samples with jpg/txt/json."""
    return make_shards(shards=10, samples=4, min_kb=0, max_kb=1)


def meta(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((path / ".nv-meta").iterdir()) if p.is_file()}


def splits(path: Path) -> dict[str, list[str]]:
    raw = yaml.safe_load((path / ".nv-meta" / "split.yaml").read_bytes())
    return {k: brace_expand(v) for k, v in raw["split_parts"].items()}


def shard_names(n: int) -> list[str]:
    return [f"parts/data-{i:06d}.tar" for i in range(n)]


def rows(path: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{path / '.nv-meta' / 'index.sqlite'}?mode=ro&immutable=1", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


# --------------------------------------------------------------------------------------------------
# The report and the files


def test_report_fields(ds: Path) -> None:
    report = shardstore.prepare(str(ds), split_ratio="8,1,1", num_workers=1)
    assert isinstance(report, PrepareReport)
    assert report.path == str(ds)
    assert (report.shards, report.samples, report.parts) == (10, 40, 120)
    assert report.bytes == sum(p.stat().st_size for p in (ds / "parts").glob("*.tar"))
    assert 0 <= report.seconds < 60
    assert report.splits == {
        "train": {"shards": 8, "samples": 32},
        "val": {"shards": 1, "samples": 4},
        "test": {"shards": 1, "samples": 4},
    }
    assert report.part_names == {"jpg": 40, "json": 40, "txt": 40}
    assert report.sample_type is None
    assert report.uuid == (ds / ".nv-meta" / "index.uuid").read_text()
    assert uuid.UUID(report.uuid).version == 4
    assert report.problems == []
    assert json.loads(report.to_json())["samples"] == 40


def test_files_written(ds: Path) -> None:
    shardstore.prepare(str(ds), split_ratio="8,1,1", num_workers=2)
    files = meta(ds)
    assert {".info.json", "split.yaml", "index.sqlite", "index.uuid"} <= set(files)
    assert "dataset.yaml" not in files
    info = json.loads(files[".info.json"])
    assert info["shard_counts"] == {s: 4 for s in shard_names(10)}
    assert rows(ds, "SELECT COUNT(*) FROM samples") == [(40,)]
    assert rows(ds, "SELECT COUNT(*) FROM sample_parts") == [(120,)]
    for i, shard in enumerate(shard_names(10)):
        offsets = read_offsets(str(ds / shard.replace(".tar", ".tar.idx")))
        db = rows(ds, f"SELECT byte_offset, byte_size FROM samples WHERE tar_file_id={i} ORDER BY sample_index")
        assert list(offsets[:-1]) == [o for o, _ in db]
        assert offsets[-1] == db[-1][0] + db[-1][1]
    assert not [p for p in ds.iterdir() if p.name.startswith(".nv-meta.")]  # no staging left behind


def test_problems_name_empty_splits(ds: Path) -> None:
    report = shardstore.prepare(str(ds), split_ratio="1,0,1", num_workers=1)
    assert report.splits["val"] == {"shards": 0, "samples": 0}
    assert report.problems == ["split 'val' has no shards"]


# --------------------------------------------------------------------------------------------------
# Splits


def test_split_ratio(ds: Path) -> None:
    shardstore.prepare(str(ds), split_ratio="0.5,0.2,0.3", num_workers=1)
    names = shard_names(10)
    assert splits(ds) == {"train": names[:5], "val": names[5:7], "test": names[7:]}
    raw = yaml.safe_load((ds / ".nv-meta" / "split.yaml").read_bytes())
    assert raw["split_parts"]["train"] == ["parts/data-{000000..000004}.tar"]  # written collapsed


def test_split_parts(ds: Path) -> None:
    report = shardstore.prepare(
        str(ds), split_parts=["train:parts/data-00000[0-6].tar", "val:parts/data-00000{7,8}.tar"], num_workers=1
    )
    names = shard_names(10)
    assert splits(ds) == {"train": names[:7], "val": names[7:9]}
    assert report.splits == {"train": {"shards": 7, "samples": 28}, "val": {"shards": 2, "samples": 8}}


def test_shuffle_tars(ds: Path) -> None:
    import random

    shardstore.prepare(str(ds), split_ratio="6,2,2", shuffle_tars=True, num_workers=1)
    order = shard_names(10)
    random.Random(42).shuffle(order)  # Energon's seed
    assert splits(ds) == {"train": order[:6], "val": order[6:8], "test": order[8:]}
    info = json.loads((ds / ".nv-meta" / ".info.json").read_bytes())
    assert list(info["shard_counts"]) == shard_names(10)  # tar_file_id order is not shuffled


def test_exclude(ds: Path) -> None:
    report = shardstore.prepare(str(ds), split_ratio="1,0,0", exclude=r"data-00000[13]", num_workers=1)
    want = [s for s in shard_names(10) if s not in ("parts/data-000001.tar", "parts/data-000003.tar")]
    assert list(json.loads((ds / ".nv-meta" / ".info.json").read_bytes())["shard_counts"]) == want
    assert splits(ds)["train"] == want and report.shards == 8
    assert not (ds / "parts" / "data-000001.tar.idx").exists()


def test_shard_order_and_discovery(tmp_path: Path) -> None:
    """Path-component order (a/b.tar before a-b.tar), .tgz names too, hidden folders ignored."""
    root = tmp_path / "d"
    for rel in ("a-b.tar", "a/b.tar", "a/c/d.tar", ".hidden/x.tar", "z.tar"):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(p, "w") as tar:
            info = tarfile.TarInfo(rel.replace("/", "_").replace(".tar", "") + ".txt")
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
    shardstore.prepare(str(root), split_ratio="1,0,0", num_workers=1)
    info = json.loads((root / ".nv-meta" / ".info.json").read_bytes())
    assert list(info["shard_counts"]) == ["a/b.tar", "a/c/d.tar", "a-b.tar", "z.tar"]


def test_split_options_are_required(ds: Path) -> None:
    with pytest.raises(ConfigError, match="split"):
        shardstore.prepare(str(ds), num_workers=1)
    assert not (ds / ".nv-meta").exists()


# --------------------------------------------------------------------------------------------------
# tar-index-only


def test_tar_index_only(ds: Path) -> None:
    shardstore.prepare(str(ds), split_ratio="8,1,1", num_workers=1)
    before = meta(ds)
    idx = {p: p.read_bytes() for p in ds.rglob("*.tar.idx")}
    for p in idx:
        p.unlink()
    report = shardstore.prepare(str(ds), tar_index_only=True, num_workers=1)
    assert {p: p.read_bytes() for p in ds.rglob("*.tar.idx")} == idx
    assert meta(ds) == before  # .nv-meta untouched, same uuid
    assert report.shards == 10 and report.samples == 40 and report.splits == {} and report.uuid == ""


def test_tar_index_only_uses_info_json_shards(ds: Path) -> None:
    shardstore.prepare(str(ds), split_ratio="8,1,1", exclude="data-000009", num_workers=1)
    report = shardstore.prepare(str(ds), tar_index_only=True, num_workers=1)
    assert report.shards == 9
    assert not (ds / "parts" / "data-000009.tar.idx").exists()


def test_tar_index_only_needs_a_prepared_dataset(ds: Path) -> None:
    with pytest.raises(DatasetNotPreparedError):
        shardstore.prepare(str(ds), tar_index_only=True)


# --------------------------------------------------------------------------------------------------
# dataset.yaml, user files, force-overwrite


@pytest.mark.parametrize(
    "sample_type, field_map, want",
    [
        (
            "CaptioningSample",
            {"image": "jpg", "caption": "txt"},
            {"sample_type": {"__module__": "megatron.energon", "__class__": "CaptioningSample"},
             "field_map": {"image": "jpg", "caption": "txt"}},
        ),
        (
            "TextSample",
            '{"text": "txt"}',
            {"sample_type": {"__module__": "megatron.energon", "__class__": "TextSample"}, "field_map": {"text": "txt"}},
        ),
        (
            "ImageClassificationSample",
            {"image": "jpg", "label": "json[label]"},
            {"sample_type": {"__module__": "megatron.energon", "__class__": "ImageClassificationSample"},
             "field_map": {"image": "jpg", "label": "json[label]"}},
        ),
        ("CrudeWebdataset", None, {"__module__": "megatron.energon", "__class__": "CrudeWebdataset"}),
    ],
)
def test_dataset_yaml_per_sample_type(ds: Path, sample_type: str, field_map: object, want: dict) -> None:
    report = shardstore.prepare(str(ds), split_ratio="8,1,1", sample_type=sample_type, field_map=field_map, num_workers=1)
    data = (ds / ".nv-meta" / "dataset.yaml").read_bytes()
    assert yaml.safe_load(data) == want
    assert list(yaml.safe_load(data)) == list(want)  # key order as Energon writes it
    assert report.sample_type == sample_type


def test_sample_type_without_field_map_writes_a_sample_loader(ds: Path) -> None:
    """As `energon prepare --sample-type X` without --field-map: dataset.yaml points at a template
    sample_loader.py to edit (a dataset.yaml with neither would not load in Energon)."""
    shardstore.prepare(str(ds), split_ratio="8,1,1", sample_type="CaptioningSample", num_workers=1)
    nv = ds / ".nv-meta"
    assert yaml.safe_load((nv / "dataset.yaml").read_bytes()) == {
        "sample_type": {"__module__": "megatron.energon", "__class__": "CaptioningSample"},
        "sample_loader": "sample_loader.py:sample_loader",
        "part_filter": "sample_loader.py:part_filter",
    }
    namespace: dict = {}
    exec(compile((nv / "sample_loader.py").read_text(), "sample_loader.py", "exec"), namespace)
    assert namespace["part_filter"]("jpg") and namespace["part_filter"]("json") and not namespace["part_filter"]("x")
    assert namespace["sample_loader"]({"TODO": 1}) == {"image": 1, "caption": 1}
    # an edited loader survives the next prepare
    (nv / "sample_loader.py").write_text("def sample_loader(raw): return raw\ndef part_filter(p): return True\n")
    shardstore.prepare(str(ds), split_ratio="8,1,1", sample_type="CaptioningSample", force_overwrite=True, num_workers=1)
    assert (nv / "sample_loader.py").read_text().startswith("def sample_loader(raw): return raw")


def test_unknown_sample_type_and_bad_field_map(ds: Path) -> None:
    with pytest.raises(ConfigError, match="unknown sample type"):
        shardstore.prepare(str(ds), split_ratio="8,1,1", sample_type="Nope")
    with pytest.raises(ConfigError, match="field map"):
        shardstore.prepare(str(ds), split_ratio="8,1,1", sample_type="TextSample", field_map="{not json")
    assert not (ds / ".nv-meta").exists()


def test_skip_dataset_yaml_keeps_existing(ds: Path) -> None:
    shardstore.prepare(str(ds), split_ratio="8,1,1", sample_type="TextSample", field_map={"text": "txt"}, num_workers=1)
    custom = b"# hand-edited\nsample_type:\n  __module__: megatron.energon\n  __class__: TextSample\nfield_map:\n  text: json[caption]\n"
    (ds / ".nv-meta" / "dataset.yaml").write_bytes(custom)
    report = shardstore.prepare(
        str(ds), split_ratio="8,1,1", force_overwrite=True, skip_dataset_yaml=True,
        sample_type="CaptioningSample", field_map={"image": "jpg", "caption": "txt"}, num_workers=1,
    )
    assert (ds / ".nv-meta" / "dataset.yaml").read_bytes() == custom
    assert report.sample_type is None


def test_without_sample_type_an_existing_dataset_yaml_stays(ds: Path) -> None:
    shardstore.prepare(str(ds), split_ratio="8,1,1", sample_type="CrudeWebdataset", num_workers=1)
    before = (ds / ".nv-meta" / "dataset.yaml").read_bytes()
    shardstore.prepare(str(ds), split_ratio="1,1,1", force_overwrite=True, num_workers=1)
    assert (ds / ".nv-meta" / "dataset.yaml").read_bytes() == before


def test_user_files_carried_over(ds: Path) -> None:
    shardstore.prepare(str(ds), split_ratio="8,1,1", num_workers=1)
    nv = ds / ".nv-meta"
    (nv / "sample_loader.py").write_text("def sample_loader(raw):\n    return raw\n")
    (nv / "notes.txt").write_bytes(b"\x00\x01 user bytes")
    (nv / "extra").mkdir()
    (nv / "extra" / "nested.json").write_text("{}")
    old_uuid = (nv / "index.uuid").read_text()
    shardstore.prepare(str(ds), split_ratio="1,1,1", force_overwrite=True, num_workers=1)
    assert (nv / "sample_loader.py").read_text() == "def sample_loader(raw):\n    return raw\n"
    assert (nv / "notes.txt").read_bytes() == b"\x00\x01 user bytes"
    assert (nv / "extra" / "nested.json").read_text() == "{}"
    assert (nv / "index.uuid").read_text() != old_uuid  # regenerated files are new
    assert [len(v) for v in splits(ds).values()] == [3, 3, 4]


def test_stale_sqlite_side_files_are_not_carried_over(ds: Path) -> None:
    """A -wal/-journal beside an old index (e.g. from Energon 6, which used WAL) must not meet the new one."""
    shardstore.prepare(str(ds), split_ratio="8,1,1", num_workers=1)
    nv = ds / ".nv-meta"
    for side in ("index.sqlite-wal", "index.sqlite-shm", "index.sqlite-journal"):
        (nv / side).write_bytes(b"stale")
    shardstore.prepare(str(ds), split_ratio="8,1,1", force_overwrite=True, num_workers=1)
    assert not [p.name for p in nv.iterdir() if p.name.startswith("index.sqlite-")]
    assert rows(ds, "SELECT COUNT(*) FROM samples") == [(40,)]


def test_legacy_info_yaml_is_kept_in_sync(ds: Path) -> None:
    """As Energon: if an old .info.yaml exists it is rewritten with the new counts, never left stale."""
    shardstore.prepare(str(ds), split_ratio="8,1,1", num_workers=1)
    (ds / ".nv-meta" / ".info.yaml").write_text("shard_counts:\n  parts/data-000000.tar: 999\n")
    shardstore.prepare(str(ds), split_ratio="8,1,1", exclude="data-000009", force_overwrite=True, num_workers=1)
    legacy = yaml.safe_load((ds / ".nv-meta" / ".info.yaml").read_bytes())
    assert legacy["shard_counts"] == json.loads((ds / ".nv-meta" / ".info.json").read_bytes())["shard_counts"]


def test_already_prepared_needs_force(ds: Path) -> None:
    shardstore.prepare(str(ds), split_ratio="8,1,1", num_workers=1)
    before = meta(ds)
    with pytest.raises(ConfigError, match="already prepared"):
        shardstore.prepare(str(ds), split_ratio="1,1,1", num_workers=1)
    assert meta(ds) == before


def test_force_overwrite_replaces_everything_generated(ds: Path) -> None:
    shardstore.prepare(str(ds), split_ratio="8,1,1", num_workers=1)
    before = meta(ds)
    os.unlink(ds / "parts" / "data-000009.tar")
    (ds / "parts" / "data-000009.tar.idx").unlink()
    report = shardstore.prepare(str(ds), split_ratio="8,1,1", force_overwrite=True, num_workers=1)
    after = meta(ds)
    assert report.shards == 9 and report.samples == 36
    assert after["index.uuid"] != before["index.uuid"]
    assert "parts/data-000009.tar" not in json.loads(after[".info.json"])["shard_counts"]
    assert rows(ds, "SELECT COUNT(*) FROM samples") == [(36,)]


def test_prepared_dataset_opens(ds: Path) -> None:
    shardstore.prepare(str(ds), split_ratio="8,1,1", num_workers=1)
    d = shardstore.open(str(ds), split="val")
    assert len(d) == 4
    sample = d[0]
    assert sample["__key__"].startswith("s00008_")
    assert set(sample) >= {"jpg", "txt", "json"}


# --------------------------------------------------------------------------------------------------
# CLI


def run_cli(*args: str, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN), "prepare", str(path), *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )


def test_cli_json(ds: Path) -> None:
    res = run_cli("--split-ratio", "8,1,1", "--non-interactive", "--json", "--num-workers", "2",
                  "--sample-type", "CaptioningSample", "--field-map", '{"image": "jpg", "caption": "txt"}', path=ds)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)  # stdout is only the JSON
    assert set(report) == {"path", "shards", "samples", "parts", "bytes", "seconds", "splits", "part_names",
                           "sample_type", "uuid", "problems", "scanned", "reused"}
    assert report["shards"] == 10 and report["samples"] == 40 and report["parts"] == 120
    assert report["splits"]["train"] == {"shards": 8, "samples": 32}
    assert report["sample_type"] == "CaptioningSample"
    assert report["uuid"] == (ds / ".nv-meta" / "index.uuid").read_text()


def test_cli_text_and_quiet(ds: Path) -> None:
    res = run_cli("--split-ratio", "8,1,1", "--non-interactive", path=ds)
    assert res.returncode == 0, res.stderr
    assert "10 shards, 40 samples, 120 parts" in res.stdout
    assert "train: 8 shards, 32 samples" in res.stdout
    res = run_cli("--split-ratio", "8,1,1", "--non-interactive", "--force-overwrite", "--quiet", path=ds)
    assert res.returncode == 0 and res.stdout == ""


def test_cli_split_parts_exclude_shuffle(ds: Path) -> None:
    res = run_cli("--split-parts", "train:parts/data-00000[0-4].tar", "--split-parts", "test:parts/data-00000[5-9].tar",
                  "--exclude", "data-000002", "--non-interactive", "--json", path=ds)
    assert res.returncode == 0, res.stderr
    names = [s for s in shard_names(10) if s != "parts/data-000002.tar"]
    assert splits(ds) == {"train": names[:4], "test": names[4:]}
    res = run_cli("--split-ratio", "1,1,0", "--shuffle-tars", "--force-overwrite", "--non-interactive", "--json", path=ds)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["splits"]["train"]["shards"] == 5


def test_cli_already_prepared_non_interactive(ds: Path) -> None:
    assert run_cli("--split-ratio", "8,1,1", "--non-interactive", path=ds).returncode == 0
    res = run_cli("--split-ratio", "8,1,1", "--non-interactive", path=ds)
    assert res.returncode != 0
    assert "already prepared" in res.stderr and "--force-overwrite" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_cli_tar_index_only_and_skip_dataset_yaml(ds: Path) -> None:
    assert run_cli("--split-ratio", "8,1,1", "--non-interactive", "--sample-type", "CrudeWebdataset", path=ds).returncode == 0
    before = meta(ds)
    (ds / "parts" / "data-000000.tar.idx").unlink()
    res = run_cli("--tar-index-only", "--non-interactive", path=ds)
    assert res.returncode == 0, res.stderr
    assert (ds / "parts" / "data-000000.tar.idx").exists() and meta(ds) == before
    res = run_cli("--split-ratio", "8,1,1", "--non-interactive", "--force-overwrite", "--skip-dataset-yaml",
                  "--sample-type", "TextSample", "--field-map", '{"text": "txt"}', path=ds)
    assert res.returncode == 0, res.stderr
    assert (ds / ".nv-meta" / "dataset.yaml").read_bytes() == before["dataset.yaml"]
