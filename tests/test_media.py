"""Media metadata without the peer: the Python options under the flags' names, the reading API
(``Dataset``/``IndexedTarStore``/``FolderStore.media_metadata``, ``ls --media``, ``info``), that only the
selected members are read (images only as far as their header), bad images named and skipped, and
``prepare-media`` on folders. (Row-for-row equality with Energon: tests/compat/test_media_compat.py.)"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import pytest
from click.testing import CliRunner
from media_samples import image, members, video, write_shards

import shardstore
from shardstore.cli import main
from shardstore.errors import ConfigError, SampleNotFoundError
from shardstore.filestores import FolderStore, IndexedTarStore
from shardstore.media_prepare import prepare_media
from shardstore.storage import LocalStorage


@pytest.fixture(scope="module")
def media_ds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = write_shards(tmp_path_factory.mktemp("media") / "ds")
    report = shardstore.prepare(str(root), split_ratio="1,0,0", media_metadata_by_extension=True, num_workers=2)
    assert report.media == {"av": 4, "image": 6}  # s10.jpg (no image) and s11.mp4 (no container): no row
    return root


def test_python_api_and_reading(media_ds: Path) -> None:
    ds = shardstore.open(str(media_ds))
    jpg = ds.media_metadata("s00.jpg")
    assert (jpg.metadata_type, jpg["width"], jpg["height"], jpg["format"], jpg["mode"]) == ("image", 40, 30, "JPEG", "RGB")
    mp4 = ds.media_metadata("s04.mp4")
    assert (mp4["video_num_frames"], mp4["video_fps"], mp4["audio_sample_rate"], mp4["audio_num_samples"]) == (12, 24.0, 16000, 8192)
    assert "audio_channels" not in ds.media_metadata("s05.mp4").values
    assert ds.media_metadata("s08.JPG")["mode"] == "L" and ds.media_metadata("s12.mp4").values == {}
    for missing in ("s00.txt", "s10.jpg", "nope.jpg"):
        with pytest.raises(SampleNotFoundError):
            ds.media_metadata(missing)
    assert IndexedTarStore(str(media_ds)).media_metadata("s06.wav")["audio_channels"] == 2


def test_ls_media_and_info(media_ds: Path) -> None:
    out = CliRunner().invoke(main, ["ls", str(media_ds), "--media", "-n", "2"])
    assert out.exit_code == 0, out.output
    assert out.stdout.splitlines() == [
        's00.jpg\timage\t{"width":40,"height":30,"format":"JPEG","mode":"RGB"}',
        's01.png\timage\t{"width":40,"height":30,"format":"PNG","mode":"RGBA"}',
    ]
    rows = json.loads(CliRunner().invoke(main, ["ls", str(media_ds), "--media", "--json"]).stdout)
    assert len(rows) == 10 and rows[4]["entry_key"] == "s04.mp4" and rows[4]["video_width"] == 64
    info = json.loads(CliRunner().invoke(main, ["info", str(media_ds), "--json"]).stdout)
    assert info["media"]["counts"] == {"av": 4, "image": 6}
    assert [(f["strategy"], f["patterns"]) for f in info["media"]["filters"]] == [("EXTENSION", "")]
    assert "media        av (4), image (6); filter: EXTENSION" in CliRunner().invoke(main, ["info", str(media_ds)]).stdout


def test_options_and_errors(prepared: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="give one of"):
        shardstore.prepare(str(prepared), split_ratio="1,0,0", force_overwrite=True, media_metadata_by_header=True,
                           media_metadata_by_extension=True)
    with pytest.raises(ConfigError, match="tar_index_only"):
        shardstore.prepare(str(prepared), tar_index_only=True, media_metadata_by_extension=True)
    with pytest.raises(ConfigError, match="no media metadata in this dataset"):
        shardstore.open(str(prepared)).media_metadata("s00000_000000.jpg")
    assert json.loads(CliRunner().invoke(main, ["info", str(prepared), "--json"]).stdout)["media"] is None
    report = shardstore.prepare(str(prepared), split_ratio="1,0,0", force_overwrite=True, media_metadata_by_glob="*.txt")
    assert report.media == {}  # text is no media: the filter is recorded, no row


def test_only_selected_members_are_read_and_images_only_to_their_header(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = image("PNG", "RGB", (1500, 1000))  # ~ a few KB compressed; padded below so its data runs past the probe
    items = [("a.png", big + b"\0" * 300_000), ("a.txt", b"t" * 300_000), ("b.mp4", video(False))]
    root = write_shards(tmp_path / "ds", items, shards=1)
    reads: list[tuple[int, int]] = []
    real = LocalStorage.read_at

    def spy(self: LocalStorage, path: str, offset: int, size: int) -> bytes:
        reads.append((offset, size))
        return real(self, path, offset, size)

    monkeypatch.setattr(LocalStorage, "read_at", spy)
    report = shardstore.prepare(str(root), split_ratio="1,0,0", media_metadata_by_extension=True, num_workers=1)
    assert report.media == {"av": 1, "image": 1}
    assert shardstore.open(str(root)).media_metadata("a.png")["width"] == 1500
    png_off = 512
    txt_off = png_off + -(-len(items[0][1]) // 512) * 512 + 512
    assert sum(n for o, n in reads if png_off <= o < png_off + len(items[0][1])) <= 64 << 10
    assert not [o for o, _ in reads if txt_off <= o < txt_off + 300_000]


def _png_header_claiming(width: int, height: int) -> bytes:
    """A PNG whose header declares a huge image (Pillow refuses it as a decompression bomb)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) + chunk(b"IEND", b"")


