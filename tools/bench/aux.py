"""Aux lookup benchmark: file-by-name reads from a polylithic dataset's stores, against Energon.

Figures (warm page cache, one thread, fixed seed), each as lookups per second:

- indexed tar, one by one: ``IndexedTarStore[name]`` vs Energon's ``WebdatasetFileStore[name]``
  (the store Energon builds for ``aux: {name: dataset}``), both on the same prepared dataset and the
  same random member names (``key.jpg``);
- indexed tar, batched: ``IndexedTarStore.get_many`` of 256 names at a time;
- indexed tar, SQL only: ``IndexedTarStore[name]`` with the name table off
  (``SHARDSTORE_NAME_TABLE_AFTER=-1``): every lookup is the ``samples JOIN sample_parts`` statement;
- folder: ``FolderStore[name]`` vs Energon's ``SystemFileStore[name]`` (``aux: filesystem://...``)
  on a folder holding a few thousand of those members as plain files;
- the floor for each: a bare loop doing only the unavoidable reads (``os.pread`` of each member's
  data range, offsets looked up beforehand; ``open``/``read`` for the folder).

The name table (shardstore/index/names.py) is built before the clock starts, into a fresh
temporary cache folder (``--cache`` to reuse one), and its build time is printed: it is paid once
per index file and machine, not per lookup. All readers are checked to return the same bytes
before anything is timed; each figure is the best
of ``--repeat`` runs, runs interleaved so machine load hits all readers alike. Target (DESIGN.md
section 9): indexed-tar lookups by name >= 5x ``WebdatasetFileStore``.

Example: .venv/bin/python tools/bench/aux.py --data /work/bench-data/read --json aux.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import shardstore  # noqa: E402
from shardstore.filestores import FolderStore, IndexedTarStore  # noqa: E402

DEFAULT_DATA = "/work/bench-data/read"
SEED = 20240601
TARGET = 5.0


def _best(fn: Callable[[], int], runs: list[float], cpu: list[float]) -> None:
    """One timed run: wall time into ``runs``, this process's CPU time into ``cpu``."""
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    runs.append(time.perf_counter() - t0)
    cpu.append(time.process_time() - c0)


def _rates(runs: dict[str, list[float]], cpu: dict[str, list[float]], counts: dict[str, int]) -> dict[str, Any]:
    """Lookups per second of the best run, by wall clock and by CPU time (steadier on a shared machine)."""
    out: dict[str, Any] = {k: counts[k] / min(v) for k, v in runs.items()}
    out["cpu"] = {k: counts[k] / max(min(v), 1e-9) for k, v in cpu.items()}
    return out


def _race(fns: dict[str, Callable[[], int]], repeat: int, counts: dict[str, int]) -> dict[str, Any]:
    """Run every reader ``repeat`` times, the runs interleaved (so a slow spell of the machine hits
    all of them alike), and turn the best times into lookups/s over ``counts`` lookups."""
    runs: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            _best(fn, runs[k], cpu[k])
    return _rates(runs, cpu, counts)


def _get_many_bytes(store: Any, names: list[str], batch: int = 256) -> int:
    """Bytes read through ``store.get_many`` a batch of names at a time."""
    return sum(len(b) for i in range(0, len(names), batch) for b in store.get_many(names[i : i + batch]))


def pick_names(ds: shardstore.Dataset, n: int, part: str) -> list[str]:
    """``n`` random member names ``key.part`` (distinct keys) of the dataset."""
    keys = list(ds.keys())
    return [f"{k}.{part}" for k in random.Random(SEED).sample(keys, min(n, len(keys)))]


def indexed_tar(data: str, names: list[str], energon_names: int, repeat: int) -> dict[str, Any]:
    from megatron.energon.cache.file_store import WebdatasetFileStore
    from megatron.energon.epathlib import EPath

    ours = IndexedTarStore(data)
    c0, t0 = time.process_time(), time.perf_counter()
    assert ours.dataset.index.use_name_table(), "no name table: see the log"
    build = {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}
    old = os.environ.get("SHARDSTORE_NAME_TABLE_AFTER")
    os.environ["SHARDSTORE_NAME_TABLE_AFTER"] = "-1"  # read when the store's index opens
    try:
        sql = IndexedTarStore(data)
        sql.dataset.index  # noqa: B018
    finally:
        if old is None:
            del os.environ["SHARDSTORE_NAME_TABLE_AFTER"]
        else:
            os.environ["SHARDSTORE_NAME_TABLE_AFTER"] = old
    theirs = WebdatasetFileStore(EPath(data))
    spans = ours._locate_many(names)  # (shard, range) per name, for the floor loop
    fds = {shard: os.open(os.path.join(data, shard), os.O_RDONLY) for shard in {s for s, _ in spans}}  # type: ignore[misc]
    plan = [(fds[s], r.size, r.offset) for s, r in spans]  # type: ignore[misc]
    sub = names[:energon_names]

    def floor() -> int:
        return sum(len(os.pread(fd, size, off)) for fd, size, off in plan)

    def one_by_one() -> int:
        return sum(len(ours[n]) for n in names)

    def batched() -> int:
        return _get_many_bytes(ours, names)

    def sql_only() -> int:
        return sum(len(sql[n]) for n in names)

    def energon() -> int:
        return sum(len(theirs[n][0]) for n in sub)

    floor()  # warm the page cache with exactly the bytes every reader reads
    check = names[:200]
    assert [ours[n] for n in check] == [theirs[n][0] for n in check] == [os.pread(*p) for p in plan[:200]]
    assert ours.get_many(check) == [ours[n] for n in check] == [sql[n] for n in check]
    assert ours.dataset.index._find is not None and sql.dataset.index._find is None
    fns = {"floor": floor, "one_by_one": one_by_one, "batched": batched, "sql_only": sql_only, "energon": energon}
    counts = {k: len(names) for k in fns}
    counts["energon"] = len(sub)
    rates = _race(fns, repeat, counts)
    rates["build"] = build
    for fd in fds.values():
        os.close(fd)
    return rates


