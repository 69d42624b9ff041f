"""JSONL datasets against the real megatron-energon 7.4.1: ``shardstore prepare data.jsonl`` writes the
same ``data.jsonl.idx`` bytes as ``energon prepare data.jsonl`` (blank lines before, between and after
objects, CRLF, no final newline, non-ASCII), Energon's loader and file store read ours, we read theirs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from energon_peer import energon_samples, missing_peer

import shardstore

pytestmark = pytest.mark.compat

try:
    import megatron.energon  # noqa: F401
except Exception as _e:  # pragma: no cover - depends on the environment
    missing_peer(_e)

BIN = Path(sys.executable).parent

FILES = {
    "plain": b'{"a": 1}\n{"b": 2}\n{"c": 3}\n',
    "blank-lines": b'\n\n{"a": 1}\n\n  \n{"b": [1, 2]}\n\n',
    "crlf-no-final-newline": b'{"a": 1}\r\n{"text": "\xc3\xbcn\xc3\xafc\xc3\xb6d\xc3\xa9"}\r\n  {"x": {"y": null}}  ',
    "one-line": b'{"only": true}',
}


def _energon_prepare(path: Path) -> None:
    res = subprocess.run([str(BIN / "energon"), "prepare", str(path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("name", sorted(FILES))
def test_idx_bytes_equal_energons(tmp_path: Path, name: str) -> None:
    ours, theirs = tmp_path / "ours" / f"{name}.jsonl", tmp_path / "theirs" / f"{name}.jsonl"
    for p in (ours, theirs):
        p.parent.mkdir()
        p.write_bytes(FILES[name])
    report = shardstore.prepare(str(ours))
    _energon_prepare(theirs)
    assert (ours.parent / f"{name}.jsonl.idx").read_bytes() == (theirs.parent / f"{name}.jsonl.idx").read_bytes()
    assert report.samples == FILES[name].count(b"{") - FILES[name].count(b'{"y"')


def _lines() -> list[dict]:
    return [{"i": i, "text": "x" * (i % 7), "nested": {"k": [i, i + 1]}} for i in range(40)]


@pytest.fixture
def jsonl(tmp_path: Path) -> Path:
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in _lines()))
    return path


def test_energon_reads_ours(jsonl: Path) -> None:
    """Energon's loader (crude JSONL dataset, a cooker) and its JSONL file store on shardstore's index."""
    from megatron.energon.cache.file_store import JsonlFileStore
    from megatron.energon.epathlib import EPath

    shardstore.prepare(str(jsonl))
    got = {key: parts["json"] for key, parts in energon_samples(jsonl)}  # Energon's JSONL factory parses the line
    assert got == {str(i): x for i, x in enumerate(_lines())}
    store = JsonlFileStore(EPath(str(jsonl)))
    data, _source = store["17.json"]
    assert json.loads(data) == _lines()[17]


def test_we_read_energons(jsonl: Path, tmp_path: Path) -> None:
    _energon_prepare(jsonl)
    ds = shardstore.open(str(jsonl), decode=True)
    assert len(ds) == 40
    assert [s["json"] for s in ds] == _lines()
    assert ds.get("5")["json"] == _lines()[5]
    raw = shardstore.open(str(jsonl))
    assert raw[3]["json"] == (json.dumps(_lines()[3]) + "\n").encode()
    copy = tmp_path / "copy.jsonl"
    shutil.copy(jsonl, copy)
    shardstore.prepare(str(copy))
    assert (tmp_path / "copy.jsonl.idx").read_bytes() == jsonl.with_name("data.jsonl.idx").read_bytes()
