"""Issue 9 point 1 through the mount: a dataset (or metadataset) whose own files name paths outside
it is refused before anything is mounted; the secret never appears under the mount point."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from escape_helpers import craft, escapes, make_ds, make_victim

from shardstore.errors import MountError, PathEscapeError
from shardstore.mount import MountHandle
from shardstore.mount.process import _is_mounted


def _cli(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shardstore.cli", *map(str, args)], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("route", ["dotdot", "absolute"])
def test_mount_refuses_a_dataset_that_names_outside_files(
    fuse: None, tmp_path: Path, mounted: Callable[..., MountHandle], route: str
) -> None:
    victim = make_victim(tmp_path / "outside")
    ds = make_ds(tmp_path / "ds")
    craft(ds, escapes(victim, ds)[route])
    with pytest.raises((MountError, PathEscapeError)) as e:  # refused before mounting, and said why
        mounted(str(ds))
    assert "refused" in str(e.value) and ".info.json" in str(e.value)
    mp = tmp_path / "mp"
    done = _cli("mount", ds, mp)
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("shardstore: error:") and "refused" in line
    assert not _is_mounted(str(mp))


def test_mount_refuses_a_metadataset_that_leaves_its_folder(fuse: None, tmp_path: Path) -> None:
    make_ds(tmp_path / "victim_ds")
    make_ds(tmp_path / "bundle" / "ds")
    yaml = tmp_path / "bundle" / "m.yaml"
    yaml.write_text("__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train: {path: ../victim_ds}\n")
    mp = tmp_path / "mp"
    done = _cli("mount", yaml, mp)
    assert done.returncode == 1 and "refused" in done.stderr, done.stderr
    assert not _is_mounted(str(mp))