def folder(data: str, names: list[str], repeat: int) -> dict[str, Any]:
    from megatron.energon.cache.file_store import SystemFileStore
    from megatron.energon.epathlib import EPath

    tmp = tempfile.mkdtemp(prefix="shardstore-bench-aux-")
    try:
        src = IndexedTarStore(data)
        rel = [f"{n[:6]}/{n}" for n in names]  # a folder per shard, as media folders usually are
        for name, path in zip(names, rel, strict=True):
            os.makedirs(os.path.join(tmp, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(tmp, path), "wb") as f:
                f.write(src[name])
        ours = FolderStore(tmp)
        theirs = SystemFileStore(EPath(tmp))
        full = [os.path.join(tmp, p) for p in rel]

        def floor() -> int:
            n = 0
            for p in full:
                with open(p, "rb") as f:
                    n += len(f.read())
            return n

        def one_by_one() -> int:
            return sum(len(ours[p]) for p in rel)

        def batched() -> int:
            return _get_many_bytes(ours, rel)

        def energon() -> int:
            return sum(len(theirs[p][0]) for p in rel)

        floor()
        assert [ours[p] for p in rel[:100]] == [theirs[p][0] for p in rel[:100]]
        fns = {"floor": floor, "one_by_one": one_by_one, "batched": batched, "energon": energon}
        return _race(fns, repeat, {k: len(rel) for k in fns})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=DEFAULT_DATA, help="a prepared dataset (default: the shared read data)")
    ap.add_argument("--lookups", type=int, default=20_000, help="random member names looked up per run")
    ap.add_argument("--energon-lookups", type=int, default=5_000, help="of those, how many Energon looks up per run")
    ap.add_argument("--folder-files", type=int, default=5_000, help="files in the folder-store comparison")
    ap.add_argument("--part", default="jpg", help="which part of each sample is the 'media' file")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--cache", help="SHARDSTORE_CACHE for the name table (default: a fresh temporary folder)")
    args = ap.parse_args()
    tmp_cache = None if args.cache else tempfile.mkdtemp(prefix="shardstore-bench-aux-cache-")
    os.environ["SHARDSTORE_CACHE"] = args.cache or tmp_cache  # type: ignore[assignment]
    try:
        run(args)
    finally:
        if tmp_cache:
            shutil.rmtree(tmp_cache, ignore_errors=True)


def run(args: argparse.Namespace) -> None:
    """The figures, with ``SHARDSTORE_CACHE`` already set."""
    ds = shardstore.open(args.data, split=None)
    names = pick_names(ds, args.lookups, args.part)
    print(f"data: {args.data} ({len(ds)} samples, {len(ds.shards)} shards); {len(names)} random names, best of {args.repeat}")
    tar = indexed_tar(args.data, names, args.energon_lookups, args.repeat)
    fold = folder(args.data, names[: args.folder_files], args.repeat)
    for clock, pick in (("wall clock", lambda d: d), ("CPU time", lambda d: d["cpu"])):
        t, f = pick(tar), pick(fold)
        rows = [
            ("indexed tar, one by one", t["one_by_one"], t["energon"], t["floor"]),
            ("indexed tar, get_many(256)", t["batched"], t["energon"], t["floor"]),
            ("indexed tar, SQL only", t["sql_only"], t["energon"], t["floor"]),
            ("folder, one by one", f["one_by_one"], f["energon"], f["floor"]),
            ("folder, get_many(256)", f["batched"], f["energon"], f["floor"]),
        ]
        print(f"lookups/s, {clock:<17} {'shardstore':>11} {'energon':>11} {'floor':>11} {'x energon':>10} {'% floor':>8}")
        for label, ours, theirs, floor in rows:
            print(f"  {label:<26} {ours:>11,.0f} {theirs:>11,.0f} {floor:>11,.0f} {ours / theirs:>9.1f}x {100 * ours / floor:>7.0f}%")
    b = tar["build"]
    print(f"name table built in {b['wall']:.2f} s wall, {b['cpu']:.2f} s CPU (once per index file and machine)")
    ratio = tar["one_by_one"] / tar["energon"]
    verdict = "meets" if ratio >= TARGET else "MISSES"
    print(f"target: indexed-tar lookups by name >= {TARGET:g}x WebdatasetFileStore: {ratio:.1f}x wall, "
          f"{tar['cpu']['one_by_one'] / tar['cpu']['energon']:.1f}x CPU ({verdict})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"indexed_tar": tar, "folder": fold, "ratio": ratio, "target": TARGET, "lookups": len(names)}, f, indent=2)


if __name__ == "__main__":
    main()
