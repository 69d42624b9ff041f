"""Hostile Minari HDF5 files: links, virtual datasets and external raw storage below an episode
(each naming a file outside the source), a soft-link cycle, 1,200 nested groups, 5M steps declared
in a small file, a metadata file that is a symlink or a FIFO. Refused, each naming the object;
one of each through the CLI under 1 GB of address space (hostile_cli)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hostile_cli import ROOT, refused

h5py = pytest.importorskip("h5py")
pytest.importorskip("gymnasium")
sys.path.insert(0, str(ROOT / "tests" / "convert"))
import minari_sources  # noqa: E402

from shardstore.convert.minari import import_minari  # noqa: E402
from shardstore.errors import EpisodeFormatError, PathEscapeError, ShardstoreError  # noqa: E402

SECRET = np.frombuffer(b"SECRET-SECRET-SECRET-SECRET-SECR", np.uint8)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = minari_sources.legacy_hdf5(tmp_path / "src" / "hostile-v0", "0.4", episodes=2)
    with h5py.File(tmp_path / "outside.hdf5", "w") as f:  # a victim file beside the source
        f.create_dataset("secret", data=SECRET)
    (tmp_path / "outside.bin").write_bytes(SECRET.tobytes())
    return src


def _edit(src: Path, change: Callable[[Any, Path], None]) -> None:
    with h5py.File(src / "data" / "main_data.hdf5", "a") as f:
        change(f["episode_1"], src.parent.parent)


def _soft_cycle(g: Any, _: Path) -> None:
    g["infos"]["loop"] = h5py.SoftLink("/episode_1/infos")


def _external_link(g: Any, outside: Path) -> None:
    g["infos"]["stolen"] = h5py.ExternalLink(str(outside / "outside.hdf5"), "/secret")


def _virtual(g: Any, outside: Path) -> None:
    layout = h5py.VirtualLayout(shape=SECRET.shape, dtype=np.uint8)
    layout[:] = h5py.VirtualSource(str(outside / "outside.hdf5"), "secret", shape=SECRET.shape)
    g["infos"].create_virtual_dataset("stolen", layout)


def _external_raw(g: Any, outside: Path) -> None:
    g["infos"].create_dataset("stolen", shape=SECRET.shape, dtype=np.uint8,
                              external=[(str(outside / "outside.bin"), 0, SECRET.size)])


def _nested(g: Any, _: Path) -> None:
    node = g["infos"]
    for _i in range(1200):
        node = node.create_group("n")
    node.create_dataset("x", data=np.zeros(3))


def _declares_5m_steps(g: Any, _: Path) -> None:
    n = 5_000_000
    for name in list(g):
        del g[name]
    g.create_dataset("rewards", shape=(n,), dtype=np.float64, chunks=(1 << 16,))
    g.create_dataset("terminations", shape=(n,), dtype=bool, chunks=(1 << 16,))
    g.create_dataset("truncations", shape=(n,), dtype=bool, chunks=(1 << 16,))
    obs = g.create_group("observations")
    obs.create_dataset("state", shape=(n + 1, 3), dtype=np.float32, chunks=(1 << 14, 3))


CASES = {
    "soft-link-cycle": (_soft_cycle, PathEscapeError, "soft link"),
    "external-link": (_external_link, PathEscapeError, "external link"),
    "virtual-dataset": (_virtual, PathEscapeError, "virtual dataset"),
    "external-raw-storage": (_external_raw, PathEscapeError, "external raw storage"),
    "1200-nested-groups": (_nested, EpisodeFormatError, "nested deeper"),
    "5M-steps-declared": (_declares_5m_steps, EpisodeFormatError, "but stores"),
}


@pytest.mark.parametrize("case", CASES)
def test_import_refuses(source: Path, tmp_path: Path, case: str) -> None:
    change, error, words = CASES[case]
    _edit(source, change)
    with pytest.raises(error) as e:
        import_minari(source, tmp_path / "out")
    assert words in str(e.value) and "main_data.hdf5" in str(e.value) and "episode_1" in str(e.value)
    assert "SECRET" not in str(e.value) and not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", ["soft-link-cycle", "external-raw-storage", "5M-steps-declared"])
def test_cli_refuses_in_one_line(source: Path, tmp_path: Path, case: str) -> None:
    change, _, words = CASES[case]
    _edit(source, change)
    refused("import", "minari", source, tmp_path / "out", "--quiet", expect=(words, "main_data.hdf5"))


def test_an_external_link_at_the_top_inside_the_folder_is_still_read(source: Path, tmp_path: Path) -> None:
    """What Minari itself writes is not refused: hard links, nested dict spaces."""
    report = import_minari(source, tmp_path / "out")
    assert report.episodes == 2


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_metadata_that_is_not_a_regular_file_is_skipped(source: Path, tmp_path: Path, kind: str) -> None:
    """A FIFO among the metadata files would block the import for ever; a symlink would keep
    another file's bytes in the import."""
    extra = source / "notes.txt"
    if kind == "fifo":
        os.mkfifo(extra)
    else:
        (tmp_path / "id_rsa").write_text("SECRET KEY")
        extra.symlink_to(tmp_path / "id_rsa")
    with pytest.warns(UserWarning, match="notes.txt"):
        import_minari(source, tmp_path / "out")
    kept = [p for p in (tmp_path / "out" / ".nv-meta").rglob("*") if p.is_file()]
    assert all(b"SECRET KEY" not in p.read_bytes() for p in kept)


