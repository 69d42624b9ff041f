"""The FUSE mount of a dataset on S3 (the local test server of tests/s3: rclone ``serve s3``).

Same checks as locally: every member byte-equal in both layouts and every view, the tools, random
and sequential reads through the read-ahead, EROFS, and no process left after unmounting.
"""

from __future__ import annotations

import errno
import importlib.util
import os
import random
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mount_helpers import MountData, sh

import shardstore
from shardstore.mount import MountHandle
from shardstore.mount.process import _is_mounted

pytestmark = [pytest.mark.mount, pytest.mark.s3]

# The S3 fixtures live in tests/s3/conftest.py; load it here under another module name and take
# every fixture it defines, not a chosen few: those the servers depend on (``_index_cache``, ...)
# come along, whatever they become.
_spec = importlib.util.spec_from_file_location("_s3_fixtures", Path(__file__).resolve().parents[1] / "s3" / "conftest.py")
assert _spec is not None and _spec.loader is not None
_s3 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_s3)


def _is_fixture(value: object) -> bool:
    # pytest >= 8.4 wraps fixtures in FixtureFunctionDefinition; older ones mark the function
    return hasattr(value, "_fixture_function_marker") or hasattr(value, "_pytestfixturefunction")


_S3_FIXTURES = {name: value for name, value in vars(_s3).items() if _is_fixture(value)}
assert {"s3_server", "storage_options", "s3_url", "upload", "msc_profile"} <= _S3_FIXTURES.keys(), sorted(_S3_FIXTURES)
globals().update(_S3_FIXTURES)


@pytest.fixture
def s3_dataset(mount_data: MountData, s3_url: Callable[[str], str], upload: Callable[..., str]) -> str:
    return upload(mount_data.path, s3_url("ds"))


@pytest.mark.parametrize("layout", ["flat", "samples"])
def test_every_member_reads_back_byte_equal_from_s3(
    mount_data: MountData, s3_dataset: str, storage_options: dict[str, Any],
    mounted: Callable[..., MountHandle], layout: str,
) -> None:
    handle = mounted(s3_dataset, layout, storage_options=storage_options)
    mp = Path(handle.mountpoint)
    for m in mount_data.members:
        rel = mount_data.path_of(m, layout)
        for view in (rel, f".by-shard/{m.shard}/{rel}", f".by-split/{mount_data.split_of(m.shard)}/{rel}"):
            assert (mp / view).stat().st_size == len(m.data), view
            assert (mp / view).read_bytes() == m.data, view
    files = int(sh("find . -type f | wc -l", cwd=mp))
    assert files == 3 * len(mount_data.members)


def test_an_msc_url_mounts(
    mount_data: MountData, s3_dataset: str, s3_server: Any, msc_profile: Callable[[str, dict[str, Any]], str],
    mounted: Callable[..., MountHandle],
) -> None:
    """``msc://PROFILE/path`` (Energon's object-store URLs) mounts as the s3:// URL it names does:
    the mount process finds the profile through MSC_CONFIG."""
    pytest.importorskip("multistorageclient", reason="multi-storage-client is not installed (it comes with megatron-energon)")
    profile = msc_profile(s3_server.endpoint, s3_server.storage_options())
    url = f"msc://{profile}/{s3_dataset.split('shardstore-test/', 1)[1]}"
    mp = Path(mounted(url).mountpoint)
    for m in mount_data.members:
        assert (mp / mount_data.path_of(m, "flat")).read_bytes() == m.data, m.name
    assert int(sh("find . -type f | wc -l", cwd=mp)) == 3 * len(mount_data.members)


def test_s3_reads_sequential_and_random(
    mount_data: MountData, s3_dataset: str, storage_options: dict[str, Any], mounted: Callable[..., MountHandle],
    tmp_path: Path,
) -> None:
    """Sequential reads go through the growing read-ahead window, seeks restart it; cp and tar work."""
    mp = Path(mounted(s3_dataset, storage_options=storage_options).mountpoint)
    blob = next(m for m in mount_data.members if m.name == "big/blob.bin")
    with open(mp / blob.name, "rb", buffering=0) as f:
        got = bytearray()
        while chunk := f.read(64 * 1024):
            got += chunk
        assert bytes(got) == blob.data
        rng = random.Random(3)
        for _ in range(40):
            offset, size = rng.randrange(len(blob.data)), rng.choice([1, 100, 4096, 300_000])
            f.seek(offset)
            assert f.read(size) == blob.data[offset : offset + size]
    sh(f"cp -r {mp}/img {tmp_path}/img")
    for m in mount_data.members:
        if m.name.startswith("img/"):
            assert (tmp_path / m.name).read_bytes() == m.data
    listing = subprocess.run(["tar", "c", "pax"], cwd=mp, check=True, capture_output=True).stdout
    assert next(m for m in mount_data.members if m.name.endswith("/leaf.bin")).data in listing


def test_s3_mount_is_read_only_and_unmounts_cleanly(
    s3_dataset: str, storage_options: dict[str, Any], fuse: None, tmp_path: Path
) -> None:
    handle = shardstore.mount(s3_dataset, tmp_path / "m", storage_options=storage_options, mkdir=True)
    try:
        with pytest.raises(OSError) as e:
            open(Path(handle.mountpoint) / "top0.txt", "wb")
        assert e.value.errno == errno.EROFS
        with pytest.raises(OSError) as e:
            os.mkdir(Path(handle.mountpoint) / "new")
        assert e.value.errno == errno.EROFS
    finally:
        pid = handle.pid
        handle.unmount()
    assert not _is_mounted(handle.mountpoint)
    assert not os.path.exists(f"/proc/{pid}")
