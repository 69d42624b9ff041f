"""nv_meta_schema: the JSON Schemas, the SQL of each index.sqlite layout, and validate()."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
import yaml
from ci import in_ci

import nv_meta_schema
import shardstore
from nv_meta_schema import LAYOUTS, Problem, detect_layout, validate

MakeShards = Callable[..., Path]
ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
ENERGON6 = Path(os.environ.get("SHARDSTORE_ENERGON6_VENV", ROOT / ".venv-energon6")) / "bin" / "energon"


@pytest.fixture
def ds(make_shards: MakeShards) -> Path:
    path = make_shards(shards=4, samples=3, min_kb=0, max_kb=1)
    shardstore.prepare(
        str(path), split_ratio="2,1,1", sample_type="CaptioningSample",
        field_map={"image": "jpg", "caption": "txt"}, num_workers=1,
    )
    return path


def files(problems: list[Problem]) -> set[str]:
    return {p.file for p in problems}


def one(problems: list[Problem], file: str, *words: str) -> Problem:
    """The problems are exactly one, in ``file``, mentioning ``words``."""
    assert len(problems) == 1, problems
    (p,) = problems
    assert p.file == file, p
    for w in words:
        assert w in p.message, p
    return p


# --------------------------------------------------------------------------------------------------
# The packaged data


def test_problem_is_a_frozen_dataclass() -> None:
    p = Problem(".nv-meta/split.yaml", "missing")
    assert [f.name for f in dataclasses.fields(p)] == ["file", "message"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.file = "x"  # type: ignore[misc]
    assert str(p) == ".nv-meta/split.yaml: missing"


@pytest.mark.parametrize("name", ["dataset", "split", "info"])
def test_schemas_are_valid_json_schemas(name: str) -> None:
    s = nv_meta_schema.schema(name)
    jsonschema.Draft202012Validator.check_schema(s)
    assert s["$schema"].endswith("2020-12/schema") and s["title"]
    assert (resources.files("nv_meta_schema") / f"{name}.schema.json").is_file()


def test_unknown_schema() -> None:
    with pytest.raises(KeyError):
        nv_meta_schema.schema("nope")


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_each_sql_file_builds_its_layout(layout: str, tmp_path: Path) -> None:
    text = nv_meta_schema.sql(layout)
    assert (resources.files("nv_meta_schema") / "sql" / LAYOUTS[layout].sql_file).is_file()
    assert "--" in text  # columns are commented
    db = sqlite3.connect(tmp_path / "index.sqlite")
    db.executescript(text)
    assert detect_layout(db) == layout
    mode = db.execute("PRAGMA journal_mode").fetchone()[0]
    db.close()
    assert mode == LAYOUTS[layout].journal
    assert (tmp_path / "index.sqlite").read_bytes()[18:20] == (b"\x02\x02" if mode == "wal" else b"\x01\x01")


def test_energon6_layout_facts() -> None:
    text = nv_meta_schema.sql("energon-6.0")
    assert "id INTEGER PRIMARY KEY AUTOINCREMENT" in text and "CREATE TABLE sample_parts" not in text
    assert "journal_mode = WAL" in text


def test_shardstore_writes_the_energon_7_4_layout(tmp_path: Path) -> None:
    """The script shardstore's index writer runs is nv_meta_schema's 7.4 tables, and builds that layout."""
    from shardstore.index.sqlite import schema_sql

    assert schema_sql() == nv_meta_schema.tables_sql("energon-7.4")
    assert "PRAGMA" not in schema_sql() and "media_metadata" not in schema_sql()  # the writer picks its journal
    db = sqlite3.connect(tmp_path / "i.sqlite")
    db.executescript(schema_sql())
    assert detect_layout(db) == "energon-7.4"
    db.close()


# --------------------------------------------------------------------------------------------------
# Valid datasets


def test_shardstore_prepared_dataset_is_valid(ds: Path) -> None:
    assert validate(ds) == []
    assert validate(str(ds)) == []


@pytest.mark.parametrize(
    "kw",
    [
        {"split_ratio": "1,0,0", "sample_type": "CrudeWebdataset"},
        {"split_parts": ["train:parts/data-00000[0-2].tar", "val:parts/data-000003.tar"], "skip_dataset_yaml": True},
        {"split_ratio": "1,1,1", "shuffle_tars": True, "exclude": "000001", "sample_type": "TextSample",
         "field_map": {"text": "json[caption],txt"}},
    ],
)
def test_shardstore_variants_are_valid(make_shards: MakeShards, kw: dict) -> None:
    path = make_shards(shards=4, samples=2, min_kb=0, max_kb=1)
    shardstore.prepare(str(path), num_workers=1, **kw)
    assert validate(path) == []


def test_sample_loader_form_is_valid(ds: Path) -> None:
    (ds / ".nv-meta" / "sample_loader.py").write_text("def sample_loader(raw): ...\ndef part_filter(p): ...\n")
    (ds / ".nv-meta" / "dataset.yaml").write_text(
        "sample_type:\n  __module__: megatron.energon\n  __class__: CaptioningSample\n"
        "sample_loader: sample_loader.py:sample_loader\npart_filter: sample_loader.py:part_filter\n"
    )
    assert validate(ds) == []


@pytest.mark.compat
def test_energon7_prepared_dataset_is_valid(make_shards: MakeShards) -> None:
    energon = BIN / "energon"
    if not energon.exists():
        if in_ci():
            pytest.fail("megatron-energon's CLI is missing; CI must run the compat tests")
        pytest.skip("megatron-energon is not installed (extra `compat`)")
    path = make_shards(shards=3, samples=3, min_kb=0, max_kb=1)
    res = subprocess.run(
        [str(energon), "prepare", str(path), "--non-interactive", "--no-progress", "--split-ratio", "1,1,1",
         "--sample-type", "CaptioningSample", "--field-map", '{"image": "jpg", "caption": "txt"}'],
        capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    db = sqlite3.connect(f"file:{path / '.nv-meta' / 'index.sqlite'}?mode=ro&immutable=1", uri=True)
    assert detect_layout(db) == "energon-7.4"
    db.close()
    assert validate(path) == []


@pytest.mark.compat
def test_energon6_prepared_dataset_is_valid(make_shards: MakeShards) -> None:
    if not ENERGON6.exists():
        if in_ci():
            pytest.fail(f"{ENERGON6} is missing (make energon6); CI must run the compat tests")
        pytest.skip(f"{ENERGON6} is missing (run `make energon6`)")
    path = make_shards(shards=3, samples=3, min_kb=0, max_kb=1)
    res = subprocess.run(
        [str(ENERGON6), "prepare", str(path), "--no-progress", "--num-workers", "1",
         "--split-parts", r"train:parts/data-00000[01]\.tar", "--split-parts", r"val:parts/data-000002\.tar"],
        input="n\n", capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert (path / ".nv-meta" / ".info.yaml").exists()
    db = sqlite3.connect(f"file:{path / '.nv-meta' / 'index.sqlite'}?mode=ro&immutable=1", uri=True)
    assert detect_layout(db) == "energon-6.0"
    db.close()
    assert validate(path) == []


# --------------------------------------------------------------------------------------------------
# Broken files


def test_not_prepared(tmp_path: Path) -> None:
    one(validate(tmp_path), ".nv-meta", "not a prepared dataset")


def _info(ds: Path) -> dict:
    return json.loads((ds / ".nv-meta" / ".info.json").read_text())


def _write_info(ds: Path, doc: object) -> None:
    (ds / ".nv-meta" / ".info.json").write_text(json.dumps(doc, indent=2))


def test_info_invalid_json(ds: Path) -> None:
    (ds / ".nv-meta" / ".info.json").write_text('{"shard_counts": ')
    problems = validate(ds)
    assert any(p.file == ".nv-meta/.info.json" and "invalid JSON" in p.message for p in problems)


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda d: d.pop("shard_counts"), ["'shard_counts' is a required property"]),
        (lambda d: d.update(extra=1), ["Additional properties", "extra"]),
        (lambda d: d["shard_counts"].update({"parts/data-000000.tar": 0}), ["parts/data-000000.tar", "minimum of 1"]),
        (lambda d: d["shard_counts"].update({"parts/data-000000.tar": "3"}), ["not of type 'integer'"]),
        (lambda d: d.update(energon_version=7), ["energon_version", "not of type 'string'"]),
    ],
)
def test_info_schema_problems(ds: Path, change: Callable[[dict], object], words: list[str]) -> None:
    doc = _info(ds)
    change(doc)
    _write_info(ds, doc)
    problems = [p for p in validate(ds) if p.file == ".nv-meta/.info.json"]
    assert problems, validate(ds)
    assert all(w in problems[0].message for w in words), problems


def test_info_absolute_shard_path(ds: Path) -> None:
    doc = _info(ds)
    doc["shard_counts"] = {"/abs/x.tar": 3, **doc["shard_counts"]}
    _write_info(ds, doc)
    assert any("/abs/x.tar" in p.message and p.file == ".nv-meta/.info.json" for p in validate(ds))


def test_stale_info_yaml(ds: Path) -> None:
    (ds / ".nv-meta" / ".info.yaml").write_text(yaml.dump({"shard_counts": {"parts/data-000000.tar": 3}}))
    one(validate(ds), ".nv-meta/.info.yaml", "differ from .info.json")


def test_split_missing(ds: Path) -> None:
    (ds / ".nv-meta" / "split.yaml").unlink()
    one(validate(ds), ".nv-meta/split.yaml", "missing")


@pytest.mark.parametrize(
    "text, words",
    [
        ("split_parts: [a, b]\n", ["split_parts", "not of type 'object'"]),
        ("[]\n", ["must be a mapping"]),
        ("split_parts:\n  train: parts/data-000000.tar\n", ["split_parts.train", "not of type 'array'"]),
        ("splits:\n  train: []\n", ["'split_parts' is a required property"]),
        ("split_parts:\n  train:\n  - parts/data-000000.tar\nexclude: {}\n", ["exclude", "not of type 'array'"]),
        ("split_parts: {train: ['parts/nope-{0..1}.tar']}\n", ["split 'train'", "parts/nope-0.tar"]),
        ("split_parts: {train: [parts/data-000000.tar]}\nexclude: [other/x.tar/k]\n", ["exclude entry 'other/x.tar/k'"]),
        ("split_parts: {train: [parts/data-000000.tar]\n", ["invalid YAML"]),
    ],
)
def test_split_problems(ds: Path, text: str, words: list[str]) -> None:
    (ds / ".nv-meta" / "split.yaml").write_text(text)
    problems = validate(ds)
    assert files(problems) == {".nv-meta/split.yaml"}, problems
    assert any(all(w in p.message for w in words) for p in problems), problems


def test_split_exclude_of_a_sample_is_fine(ds: Path) -> None:
    (ds / ".nv-meta" / "split.yaml").write_text(
        "split_parts: {train: ['parts/data-{000000..000003}.tar']}\nexclude: [parts/data-000001.tar/s00001_000000]\n"
    )
    assert validate(ds) == []


@pytest.mark.parametrize(
    "text, words",
    [
        ("field_map: {image: jpg}\n", ["top level", "'__class__' is a required property"]),
        ("sample_type: {__module__: megatron.energon, __class__: CaptioningSample}\n", ["needs a field_map or a sample_loader"]),
        (
            "sample_type: {__module__: megatron.energon, __class__: CaptioningSample}\nfield_map: {image: 3}\n",
            ["$.field_map.image", "3 is not of type 'string'"],
        ),
        (
            "sample_type: {__module__: megatron.energon, __class__: CaptioningSample}\nfield_map: {image: jpg}\n"
            "sample_loader: sample_loader.py:sample_loader\n",
            ["top level", "'sample_loader' is not allowed"],
        ),
        ("sample_type: CaptioningSample\nfield_map: {image: jpg}\n", ["not of type 'object'"]),
        ("__module__: megatron.energon\n__class__: Crude Webdataset\n", ["does not match"]),
        ("- just a list\n", ["top level", "must be a mapping, not list"]),
        ("__module__: megatron.energon\n__class__: CrudeWebdataset\nsample_type: {__module__: m, __class__: C}\n"
         "field_map: {a: b}\n", ["'__module__' is not allowed"]),
        ("sample_type: [\n", ["invalid YAML"]),
    ],
)
def test_dataset_yaml_problems(ds: Path, text: str, words: list[str]) -> None:
    (ds / ".nv-meta" / "dataset.yaml").write_text(text)
    problems = validate(ds)
    assert files(problems) == {".nv-meta/dataset.yaml"}, problems
    assert any(all(w in p.message for w in words) for p in problems), problems


def test_dataset_yaml_loader_file_missing(ds: Path) -> None:
    (ds / ".nv-meta" / "dataset.yaml").write_text(
        "sample_type: {__module__: megatron.energon, __class__: TextSample}\nsample_loader: loader.py:load\n"
    )
    one(validate(ds), ".nv-meta/dataset.yaml", "loader.py")


def test_dataset_yaml_is_optional(ds: Path) -> None:
    (ds / ".nv-meta" / "dataset.yaml").unlink()
    assert validate(ds) == []


def _index(ds: Path) -> Path:
    return ds / ".nv-meta" / "index.sqlite"


def test_index_missing_or_not_sqlite(ds: Path) -> None:
    _index(ds).unlink()
    one(validate(ds), ".nv-meta/index.sqlite", "missing")
    _index(ds).write_bytes(b"not a database" * 20)
    one(validate(ds), ".nv-meta/index.sqlite", "not an SQLite database")


def test_index_in_wal_mode(ds: Path) -> None:
    db = sqlite3.connect(_index(ds))
    db.execute("PRAGMA journal_mode=WAL")
    db.close()
    one(validate(ds), ".nv-meta/index.sqlite", "journal mode is WAL", "energon-7.4")


def test_index_uncommitted_wal(ds: Path) -> None:
    shutil.copy(_index(ds), ds / "copy.sqlite")
    (ds / ".nv-meta" / "index.sqlite-wal").write_bytes(b"x" * 100)
    one(validate(ds), ".nv-meta/index.sqlite-wal", "uncommitted")


def test_index_without_unique_key(ds: Path) -> None:
    """The 7.0 columns but a rollback journal and no key index: no known layout."""
    db = sqlite3.connect(_index(ds))
    db.executescript(
        "CREATE TABLE s2 (tar_file_id INTEGER NOT NULL, sample_key TEXT NOT NULL, sample_index INTEGER NOT NULL,"
        " byte_offset INTEGER, byte_size INTEGER); INSERT INTO s2 SELECT * FROM samples; DROP TABLE samples;"
        " ALTER TABLE s2 RENAME TO samples;"
        " CREATE INDEX idx_samples_by_tar_and_idx ON samples(tar_file_id, sample_index);"
    )
    db.close()
    problems = validate(ds)
    assert files(problems) == {".nv-meta/index.sqlite"}
    assert any("table samples has indexes" in p.message and "UNIQUE" in p.message for p in problems), problems


def test_index_missing_table_and_unknown_table(ds: Path) -> None:
    db = sqlite3.connect(_index(ds))
    db.executescript("DROP TABLE sample_parts; CREATE TABLE extra (x INTEGER);")
    db.close()
    messages = [p.message for p in validate(ds)]
    assert any("missing table sample_parts" in m for m in messages), messages
    assert any("unknown table extra" in m for m in messages), messages


def test_index_media_tables_are_optional(ds: Path) -> None:
    db = sqlite3.connect(_index(ds))
    text = nv_meta_schema.sql("energon-7.4")
    db.executescript(text[text.index("CREATE TABLE media_metadata") :])
    db.close()
    assert validate(ds) == []


def test_index_count_disagrees_with_info(ds: Path) -> None:
    db = sqlite3.connect(_index(ds))
    db.execute("DELETE FROM samples WHERE sample_index = 0 AND tar_file_id = 0")
    db.commit()
    db.close()
    one(validate(ds), ".nv-meta/index.sqlite", "11 samples", "counts 12")


def test_index_tar_file_id_out_of_range(ds: Path) -> None:
    db = sqlite3.connect(_index(ds))
    db.execute("UPDATE samples SET tar_file_id = 9 WHERE sample_index = 0 AND tar_file_id = 3")
    db.commit()
    db.close()
    one(validate(ds), ".nv-meta/index.sqlite", "tar_file_id runs 0..9", "4 shards")


@pytest.mark.parametrize("content", [None, b"", b"not-a-uuid", b"12345678-1234-4234-8234-123456789abc\n"])
def test_uuid_problems(ds: Path, content: bytes | None) -> None:
    path = ds / ".nv-meta" / "index.uuid"
    if content is None:
        path.unlink()
    else:
        path.write_bytes(content)
    one(validate(ds), ".nv-meta/index.uuid")


def test_tar_idx_missing_wrong_size_and_shard_missing(ds: Path) -> None:
    (ds / "parts" / "data-000000.tar.idx").unlink()
    one(validate(ds), "parts/data-000000.tar.idx", "missing", "--tar-index-only")
    shardstore.prepare(str(ds), tar_index_only=True, num_workers=1)
    assert validate(ds) == []
    with open(ds / "parts" / "data-000001.tar.idx", "ab") as f:
        f.write(b"\0" * 8)
    one(validate(ds), "parts/data-000001.tar.idx", "40 bytes", "expected 32 for 3 samples")
    shardstore.prepare(str(ds), tar_index_only=True, num_workers=1)
    (ds / "parts" / "data-000002.tar").unlink()
    one(validate(ds), "parts/data-000002.tar", "missing")


def test_several_problems_at_once(ds: Path) -> None:
    (ds / ".nv-meta" / "index.uuid").unlink()
    (ds / ".nv-meta" / "dataset.yaml").write_text("nonsense: 1\n")
    (ds / "parts" / "data-000003.tar.idx").unlink()
    assert files(validate(ds)) == {".nv-meta/index.uuid", ".nv-meta/dataset.yaml", "parts/data-000003.tar.idx"}
