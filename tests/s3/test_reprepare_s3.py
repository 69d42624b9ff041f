"""Issue 9 point 3 on S3: no rename there, so a re-prepare writes ``.tar.idx`` files, then the
``.nv-meta`` files, ``index.uuid`` last (the commit point). A reader that opened the old index and
downloads an index file after the new ``index.uuid`` landed gets ``StaleIndexError``, never another
generation's rows, and nothing of the mix is cached."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from escape_helpers import write_tar

import shardstore
from shardstore.errors import StaleIndexError


def test_a_reader_across_a_remote_reprepare_gets_a_typed_error(
    tmp_path: Path, s3_url: Callable[[str], str], upload: Callable[[Path, str], str], storage_options: dict[str, Any]
) -> None:
    ds = tmp_path / "ds"
    write_tar(ds / "parts" / "a.tar", {f"a{i}.txt": f"a{i}".encode() for i in range(4)})
    write_tar(ds / "parts" / "b.tar", {f"b{i}.txt": f"b{i}".encode() for i in range(4)})
    url = upload(ds, s3_url("ds"))
    shardstore.prepare(url, split_ratio="1,0,0", storage_options=storage_options)
    before = shardstore.open(url, split=None, storage_options=storage_options)
    assert before[5]["txt"] == b"b1"  # .tar.idx of b downloaded and cached under the old uuid
    # re-prepared without a: b becomes tar_file_id 0, the rows of the new index.sqlite say so
    shardstore.prepare(url, split_ratio="1,0,0", exclude="a.tar", force_overwrite=True, storage_options=storage_options)
    with pytest.raises(StaleIndexError, match="re-prepared while this reader used it"):
        before.get("b2")  # index.sqlite downloaded now is of the new generation: refused
    with pytest.raises(StaleIndexError):
        before.get("b2")  # and it was not cached under the old uuid
    after = shardstore.open(url, split=None, storage_options=storage_options)
    assert after.get("b2")["txt"] == b"b2" and len(after) == 4
