"""The wids side of the benchmarks, run by ``tools/bench/peers.py`` with the wids venv's Python.

wids (``webdataset`` 0.2.x, the last is 0.2.111) imports torch and conflicts with webdataset 1.0
of the test venv, so it lives in a venv of its own (``.venv-wids``, made by ``make bench-peers``)
and this script runs there as a subprocess. It imports nothing of shardstore and prints one JSON
object on standard output.

Commands:

- ``index OUT SHARD...``: count each shard's samples the way wids does (``compute_num_samples``:
  an in-memory scan of every header) and write the shard list wids reads (``url``, ``nsamples``,
  ``filesize``) to OUT; prints the scan's seconds. ``widsindex create`` does this plus an MD5 of
  every shard and a copy of it to ``/tmp/shard.tar``; that command is timed on its own by the
  prepare benchmark.
- ``read SHARDLIST JOB``: open ``ShardListDataset(SHARDLIST, transformations=[])`` with an LRU as
  large as the shard count (so no shard is scanned twice) and every shard opened before the clock
  starts (timed apart, as ``open_seconds``), then time JOB's loops: ``position`` (``ds[i]`` for
  JOB's positions), ``key`` (a dict of every key to its position, the way a wids user finds a
  sample by key, built apart as ``key_dict_seconds``; then ``ds[index[key]]``) and ``sequential``
  (``ds[i]`` for every position in order). Each loop runs JOB's ``repeat`` times; best wall and CPU.
  A digest of the first ``check`` samples' parts lets the caller compare bytes with shardstore's.

Example: .venv-wids/bin/python tools/bench/wids_worker.py index /tmp/shards.json /data/parts/*.tar
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from typing import Any


def cmd_index(out: str, shards: list[str]) -> dict[str, Any]:
    import wids

    t0, c0 = time.perf_counter(), time.process_time()
    shardlist = [
        {"url": os.path.abspath(p), "nsamples": wids.wids.compute_num_samples(p), "filesize": os.path.getsize(p)}
        for p in shards
    ]
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    with open(out, "w") as f:
        json.dump({"__kind__": "wids-shard-index-v1", "wids_version": 1, "shardlist": shardlist}, f)
    return {"seconds": seconds, "cpu_seconds": cpu, "shards": len(shards), "samples": sum(s["nsamples"] for s in shardlist)}


def _digest(samples: list[dict[str, Any]]) -> str:
    """Keys and parts (extension without the dot -> bytes) of each sample, in order."""
    h = hashlib.sha256()
    for s in samples:
        h.update(s["__key__"].encode() + b"\0")
        for ext in sorted(k for k in s if not k.startswith("__")):
            h.update(ext.lstrip(".").encode() + b"\0" + s[ext].getvalue() + b"\0")
    return h.hexdigest()


def _timed(fn: Any, items: list[Any], repeat: int) -> dict[str, Any]:
    best_wall = best_cpu = float("inf")
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        for x in items:
            fn(x)
        best_wall = min(best_wall, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    return {"items": len(items), "seconds": best_wall, "cpu_seconds": best_cpu, "runs": repeat}


def cmd_read(shardlist: str, job_file: str) -> dict[str, Any]:
    import wids

    with open(job_file) as f:
        job = json.load(f)
    with open(shardlist) as f:
        shards = json.load(f)["shardlist"]
    t0 = time.perf_counter()
    ds = wids.ShardListDataset(
        shards, transformations=[], lru_size=len(shards), localname=lambda url: url  # local files, no copy
    )
    for start in [0, *ds.cum_lengths[:-1]]:  # scan every shard once, outside the timed loops
        ds[int(start)]
    out: dict[str, Any] = {"open_seconds": time.perf_counter() - t0, "samples": int(len(ds))}
    repeat, check = job["repeat"], job["check"]
    getitem = ds.__getitem__
    if "positions" in job:
        positions = job["positions"]
        out["position_digest"] = _digest([ds[p] for p in positions[:check]])
        out["position"] = _timed(getitem, positions, repeat)
    if "keys" in job:
        t0 = time.perf_counter()
        index: dict[str, int] = {}
        for start, shard in zip([0, *ds.cum_lengths[:-1]], shards, strict=True):
            itf = ds.cache.get_shard(shard["url"])
            names = list(itf.reader.names())
            for i, group in enumerate(itf.samples):
                index[wids.wids.splitname(names[group[0]])[0]] = int(start) + i
        out["key_dict_seconds"] = time.perf_counter() - t0
        keys = job["keys"]
        out["key_digest"] = _digest([ds[index[k]] for k in keys[:check]])
        out["key"] = _timed(lambda k: getitem(index[k]), keys, repeat)
    if job.get("sequential"):
        n = int(len(ds))

        def in_order(count: int) -> None:
            for i in range(count):
                getitem(i)

        out["sequential_digest"] = _digest([ds[p] for p in range(check)])
        out["sequential"] = {**_timed(in_order, [n], repeat), "items": n}
    return out


def main() -> None:
    cmd, *args = sys.argv[1:]
    if cmd == "index":
        result = cmd_index(args[0], args[1:])
    elif cmd == "read":
        result = cmd_read(args[0], args[1])
    else:
        raise SystemExit(f"unknown command {cmd!r} (index, read)")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
