"""Episode reads over S3 for the benchmarks that compare store layouts (``episodes.py``,
``lerobot.py``): each imported dataset is served by the local S3 server (tools/s3server.py: rclone;
the datasets' common parent folder is its root, each dataset folder a bucket: nothing is copied),
behind tools/delayproxy.py adding ``delay_ms`` each way, as a real bucket's latency. Per dataset:
random steps, windows and whole episodes through ``shardstore.episodes(s3://...)``, in ms per item
and GET requests per item (the proxy counts them), after an untimed first read that fetches the
index files. Returns None (and says why) when no S3 server can be had here.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

__all__ = ["s3_reads", "print_s3"]


def s3_reads(
    stores: Mapping[str, Path],
    reads: Mapping[str, Callable[[Any], Callable[[], int]]],
    delay_ms: float = 10.0,
) -> dict[str, dict[str, dict[str, float]]] | None:
    """``{store: {read: {"ms_per_item", "gets_per_item"}}}``: every ``reads[name](view)`` (a loop
    over a fixed list of items of that view, returning its item count) timed once per store over
    S3. The stores must share one parent folder whose names are valid bucket names."""
    import delayproxy
    import s3server

    import shardstore

    parents = {p.resolve().parent for p in stores.values()}
    if len(parents) != 1:
        raise ValueError("the stores must share one parent folder (the S3 server's root)")
    try:
        server = s3server.start(parents.pop(), etag=False)
    except s3server.Unavailable as e:
        print(f"S3 figures skipped: no S3 server here ({e})", file=sys.stderr)
        return None
    out: dict[str, dict[str, dict[str, float]]] = {}
    try:
        with delayproxy.delay_proxy(server.endpoint, delay_ms) as proxy:
            options = server.storage_options(proxy.endpoint)
            for name, path in stores.items():
                view = shardstore.episodes(f"s3://{path.resolve().name}", storage_options=options)
                view.step(0, 0)  # the index files, the shard's size check: once per reader
                out[name] = {}
                for read, make in reads.items():
                    loop = make(view)
                    proxy.reset_counts()
                    t0 = time.perf_counter()
                    items = loop()
                    secs = time.perf_counter() - t0
                    out[name][read] = {"ms_per_item": 1e3 * secs / items, "gets_per_item": proxy.count("GET") / items}
    finally:
        server.stop()
    return out


def print_s3(figures: dict[str, dict[str, dict[str, float]]] | None, delay_ms: float) -> None:
    if figures is None:
        return
    print(f"S3 (local rclone server, {delay_ms:g} ms added each way): ms per item, GET requests per item")
    for name, reads in figures.items():
        cells = "  ".join(f"{read} {v['ms_per_item']:7.1f} ms {v['gets_per_item']:4.1f} GET" for read, v in reads.items())
        print(f"  {name:<34} {cells}")
