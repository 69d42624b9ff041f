"""What the real megatron-energon 7.4.1 does with the inputs of issue 9's point 7, pinned: the
choices shardstore made follow it (or, where Energon crashes, give a clean error instead).

- A member name that is not UTF-8 (latin-1 ustar): ``energon prepare`` fails with a
  ``UnicodeEncodeError`` traceback; shardstore's prepare fails with a one-line ``TarFormatError``.
- A part repeated within one sample: Energon's sample reader returns the last copy (later members
  overwrite earlier ones); shardstore returns the last copy by position, by key and by name.
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from energon_peer import missing_peer

import shardstore
from shardstore.errors import TarFormatError

try:
    import megatron.energon  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    missing_peer(e)

pytestmark = pytest.mark.compat
ENERGON = Path(sys.executable).parent / "energon"


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def test_non_utf8_names_fail_in_energon_and_cleanly_here(tmp_path: Path) -> None:
    for name in ("energon", "shardstore"):
        (tmp_path / name / "s").mkdir(parents=True)
        with tarfile.open(tmp_path / name / "s/a.tar", "w", format=tarfile.USTAR_FORMAT, encoding="latin-1") as tar:
            _add(tar, "ok.txt", b"fine")
            _add(tar, "caf\u00e9.txt", b"latin-1 name")
    res = subprocess.run(
        [str(ENERGON), "prepare", str(tmp_path / "energon"), "--non-interactive", "--no-progress",
         "--split-parts", "train:.*"],
        capture_output=True, text=True, timeout=120,
    )
    assert res.returncode != 0 and "UnicodeEncodeError" in res.stdout + res.stderr
    with pytest.raises(TarFormatError, match="is not UTF-8"):
        shardstore.prepare(str(tmp_path / "shardstore"), split_ratio="1,0,0", num_workers=1)


def test_a_repeated_part_is_the_last_copy_in_energon_too(tmp_path: Path) -> None:
    from megatron.energon.epathlib import EPath
    from megatron.energon.flavors.webdataset.itar_reader import SqliteITarEntryReader

    (tmp_path / "s").mkdir()
    with tarfile.open(tmp_path / "s/a.tar", "w") as tar:
        for name, data in [("a.txt", b"first"), ("a.txt", b"second!"), ("b.txt", b"bee")]:
            _add(tar, name, data)
    shardstore.prepare(str(tmp_path), split_ratio="1,0,0", num_workers=1)
    energon = SqliteITarEntryReader(EPath(str(tmp_path)))["a"]
    assert energon["txt"] == b"second!"
    ds = shardstore.open(str(tmp_path))
    assert ds[0]["txt"] == ds.get("a")["txt"] == ds.read_file("a.txt") == energon["txt"]
