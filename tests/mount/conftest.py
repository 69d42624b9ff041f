"""Fixtures for the FUSE mount tests: FUSE present, a dataset with awkward names, mounts.

The tests really mount (mfusepy on libfuse3). They skip, saying why, only when FUSE cannot work
here (no /dev/fuse, no fusermount3, no libfuse3); under CI (``CI=true``) they fail instead.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ci import in_ci
from mount_helpers import MountData, build_dataset, fuse_problem

import shardstore
from shardstore.mount import MountHandle


@pytest.fixture(scope="session")
def fuse() -> None:
    """Skip (or, under CI, fail) when FUSE cannot mount here."""
    problem = fuse_problem()
    if problem is not None:
        if in_ci():
            pytest.fail(f"FUSE unavailable: {problem} -- CI must run the mount tests", pytrace=False)
        pytest.skip(f"FUSE unavailable: {problem}")


@pytest.fixture(scope="session")
def mount_data(tmp_path_factory: pytest.TempPathFactory) -> MountData:
    """The awkward-names dataset, built and prepared once per session."""
    return build_dataset(tmp_path_factory.mktemp("mountdata") / "ds")


@pytest.fixture
def mounted(fuse: None, tmp_path: Path) -> Iterator[Callable[..., MountHandle]]:
    """``mounted(dataset, layout="flat", **kw) -> handle``; every mount is undone after the test."""
    handles: list[MountHandle] = []

    def make(dataset: Any, layout: str = "flat", **kw: Any) -> MountHandle:
        handle = shardstore.mount(dataset, tmp_path / f"mnt{len(handles)}", layout=layout, mkdir=True, **kw)
        handles.append(handle)
        return handle

    yield make
    for handle in handles:
        handle.unmount()


@pytest.fixture(autouse=True)
def _no_mount_left_behind(tmp_path: Path) -> Iterator[None]:
    """Whatever a test does (or fails to do), nothing stays mounted under its folder."""
    yield
    from shardstore.mount import umount
    from shardstore.mount.process import _log_path, _mounted_fuse

    for mp in sorted(_mounted_fuse()):
        if mp.startswith(str(tmp_path) + os.sep):
            try:
                umount(mp, timeout=5)
            except shardstore.ShardstoreError:
                pass
    logs = Path(_log_path(str(tmp_path / "x"))).parent
    stem = Path(_log_path(str(tmp_path / "x"))).name[: -len("x.log")]
    for log in logs.glob(stem + "*.log"):  # the logs of this test's mount points
        log.unlink(missing_ok=True)
