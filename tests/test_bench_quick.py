"""The quick benchmark run (``make bench-quick``: tools/bench/all.py --quick) still works end to end.

Tiny data, one run of each benchmark, no targets: what is checked is that every script runs,
writes its JSON with summary rows, and that summary.py turns them into a table and PNG charts.
The peers in venvs of their own (wids, ratarmount) are pointed at paths that do not exist, so the
run must leave them out and say so (the suite never needs those venvs; webdataset 1.0 of the test
venv still runs). The mount step needs FUSE and is left out when FUSE cannot work here (CI must
have it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ci import in_ci

ROOT = Path(__file__).resolve().parents[1]


def _fuse_problem() -> str | None:
    sys.path.insert(0, str(ROOT / "tests" / "mount"))
    from mount_helpers import fuse_problem

    return fuse_problem()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_bench_quick_writes_json_table_and_charts(tmp_path: Path) -> None:
    cmd = [sys.executable, str(ROOT / "tools" / "bench" / "all.py"), "--quick", "--work", str(tmp_path),
           "--shards", "2", "--samples", "50"]
    problem = _fuse_problem()
    if problem is not None:
        if in_ci():
            pytest.fail(f"FUSE unavailable: {problem}")
        cmd += ["--skip", "mount"]
    nowhere = str(tmp_path / "no-such-venv" / "bin" / "x")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               SHARDSTORE_BENCH_WIDS_PYTHON=nowhere, SHARDSTORE_BENCH_RATARMOUNT=nowhere)
    doc = ROOT / "docs" / "benchmarks.md"
    before = doc.stat().st_mtime_ns
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=850)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "wids is not installed" in proc.stderr and "ratarmount is not installed" in proc.stderr
    assert doc.stat().st_mtime_ns == before  # the quick run writes nothing under docs/

    results = tmp_path / "results"
    steps = ["prepare", "read"] + ([] if problem else ["mount"])
    for step in ("episodes", "rlds", "lerobot", "check"):  # the robot-learning benchmarks ran and wrote their figures
        assert json.loads((results / f"{step}.json").read_text()), step
    assert "== import-cluster done" in proc.stdout
    for step in steps:
        data = json.loads((results / f"{step}.json").read_text())
        assert data["summary"], f"{step}.json has no summary rows"
        assert all(row["values"].get("shardstore", 0) > 0 for row in data["summary"]), step
    page = (tmp_path / "summary.md").read_text()
    assert "| random access by position (samples/s) |" in page
    assert "| prepare / index build (s) |" in page
    assert "WebDataset" in page or "webdataset" in page  # webdataset.WebDataset, in the test venv, ran
    charts = sorted(p.name for p in (tmp_path / "img").glob("bench-*.png"))
    assert "bench-reading-random-access-and-in-order.png" in charts and "bench-prepare-and-index-builds.png" in charts
    for name in charts:
        assert (tmp_path / "img" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"(img/{name})" in page
