"""Flat listings read in C (``_fusefast.names_page``) list exactly what the Python path lists,
in the same order: keys out of tar order across shards, subfolders among plain keys (C stops at
each, Python lists it), a repeated member, multi-dot parts, non-ASCII names, invalid names, and
pages cut small so every boundary case meets a page end. No FUSE needed: this is the tree."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from ci import in_ci

import shardstore
from shardstore.dataset import Dataset
from shardstore.mount import tree as mount_tree
from shardstore.mount.tree import Tree

# key order interleaves the shards; "k001/..." and "m/..." are subfolders among plain keys
SHARDS = {
    "s/a.tar": ["k003.jpg", "k003.txt", "k001.jpg", "k001.txt", "k001/x.txt", "k001/y/z.txt", "k006.a.b.c", "rep.txt",
                "rep.txt", "ünï/çödé.txt", "ünï.txt"],
    "s/b.tar": ["k000.jpg", "k002.jpg", "k002.json", "k0010.txt", "m/1.txt", "m/2.txt", "n.m/o.txt", "n.m.txt",
                "./dot.txt", "/abs.txt", "k005.cls", *(f"many/{i:03d}.{p}" for i in range(40) for p in ("a", "bb"))],
}


def _build(root: Path) -> Path:
    for shard, names in SHARDS.items():
        path = root / shard
        path.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
            for i, name in enumerate(names):
                data = f"{shard}:{i}".encode()
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    shardstore.prepare(str(root), split_parts=["train:s/a.tar", "val:s/b.tar"], num_workers=1, progress=False)
    return root


@pytest.fixture(scope="module")
def names_ds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory.mktemp("names") / "ds")


@pytest.fixture(autouse=True)
def _needs_helper() -> None:
    if mount_tree._fast is None or not hasattr(mount_tree._fast, "names_page"):
        if in_ci():
            pytest.fail("shardstore._fusefast is not built: CI must test the compiled listing", pytrace=False)
        pytest.skip("shardstore._fusefast is not built here (no C compiler at install)")


def _walk(tree: Tree, path: str = "/") -> Iterator[tuple[str, list[tuple[str, bool]]]]:
    """(folder, its listing) for every folder of the tree, depth first."""
    entries = list(tree.listdir(path))
    yield path, entries
    for name, is_dir in entries:
        if is_dir:
            yield from _walk(tree, f"{path.rstrip('/')}/{name}")


def _python_tree(ds: Path, monkeypatch: pytest.MonkeyPatch) -> Tree:
    with monkeypatch.context() as m:
        m.setattr(mount_tree, "_fast", None)
        tree = Tree(Dataset(str(ds), None), "flat")
    assert tree._c_names is None
    return tree


@pytest.mark.parametrize(("names_page", "page"), [(4096, 512), (1, 2), (2, 3), (3, 1)])
def test_c_listing_equals_python_listing(
    names_ds: Path, monkeypatch: pytest.MonkeyPatch, names_page: int, page: int
) -> None:
    monkeypatch.setattr(mount_tree, "NAMES_PAGE", names_page)
    monkeypatch.setattr(mount_tree, "PAGE", page)
    c_tree = Tree(Dataset(str(names_ds), None), "flat")
    walked = dict(_walk(c_tree))
    assert walked == dict(_walk(_python_tree(names_ds, monkeypatch)))
    root = [name for name, _ in walked["/"]]
    assert root[:2] == [".by-shard", ".by-split"]
    assert root.count("rep.txt") == 1  # a repeated member is one file
    assert {"k001", "m", "n.m", "many", "ünï"} <= {name for name, is_dir in walked["/"] if is_dir}
    assert {"k003.jpg", "k002.json", "k006.a.b.c", "ünï.txt", "n.m.txt"} <= set(root)
    assert not {"abs.txt", "dot.txt", "", ".", ".."} & set(root)
    order = [root.index(f"k00{i}.{p}") for i, p in ((0, "jpg"), (1, "jpg"), (2, "jpg"), (3, "jpg"), (5, "cls"))]
    assert order == sorted(order)  # key order, not tar order
    assert [name for name, _ in walked["/many"]] == [f"{i:03d}.{p}" for i in range(40) for p in ("a", "bb")]
    files = sum(1 for entries in walked.values() for _, is_dir in entries if not is_dir)
    assert files == 3 * (sum(len(set(n)) for n in SHARDS.values()) - 2)  # root + .by-shard + .by-split; 2 invalid


def test_c_pages_are_used_and_stay_small(names_ds: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The root's plain files come as C pages (NUL-ended names), at most NAMES_PAGE samples each."""
    monkeypatch.setattr(mount_tree, "NAMES_PAGE", 2)
    tree = Tree(Dataset(str(names_ds), None), "flat")
    pages = list(tree.listdir_pages("/many"))
    blobs = [names for names, _ in pages if isinstance(names, bytes)]
    assert len(blobs) == 40 // 2 and all(names.count(b"\0") == 4 for names in blobs)
    assert all(isinstance(names, list) for names, _ in tree.listdir_pages("/.by-split/val"))  # filtered views: Python
