"""Media metadata against the real megatron-energon 7.4.1: ``prepare --media-metadata-by-...`` fills
``media_metadata`` and ``media_filters`` row for row as ``energon prepare`` does (jpg, png, webp, gif, mp4
with and without audio, wav, a PNG only the header strategy finds, broken media); each tool reads the
other's; ``prepare-media`` on a folder likewise. Where Energon 7.4.1 fails (its glob strategy as soon as a
pattern matches, its header strategy on folders, a truncated image), what shardstore does is pinned."""

from __future__ import annotations

import io
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from energon_peer import missing_peer
from media_samples import image, video, wav, write_shards

import shardstore
from shardstore.filestores import FolderStore, IndexedTarStore

pytestmark = pytest.mark.compat

try:
    import megatron.energon  # noqa: F401
except Exception as _e:  # pragma: no cover - depends on the environment
    missing_peer(_e)

BIN = Path(sys.executable).parent
ARGS = ("--non-interactive", "--no-progress", "--split-ratio", "1,0,0", "--sample-type", "CrudeWebdataset")


def _tables(root: Path) -> tuple[list[tuple], list[tuple], list[tuple]]:
    con = sqlite3.connect(f"file:{root / '.nv-meta' / 'index.sqlite'}?mode=ro&immutable=1", uri=True)
    try:
        media = sorted(con.execute("SELECT entry_key, metadata_type, metadata_json FROM media_metadata"))
        filters = con.execute("SELECT filter_id, strategy, patterns FROM media_filters").fetchall()
        samples = sorted(con.execute("SELECT * FROM samples")) + sorted(con.execute("SELECT * FROM sample_parts"))
        return media, filters, samples
    finally:
        con.close()


def _energon(root: Path, *args: str, command: str = "prepare", ok: bool = True) -> subprocess.CompletedProcess[str]:
    extra = ARGS if command == "prepare" else ("--no-progress",)
    res = subprocess.run([str(BIN / "energon"), command, str(root), *extra, *args], capture_output=True, text=True, timeout=300)
    if ok:
        assert res.returncode == 0, res.stdout + res.stderr
    return res


