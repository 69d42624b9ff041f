"""Crafted datasets whose own files name paths outside them (issue 9 point 1), for the
containment tests of every reader: tests/test_containment.py, tests/s3/, tests/mount/."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import shardstore

SECRET = b"SECRET-outside-the-dataset"


def write_tar(path: Path, members: dict[str, bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


def make_ds(root: Path) -> Path:
    write_tar(root / "parts" / "a.tar", {f"a{i}.txt": f"a{i}".encode() for i in range(3)})
    write_tar(root / "parts" / "b.tar", {f"b{i}.txt": f"b{i}".encode() for i in range(3)})
    shardstore.prepare(str(root), split_ratio="1,0,0", num_workers=1)
    return root


def craft(ds: Path, evil: str) -> None:
    """Rename shard ``parts/b.tar`` to ``evil`` in .info.json and split.yaml (the index rows keep
    its tar_file_id, so a reader following the name reads ``evil`` at b's offsets)."""
    meta = ds / ".nv-meta"
    info = json.loads((meta / ".info.json").read_text())
    info["shard_counts"] = {(evil if k == "parts/b.tar" else k): v for k, v in info["shard_counts"].items()}
    (meta / ".info.json").write_text(json.dumps(info, indent=2))
    (meta / "split.yaml").write_text(
        "split_parts:\n  train:\n  - parts/a.tar\n  - " + json.dumps(evil) + "\n  val: []\n  test: []\nexclude: []\n"
    )


def escapes(victim: Path, ds: Path) -> dict[str, str]:
    return {
        "dotdot": os.path.relpath(victim, ds),
        "inner-dotdot": "parts/../" + os.path.relpath(victim, ds),
        "absolute": str(victim),
        "nul": "parts/b.tar\x00" + str(victim),
        "other-root": "file://" + str(victim),
    }




def make_victim(folder: Path) -> Path:
    """``folder/secret.tar`` holding SECRET, prepared (its ``.tar.idx`` is valid): what an escape reads."""
    write_tar(folder / "secret.tar", {"secret.txt": SECRET, "secret2.txt": SECRET})
    shardstore.prepare(str(folder), split_ratio="1,0,0", num_workers=1)
    return folder / "secret.tar"
