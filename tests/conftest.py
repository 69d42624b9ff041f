"""Fixtures shared by the whole suite: small synthetic datasets made in the test's temp folder."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from leftovers import pytest_sessionfinish  # noqa: E402, F401  (a run that leaves a process behind fails)
from make_dataset import make_dataset  # noqa: E402


@pytest.fixture
def make_shards(tmp_path: Path) -> Callable[..., Path]:
    """``make_shards(shards=3, samples=20, **kw) -> folder`` of synthetic shards (not prepared)."""

    def make(shards: int = 3, samples: int = 20, name: str = "ds", **kw: object) -> Path:
        out = tmp_path / name
        make_dataset(str(out), shards=shards, samples=samples, **kw)  # type: ignore[arg-type]
        return out

    return make


@pytest.fixture
def prepared(make_shards: Callable[..., Path]) -> Path:
    """A prepared 4-shard x 25-sample dataset (split 8,1,1 -> train has 3 shards)."""
    import shardstore

    path = make_shards(shards=4, samples=25)
    shardstore.prepare(str(path), split_ratio="8,1,1", num_workers=1)
    return path


@pytest.fixture
def record_preads(monkeypatch: pytest.MonkeyPatch) -> Callable[[], list[tuple[int, int]]]:
    """``record_preads() -> reads``: from that call until the test ends, ``reads`` gets the
    (size, offset) of every ``os.pread``, whoever issues it. Called after a test's warm-up reads,
    so a test counts only the reads it means to."""

    def start() -> list[tuple[int, int]]:
        reads: list[tuple[int, int]] = []
        real = os.pread

        def spy(fd: int, size: int, offset: int) -> bytes:
            reads.append((size, offset))
            return real(fd, size, offset)

        monkeypatch.setattr(os, "pread", spy)
        return reads

    return start