def test_an_image_pillow_refuses_is_named_and_skipped(tmp_path: Path) -> None:
    root = write_shards(tmp_path / "ds", [("ok.jpg", image("JPEG")), ("bomb.png", _png_header_claiming(60000, 60000))], shards=1)
    result = CliRunner().invoke(main, ["prepare", str(root), "--split-ratio", "1,0,0", "--non-interactive", "--media-metadata-by-extension"])
    assert result.exit_code == 0, result.output
    assert "bomb.png" in result.stderr and "DecompressionBomb" in result.stderr
    ds = shardstore.open(str(root))
    assert ds.media_metadata("ok.jpg")["format"] == "JPEG"
    with pytest.raises(SampleNotFoundError):
        ds.media_metadata("bomb.png")


def test_prepare_media_folder(tmp_path: Path) -> None:
    folder = tmp_path / "media"
    for name, data in members():
        path = folder / ("sub" if name[2] in "02468" else "") / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    report = prepare_media(str(folder), media_metadata_by_header=True, num_workers=2)
    assert report.kind == "folder" and report.media == {"av": 4, "image": 7}
    store = FolderStore(f"filesystem://{folder}")
    assert store.media_metadata("sub/s00.jpg")["format"] == "JPEG" and store.media_metadata("s07.bin")["format"] == "PNG"
    with pytest.raises(SampleNotFoundError, match="no media metadata recorded"):
        store.media_metadata("sub/s00.txt")
    with pytest.raises(SampleNotFoundError, match="no such file"):
        store.media_metadata("none.jpg")
    again = prepare_media(str(folder), media_metadata_by_glob="*.wav")  # adds a filter, keeps the rows
    assert again.media == {"av": 1}
    listing = CliRunner().invoke(main, ["ls", str(folder), "--media", "--json"])
    assert len(json.loads(listing.stdout)) == 11
    with pytest.raises(ConfigError, match="no media files"):
        prepare_media(str(tmp_path / "media" / "sub"), media_metadata_by_glob="*.tiff")
    assert not [p for p in folder.rglob("*") if p.name.startswith(".shardstore-media-")]


def test_prepare_media_adds_to_a_prepared_dataset(prepared: Path) -> None:
    uuid_before = (prepared / ".nv-meta" / "index.uuid").read_text()
    (prepared / "extra").mkdir()
    result = CliRunner().invoke(main, ["prepare-media", str(prepared), "--media-metadata-by-glob", "*.json", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["kind"] == "dataset"
    assert (prepared / ".nv-meta" / "index.uuid").read_text() != uuid_before
    assert len(shardstore.open(str(prepared))) == 75  # the sample tables are kept


def _jpegs() -> dict[str, bytes]:
    """JPEGs of the kinds a dataset holds, written by Pillow."""
    import io

    from PIL import Image

    def save(im: Image.Image, **kw: object) -> bytes:
        buf = io.BytesIO()
        im.save(buf, "JPEG", **kw)
        return buf.getvalue()

    rgb = Image.radial_gradient("L").convert("RGB").resize((97, 61))
    exif = Image.Exif()
    exif[0x010F] = "shardstore"  # Make
    icc = b"\0" * 128 + b"acsp" + b"\0" * 400
    out = {
        "rgb": save(rgb), "grey": save(rgb.convert("L")), "cmyk": save(rgb.convert("CMYK")),
        "progressive": save(rgb, progressive=True), "optimized": save(rgb, optimize=True, quality=40),
        "exif+icc+comment": save(rgb, exif=exif.tobytes(), icc_profile=icc, comment=b"hello"),
        "subsampling 4:4:4": save(rgb, subsampling=0), "restart markers": save(rgb, restart_marker_blocks=2),
    }
    mpo = io.BytesIO()
    rgb.save(mpo, "MPO", save_all=True, append_images=[rgb.rotate(90)])
    out["mpo (two pictures)"] = mpo.getvalue()
    return out


def test_jpeg_fast_path_gives_what_pillow_gives() -> None:
    """The probe's own JPEG header parse returns Pillow's metadata for plain JPEGs and leaves
    anything else (an MPO, a cut-off header, not a JPEG) to Pillow: the rows stay Energon's."""
    import io

    from PIL import Image

    from shardstore.media import _image_metadata, jpeg_metadata

    for kind, data in _jpegs().items():
        with Image.open(io.BytesIO(data)) as im:
            pillow = {"width": im.width, "height": im.height, "format": im.format, "mode": im.mode}
        fast = jpeg_metadata(data)
        if kind.startswith("mpo"):
            assert fast is None and pillow["format"] == "MPO", kind
        else:
            assert fast == pillow, kind
        assert _image_metadata(io.BytesIO(data), kind) == pillow, kind  # the probe, either path
    rgb = _jpegs()["rgb"]
    sos = rgb.index(b"\xff\xda")
    assert jpeg_metadata(rgb[:sos]) is None and jpeg_metadata(b"\x89PNG\r\n") is None
    assert jpeg_metadata(rgb[:20] + b"junk" + rgb[20:]) is None
