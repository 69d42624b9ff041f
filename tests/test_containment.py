"""Issue 9 point 1, as an attacker: a dataset whose own files name paths outside it.

Each crafted dataset has a real target outside its folder (a tar holding SECRET, with a valid
.tar.idx), so a reader without the containment rule would serve it. Every reader path must refuse
with ``PathEscapeError`` (CLI: one line, non-zero exit) and never print the secret. S3 keys and the
mount have their own files (tests/s3/test_containment_s3.py, tests/mount/test_mount_containment.py).
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from escape_helpers import SECRET, craft, escapes, make_ds, make_victim, write_tar

import shardstore
from shardstore.cli import main
from shardstore.dataset import Dataset
from shardstore.errors import PathEscapeError
from shardstore.filestores import FolderStore, IndexedTarStore
from shardstore.metadataset import open_metadataset
from shardstore.storage import LocalStorage, contained_path


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """``outside/secret.tar`` (prepared, so its ``.tar.idx`` is valid) beside the datasets."""
    return make_victim(tmp_path / "outside")


ROUTES = ["dotdot", "inner-dotdot", "absolute", "nul", "other-root"]


@pytest.mark.parametrize("route", ROUTES)
def test_python_api_refuses_shard_paths_that_leave_the_dataset(tmp_path: Path, victim: Path, route: str) -> None:
    ds = make_ds(tmp_path / "ds")
    craft(ds, escapes(victim, ds)[route])
    for split in ("train", None):
        with pytest.raises(PathEscapeError) as e:
            shardstore.open(str(ds), split=split)
        assert ".info.json" in str(e.value) and "refused" in str(e.value)
    with pytest.raises(PathEscapeError):
        IndexedTarStore(str(ds))


@pytest.mark.parametrize("command", [["info"], ["ls"], ["cat", "secret.txt"], ["cat", "b0.txt"], ["preview"]])
def test_cli_refuses_with_one_line(tmp_path: Path, victim: Path, command: list[str]) -> None:
    ds = make_ds(tmp_path / "ds")
    craft(ds, escapes(victim, ds)["dotdot"])
    res = CliRunner().invoke(main, [command[0], str(ds), *command[1:]])
    assert res.exit_code != 0
    out = res.output + (res.stderr if res.stderr_bytes is not None else "")
    assert "SECRET" not in out and "Traceback" not in out
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardstore: error:") and "refused" in lines[0], res.stderr


def test_check_reports_the_escape(tmp_path: Path, victim: Path) -> None:
    ds = make_ds(tmp_path / "ds")
    craft(ds, escapes(victim, ds)["absolute"])
    res = CliRunner().invoke(main, ["check", str(ds)])
    assert res.exit_code == 1 and "SECRET" not in res.output


def test_the_storage_layer_refuses_whatever_the_caller(tmp_path: Path, victim: Path) -> None:
    """The rule sits where every reader ends up: a name that leaves the root is never opened."""
    ds = make_ds(tmp_path / "ds")
    storage = LocalStorage(str(ds))
    for name in escapes(victim, ds).values():
        for call in (storage.read, storage.stat, storage.exists, lambda n: storage.read_at(n, 0, 1)):
            with pytest.raises(PathEscapeError):
                call(name)
    assert storage.read("parts/./a.tar")[:5] == (ds / "parts" / "a.tar").read_bytes()[:5]  # lexical, not '..'
    assert contained_path("a..b/c..tar", "/r") == "a..b/c..tar"


def test_split_config_and_brace_patterns_are_contained(tmp_path: Path, victim: Path) -> None:
    ds = make_ds(tmp_path / "ds")
    with pytest.raises(PathEscapeError):
        Dataset(str(ds), split_config="../../outside/.nv-meta/split.yaml")
    (ds / ".nv-meta" / "split.yaml").write_text("split_parts:\n  train: ['parts/{a,../../outside/secret}.tar']\n")
    with pytest.raises(PathEscapeError) as e:  # a brace pattern that expands to an escape
        shardstore.open(str(ds))
    assert "split.yaml" in str(e.value)


def test_symlinks_the_user_made_inside_are_followed(tmp_path: Path) -> None:
    """The rule is lexical: a shard (or folder) that is a symlink to elsewhere is the user's choice."""
    write_tar(tmp_path / "disk2" / "c.tar", {"c0.txt": b"c0", "c1.txt": b"c1"})
    write_tar(tmp_path / "disk3" / "d.tar", {"d0.txt": b"d0"})
    ds = tmp_path / "ds"
    write_tar(ds / "parts" / "a.tar", {"a0.txt": b"a0"})
    os.symlink(tmp_path / "disk2" / "c.tar", ds / "parts" / "c.tar")
    os.symlink(tmp_path / "disk3", ds / "more")
    shardstore.prepare(str(ds), split_ratio="1,0,0", num_workers=1)
    got = shardstore.open(str(ds))
    assert sorted(s["__key__"] for s in got) == ["a0", "c0", "c1", "d0"]
    assert got.read_file("c1.txt") == b"c1" and got.read_file("d0.txt") == b"d0"


