"""Hostile episode-frame WebDataset shards and kept step keys: a .tar.zst member declaring 2 GiB, a
``dones`` pickle calling ``bytearray(2.5e9)`` (no opt-in) and a part doing it with the opt-in, an
export whose kept step keys and part names are paths. Through the CLI under 1 GB of address space."""

from __future__ import annotations

import io
import json
import sqlite3
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
from hostile_cli import ROOT, refused, run

sys.path.insert(0, str(ROOT / "tools"))
from make_episode_wds import rollouts, write_shard  # noqa: E402

from shardstore.convert.episode_wds import export_episode_wds, import_episode_wds  # noqa: E402
from shardstore.errors import PathEscapeError  # noqa: E402

zstandard = pytest.importorskip("zstandard")
BAD_NAMES = ["../../../tmp/hostile-x", "/tmp/hostile-abs", "a\\..\\..\\b", "frame\n000", "frame\x00"]


class _Bomb:
    """Pickles as ``bytearray(2_500_000_000)``: 32 bytes that allocate 2.4 GB when loaded."""

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (bytearray, (2_500_000_000,))


def _task(tmp_path: Path, frames: list[dict]) -> Path:  # type: ignore[type-arg]
    folder = tmp_path / "src" / "demos" / "b" / "t"
    write_shard(folder / "shard-000000.tar", {"benchmark_name": "b"}, frames)
    return folder


def test_a_zst_member_declaring_2_gib(tmp_path: Path) -> None:
    """The member's header is checked before its data is read: a compressed shard gives no size
    to trust, so a member over the limit is refused where it starts."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        meta = tarfile.TarInfo("_metadata.meta.pickle")
        data = b"\x80\x04N."
        meta.size = len(data)
        tar.addfile(meta, io.BytesIO(data))
    header = tarfile.TarInfo("frame_000.obs.pickle")
    header.size = 2 << 30
    raw = buf.getvalue()[:1024] + header.tobuf(tarfile.USTAR_FORMAT) + b"\0" * (1 << 16)
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "shard-000000.tar.zst").write_bytes(zstandard.ZstdCompressor().compress(raw))
    refused("import", "episode-wds", folder, tmp_path / "out", "--quiet",
            expect=("frame_000.obs.pickle", "20000000000", "shard-000000.tar.zst"))


def test_a_plain_tar_member_larger_than_its_shard(tmp_path: Path) -> None:
    folder = _task(tmp_path, rollouts(np.random.default_rng(0), [2]))
    shard = folder / "shard-000000.tar"
    raw = bytearray(shard.read_bytes())
    at = raw.find(b"frame_000.acts.pickle")
    raw[at + 124 : at + 136] = b"%011o\0" % (1 << 32)
    raw[at + 148 : at + 156] = b"        "
    raw[at + 148 : at + 156] = b"%06o\0 " % sum(raw[at : at + 512])
    shard.write_bytes(bytes(raw))
    refused("import", "episode-wds", folder, tmp_path / "out", "--quiet", expect=("frame_000.acts.pickle", "ends inside"))


def test_dones_calling_bytearray_is_refused_without_the_opt_in(tmp_path: Path) -> None:
    frames = rollouts(np.random.default_rng(0), [2])
    frames[0]["dones"] = _Bomb()
    folder = _task(tmp_path, frames)
    refused("import", "episode-wds", folder, tmp_path / "out", "--quiet",
            expect=("frame_000.dones.pickle", "builtins.bytearray", "refused"))


def test_a_part_calling_bytearray_is_capped_with_the_opt_in(tmp_path: Path) -> None:
    frames = rollouts(np.random.default_rng(0), [2])
    frames[1]["acts"] = _Bomb()
    folder = _task(tmp_path, frames)
    refused("import", "episode-wds", folder, tmp_path / "out", "--quiet", "--allow-pickle",
            expect=("frame_001.acts.pickle", "2500000000", "refused"))


@pytest.fixture
def imported(tmp_path: Path) -> Path:
    folder = _task(tmp_path, rollouts(np.random.default_rng(0), [2, 3]))
    out = tmp_path / "ds"
    import_episode_wds(folder, out)
    return out


def _set_keys(ds: Path, key: str) -> None:
    db = sqlite3.connect(ds / ".nv-meta" / "episodes.sqlite")
    for number, text in db.execute("SELECT number, source FROM episodes").fetchall():
        source = json.loads(text)
        source["keys"] = [key] * len(source["keys"])
        db.execute("UPDATE episodes SET source=? WHERE number=?", (json.dumps(source), number))
    db.commit()
    db.close()


def test_export_refuses_kept_step_keys_that_are_paths(imported: Path, tmp_path: Path) -> None:
    for n, bad in enumerate(BAD_NAMES):
        _set_keys(imported, bad)
        with pytest.raises(PathEscapeError) as e:
            export_episode_wds(str(imported), str(tmp_path / f"out{n}"))
        assert "step key" in str(e.value) and not (tmp_path / f"out{n}").exists()
    assert not list(Path("/tmp").glob("hostile-*"))


def test_cli_export_refuses_a_dotdot_step_key(imported: Path, tmp_path: Path) -> None:
    _set_keys(imported, "../../../tmp/hostile-x")
    refused("export", "episode-wds", imported, tmp_path / "out", expect=("step key", "refused"))


def test_export_refuses_a_part_name_that_is_a_path(imported: Path, tmp_path: Path) -> None:
    schema_path = imported / ".nv-meta" / "schema.json"
    schema = json.loads(schema_path.read_text())
    for f in schema["fields"]:
        if f["name"] == "acts":
            f.setdefault("attrs", {})["part"] = "../../hostile-part.pickle"
    schema_path.write_text(json.dumps(schema))
    with pytest.raises(PathEscapeError, match="part name"):
        export_episode_wds(str(imported), str(tmp_path / "out"))


def test_a_clean_source_still_round_trips(imported: Path, tmp_path: Path) -> None:
    res = run("export", "episode-wds", imported, tmp_path / "out")
    assert res.returncode == 0, res.stderr
