"""Everything prepare writes, read back for comparison: two prepares that must agree (a resumed one
and an uninterrupted one, an update and a full prepare) compare ``written(a) == written(b)``.

Imported as ``from index_snapshot import written`` (``tests/`` is on ``sys.path``, as for ``ci``).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any


def written(ds: Path) -> dict[str, Any]:
    """``.info.json``, ``split.yaml`` and ``dataset.yaml`` byte for byte, the index's tables row by
    row with their rowids, and the ``.tar.idx`` of every shard ``.info.json`` lists."""
    meta = ds / ".nv-meta"
    out: dict[str, Any] = {n: (meta / n).read_bytes() for n in (".info.json", "split.yaml", "dataset.yaml")}
    con = sqlite3.connect(f"file:{meta / 'index.sqlite'}?mode=ro", uri=True)
    try:
        for table in ("samples", "sample_parts"):
            out[table] = con.execute(f"SELECT rowid, * FROM {table} ORDER BY rowid").fetchall()
    finally:
        con.close()
    out["tar.idx"] = {s: (ds / f"{s}.idx").read_bytes() for s in json.loads(out[".info.json"])["shard_counts"]}
    return out