# ----- metadatasets ----------------------------------------------------------------------------------
V2 = "__module__: megatron.energon\n__class__: MetadatasetV2\n"


@pytest.fixture
def bundle(tmp_path: Path, victim: Path) -> Callable[[str], Path]:
    """``bundle(splits_yaml) -> yaml path`` in ``bundle/`` holding a good dataset ``ds``; a prepared
    victim dataset and a media folder sit beside the bundle."""
    make_ds(tmp_path / "bundle" / "ds")
    make_ds(tmp_path / "victim_ds")
    (tmp_path / "media").mkdir()
    (tmp_path / "media" / "id_rsa").write_bytes(SECRET)

    def write(splits: str) -> Path:
        path = tmp_path / "bundle" / "m.yaml"
        path.write_text(V2 + textwrap.dedent(splits))
        return path

    return write


@pytest.mark.parametrize(
    ("splits", "key"),
    [
        ("splits:\n  train: {path: ../victim_ds}\n", "splits.train.path"),
        ("splits:\n  train:\n    blend:\n      - {weight: 1, path: ds}\n      - {weight: 1, path: ds/../../victim_ds}\n",
         "splits.train.blend[1].path"),
        ("splits:\n  train: {path: ds, aux: {media: 'filesystem://../media'}}\n", "splits.train.aux.media"),
        ("splits:\n  train: {path: ds, aux: {media: ../victim_ds}}\n", "splits.train.aux.media"),
        ("splits:\n  train: {path: ds, split_config: ../../victim_ds/.nv-meta/split.yaml}\n", "splits.train.split_config"),
        ("splits:\n  train: {path: ds, dataset_config: ../x.yaml}\n", "splits.train.dataset_config"),
        ("splits:\n  train: {path: \"ds\\0\"}\n", "splits.train.path"),
    ],
    ids=["path", "blend-path", "aux-folder", "aux-dataset", "split_config", "dataset_config", "nul"],
)
def test_metadataset_references_stay_in_the_yaml_folder(bundle: Callable[[str], Path], splits: str, key: str) -> None:
    path = bundle(splits)
    with pytest.raises(PathEscapeError) as e:
        open_metadataset(str(path))
    assert str(path) in str(e.value) and key in str(e.value)
    res = CliRunner().invoke(main, ["info", str(path)])
    assert res.exit_code != 0 and "SECRET" not in res.output and "refused" in res.stderr


def test_metadataset_absolute_references_are_the_authors_choice(bundle: Callable[[str], Path], tmp_path: Path) -> None:
    """An absolute path or URL in a YAML is explicit configuration, as in Energon (docs/format.md)."""
    md = open_metadataset(str(bundle(f"splits:\n  train: {{path: {tmp_path / 'victim_ds'}}}\n")))
    assert len(md) == 6


def test_aux_folder_names_from_samples_stay_inside(tmp_path: Path) -> None:
    (tmp_path / "media").mkdir()
    (tmp_path / "media" / "ok.jpg").write_bytes(b"ok")
    (tmp_path / "id_rsa").write_bytes(SECRET)
    store = FolderStore(f"filesystem://{tmp_path / 'media'}")
    assert store["ok.jpg"] == b"ok"
    for name in ("../id_rsa", str(tmp_path / "id_rsa"), "ok.jpg\x00", "a/../../id_rsa"):
        with pytest.raises(PathEscapeError):
            store[name]
