"""RLDS from a bucket: `import rlds` and `check rlds` read a TFDS folder through fsspec (real local S3
server), with the same result as from disk."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "convert"))
from rlds_source import write_rlds_source  # noqa: E402

import shardstore  # noqa: E402
from shardstore.convert.rlds import import_rlds  # noqa: E402
from shardstore.convert.rlds.check import check_rlds  # noqa: E402

pytestmark = pytest.mark.s3


def test_import_and_check_from_s3(
    tmp_path: Path, s3_url: Callable[[str], str], upload: Any, storage_options: dict[str, Any]
) -> None:
    src = tmp_path / "robo" / "1.0.0"
    write_rlds_source(src)
    url = upload(src, s3_url("robo/1.0.0"))
    report = import_rlds(url, str(tmp_path / "ds"), storage_options=storage_options)
    assert (report.episodes, report.steps) == (7, 20)
    import_rlds(str(src), str(tmp_path / "ds_local"))
    a, b = shardstore.episodes(str(tmp_path / "ds")), shardstore.episodes(str(tmp_path / "ds_local"))
    for e in range(len(b)):
        assert a[e].steps["observation.wrist"] == b[e].steps["observation.wrist"]
        assert (a[e].steps["action"] == b[e].steps["action"]).all()
    check = check_rlds(url, storage_options=storage_options)
    assert check.ok and check.splits["train"] == {"episodes": 5, "steps": 15, "shards": 3}
