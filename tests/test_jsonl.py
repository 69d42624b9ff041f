"""JSONL datasets: ``prepare`` writes ``data.jsonl.idx``; ``shardstore.open("data.jsonl")`` reads lines
by position and key, iterates and shards like a tar dataset; metadatasets blend JSONL files with tar
datasets; ``info``, ``check``, ``ls``, ``cat`` and ``preview`` work on them; broken lines are named.
(Byte-equality with Energon's index is in tests/compat/test_jsonl_compat.py, S3 in tests/s3.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import shardstore
from shardstore.cli import main
from shardstore.errors import DatasetNotPreparedError, DecodeError, SampleNotFoundError, StaleIndexError
from shardstore.metadataset import open_metadataset

N = 50


def _record(i: int) -> dict:
    return {"i": i, "text": "ab" * (i % 5)}


@pytest.fixture
def jsonl(tmp_path: Path) -> Path:
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(_record(i)) + "\n" for i in range(N)))
    report = shardstore.prepare(str(path))
    assert (report.samples, report.shards, report.part_names) == (N, 1, {"json": N})
    return path


def test_random_access_by_position_and_key(jsonl: Path) -> None:
    raw = shardstore.open(str(jsonl))
    assert len(raw) == N
    s = raw[7]
    assert (s["__key__"], s["__shard__"], s["__index__"]) == ("7", "data.jsonl", 7)
    assert s["json"] == (json.dumps(_record(7)) + "\n").encode()
    assert raw[-1]["__key__"] == str(N - 1)
    assert [x["__key__"] for x in raw[3:6]] == ["3", "4", "5"]
    decoded = shardstore.open(str(jsonl), decode=True)
    assert decoded[12]["json"] == _record(12) == decoded.get("12")["json"]
    assert json.loads(raw.read_file("9.json")) == _record(9)
    assert [x["json"] for x in decoded.get_many(["40", 2, "0"])] == [_record(40), _record(2), _record(0)]
    assert "3" in raw and "50" not in raw and "03" not in raw
    for bad in ("50", "x", "-1", "1.txt"):
        with pytest.raises(SampleNotFoundError):
            raw.read_file(bad) if "." in bad else raw.get(bad)
    with pytest.raises(IndexError):
        raw[N]


def test_iteration_shards_over_ranks_and_workers(jsonl: Path) -> None:
    ds = shardstore.open(str(jsonl), decode=True)
    assert [s["json"]["i"] for s in ds] == list(range(N))
    for shuffle in (False, True):
        seen: list[int] = []
        for rank in range(2):
            for worker in range(3):
                part = [s["__index__"] for s in ds.iter(shuffle=shuffle, seed=5, rank=rank, world_size=2, worker_id=worker, num_workers=3)]
                assert part and len(set(part)) == len(part)
                seen += part
        assert sorted(seen) == list(range(N))
    a = [s["__index__"] for s in ds.iter(shuffle=True, seed=1)]
    assert a == [s["__index__"] for s in ds.iter(shuffle=True, seed=1)] != list(range(N))
    assert [s["__index__"] for s in ds.iter(start=45)] == list(range(45, N))


def test_broken_line_names_line_and_offset(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    good = b'{"a": 1}\n\n'
    path.write_bytes(good + b'{"a": 2,}\n{"a": 3}\n')
    with pytest.raises(DecodeError) as err:
        shardstore.prepare(str(path))
    assert "line 3" in str(err.value) and err.value.offset == len(good) and "bad.jsonl" in str(err.value)
    path.write_bytes(good + b'[1, 2]\n')
    with pytest.raises(DecodeError, match="line 3 is not a JSON object"):
        shardstore.prepare(str(path))
    assert not (tmp_path / "bad.jsonl.idx").exists()
    result = CliRunner().invoke(main, ["prepare", str(path)])
    assert result.exit_code == 1 and "line 3" in result.stderr and f"offset {len(good)}" in result.stderr
    path.write_bytes(b"\n \n")
    with pytest.raises(Exception, match="no JSON object"):
        shardstore.prepare(str(path))


def test_unprepared_and_stale(jsonl: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.jsonl"
    other.write_text('{"a": 1}\n')
    with pytest.raises(DatasetNotPreparedError, match="shardstore prepare"):
        shardstore.open(str(other))
    with jsonl.open("a") as f:
        f.write('{"late": true}\n')
    with pytest.raises(StaleIndexError):
        shardstore.open(str(jsonl))
    result = CliRunner().invoke(main, ["check", str(jsonl)])
    assert result.exit_code == 1 and "its index ends at" in result.stdout


def test_cli_commands(jsonl: Path) -> None:
    def run(*args: str) -> str:
        result = CliRunner().invoke(main, [*args])
        assert result.exit_code == 0, result.output
        return result.stdout

    info = json.loads(run("info", str(jsonl), "--json"))
    assert (info["samples"], info["index_format"], info["parts"], info["bytes"]) == (N, "jsonl", {"json": N}, jsonl.stat().st_size)
    assert "JSONL" in run("info", str(jsonl))
    assert json.loads(run("check", str(jsonl), "--deep", "--json"))["ok"]
    assert run("ls", str(jsonl), "-n", "2") == "0\tjson\n1\tjson\n"
    assert json.loads(run("cat", str(jsonl), "31.json")) == _record(31)
    preview = json.loads(run("preview", str(jsonl), "-n", "2", "--json"))
    assert [p["key"] for p in preview] == ["0", "1"] and preview[1]["parts"]["json"] == _record(1)
    # a hand-edited line keeps the size: only the deep check notices the index no longer fits
    text = jsonl.read_bytes()
    jsonl.write_bytes(text.replace(b'{"i": 3,', b'{"i":3,', 1).replace(b"\n", b" \n", 1))
    result = CliRunner().invoke(main, ["check", str(jsonl), "--deep"])
    assert result.exit_code == 1 and "differs from the file's lines" in result.stdout


def test_metadataset_blends_jsonl_with_a_tar_dataset(jsonl: Path, prepared: Path, tmp_path: Path) -> None:
    meta = tmp_path / "meta.yaml"
    meta.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        f"      - weight: 1\n        path: {jsonl}\n        subflavors: {{kind: text}}\n"
        f"      - weight: 1\n        path: {prepared}\n"
    )
    md = open_metadataset(str(meta))
    samples = list(md.iter(repeat=False))
    from_jsonl = [s for s in samples if s["__shard__"] == "data.jsonl"]
    assert sorted(int(s["__key__"]) for s in from_jsonl) == list(range(N))
    assert all(s["__subflavors__"] == {"kind": "text"} for s in from_jsonl)
    assert len(samples) - len(from_jsonl) == len(shardstore.open(str(prepared)))
    info = CliRunner().invoke(main, ["info", str(meta), "--json"])
    assert info.exit_code == 0, info.output


def test_mount_refuses_jsonl_clearly(jsonl: Path, tmp_path: Path) -> None:
    from shardstore.errors import ConfigError
    from shardstore.mount import open_tree

    with pytest.raises(ConfigError, match="cannot be mounted"):
        open_tree(str(jsonl))
    meta = tmp_path / "m.yaml"
    meta.write_text(f"__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    path: {jsonl}\n")
    with pytest.raises(ConfigError, match="cannot be mounted"):
        open_tree(str(meta))