def _shardstore(root: Path, *args: str) -> None:
    res = subprocess.run([str(BIN / "shardstore"), "prepare", str(root), *ARGS, *args], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_shards(tmp_path_factory.mktemp("media") / "src")


@pytest.mark.parametrize("flag", ["--media-metadata-by-extension", "--media-metadata-by-header"])
def test_tables_equal_energons(source: Path, tmp_path: Path, flag: str) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    shutil.copytree(source, ours)
    shutil.copytree(source, theirs)
    _shardstore(ours, flag)
    _energon(theirs, flag)
    mine, peer = _tables(ours), _tables(theirs)
    assert mine == peer
    media = dict((k, (t, j)) for k, t, j in mine[0])
    assert ("s07.bin" in media) == (flag == "--media-metadata-by-header")  # only the header finds it
    assert media["s12.mp4"] == ("av", "{}") and "s10.jpg" not in media and "s11.mp4" not in media
    assert '"audio_num_samples":8192' in media["s04.mp4"][1] and "audio" not in media["s05.mp4"][1]
    assert mine[1] == [(1, "EXTENSION" if "extension" in flag else "HEADER", "")]


def test_each_reads_the_others(source: Path, tmp_path: Path) -> None:
    from megatron.energon.cache.file_store import WebdatasetFileStore
    from megatron.energon.epathlib import EPath

    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    shutil.copytree(source, ours)
    shutil.copytree(source, theirs)
    _shardstore(ours, "--media-metadata-by-extension")
    _energon(theirs, "--media-metadata-by-extension")
    peer_store = WebdatasetFileStore(EPath(str(ours)))
    for name in ("s00.jpg", "s04.mp4", "s06.wav", "s09.seg.png"):
        theirs_view = peer_store.get_media_metadata(name).to_dict()
        assert theirs_view == shardstore.open(str(ours), split=None).media_metadata(name).values
        assert IndexedTarStore(str(theirs)).media_metadata(name).values == theirs_view
    assert shardstore.open(str(theirs), split=None).media_metadata("s02.webp")["format"] == "WEBP"


@pytest.mark.slow
def test_glob(source: Path, tmp_path: Path) -> None:
    """Energon 7.4.1's glob strategy fails as soon as a pattern matches a member; with no match both
    write empty media tables and the same filter row. Matched members are typed as by the header strategy."""
    ours, theirs, header = tmp_path / "ours", tmp_path / "theirs", tmp_path / "header"
    for d in (ours, theirs, header):
        shutil.copytree(source, d)
    _shardstore(ours, "--media-metadata-by-glob", "*.tiff,*.mkv")
    _energon(theirs, "--media-metadata-by-glob", "*.tiff,*.mkv")
    assert _tables(ours) == _tables(theirs) and _tables(ours)[0] == []
    assert _tables(ours)[1] == [(1, "GLOB", "*.tiff,*.mkv")]
    assert _energon(theirs, "--force-overwrite", "--media-metadata-by-glob", "*.jpg", ok=False).returncode != 0
    _shardstore(ours, "--force-overwrite", "--media-metadata-by-glob", "*.jpg,*.bin,*.mp4")
    _shardstore(header, "--media-metadata-by-header")
    picked = [r for r in _tables(header)[0] if r[0].endswith((".jpg", ".bin", ".mp4"))]
    assert _tables(ours)[0] == picked and any(r[0] == "s07.bin" for r in picked)


@pytest.mark.slow
def test_truncated_image(tmp_path: Path) -> None:
    """Energon's prepare fails on an image whose data is cut short (Pillow's load raises); shardstore
    reads only the header and records what it says."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (200, 300, 3), dtype=np.uint8)).save(buf, "JPEG")
    items = [("a.jpg", image("JPEG")), ("b.jpg", buf.getvalue()[: len(buf.getvalue()) // 2])]
    ours, theirs = write_shards(tmp_path / "ours", items, shards=1), write_shards(tmp_path / "theirs", items, shards=1)
    assert _energon(theirs, "--media-metadata-by-extension", ok=False).returncode != 0
    _shardstore(ours, "--media-metadata-by-extension")
    assert ("b.jpg", "image", '{"width":300,"height":200,"format":"JPEG","mode":"RGB"}') in _tables(ours)[0]


def _folder(root: Path) -> Path:
    (root / "images").mkdir(parents=True)
    (root / "video").mkdir()
    (root / "images" / "a.jpg").write_bytes(image("JPEG"))
    (root / "images" / "b.PNG").write_bytes(image("PNG", "RGBA"))
    (root / "images" / "c.bin").write_bytes(image("PNG"))
    (root / "video" / "d.mp4").write_bytes(video(True))
    (root / "e.wav").write_bytes(wav())
    (root / "broken.jpg").write_bytes(b"no image")
    (root / "notes.txt").write_text("not media")
    return root


def test_prepare_media_folder_equals_energons(tmp_path: Path) -> None:
    from megatron.energon.cache.file_store import SystemFileStore

    ours, theirs = _folder(tmp_path / "ours"), _folder(tmp_path / "theirs")
    res = subprocess.run([str(BIN / "shardstore"), "prepare-media", str(ours), "--media-metadata-by-extension"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    _energon(theirs, "--media-metadata-by-extension", command="prepare-media")
    con = [sqlite3.connect(root / ".nv-meta" / "index.sqlite") for root in (ours, theirs)]
    names = [sorted(r[0] for r in c.execute("SELECT name FROM sqlite_master")) for c in con]
    rows = [sorted(c.execute("SELECT * FROM media_metadata")) for c in con]
    filters = [c.execute("SELECT filter_id, strategy, patterns FROM media_filters").fetchall() for c in con]
    assert names[0] == names[1] and rows[0] == rows[1] and filters[0] == filters[1]
    assert [r[0] for r in rows[0]] == ["e.wav", "images/a.jpg", "images/b.PNG", "video/d.mp4"]
    peer = SystemFileStore(str(ours))
    for name in ("images/a.jpg", "video/d.mp4", "e.wav"):
        assert peer.get_media_metadata(name).to_dict() == FolderStore(f"filesystem://{theirs}").media_metadata(name).values


def test_prepare_media_on_a_prepared_dataset_equals_energons(source: Path, tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    shutil.copytree(source, ours)
    _shardstore(ours)
    shutil.copytree(ours, theirs)
    res = subprocess.run([str(BIN / "shardstore"), "prepare-media", str(ours), "--media-metadata-by-extension"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    _energon(theirs, "--media-metadata-by-extension", command="prepare-media")
    assert _tables(ours) == _tables(theirs) and len(_tables(ours)[0]) == 10