def test_errors_are_typed(source: Path, tmp_path: Path) -> None:
    _edit(source, _external_link)
    with pytest.raises(ShardstoreError):
        import_minari(source, tmp_path / "out")


def test_an_image_space_that_lies_about_its_shape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Minari 0.5 JPEG-encodes image spaces; rows whose shape differs from the space are read as
    JPEG bytes. Raw pixels under a space claiming another shape must not become '.jpg' parts."""
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    minari_sources.robot("robot/lie-v0", 2)
    src = next((tmp_path / "minari").rglob("main_data.hdf5")).parent.parent
    with h5py.File(src / "data" / "main_data.hdf5", "a") as f:
        for name in f:
            obs = f[name]["observations"]
            n = obs["pixels"].shape[0]
            del obs["pixels"]
            obs.create_dataset("pixels", data=np.full((n, 16, 16, 3), 7, np.uint8))
    with pytest.raises(EpisodeFormatError, match="not a JPEG") as e:
        import_minari(src, tmp_path / "out")
    assert "observations.pixels" in str(e.value)
    refused("import", "minari", src, tmp_path / "out2", "--quiet", expect=("not a JPEG", "pixels"))


def test_an_arrow_buffer_declaring_2_40_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record batch whose buffer length says 1 TiB in a file of a few KB: pyarrow's reader checks
    it against the file; the error names the file, in one line, under 1 GB of address space."""
    import struct

    pa = pytest.importorskip("pyarrow")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    minari_sources.cartpole("cartpole/arrow-v0", 2, data_format="arrow")
    file = sorted((tmp_path / "minari").rglob("*.arrow"))[0]
    with pa.ipc.open_file(pa.memory_map(str(file))) as reader:
        size = reader.get_batch(0).column(reader.schema.get_field_index("rewards")).buffers()[1].size
    data = bytearray(file.read_bytes())
    at = data.find(struct.pack("<q", size), data.find(b"rewards"))
    assert at > 0
    data[at : at + 8] = struct.pack("<q", 1 << 40)
    file.write_bytes(bytes(data))
    src = file.parents[2]
    with pytest.raises(EpisodeFormatError) as e:
        import_minari(src, tmp_path / "out")
    assert file.name in str(e.value) and isinstance(e.value.__cause__, pa.ArrowException | OSError)
    refused("import", "minari", src, tmp_path / "out2", "--quiet", expect=file.name)


@pytest.mark.parametrize(
    "name", ["data/a\\..\\..\\hostile.json", "data/new\nline.json", "../../hostile.json", "/tmp/hostile.json", "data/\x00.json"]
)
def test_export_refuses_a_kept_file_name_that_is_not_plain(source: Path, tmp_path: Path, name: str) -> None:
    """Kept source files are written back by name on export (``.nv-meta/source``, listed in
    ``episodes.sqlite``): the name is the dataset's, so checked before anything is written."""
    import sqlite3

    from shardstore.convert.minari import export_minari

    ds = tmp_path / "ds"
    import_minari(source, ds)
    db = sqlite3.connect(ds / ".nv-meta" / "episodes.sqlite")
    db.execute("INSERT INTO source_files VALUES (?, 2)", (name,))
    db.commit()
    db.close()
    with pytest.raises(PathEscapeError, match="refused"):
        export_minari(ds, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not list(tmp_path.rglob("hostile.json"))
    assert not Path("/tmp/hostile.json").exists()
    refused("export", "minari", ds, tmp_path / "out", expect="refused")
