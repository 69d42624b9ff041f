"""shardstore prepare against the real megatron-energon 7.4.1: same output file by file, and Energon's
own readers read a shardstore-prepared dataset.

The shards are built here with ``tarfile`` and cover ustar (with the name prefix), GNU (long names and
long links), PAX (long and non-ASCII names, a global header), keys inside folders, folders with dots,
members Energon skips (``__dunder__`` paths, directories, symlinks, hard links, names without a dot,
hidden basenames), empty parts, a multi-MB part, and shard ordering by path components.
"""

from __future__ import annotations

import io
import json
import random
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path

import pytest
import yaml
from energon_peer import energon_samples, missing_peer

pytestmark = pytest.mark.compat

try:  # the peer: a test-only dependency (extra `compat`)
    import megatron.energon  # noqa: F401
except Exception as _e:  # pragma: no cover - depends on the environment
    missing_peer(_e)

BIN = Path(sys.executable).parent
FIELD_MAP = '{"image": "jpg", "caption": "txt"}'
MTIME = 1_700_000_000


# --------------------------------------------------------------------------------------------------
# Fixture shards


def _add(tar: tarfile.TarFile, name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mtime = MTIME
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    info.linkname = link
    if kind == tarfile.REGTYPE:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    else:
        tar.addfile(info)


def _sample(tar: tarfile.TarFile, rng: random.Random, key: str, size: int | None = None) -> None:
    _add(tar, f"{key}.jpg", rng.randbytes(rng.randint(0, 3000) if size is None else size))
    _add(tar, f"{key}.txt", f"caption of {key}".encode())
    _add(tar, f"{key}.json", json.dumps({"key": key}).encode())


def build_shards(root: Path) -> None:
    """The fixture dataset (about 3.3 MB): every case of the module docstring at least once."""
    rng = random.Random(1234)
    parts = root / "parts"
    (parts / "a").mkdir(parents=True)

    # ustar, skipped members of every kind, folders, dotted folders; path-component order puts
    # parts/a/b.tar before parts/a-b.tar (a plain string sort would not).
    with tarfile.open(parts / "a" / "b.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
        _add(tar, "__meta__/info.json", b'{"skipped": true}')
        _add(tar, "__meta__", b"skipped too")
        _add(tar, "imgs", kind=tarfile.DIRTYPE)
        _sample(tar, rng, "imgs/0001")
        _add(tar, "imgs/0002.jpg", rng.randbytes(700))
        _add(tar, "README", b"no dot: skipped, and does not break the run")
        _add(tar, "imgs/0002.txt", b"")  # an empty part
        _add(tar, "imgs/0002.cls", b"")
        _add(tar, "a.b/c.d.e", b"dotted folder: key a.b/c, part d.e")
        _add(tar, "a.b/c.txt", b"same key")
        _add(tar, "a.b/noext", b"skipped")
        _add(tar, "dir.x/.hidden.txt", b"dot in the folder and at the start of the basename: skipped")
        _add(tar, "hid/.den.txt", b"key 'hid/', part 'den.txt' by the regex")
        _add(tar, "__key__.txt", b"not a dunder path component: a real key")
        _add(tar, "link.jpg", kind=tarfile.SYMTYPE, link="imgs/0001.jpg")
        _add(tar, "hard.jpg", kind=tarfile.LNKTYPE, link="imgs/0001.jpg")
        _add(tar, "fifo.txt", kind=tarfile.FIFOTYPE)
        deep = "/".join(["folder"] * 12) + "/ustar-prefix-key"  # > 100 chars: uses the ustar prefix field
        _sample(tar, rng, deep)
        _sample(tar, rng, "last")
        _add(tar, "trailing-dir", kind=tarfile.DIRTYPE)  # after the last sample: inside its byte range
        _add(tar, "trailing", b"no dot, after the last sample")

    # ustar with a multi-MB part
    with tarfile.open(parts / "a-b.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
        _sample(tar, rng, "big/0000", size=3 << 20)
        for i in range(1, 4):
            _sample(tar, rng, f"big/{i:04d}")

    # GNU: long names ('L'), long link names ('K'), long directory names
    with tarfile.open(parts / "gnu-000.tar", "w", format=tarfile.GNU_FORMAT) as tar:
        long_dir = "g" * 60 + "/" + "n" * 70
        _add(tar, long_dir, kind=tarfile.DIRTYPE)
        for i in range(3):
            _sample(tar, rng, f"{long_dir}/sample-{i:03d}-" + "x" * 40)
        _add(tar, "gnu-link.jpg", kind=tarfile.SYMTYPE, link="t/" * 80 + "target.jpg")
        _add(tar, "short.key.with.dots.txt", b"part with dots")
        _add(tar, "z" * 101, b"long name, no dot: skipped")

    # PAX: long and non-ASCII names, and a global header at the start (tarfile writes one for pax_headers)
    with tarfile.open(
        parts / "pax-000.tar", "w", format=tarfile.PAX_FORMAT, pax_headers={"comment": "global header"}
    ) as tar:
        _sample(tar, rng, "ünïcödé/ключ")
        _sample(tar, rng, "日本/" + "語" * 40)  # > 100 bytes encoded
        _sample(tar, rng, "p/" + "q" * 120)
        _add(tar, "ünï-link.txt", kind=tarfile.SYMTYPE, link="ziel/" * 30)
        _add(tar, "emoji-🙂.txt", b"")
    with tarfile.open(parts / "pax-001.tar", "w", format=tarfile.PAX_FORMAT) as tar:
        for i in range(3):
            _sample(tar, rng, f"pax1/{i}")

    # plain numbered shards, for brace collapse in split.yaml
    for s in range(5):
        with tarfile.open(parts / f"data-{s:03d}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
            for i in range(2 + s):
                _sample(tar, rng, f"d{s}/{i:04d}")


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("compat") / "source"
    build_shards(root)
    return root


def _copy(source: Path, dest: Path) -> Path:
    shutil.copytree(source, dest)
    return dest


def _shardstore(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [str(BIN / "shardstore"), "prepare", str(path), "--non-interactive", "--no-progress", *args]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return res


def _energon(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [str(BIN / "energon"), "prepare", str(path), "--non-interactive", "--no-progress", "--num-workers", "2", *args]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return res


PREPARE_ARGS = ("--split-ratio", "6,2,2", "--sample-type", "CaptioningSample", "--field-map", FIELD_MAP)


@pytest.fixture(scope="module")
def pair(source: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(shardstore-prepared copy, energon-prepared copy) of the fixture, same flags."""
    base = tmp_path_factory.mktemp("pair")
    ours = _copy(source, base / "shardstore")
    theirs = _copy(source, base / "energon")
    _shardstore(ours, *PREPARE_ARGS)
    _energon(theirs, *PREPARE_ARGS)
    return ours, theirs


# --------------------------------------------------------------------------------------------------
# Helpers


def _meta(path: Path, name: str) -> bytes:
    return (path / ".nv-meta" / name).read_bytes()


def _rows(path: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{path / '.nv-meta' / 'index.sqlite'}?mode=ro&immutable=1", uri=True)
    try:
        return sorted(con.execute(sql).fetchall())
    finally:
        con.close()


def _expanded_splits(path: Path) -> tuple[dict[str, list[str]], list[str]]:
    import braceexpand

    raw = yaml.safe_load(_meta(path, "split.yaml"))
    exp = {k: [n for p in v for n in braceexpand.braceexpand(p)] for k, v in raw["split_parts"].items()}
    exclude = [n for p in raw.get("exclude") or [] for n in braceexpand.braceexpand(p)]
    return exp, exclude


def _tar_idx_files(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*.tar.idx"))}


def _ground_truth(path: Path) -> dict[str, dict[str, bytes]]:
    """key -> {part: bytes} from tarfile itself, with Energon's own name rules (the peer's regexes)."""
    from megatron.energon.flavors.webdataset.config import skip_meta_re, split_name_re

    info = json.loads(_meta(path, ".info.json"))
    out: dict[str, dict[str, bytes]] = {}
    for shard in info["shard_counts"]:
        with tarfile.open(path / shard) as tar:
            for m in tar:
                if not m.isreg() or skip_meta_re.match(m.name):
                    continue
                match = split_name_re.match(m.name)
                if match:
                    f = tar.extractfile(m)
                    assert f is not None
                    out.setdefault(match.group(1), {})[match.group(2)] = f.read()
    return out


# --------------------------------------------------------------------------------------------------
# Same output as Energon, file by file


def test_fixture_covers_the_formats(source: Path) -> None:
    """The shards really use the header kinds the test claims to cover."""
    raw = {p.name: p.read_bytes() for p in (source / "parts").rglob("*.tar")}
    assert b"././@LongLink" in raw["gnu-000.tar"]  # GNU 'L' and 'K' headers
    with tarfile.open(source / "parts" / "gnu-000.tar") as tar:
        types = {m.name: m for m in tar}
    assert any(len(n) > 100 and m.isreg() for n, m in types.items())
    assert any(len(m.linkname) > 100 for m in types.values())
    pax = raw["pax-000.tar"]
    assert pax[156:157] == b"g"  # global header first
    assert b"path=" in pax and "ключ".encode() in pax
    ustar = raw["b.tar"]
    assert ustar[257:263] == b"ustar\x00"
    assert any(len(m) > 100 for m in tarfile.open(source / "parts" / "a" / "b.tar").getnames())
    assert (source / "parts" / "a-b.tar").stat().st_size > 3 << 20


def test_info_json_bytes(pair: tuple[Path, Path]) -> None:
    ours, theirs = pair
    assert _meta(ours, ".info.json") == _meta(theirs, ".info.json")
    shards = list(json.loads(_meta(ours, ".info.json"))["shard_counts"])
    assert shards[:2] == ["parts/a/b.tar", "parts/a-b.tar"]  # path-component order


def test_split_yaml_expansion(pair: tuple[Path, Path]) -> None:
    ours, theirs = pair
    assert _expanded_splits(ours) == _expanded_splits(theirs)
    assert sum(len(v) for v in _expanded_splits(ours)[0].values()) == 10


def test_dataset_yaml_bytes(pair: tuple[Path, Path]) -> None:
    ours, theirs = pair
    assert _meta(ours, "dataset.yaml") == _meta(theirs, "dataset.yaml")


def test_index_rows(pair: tuple[Path, Path]) -> None:
    ours, theirs = pair
    for sql in ("SELECT * FROM samples", "SELECT * FROM sample_parts"):
        mine, peer = _rows(ours, sql), _rows(theirs, sql)
        assert mine == peer, sql
        assert len(mine) > 20
    keys = {r[1] for r in _rows(ours, "SELECT * FROM samples")}
    assert {"a.b/c", "__key__", "imgs/0002", "ünïcödé/ключ", "short", "hid/"} <= keys
    assert not any(k.startswith("__meta__") or k in ("README", "trailing", "link", "hard") for k in keys)


def test_index_schema(pair: tuple[Path, Path]) -> None:
    """Same tables, columns, types, constraints and indexes (statement whitespace may differ)."""
    ours, theirs = pair

    def schema(path: Path) -> dict[str, list[tuple]]:
        out = {}
        for table in ("samples", "sample_parts"):
            out[table] = _rows(path, f"PRAGMA table_info({table})")
            for (_, name, unique, origin, partial) in _rows(path, f"PRAGMA index_list({table})"):
                cols = _rows(path, f"PRAGMA index_info({name})")
                label = name if origin == "c" else f"auto:{origin}:{[c[2] for c in cols]}"
                out[f"{table}.{label}"] = [unique, partial, *cols]
        return out

    assert schema(ours) == schema(theirs)


def test_tar_idx_bytes(pair: tuple[Path, Path]) -> None:
    ours, theirs = pair
    mine, peer = _tar_idx_files(ours), _tar_idx_files(theirs)
    assert len(mine) == 10
    assert mine == peer


def test_rollback_journal_and_uuid(pair: tuple[Path, Path]) -> None:
    ours, _ = pair
    db = (ours / ".nv-meta" / "index.sqlite").read_bytes()
    assert db[:16] == b"SQLite format 3\x00"
    assert db[18:20] == b"\x01\x01"  # file format versions: 1 = rollback journal, 2 = WAL
    con = sqlite3.connect(ours / ".nv-meta" / "index.sqlite")
    try:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] != "wal"
    finally:
        con.close()
    assert not (ours / ".nv-meta" / "index.sqlite-wal").exists()
    text = _meta(ours, "index.uuid").decode()
    assert len(text) == 36 and str(uuid.UUID(text)) == text and uuid.UUID(text).version == 4


def test_no_leftovers(pair: tuple[Path, Path]) -> None:
    ours, theirs = pair
    assert not [p for p in ours.iterdir() if p.name.startswith(".nv-meta.")]
    assert not list(ours.rglob("*.tmp"))
    # every Energon file exists in ours too (shardstore may add its own, never drop one)
    assert {p.name for p in (theirs / ".nv-meta").iterdir()} <= {p.name for p in (ours / ".nv-meta").iterdir()}


@pytest.mark.parametrize(
    "args",
    [
        ("--split-parts", "train:parts/data-.*", "--split-parts", "val:parts/(gnu|pax)-.*", "--skip-dataset-yaml"),
        ("--split-ratio", "1,1,1", "--shuffle-tars", "--exclude", "gnu", "--sample-type", "CrudeWebdataset"),
        ("--split-ratio", "8,1,1", "--sample-type", "VQASample"),  # no field map: a sample_loader.py to edit
    ],
    ids=["split-parts", "shuffle-exclude-crude", "sample-loader"],
)
def test_flag_variants(source: Path, tmp_path: Path, args: tuple[str, ...]) -> None:
    ours = _copy(source, tmp_path / "shardstore")
    theirs = _copy(source, tmp_path / "energon")
    _shardstore(ours, *args)
    _energon(theirs, *args)
    assert _meta(ours, ".info.json") == _meta(theirs, ".info.json")
    assert _expanded_splits(ours) == _expanded_splits(theirs)
    assert _tar_idx_files(ours) == _tar_idx_files(theirs)
    for sql in ("SELECT * FROM samples", "SELECT * FROM sample_parts"):
        assert _rows(ours, sql) == _rows(theirs, sql)
    has_yaml = (theirs / ".nv-meta" / "dataset.yaml").exists()
    assert has_yaml == (ours / ".nv-meta" / "dataset.yaml").exists()
    if has_yaml:
        assert _meta(ours, "dataset.yaml") == _meta(theirs, "dataset.yaml")
    has_loader = (theirs / ".nv-meta" / "sample_loader.py").exists()  # our own template text, same names
    assert has_loader == (ours / ".nv-meta" / "sample_loader.py").exists() == ("VQASample" in args)


def test_tar_index_only_matches_energon(pair: tuple[Path, Path], tmp_path: Path) -> None:
    """--tar-index-only rewrites the .tar.idx files (deleted here) exactly as Energon does."""
    ours, _ = pair
    work = _copy(ours, tmp_path / "ours")
    peer = _copy(ours, tmp_path / "peer")
    for root in (work, peer):
        for p in root.rglob("*.tar.idx"):
            p.unlink()
    _shardstore(work, "--tar-index-only")
    _energon(peer, "--tar-index-only")
    assert _tar_idx_files(work) == _tar_idx_files(peer) == _tar_idx_files(ours)


# --------------------------------------------------------------------------------------------------
# Energon's readers on a shardstore-prepared dataset


def test_energon_position_reader_reads_every_sample(pair: tuple[Path, Path]) -> None:
    """ShardInfosITarReader goes through the .tar.idx files: every sample, every part, exact bytes."""
    from megatron.energon.epathlib import EPath
    from megatron.energon.flavors.webdataset.itar_reader import ShardInfosITarReader
    from megatron.energon.flavors.webdataset.structs import ShardInfo

    ours, _ = pair
    truth = _ground_truth(ours)
    base = EPath(ours)
    counts = json.loads(_meta(ours, ".info.json"))["shard_counts"]
    infos = [ShardInfo(name=n, path=base / n, count=c) for n, c in counts.items()]
    reader = ShardInfosITarReader(base, infos)
    try:
        seen = {}
        for i in range(len(reader)):
            sample = reader[i]
            assert sample is not None
            seen[sample["__key__"]] = {k: v for k, v in sample.items() if not k.startswith("__")}
        assert len(reader) == sum(counts.values()) == len(truth)
        assert seen == truth
    finally:
        reader.close()


def test_energon_key_reader_reads_every_sample(pair: tuple[Path, Path]) -> None:
    """SqliteITarEntryReader looks samples up by key in index.sqlite."""
    from megatron.energon.epathlib import EPath
    from megatron.energon.flavors.webdataset.itar_reader import SqliteITarEntryReader

    ours, _ = pair
    truth = _ground_truth(ours)
    reader = SqliteITarEntryReader(EPath(ours))
    try:
        assert len(reader) == len(truth)
        for key, parts in truth.items():
            sample = reader[key]
            assert {k: v for k, v in sample.items() if not k.startswith("__")} == parts, key
        listed = sorted(k for k, _, _ in reader.list_all_samples())
        assert listed == sorted(truth)
    finally:
        reader.close()


def test_energon_file_store_reads_every_member(pair: tuple[Path, Path]) -> None:
    """WebdatasetFileStore reads members by full name through sample_parts."""
    from megatron.energon.cache.file_store import WebdatasetFileStore
    from megatron.energon.epathlib import EPath

    ours, _ = pair
    truth = _ground_truth(ours)
    store = WebdatasetFileStore(EPath(ours))
    try:
        n = 0
        for key, parts in truth.items():
            for part, data in parts.items():
                got, _source = store[f"{key}.{part}"]
                assert got == data, f"{key}.{part}"
                n += 1
        listed = sorted(name for name, _, _ in store.list_all_sample_parts())
        assert listed == sorted(f"{k}.{p}" for k, ps in truth.items() for p in ps)
        assert n > 40
    finally:
        store.close()


def test_energon_loader_reads_every_split(pair: tuple[Path, Path], tmp_path: Path) -> None:
    """Energon's dataset factory and loader on what shardstore wrote (split.yaml, the crude dataset.yaml,
    .tar.idx): iterating the three splits yields every sample once, with exact bytes."""
    ours = _copy(pair[0], tmp_path / "crude")
    _shardstore(ours, "--force-overwrite", "--split-ratio", "6,2,2", "--sample-type", "CrudeWebdataset")
    truth = _ground_truth(ours)
    got: dict[str, dict[str, bytes]] = {}
    for split in ("train", "val", "test"):  # the parts are random bytes, not images: no decoding
        for key, parts in energon_samples(ours, split):
            assert key not in got
            got[key] = parts
    assert got == truth


def test_sample_types_match_energons_classes() -> None:
    """--sample-type and the wizard offer exactly Energon's sample classes, with their fields in order."""
    import dataclasses
    import inspect

    import megatron.energon as energon

    from shardstore.nvmeta import SAMPLE_TYPES

    base = {f.name for f in dataclasses.fields(energon.Sample)}
    classes = {n: c for n, c in inspect.getmembers(energon) if isinstance(c, type) and issubclass(c, energon.Sample)}
    assert set(SAMPLE_TYPES) == set(classes) | {"CrudeWebdataset"}
    for name, cls in classes.items():
        fields = tuple(
            (f.name, f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
            for f in dataclasses.fields(cls)
            if f.name not in base
        )
        assert SAMPLE_TYPES[name] == fields, name


def test_legacy_info_yaml_rewritten_like_energon(pair: tuple[Path, Path], tmp_path: Path) -> None:
    """A dataset that still has an old .info.yaml: both tools rewrite it with the new counts, same bytes."""
    copies = [_copy(p, tmp_path / name) for p, name in zip(pair, ("ours", "peer"), strict=True)]
    for c in copies:
        (c / ".nv-meta" / ".info.yaml").write_text("shard_counts:\n  stale.tar: 1\n")
    _shardstore(copies[0], "--force-overwrite", "--split-ratio", "1,0,0", "--exclude", "pax")
    _energon(copies[1], "--force-overwrite", "--split-ratio", "1,0,0", "--exclude", "pax")
    assert _meta(copies[0], ".info.yaml") == _meta(copies[1], ".info.yaml")
    assert "stale.tar" not in _meta(copies[0], ".info.yaml").decode()
    assert _meta(copies[0], ".info.json") == _meta(copies[1], ".info.json")
