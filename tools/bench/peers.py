"""The tools a user would pick instead of shardstore, found and driven for the benchmarks.

- wids (``webdataset`` 0.2.111's indexed random access) in the venv ``.venv-wids`` (it imports
  torch and conflicts with webdataset 1.0 of the test venv): driven through
  ``tools/bench/wids_worker.py``, which prints JSON;
- ratarmount (a FUSE mount of tar files through its own SQLite index) in ``.venv-ratarmount``;
- ``webdataset.WebDataset`` (1.0, in the test venv) for sequential raw iteration.

``make bench-peers`` makes both venvs. A peer that is not installed is skipped with a message
saying so (``missing``), never an error, so the quick run of the test suite needs neither venv.
``SHARDSTORE_BENCH_WIDS_PYTHON`` and ``SHARDSTORE_BENCH_RATARMOUNT`` point elsewhere (e.g. venvs
under /work/venvs).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
WIDS_WORKER = Path(__file__).resolve().parent / "wids_worker.py"


def wids_python() -> str | None:
    """The Python of the wids venv, or None when there is none."""
    path = os.environ.get("SHARDSTORE_BENCH_WIDS_PYTHON") or str(ROOT / ".venv-wids" / "bin" / "python")
    return path if os.path.exists(path) else None


def ratarmount_bin() -> str | None:
    """The ratarmount command of its venv, or None when there is none."""
    path = os.environ.get("SHARDSTORE_BENCH_RATARMOUNT") or str(ROOT / ".venv-ratarmount" / "bin" / "ratarmount")
    return path if os.path.exists(path) else None


def widsindex_bin() -> str | None:
    """``widsindex`` beside the wids venv's Python (its own index build command)."""
    py = wids_python()
    path = os.path.join(os.path.dirname(py), "widsindex") if py else ""
    return path if py and os.path.exists(path) else None


def missing(peer: str, what: str) -> str:
    """Say once, on stderr, that ``peer`` is not installed and what is left out; returns the note."""
    note = f"{peer} is not installed (make bench-peers): {what} left out"
    print(f"note: {note}", file=sys.stderr, flush=True)
    return note


def sample_digest(samples: list[Any]) -> str:
    """The digest ``wids_worker._digest`` makes of the same samples, from shardstore's ``Sample``s
    (or webdataset's dicts): key, then each part's name and bytes in name order."""
    h = hashlib.sha256()
    for s in samples:
        h.update(s["__key__"].encode() + b"\0")
        for part in sorted(k for k in s if not k.startswith("__")):
            h.update(part.encode() + b"\0" + bytes(s[part]) + b"\0")
    return h.hexdigest()


def run_wids(args: list[str], timeout: float = 3600) -> dict[str, Any]:
    """Run the wids worker with the wids venv's Python; its JSON answer."""
    py = wids_python()
    assert py is not None
    proc = subprocess.run([py, str(WIDS_WORKER), *args], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"wids worker failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def wids_read(shardlist: str, job: dict[str, Any]) -> dict[str, Any]:
    """``wids_worker.py read`` on ``job`` (positions, keys, sequential, repeat, check)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(job, f)
    try:
        return run_wids(["read", shardlist, f.name])
    finally:
        os.unlink(f.name)


def ratarmount_cmd(tars: list[str], index_dir: str, *extra: str) -> list[str]:
    """ratarmount over ``tars`` (a union mount when several) with its indexes in ``index_dir``;
    every shard gets an index file (``--index-minimum-file-count 0``), as on a large dataset."""
    exe = ratarmount_bin()
    assert exe is not None
    return [exe, "--index-folders", index_dir, "--index-minimum-file-count", "0", *extra, *tars]


def is_mounted(mp: str) -> bool:
    """Whether ``mp`` is a mount point now (from /proc/self/mountinfo: no stat of a mount that
    may not answer yet)."""
    target = os.path.realpath(mp)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4].encode().decode("unicode_escape") == target for line in f)


@contextmanager
def ratarmount_mount(tars: list[str], mp: str, index_dir: str, fresh: bool = True) -> Iterator[int]:
    """ratarmount in the foreground on ``mp``; yields its pid once the mount is up. ``fresh``
    removes ``index_dir`` first, so its index build is counted in the time to be ready."""
    if fresh:
        shutil.rmtree(index_dir, ignore_errors=True)
    os.makedirs(index_dir, exist_ok=True)
    os.makedirs(mp, exist_ok=True)
    proc = subprocess.Popen(
        [*ratarmount_cmd(tars, index_dir, "-f"), mp], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 1800
        while not is_mounted(mp):
            if proc.poll() is not None:
                raise RuntimeError(f"ratarmount exited with {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"ratarmount: {mp} not mounted after 1800 s")
            time.sleep(0.01)
        yield proc.pid
    finally:
        subprocess.run(["fusermount3", "-u", mp], check=False, capture_output=True)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def load_bench(name: str) -> Any:
    """Another script of tools/bench as a module (``prepare``'s name would clash with
    ``shardstore.prepare`` on ``sys.path``), e.g. for its ``write_json``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"shardstore_bench_{name}", Path(__file__).parent / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module
