"""Run a shardstore command on a hostile input the way a user would: a CLI subprocess under an
address-space limit (1 GB, ``RLIMIT_AS``) and a time limit, and check the refusal: exit 1 and one
line ``shardstore: error: ...`` on stderr, no traceback. A source that made the command allocate
what it declares (2 GiB, 2**62 bytes) fails the limit with a ``MemoryError`` traceback instead;
one that hangs (a FIFO) fails the time limit."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT_AS = 1 << 30
TIMEOUT = 60


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_AS, LIMIT_AS))


def run(*args: object, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "shardstore.cli", *map(str, args)],
        preexec_fn=_limits, capture_output=True, text=True, timeout=TIMEOUT, env=env, cwd=cwd,
    )


def refused(*args: object, expect: str | tuple[str, ...] = ()) -> str:
    """Run the command; assert exit 1 and one ``shardstore: error:`` line (holding each of
    ``expect``); return that line."""
    res = run(*args)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip() and "Warning" not in ln and not ln.startswith("  ")]
    assert res.returncode == 1, (res.returncode, res.stderr[-3000:])
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("shardstore: error:"), res.stderr[-3000:]
    for word in (expect,) if isinstance(expect, str) else expect:
        assert word in lines[0], (word, lines[0])
    return lines[0]
