"""Hostile RLDS folders and kept RLDS metadata: names and templates that leave OUT or the source,
a TFRecord length of 2**62 with a valid CRC, features.json nested 3,000 deep. Each one refused by
the CLI under 1 GB of address space (hostile_cli)."""

from __future__ import annotations

import json
import os
import struct
import sys
from pathlib import Path

import pytest
from hostile_cli import ROOT, refused

sys.path.insert(0, str(ROOT / "tests" / "convert"))
from rlds_source import masked, write_rlds_source  # noqa: E402

from shardstore.convert.rlds import export_rlds, import_rlds  # noqa: E402
from shardstore.errors import ConfigError, PathEscapeError  # noqa: E402

NAMES = {  # each a name no writer may put on disk or reader open
    "absolute": "/tmp/hostile-abs",
    "dotdot": "../../hostile-up",
    "backslash": "..\\..\\hostile-bs",
    "newline": "robo\nname",
    "nul": "robo\x00x",
}


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rlds") / "robo" / "1.0.0"
    write_rlds_source(root)
    return root


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def _edit_info(folder: Path, edit: object) -> None:
    path = folder / "dataset_info.json"
    info = json.loads(path.read_text())
    edit(info)  # type: ignore[operator]
    path.write_text(json.dumps(info))


WHERE_IMPORT = ["template", "name", "split"]


def _bad_info(where: str, bad: str):  # type: ignore[no-untyped-def]
    def edit(info: dict) -> None:
        if where == "template":
            for s in info["splits"]:
                s["filepathTemplate"] = bad + "-{SHARD_X_OF_Y}"
        elif where == "name":
            info["name"] = bad
        else:
            info["splits"][0]["name"] = bad

    return edit


def test_import_refuses_names_that_leave_the_source(source: Path, tmp_path: Path) -> None:
    """Every route x every place, through the Python API (typed error, nothing written)."""
    for route, bad in NAMES.items():
        for where in WHERE_IMPORT:
            src = _copy(source, tmp_path / f"src-{route}-{where}")
            _edit_info(src, _bad_info(where, bad))
            with pytest.raises(PathEscapeError) as e:
                import_rlds(str(src), str(tmp_path / "out"))
            assert "dataset_info.json" in str(e.value), (route, where, e.value)
            assert not (tmp_path / "out").exists()
    assert not list(Path("/tmp").glob("hostile-*"))


def test_cli_import_refuses_an_absolute_template(source: Path, tmp_path: Path) -> None:
    src = _copy(source, tmp_path / "src")
    _edit_info(src, _bad_info("template", "/tmp/hostile-abs"))
    refused("import", "rlds", src, tmp_path / "out", "--quiet", expect=("dataset_info.json", "refused"))


@pytest.fixture(scope="module")
def imported(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("imp") / "ds"
    import_rlds(str(source), str(out))
    return out


def test_export_refuses_kept_names_that_leave_out(imported: Path, tmp_path: Path) -> None:
    """The kept dataset_info.json (``.nv-meta/source/``) is the dataset's own file: an export
    takes names from it, so it is checked like a source."""
    victim = tmp_path / "victim"
    victim.write_text("keep")
    for route, bad in NAMES.items():
        for where in ("template", "name"):
            ds = _copy(imported, tmp_path / f"ds-{route}-{where}")
            _edit_info(ds / ".nv-meta" / "source", _bad_info(where, bad))
            with pytest.raises(PathEscapeError):
                export_rlds(str(ds), str(tmp_path / "out"))
            assert not (tmp_path / "out").exists()
    assert victim.read_text() == "keep"
    assert not list(Path("/tmp").glob("hostile-*")) and not (tmp_path.parent / "hostile-up").exists()


def test_cli_export_refuses_a_dotdot_dataset_name(imported: Path, tmp_path: Path) -> None:
    ds = _copy(imported, tmp_path / "ds")
    _edit_info(ds / ".nv-meta" / "source", _bad_info("name", "../../hostile-up"))
    refused("export", "rlds", ds, tmp_path / "out", expect=("dataset_info.json", "refused"))


def test_export_refuses_a_split_name_that_is_a_path(imported: Path, tmp_path: Path) -> None:
    """Split names come from the store's split.yaml and become shard file names."""
    ds = _copy(imported, tmp_path / "ds")
    split = ds / ".nv-meta" / "split.yaml"
    split.write_text(split.read_text().replace("train:", "../../hostile-split:"))
    with pytest.raises(PathEscapeError):
        export_rlds(str(ds), str(tmp_path / "out"))
    assert not (tmp_path.parent / "hostile-split.0.part").exists()


def test_a_tfrecord_length_of_2_62_with_a_valid_crc(source: Path, tmp_path: Path) -> None:
    src = _copy(source, tmp_path / "src")
    shard = sorted(src.glob("*.tfrecord-*"))[0]
    n = struct.pack("<Q", 1 << 62)
    shard.write_bytes(n + struct.pack("<I", masked(n)) + b"\0" * 64)
    refused("import", "rlds", src, tmp_path / "out", "--quiet", expect=(shard.name, "record 0", "truncated"))


def test_features_json_nested_3000_deep(source: Path, tmp_path: Path) -> None:
    src = _copy(source, tmp_path / "src")
    deep = '{"featuresDict": {"features": {"x": ' * 3000 + '{"tensor": {}}' + "}}}" * 3000
    (src / "features.json").write_text(deep)  # json.dumps itself cannot nest this deep
    refused("import", "rlds", src, tmp_path / "out", "--quiet", expect="features.json")


def test_features_json_nested_60_deep(source: Path, tmp_path: Path) -> None:
    src = _copy(source, tmp_path / "src")
    features = json.loads((src / "features.json").read_text())
    node: dict = {"tensor": {"shape": {}, "dtype": "float32"}}
    for _ in range(60):
        node = {"featuresDict": {"features": {"x": node}}}
    features["featuresDict"]["features"]["deep"] = node
    (src / "features.json").write_text(json.dumps(features))
    refused("import", "rlds", src, tmp_path / "out", "--quiet", expect=("features.json", "nested"))


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_metadata_that_is_not_a_regular_file(source: Path, tmp_path: Path, kind: str) -> None:
    src = _copy(source, tmp_path / "src")
    info = src / "features.json"
    (tmp_path / "elsewhere.json").write_bytes(info.read_bytes())
    info.unlink()
    if kind == "fifo":
        os.mkfifo(info)
    else:
        info.symlink_to(tmp_path / "elsewhere.json")
    with pytest.warns(UserWarning, match="features.json"), pytest.raises(ConfigError, match="regular file"):
        import_rlds(str(src), str(tmp_path / "out"))
