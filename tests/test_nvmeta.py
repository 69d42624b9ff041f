"""The small files of .nv-meta: brace collapse/expand, split rules, .info.json, dataset.yaml, uuid."""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstore import nvmeta
from shardstore.errors import ConfigError, DatasetNotPreparedError, IndexVersionError
from shardstore.prepare import _split_shards, parse_split_parts, parse_split_ratio
from shardstore.storage import FileStat, LocalStorage

SETTINGS = settings(max_examples=300, deadline=None, derandomize=True, database=None)

# --------------------------------------------------------------------------------------------------
# Brace expansion and collapse


def shards(n: int, fmt: str = "parts/data-{:06d}.tar", start: int = 0) -> list[str]:
    return [fmt.format(i) for i in range(start, start + n)]


def test_collapse_runs() -> None:
    assert nvmeta.brace_collapse(shards(10)) == ["parts/data-{000000..000009}.tar"]
    assert nvmeta.brace_collapse(shards(1)) == ["parts/data-000000.tar"]
    assert nvmeta.brace_collapse([]) == []


def test_collapse_keeps_order_and_breaks_on_gaps() -> None:
    names = shards(3) + shards(2, start=5) + ["other.tar"] + shards(1, start=3)
    out = nvmeta.brace_collapse(names)
    assert out == [
        "parts/data-{000000..000002}.tar",
        "parts/data-{000005..000006}.tar",
        "other.tar",
        "parts/data-000003.tar",
    ]
    assert nvmeta.brace_expand(out) == names


def test_collapse_needs_same_width() -> None:
    names = ["s8.tar", "s9.tar", "s10.tar", "s11.tar"]
    out = nvmeta.brace_collapse(names)
    assert out == ["s{8..9}.tar", "s{10..11}.tar"]
    assert nvmeta.brace_expand(out) == names


def test_collapse_descending_is_not_a_run() -> None:
    names = ["a2.tar", "a1.tar", "a0.tar"]
    assert nvmeta.brace_expand(nvmeta.brace_collapse(names)) == names


def test_special_characters_are_escaped() -> None:
    names = ["{a,b}.tar", "x\\y.tar", "c{1..2}.tar", "d,e.tar", "f}.tar"]
    out = nvmeta.brace_collapse(names)
    assert nvmeta.brace_expand(out) == names


def test_expand_like_braceexpand() -> None:
    assert nvmeta.brace_expand(["a-{000..002}.tar", "b.tar", "c{1,3}.tar"]) == [
        "a-000.tar",
        "a-001.tar",
        "a-002.tar",
        "b.tar",
        "c1.tar",
        "c3.tar",
    ]


_name_chars = st.sampled_from(list("ab/-_.0123456789") + ["{", "}", ",", "\\", "..", "ü"])
_names = st.lists(_name_chars, min_size=1, max_size=12).map("".join)


@SETTINGS
@given(st.lists(_names, max_size=12))
def test_expand_collapse_roundtrip_any_names(names: list[str]) -> None:
    assert nvmeta.brace_expand(nvmeta.brace_collapse(names)) == names


@SETTINGS
@given(
    st.lists(
        st.tuples(st.sampled_from(["p/a-", "p/b-", "x"]), st.integers(0, 120), st.sampled_from([1, 2, 3, 6])),
        max_size=30,
    )
)
def test_expand_collapse_roundtrip_numbered(items: list[tuple[str, int, int]]) -> None:
    names = [f"{p}{n:0{w}d}.tar" for p, n, w in sorted(items)]
    collapsed = nvmeta.brace_collapse(names)
    assert nvmeta.brace_expand(collapsed) == names
    assert len(collapsed) <= len(names)


# --------------------------------------------------------------------------------------------------
# Split rules (Energon's)


def test_parse_split_ratio() -> None:
    assert parse_split_ratio("8,1,1") == [("train", 8.0), ("val", 1.0), ("test", 1.0)]
    assert parse_split_ratio(" 0.5, 0.2 ,0.3") == [("train", 0.5), ("val", 0.2), ("test", 0.3)]
    for bad in ("8,1", "a,b,c", "1,1,1,1", "-1,1,1", "0,0,0", ""):
        with pytest.raises(ConfigError):
            parse_split_ratio(bad)


def test_parse_split_parts() -> None:
    assert parse_split_parts(["train:parts/a:b.*", "val:x"]) == [("train", "parts/a:b.*"), ("val", "x")]
    with pytest.raises(ConfigError):
        parse_split_parts(["no-colon"])


