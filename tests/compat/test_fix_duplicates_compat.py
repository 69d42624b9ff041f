"""``prepare --fix-duplicates`` against the real megatron-energon 7.4.1 (its tar patcher needs numba, in the
``compat`` extra): the same shards byte for byte after the rename, the same index, and Energon reads the
result; both refuse what renaming cannot fix, and leave the shards alone then."""

from __future__ import annotations

import io
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from energon_peer import energon_samples, missing_peer

pytestmark = pytest.mark.compat

try:
    import megatron.energon  # noqa: F401
    import numba  # noqa: F401  # Energon's --fix-duplicates imports it
except Exception as _e:  # pragma: no cover - depends on the environment
    missing_peer(_e)

BIN = Path(sys.executable).parent
ARGS = ("--non-interactive", "--no-progress", "--split-ratio", "1,0,0", "--sample-type", "CrudeWebdataset")


def _add(tar: tarfile.TarFile, name: str, data: bytes | None = b"x", kind: bytes = tarfile.REGTYPE) -> None:
    info = tarfile.TarInfo(name)
    info.mtime = 1_700_000_000
    info.type = kind
    if data is not None and kind == tarfile.REGTYPE:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    else:
        tar.addfile(info)


def build(root: Path, *, repeat_inside: bool = False) -> Path:
    """Three shards sharing keys; ustar with a name that needs the prefix field after renaming, a folder
    entry, a symlink, a PAX global header (no path in it), nested shard folders."""
    (root / "parts" / "sub").mkdir(parents=True)
    long_dir = "d" * 70 + "/" + "e" * 20
    with tarfile.open(root / "parts" / "a.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
        _add(tar, "imgs", None, tarfile.DIRTYPE)
        for i in range(3):
            _add(tar, f"imgs/{i:04d}.jpg", bytes([i]) * (100 + i))
            _add(tar, f"imgs/{i:04d}.txt", b"caption %d" % i)
        _add(tar, f"{long_dir}/k.json", b"{}")
        _add(tar, "link.txt", None, tarfile.SYMTYPE)
    with tarfile.open(root / "parts" / "sub" / "b.tar", "w", format=tarfile.PAX_FORMAT, pax_headers={"comment": "g"}) as tar:
        for i in range(2, 5):
            _add(tar, f"imgs/{i:04d}.jpg", bytes([i]) * 50)
        if repeat_inside:
            _add(tar, "imgs/0002.cls", b"again, after another key")
    with tarfile.open(root / "parts" / "c.tar", "w", format=tarfile.GNU_FORMAT) as tar:
        _add(tar, "imgs/0004.jpg", b"four")
        _add(tar, "other.txt", b"unique")
    return root


def _shards(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.tar"))}


def _samples(root: Path) -> list[tuple]:
    con = sqlite3.connect(f"file:{root / '.nv-meta' / 'index.sqlite'}?mode=ro&immutable=1", uri=True)
    try:
        return sorted(con.execute("SELECT * FROM samples").fetchall()) + sorted(con.execute("SELECT * FROM sample_parts").fetchall())
    finally:
        con.close()


def _run(tool: str, root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [str(BIN / tool), "prepare", str(root), *ARGS, "--fix-duplicates", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def energon_fixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = build(tmp_path_factory.mktemp("energon") / "ds")
    res = _run("energon", root, "--num-workers", "2")
    assert res.returncode == 0, res.stdout + res.stderr
    return root


def test_same_shards_and_index_as_energon(energon_fixed: Path, tmp_path: Path) -> None:
    ours = build(tmp_path / "ds")
    before = _shards(ours)
    plan = subprocess.run(
        [str(BIN / "shardstore"), "prepare", str(ours), *ARGS, "--fix-duplicates", "--dry-run"], capture_output=True, text=True
    )
    assert plan.returncode == 0, plan.stderr
    assert "imgs/0002: parts/a.tar, parts/sub/b.tar" in plan.stdout and "would rename every member of 3 shards" in plan.stdout
    assert _shards(ours) == before and not (ours / ".nv-meta").exists()  # a dry run changes nothing
    res = _run("shardstore", ours)
    assert res.returncode == 0, res.stderr
    assert _shards(ours) == _shards(energon_fixed) != before
    assert _samples(ours) == _samples(energon_fixed)
    keys = [r[1] for r in _samples(ours) if isinstance(r[1], str)]
    assert "parts/sub/b.tar/imgs/0002" in keys and "parts/a.tar/" + "d" * 70 + "/" + "e" * 20 + "/k" in keys
    assert not [p for p in ours.rglob("*") if ".fix-duplicates-" in p.name]


def test_energon_reads_the_fixed_dataset(tmp_path: Path) -> None:
    ours = build(tmp_path / "ds")
    assert _run("shardstore", ours).returncode == 0
    got = dict(energon_samples(ours))
    assert got["parts/a.tar/imgs/0001"]["jpg"] == bytes([1]) * 101
    assert got["parts/sub/b.tar/imgs/0003"] == {"jpg": bytes([3]) * 50}
    assert got["parts/c.tar/imgs/0004"] == {"jpg": b"four"}


@pytest.mark.slow  # Energon's patcher compiles its numba code in every process: ~20 s of CPU
def test_both_refuse_a_key_repeated_inside_a_shard(tmp_path: Path) -> None:
    ours, theirs = build(tmp_path / "ours", repeat_inside=True), build(tmp_path / "theirs", repeat_inside=True)
    before = _shards(ours)
    mine = _run("shardstore", ours)
    peer = _run("energon", theirs, "--num-workers", "2")
    assert mine.returncode != 0 and peer.returncode != 0
    assert "occurs twice inside the shard" in mine.stderr and "parts/sub/b.tar" in mine.stderr
    assert _shards(ours) == before == _shards(theirs)
