"""Fixtures shared by the whole suite: small synthetic datasets made in the test's temp folder."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from leftovers import pytest_sessionfinish  # noqa: E402, F401  (a run that leaves a process behind fails)
from make_dataset import make_dataset  # noqa: E402

# A run started in the background from a non-interactive shell (`make test &`, nohup, some CI
# runners) has SIGINT ignored, and an ignored signal survives exec: Python in every child would then
# install no KeyboardInterrupt handler, and the Ctrl-C a test sends would be lost (the prepare runs
# on, the test times out). The test process takes Python's handler back; its children start with
# the default disposition whatever started the run.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

_POLICY = os.sched_getscheduler(0), os.sched_getparam(0).sched_priority


@pytest.fixture(autouse=True)
def _scheduling_policy_unchanged() -> Iterator[None]:
    """No test may leave the test process with another scheduling policy: SVT-AV1 as root switches
    the thread opening an encoder to SCHED_FIFO 99 (shardstore.episodes.video.scheduling_kept), and
    every process the suite starts after would inherit it; CPU-bound real-time processes of equal
    priority never yield, which once hung a whole run. The policy is put back and the test fails."""
    yield
    after = os.sched_getscheduler(0), os.sched_getparam(0).sched_priority
    if after != _POLICY:  # also what a module fixture of this test did
        os.sched_setscheduler(0, _POLICY[0], os.sched_param(_POLICY[1]))
        pytest.fail(f"the test left the process under scheduling policy {after} (was {_POLICY}): "
                    "wrap video encoders in shardstore.episodes.video.scheduling_kept()", pytrace=False)


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