def _reference_ratio(names: list[str], ratio: list[float], shuffle: bool) -> dict[str, list[str]]:
    """Energon's rule written out: normalise, (shuffle with seed 42), cut at int(n * cumulative)."""
    order = list(names)
    if shuffle:
        random.Random(42).shuffle(order)
    total = sum(ratio)
    out, cum, start = {}, 0.0, 0
    for name, r in zip(("train", "val", "test"), ratio, strict=True):
        cum += r / total
        end = int(len(order) * cum)
        out[name] = order[start:end]
        start = end
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 7, 10, 64])
@pytest.mark.parametrize("ratio", ["8,1,1", "1,1,1", "0.8,0.1,0.1", "1,0,0", "0.7,0.2,0.1", "3,3,3"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_ratio_split(n: int, ratio: str, shuffle: bool) -> None:
    names = shards(n)
    parsed = parse_split_ratio(ratio)
    got = _split_shards(names, parsed, None, shuffle)
    assert got == _reference_ratio(names, [w for _, w in parsed], shuffle)
    assert sum(len(v) for v in got.values()) <= n


def test_ratio_split_examples() -> None:
    got = _split_shards(shards(10), parse_split_ratio("8,1,1"), None, False)
    assert [len(v) for v in got.values()] == [8, 1, 1]
    got = _split_shards(shards(3), parse_split_ratio("8,1,1"), None, False)
    assert [len(v) for v in got.values()] == [2, 0, 1]  # int() truncation, as Energon
    shuffled = _split_shards(shards(20), parse_split_ratio("1,0,0"), None, True)["train"]
    assert sorted(shuffled) == shards(20) and shuffled != shards(20)


def test_pattern_split_uses_match_and_braces() -> None:
    names = ["parts/train-0.tar", "parts/train-1.tar", "parts/val-0.tar", "x/parts/train-2.tar"]
    got = _split_shards(names, None, parse_split_parts(["train:parts/train-.*", "val:parts/{val,none}-.*"]), False)
    assert got == {"train": ["parts/train-0.tar", "parts/train-1.tar"], "val": ["parts/val-0.tar"]}


# --------------------------------------------------------------------------------------------------
# The files


def _storage(tmp_path: Path) -> LocalStorage:
    (tmp_path / ".nv-meta").mkdir(exist_ok=True)
    return LocalStorage(str(tmp_path))


def test_info_json_format_and_roundtrip(tmp_path: Path) -> None:
    info = nvmeta.DatasetInfo("7.4.1", {"parts/b.tar": 3, "parts/a.tar": 5})
    data = nvmeta.info_bytes(info)
    assert data == json.dumps({"energon_version": "7.4.1", "shard_counts": {"parts/b.tar": 3, "parts/a.tar": 5}}, indent=2).encode()
    assert not data.endswith(b"\n")
    (tmp_path / ".nv-meta").mkdir()
    (tmp_path / ".nv-meta" / ".info.json").write_bytes(data)
    back = nvmeta.read_info(LocalStorage(str(tmp_path)))
    assert back == info and back.shards == ["parts/b.tar", "parts/a.tar"]  # order is tar_file_id


def test_info_yaml_legacy(tmp_path: Path) -> None:
    st_ = _storage(tmp_path)
    (tmp_path / ".nv-meta" / ".info.yaml").write_text("shard_counts:\n  a.tar: 2\n  b.tar: 1\n")
    info = nvmeta.read_info(st_)
    assert info.shard_counts == {"a.tar": 2, "b.tar": 1} and info.energon_version == "unknown"


def test_info_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotPreparedError):
        nvmeta.read_info(LocalStorage(str(tmp_path)))
    st_ = _storage(tmp_path)
    (tmp_path / ".nv-meta" / ".info.json").write_text("{not json")
    with pytest.raises(ConfigError, match=".info.json"):
        nvmeta.read_info(st_)
    (tmp_path / ".nv-meta" / ".info.json").write_text('{"energon_version": "7"}')
    with pytest.raises(ConfigError, match="shard_counts"):
        nvmeta.read_info(st_)


def test_shardstore_json_roundtrip_and_errors(tmp_path: Path) -> None:
    st_ = _storage(tmp_path)
    assert nvmeta.read_shardstore_json(st_) is None  # a dataset Energon prepared
    data = nvmeta.shardstore_json_bytes({"a.tar": FileStat(10, mtime=1.5), "b.tar": FileStat(20, etag='"e"')})
    assert json.loads(data) == {"format": 1, "shards": {"a.tar": {"size": 10, "mtime": 1.5}, "b.tar": {"size": 20, "etag": '"e"'}}}
    meta = tmp_path / ".nv-meta" / nvmeta.SHARDSTORE_JSON
    meta.write_bytes(data)
    assert nvmeta.read_shardstore_json(st_) == {"a.tar": {"size": 10, "mtime": 1.5}, "b.tar": {"size": 20, "etag": '"e"'}}
    for bad in ("{not json", "[]", '{"format": 1}', '{"shards": {"a.tar": 3}}'):
        meta.write_text(bad)
        with pytest.raises(ConfigError, match="invalid shardstore.json"):
            nvmeta.read_shardstore_json(st_)
    meta.write_text('{"format": 2, "shards": {}}')
    with pytest.raises(IndexVersionError, match="format 2"):
        nvmeta.read_shardstore_json(st_)


def test_shard_changed_rules() -> None:
    recorded = {"size": 100, "mtime": 1.0, "etag": "x"}
    # local files prepared locally: the mtime is compared; a new one is settled by the fingerprint
    # (same_bytes: shardprint.matches), refused when there is none to compare
    local = {"size": 100, "mtime": 1.0}
    assert "shard was modified or copied (mtime 2.0, was 1.0" in (nvmeta.shard_changed(local, FileStat(100, mtime=2.0), 100, True) or "")
    assert nvmeta.shard_changed(local, FileStat(100, mtime=2.0), 100, True, lambda: True) is None  # a copy
    rewritten = nvmeta.shard_changed(local, FileStat(100, mtime=2.0), 100, True, lambda: False) or ""
    assert "shard was modified (mtime 2.0, was 1.0" in rewritten and "rewritten in place" in rewritten
    assert nvmeta.shard_changed(recorded, FileStat(100, etag="y"), 90, False, lambda: True) is None  # an S3 copy
    assert nvmeta.shard_changed(local, FileStat(100, mtime=1.0), 100, True) is None
    assert nvmeta.shard_changed({"size": 100}, FileStat(100, mtime=2.0), 100, True) is None  # no mtime recorded
    # never across storages: uploaded to S3 (not local), or prepared on S3 (an ETag recorded) and copied here
    assert nvmeta.shard_changed(local, FileStat(100, mtime=2.0), 100, False) is None
    assert nvmeta.shard_changed(recorded, FileStat(100, mtime=2.0), 100, True) is None
    assert nvmeta.shard_changed(recorded, FileStat(100, mtime=2.0, etag="x"), 100) is None  # the ETag decides
    assert nvmeta.shard_changed(recorded, FileStat(100, etag="x"), 90) is None
    assert "was 100 at prepare" in (nvmeta.shard_changed(recorded, FileStat(101), 90) or "")
    assert "ETag y, was x at prepare" in (nvmeta.shard_changed(recorded, FileStat(100, etag="y"), 90) or "")
    assert nvmeta.shard_changed({"size": 100}, FileStat(100, etag="y"), 90) is None  # no ETag recorded
    for rec in (None, {}, {"etag": "x"}):  # nothing (or no size) recorded: the .tar.idx end decides
        assert nvmeta.shard_changed(rec, FileStat(89, etag="x"), 90) == (
            "shard size is 89 bytes but its index reaches offset 90: truncated since prepare? "
            "rerun `shardstore prepare --force-overwrite`"
        )
        assert nvmeta.shard_changed(rec, FileStat(90), 90) is None


def test_split_yaml_roundtrip(tmp_path: Path) -> None:
    splits = nvmeta.Splits({"train": shards(8), "val": shards(1, start=8), "test": []}, ["parts/data-000003.tar"])
    data = nvmeta.splits_bytes(splits)
    raw = yaml.safe_load(data)
    assert list(raw) == ["split_parts", "exclude"]
    assert raw["split_parts"]["train"] == ["parts/data-{000000..000007}.tar"]
    assert raw["split_parts"]["test"] == []
    st_ = _storage(tmp_path)
    (tmp_path / ".nv-meta" / "split.yaml").write_bytes(data)
    back = nvmeta.read_splits(st_)
    assert back.shards("train") == [s for s in shards(8) if s != "parts/data-000003.tar"]
    assert back.shards("val") == shards(1, start=8)
    with pytest.raises(ConfigError, match="no split 'nope'"):
        back.shards("nope")


def test_split_exclude_of_samples(tmp_path: Path) -> None:
    splits = nvmeta.Splits({"train": ["a.tar", "b.tar"]}, ["b.tar", "a.tar/key-{1..2}"])
    assert splits.shards("train") == ["a.tar"]
    assert {"a.tar/key-1", "a.tar/key-2"} <= splits.excluded_samples()


def test_split_json_fallback(tmp_path: Path) -> None:
    st_ = _storage(tmp_path)
    (tmp_path / ".nv-meta" / "split.json").write_text(json.dumps({"split_parts": {"train": ["x-{0..1}.tar"]}}))
    assert nvmeta.read_splits(st_).shards("train") == ["x-0.tar", "x-1.tar"]


def test_dataset_yaml_forms() -> None:
    data = nvmeta.dataset_yaml_bytes("CaptioningSample", {"image": "jpg", "caption": "txt"})
    assert data == (
        b"sample_type:\n  __module__: megatron.energon\n  __class__: CaptioningSample\n"
        b"field_map:\n  image: jpg\n  caption: txt\n"
    )
    crude = nvmeta.dataset_yaml_bytes("CrudeWebdataset", None)
    assert crude == b"__module__: megatron.energon\n__class__: CrudeWebdataset\n"
    with pytest.raises(ConfigError, match="unknown sample type"):
        nvmeta.dataset_yaml_bytes("NoSuchSample", None)


def test_read_dataset_yaml(tmp_path: Path) -> None:
    st_ = _storage(tmp_path)
    assert nvmeta.read_dataset_yaml(st_) is None
    (tmp_path / ".nv-meta" / "dataset.yaml").write_bytes(nvmeta.dataset_yaml_bytes("TextSample", {"text": "txt"}))
    assert nvmeta.read_dataset_yaml(st_) == {
        "sample_type": {"__module__": "megatron.energon", "__class__": "TextSample"},
        "field_map": {"text": "txt"},
    }
    (tmp_path / ".nv-meta" / "dataset.yaml").write_text("- a list\n")
    with pytest.raises(ConfigError):
        nvmeta.read_dataset_yaml(st_)
    (tmp_path / ".nv-meta" / "dataset.yaml").write_text("a: [unclosed\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        nvmeta.read_dataset_yaml(st_)


def test_new_uuid() -> None:
    a, b = nvmeta.new_uuid().decode(), nvmeta.new_uuid().decode()
    assert len(a) == 36 and uuid.UUID(a).version == 4 and str(uuid.UUID(a)) == a and a != b


@pytest.mark.parametrize(
    "shard, idx",
    [("a/b.tar", "a/b.tar.idx"), ("x.tgz", "x.tar.idx"), ("a.b/c.d.tar", "a.b/c.d.tar.idx"), ("a.b/c", "a.b/c.tar.idx")],
)
def test_tar_idx_path(shard: str, idx: str) -> None:
    """As Energon's ``with_suffix('.tar.idx')``: the last suffix of the basename is replaced."""
    assert nvmeta.tar_idx_path(shard) == idx


def test_dataset_kind(tmp_path: Path) -> None:
    assert nvmeta.dataset_kind(str(tmp_path / "m.yaml")) == nvmeta.DatasetKind.METADATASET
    assert nvmeta.dataset_kind(str(tmp_path / "d.jsonl")) == nvmeta.DatasetKind.JSONL
    assert nvmeta.dataset_kind(str(tmp_path)) == nvmeta.DatasetKind.FOLDER
    _storage(tmp_path)
    (tmp_path / ".nv-meta" / ".info.json").write_bytes(nvmeta.info_bytes(nvmeta.DatasetInfo("7.4.1", {"a.tar": 1})))
    assert nvmeta.dataset_kind(str(tmp_path)) == nvmeta.DatasetKind.WEBDATASET


def test_sample_types_are_energons() -> None:
    """The names offered by --sample-type exist in megatron.energon with these fields (checked in compat too)."""
    assert "CrudeWebdataset" in nvmeta.SAMPLE_TYPES and "CaptioningSample" in nvmeta.SAMPLE_TYPES
    assert dict(nvmeta.SAMPLE_TYPES["CaptioningSample"]) == {"image": True, "caption": True}
