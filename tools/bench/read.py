"""Read benchmark: shardstore against Energon's own readers and the bare I/O floor, in one run.

Figures (warm page cache, one thread, fixed seed):

- by position: ``ds[i]`` for random positions (raw bytes) vs Energon's ``ShardInfosITarReader``
  vs a bare ``os.pread`` loop over the same byte ranges (ranges taken from the ``.tar.idx``
  files beforehand, so the loop does nothing but the unavoidable reads);
- by key: ``ds.get(key)`` vs Energon's ``SqliteITarEntryReader``;
- by member name: ``ds.read_file("key.part")`` vs Energon's ``WebdatasetFileStore``;
- sequential: ``ds.iter()`` over the whole split vs reading every shard front to back;
- S3 (local server, direct and through a proxy adding 20 ms per request): 256 random samples
  with ``ds.get_many`` vs a one-by-one loop.

Every reader is checked to return the same bytes as the others on a prefix of the positions
before anything is timed. Each loop runs ``--repeat`` times (Energon's ``--energon-repeat``), the
runs of a section interleaved; the best run is kept, in wall-clock and in CPU time (this process's
user + system time, steadier on a shared machine). Ratios are printed for both clocks, except for
S3, where the loops mostly wait and only wall-clock time means anything.

Example: .venv/bin/python tools/bench/read.py --data /work/bench-data/read
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import peers  # tools/bench, the script's own folder, is first on sys.path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import numpy as np  # noqa: E402

import shardstore  # noqa: E402

DEFAULT_DATA = "/work/bench-data/read"
SEED = 20240601
#: Targets from DESIGN.md section 9: (figure, what it is compared with, minimum ratio).
TARGETS = [
    ("position", "energon", 20.0),
    ("position", "floor", 0.5),
    ("key", "energon", 10.0),
    ("member", "energon", 5.0),
    ("s3", "one_by_one", 10.0),
    ("s3_delay", "one_by_one", 10.0),
    # against the tools users would pick instead (issue 16)
    ("position", "wids", 3.0),
    ("sequential", "webdataset", 1.5),
]


@dataclass
class Figure:
    """One timed loop: items, payload bytes, and its best run in wall-clock and in CPU time."""

    name: str
    items: int
    nbytes: int
    seconds: float = float("inf")
    cpu_seconds: float = float("inf")
    runs: int = 0

    def rate(self, clock: str = "wall") -> float:
        t = self.seconds if clock == "wall" else self.cpu_seconds
        return self.items / t if t > 0 else float("inf")

    @property
    def per_s(self) -> float:
        return self.rate("wall")

    @property
    def mb_per_s(self) -> float:
        return self.nbytes / self.seconds / 1e6 if self.seconds > 0 else float("inf")

    def as_dict(self) -> dict[str, Any]:
        return {
            "items": self.items,
            "seconds": round(self.seconds, 4),
            "cpu_seconds": round(self.cpu_seconds, 4),
            "per_s": round(self.per_s, 1),
            "cpu_per_s": round(self.rate("cpu"), 1),
            "mb_per_s": round(self.mb_per_s, 1),
            "runs": self.runs,
        }


@dataclass
class Section:
    """A group of figures (one per reader) measured on the same items."""

    name: str
    figures: dict[str, Figure] = field(default_factory=dict)
    skipped: str | None = None
    note: str = ""
    #: For S3 on the bare local server: the most any concurrency can gain over one by one here, when
    #: every request costs CPU (client + server) that 2 cores must share (see ``cpu_bound``).
    bound: dict[str, float] | None = None

    def ratio(self, a: str, b: str, clock: str = "wall") -> float | None:
        if a in self.figures and b in self.figures:
            return self.figures[a].rate(clock) / self.figures[b].rate(clock)
        return None


def measure(sec: Section, cases: list[tuple[str, Callable[[], object], int, int, int]]) -> None:
    """Time each case ``(name, fn, items, payload bytes, runs)``, the runs of all cases interleaved
    (a, b, c, a, b, c, ...) so a change in the machine's load hits them alike; keep each one's best
    run, separately for wall-clock and CPU time (user + system of this process, which moves less
    than wall time on a shared machine).

    The timed loops only call the reader (their results are dropped): the bytes they return are
    counted once, beforehand, so counting costs no reader any time.
    """
    figs = {name: Figure(name, items, nbytes) for name, _, items, nbytes, _ in cases}
    for r in range(max(c[4] for c in cases)):
        for name, fn, _, _, runs in cases:
            if r >= runs:
                continue
            fig = figs[name]
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            t1, c1 = time.perf_counter(), time.process_time()
            fig.seconds, fig.cpu_seconds, fig.runs = (
                min(fig.seconds, t1 - t0),
                min(fig.cpu_seconds, c1 - c0),
                r + 1,
            )
    sec.figures.update(figs)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ----- data and the floor ---------------------------------------------------------------------------


class Floor:
    """The bare I/O: open file descriptors and byte ranges computed before any timing."""

    def __init__(self, ds: shardstore.Dataset) -> None:
        self.root = ds.url
        self.fds = [os.open(os.path.join(self.root, s.name), os.O_RDONLY) for s in ds.shards]
        self.offsets = [np.fromfile(os.path.join(self.root, s.name + ".idx"), dtype="<u8") for s in ds.shards]
        self.starts = np.cumsum([0] + [s.count for s in ds.shards])

    def ranges(self, positions: list[int]) -> list[tuple[int, int, int]]:
        """(fd, size, offset) of each position's sample, straight from the ``.tar.idx`` arrays."""
        out = []
        for p in positions:
            k = int(np.searchsorted(self.starts, p, side="right")) - 1
            j = p - int(self.starts[k])
            off = int(self.offsets[k][j])
            out.append((self.fds[k], int(self.offsets[k][j + 1]) - off, off))
        return out

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)


def pread_loop(ranges: list[tuple[int, int, int]]) -> Callable[[], None]:
    def run() -> None:
        pread = os.pread
        for fd, size, off in ranges:
            pread(fd, size, off)

    return run


def warm_cache(ds: shardstore.Dataset) -> float:
    """Read every shard and index file once so all readers start from a warm page cache."""
    t0 = time.perf_counter()
    buf = bytearray(8 << 20)
    for s in ds.shards:
        for name in (s.name, s.name + ".idx"):
            with open(os.path.join(ds.url, name), "rb", buffering=0) as f:
                while f.readinto(buf):
                    pass
    with open(os.path.join(ds.url, ".nv-meta", "index.sqlite"), "rb") as f:
        while f.read(8 << 20):
            pass
    return time.perf_counter() - t0


def sample_bytes(sample: Any) -> int:
    return sum(len(v) for k, v in sample.items() if not k.startswith("__"))


def parts_of(sample: Any) -> dict[str, bytes]:
    return {k: bytes(v) for k, v in sample.items() if not k.startswith("__")}


# ----- Energon ---------------------------------------------------------------------------------------


class Energon:
    """Energon's readers over the same prepared folder (its `.nv-meta` is the same format)."""

    def __init__(self, path: str, split: str) -> None:
        from megatron.energon.epathlib import EPath
        from megatron.energon.flavors.webdataset.metadata import WebdatasetMeta

        self.path = EPath(path)
        self.meta = WebdatasetMeta.from_config(self.path, split_part=split)
        self.version = _energon_version()

    def position_reader(self) -> Any:
        from megatron.energon.flavors.webdataset.itar_reader import ShardInfosITarReader

        # itar_cache_size as Energon's own training loader sets it (16 parallel shard iterators).
        return ShardInfosITarReader(self.path, self.meta.shards, itar_cache_size=16)

    def key_reader(self) -> Any:
        from megatron.energon.flavors.webdataset.itar_reader import SqliteITarEntryReader

        return SqliteITarEntryReader(self.path)

    def file_store(self) -> Any:
        from megatron.energon.cache.file_store import WebdatasetFileStore

        return WebdatasetFileStore(self.path)


def _energon_version() -> str:
    try:
        from importlib.metadata import version

        return version("megatron-energon")
    except Exception:  # noqa: BLE001 - only for the report
        return "?"


# ----- sections --------------------------------------------------------------------------------------


def loop(fn: Callable[[Any], object], items: list[Any]) -> Callable[[], None]:
    """``for x in items: fn(x)``, nothing else."""

    def run() -> None:
        for x in items:
            fn(x)

    return run


def measure_against_floor(
    sec: Section,
    items: list[Any],
    ours: Callable[[Any], object],
    payload: int,
    ranges: list[tuple[int, int, int]],
    reader: Any,
    repeat: int,
    energon_repeat: int,
) -> Section:
    """Time the pread floor over ``ranges``, ``ours`` and Energon's ``reader`` (when there) over the
    same ``items``, then close the reader: one shape for the position, key and member sections."""
    n = len(items)
    cases: list[tuple[str, Callable[[], object], int, int, int]] = [
        ("floor", pread_loop(ranges), n, sum(r[1] for r in ranges), repeat),
        ("shardstore", loop(ours, items), n, payload, repeat),
    ]
    if reader is not None:
        cases.append(("energon", loop(reader.__getitem__, items), n, payload, energon_repeat))
    measure(sec, cases)
    if reader is not None:
        reader.close()
    return sec


def bench_position(
    ds: shardstore.Dataset,
    positions: list[int],
    floor: Floor,
    energon: Energon | None,
    repeat: int,
    check: int,
    energon_repeat: int,
) -> Section:
    sec = Section("position", note=f"{len(positions)} random positions, raw bytes")
    ranges = floor.ranges(positions)
    reader = energon.position_reader() if energon else None
    for p, (fd, size, off) in zip(positions[:check], ranges[:check], strict=True):  # same bytes everywhere
        ours = ds[p]
        raw = os.pread(fd, size, off)
        for part, data in parts_of(ours).items():
            assert data in raw, f"position {p}: part {part} is not inside the sample's byte range"
        if reader is not None:
            theirs = reader[p]
            assert theirs["__key__"] == ours["__key__"], (p, theirs["__key__"], ours["__key__"])
            assert parts_of(theirs) == parts_of(ours), f"position {p}: Energon and shardstore differ"
    payload = sum(sample_bytes(ds[p]) for p in positions)
    return measure_against_floor(
        sec, positions, ds.__getitem__, payload, ranges, reader, repeat, energon_repeat
    )


def bench_key(
    ds: shardstore.Dataset,
    keys: list[str],
    ranges: list[tuple[int, int, int]],
    energon: Energon | None,
    repeat: int,
    check: int,
    energon_repeat: int,
) -> Section:
    sec = Section("key", note=f"{len(keys)} random keys, raw bytes")
    reader = energon.key_reader() if energon else None
    for k in keys[:check]:
        ours = ds.get(k)
        assert ours["__key__"] == k
        if reader is not None:
            assert parts_of(reader[k]) == parts_of(ours), f"key {k}: Energon and shardstore differ"
    payload = sum(sample_bytes(ds.get(k)) for k in keys)
    return measure_against_floor(sec, keys, ds.get, payload, ranges, reader, repeat, energon_repeat)


def bench_member(
    ds: shardstore.Dataset,
    names: list[str],
    floor: Floor,
    energon: Energon | None,
    repeat: int,
    check: int,
    energon_repeat: int,
) -> Section:
    sec = Section("member", note=f"{len(names)} random member names (jpg/txt/json), payload only")
    # Lookups by name go through the name table once a process has made a few thousand (it is
    # built once per index file and machine, into the local cache): build or open it before the
    # clock starts, as a long-running reader has.
    t0 = time.perf_counter()
    if ds.index.use_name_table():
        log(f"name table ready in {time.perf_counter() - t0:.2f} s")
    fds = {s.name: fd for s, fd in zip(ds.shards, floor.fds, strict=True)}
    ranges = []
    for name in names:  # the floor reads exactly the payload, its range looked up beforehand
        shard, rng = ds.member_range(name)
        ranges.append((fds[shard], rng.size, rng.offset))
    store = energon.file_store() if energon else None
    for name, (fd, size, off) in zip(names[:check], ranges[:check], strict=True):
        ours = ds.read_file(name)
        assert ours == os.pread(fd, size, off)
        if store is not None:
            assert store[name][0] == ours, f"member {name}: Energon and shardstore differ"
    payload = sum(r[1] for r in ranges)
    return measure_against_floor(sec, names, ds.read_file, payload, ranges, store, repeat, energon_repeat)


def bench_sequential(ds: shardstore.Dataset, repeat: int, with_peers: bool = True) -> Section:
    sec = Section("sequential", note=f"the whole split ({len(ds)} samples) in order")
    try:
        first = next(ds.iter())
    except (ImportError, NotImplementedError, AttributeError) as e:
        sec.skipped = f"ds.iter() is not available ({type(e).__name__}: {e})"
        return sec
    assert first["__key__"] == ds[0]["__key__"]
    count = payload = 0
    for sample in ds.iter():  # every sample once, counted outside the timing
        count += 1
        payload += sample_bytes(sample)
    assert count == len(ds), (count, len(ds))
    paths = [os.path.join(ds.url, s.name) for s in ds.shards]

    def ours() -> None:
        for _ in ds.iter():
            pass

    def floor() -> None:
        """Every shard front to back in 8 MiB reads: the unavoidable I/O of one pass."""
        buf = bytearray(8 << 20)
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            try:
                while os.readv(fd, [buf]):
                    pass
            finally:
                os.close(fd)

    total = sum(os.path.getsize(p) for p in paths)
    cases: list[tuple[str, Callable[[], object], int, int, int]] = [
        ("floor", floor, len(ds), total, repeat), ("shardstore", ours, len(ds), payload, repeat)
    ]
    if with_peers and importlib.util.find_spec("webdataset") is not None:
        cases.append(("webdataset", webdataset_loop(paths, len(ds), payload), len(ds), payload, repeat))
    measure(sec, cases)
    return sec


def webdataset_loop(paths: list[str], count: int, payload: int) -> Callable[[], None]:
    """``webdataset.WebDataset(shards, shardshuffle=False)`` iterated raw (no decoding), the way a
    WebDataset user reads a split in order; checked once to yield the same samples and bytes."""
    import webdataset as wds

    n = nbytes = 0
    for s in wds.WebDataset(paths, shardshuffle=False):
        n += 1
        nbytes += sum(len(v) for k, v in s.items() if not k.startswith("__"))
    assert (n, nbytes) == (count, payload), f"webdataset read {n} samples, {nbytes} bytes; shardstore {count}, {payload}"

    def run() -> None:
        for _ in wds.WebDataset(paths, shardshuffle=False):
            pass

    return run


def bench_wids(
    ds: shardstore.Dataset, sections: dict[str, Section], positions: list[int], keys: list[str], repeat: int,
    check: int, sequential: bool,
) -> dict[str, Any]:
    """wids (``ShardListDataset``, raw samples) on the same positions and keys, in its own venv: adds
    a ``wids`` figure to the position, key and sequential sections; returns its index build and
    open times. Its samples are checked to be shardstore's (same keys, same bytes)."""
    import tempfile

    paths = [os.path.join(ds.url, s.name) for s in ds.shards]
    with tempfile.TemporaryDirectory(prefix="wids-bench-") as tmp:
        shardlist = os.path.join(tmp, "shards.json")
        index = peers.run_wids(["index", shardlist, *paths])
        job: dict[str, Any] = {"positions": positions, "keys": keys, "repeat": repeat, "check": check,
                               "sequential": sequential}
        got = peers.wids_read(shardlist, job)
    assert got["samples"] == len(ds), (got["samples"], len(ds))
    want = {
        "position": peers.sample_digest([ds[p] for p in positions[:check]]),
        "key": peers.sample_digest([ds.get(k) for k in keys[:check]]),
        "sequential": peers.sample_digest([ds[p] for p in range(min(check, len(ds)))]),
    }
    for name, sec in sections.items():
        if name not in want or name not in got or sec.skipped:
            continue
        assert got[f"{name}_digest"] == want[name], f"{name}: wids and shardstore return different samples"
        r = got[name]
        base = next(iter(sec.figures.values()))
        nbytes = sec.figures["shardstore"].nbytes if "shardstore" in sec.figures else base.nbytes
        sec.figures["wids"] = Figure("wids", r["items"], nbytes, r["seconds"], r["cpu_seconds"], r["runs"])
    return {"index_scan_seconds": round(index["seconds"], 3), "open_seconds": round(got["open_seconds"], 3),
            "key_dict_seconds": round(got.get("key_dict_seconds", 0.0), 3)}


# ----- S3 --------------------------------------------------------------------------------------------

S3_SAMPLES = 256
S3_DELAY_MS = 20


def _s3_tools() -> tuple[Any, Any] | str:
    """The local S3 server and delay proxy helpers, or why they cannot be used."""
    missing = [f for f in ("s3server.py", "delayproxy.py") if not (ROOT / "tools" / f).exists()]
    if missing:
        return f"tools/{' and tools/'.join(missing)} not there yet"
    try:
        import delayproxy
        import s3server
    except Exception as e:  # noqa: BLE001 - report and skip
        return f"cannot import the S3 tools: {type(e).__name__}: {e}"
    return s3server, delayproxy


def bench_s3(ds: shardstore.Dataset, seed: int, repeat: int) -> list[Section]:
    """The same dataset served by the local S3 server (its parent folder is the server's root, the
    dataset folder a bucket: nothing is copied), direct and through the delay proxy."""
    tools = _s3_tools()
    if isinstance(tools, str):
        return [Section("s3", skipped=tools), Section("s3_delay", skipped=tools)]
    s3server, delayproxy = tools
    root = Path(ds.url).resolve()
    url = f"s3://{root.name}"
    with contextlib.ExitStack() as stack:
        try:  # etag=False: no MD5 of 3.6 GB of shards first (prepare recorded sizes here, not ETags)
            srv = stack.enter_context(s3server.s3_server(root.parent, etag=False))
        except s3server.Unavailable as e:
            why = f"no S3 server on this machine: {e}"
            return [Section("s3", skipped=why), Section("s3_delay", skipped=why)]
        note = "local S3 server (rclone), direct"
        sections = [_s3_section("s3", url, srv.storage_options(), ds, seed, repeat, note, repeat)]
        sections[0].bound = cpu_bound(sections[0], srv.pid, url, srv.storage_options(), ds, seed)
        proxy = stack.enter_context(delayproxy.delay_proxy(srv.endpoint, S3_DELAY_MS, process=True))
        note = f"local S3 server through a proxy adding {S3_DELAY_MS} ms each way"
        sections.append(
            _s3_section("s3_delay", url, srv.storage_options(proxy.endpoint), ds, seed, repeat, note, 1)
        )
    return sections


def _s3_section(
    name: str,
    url: str,
    options: dict[str, Any],
    local: shardstore.Dataset,
    seed: int,
    repeat: int,
    note: str,
    one_by_one_repeat: int,
) -> Section:
    sec = Section(name, note=f"{S3_SAMPLES} random samples, {note}")
    ds = shardstore.open(url, split=local.split, storage_options=options)
    rng = random.Random(seed + 1)
    positions = [rng.randrange(len(ds)) for _ in range(S3_SAMPLES)]
    # Untimed first pass: downloads the index files once and checks each shard's size (one HEAD a
    # shard, once per process), as any long-running reader has done before its steady state.
    got = ds.get_many(positions)
    for p, sample in zip(positions, got, strict=True):
        assert parts_of(sample) == parts_of(local[p]), f"S3 sample {p} differs from the local one"
    payload = sum(sample_bytes(s) for s in got)
    measure(
        sec,
        [
            ("get_many", lambda: ds.get_many(positions), S3_SAMPLES, payload, repeat),
            ("one_by_one", loop(ds.__getitem__, positions), S3_SAMPLES, payload, one_by_one_repeat),
        ],
    )
    return sec


def _process_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_bound(
    sec: Section, server_pid: int, url: str, options: dict[str, Any], local: shardstore.Dataset, seed: int
) -> dict[str, float]:
    """The most ``get_many`` can gain over the one-by-one loop on this machine, when the server
    answers at once (loopback, no network latency): a request then costs only CPU, the client's
    and the server's, and concurrency can at best spread that CPU over the cores. One more
    one-by-one run measures both (this process's CPU and the server process's, from /proc); the
    bound is the one-by-one wall time per sample over (CPU per sample / cores)."""
    ds = shardstore.open(url, split=local.split, storage_options=options)
    rng = random.Random(seed + 1)
    positions = [rng.randrange(len(ds)) for _ in range(S3_SAMPLES)]
    ds.get_many(positions[:8])  # index files fetched, shards checked: as in the timed runs
    c0, s0, t0 = time.process_time(), _process_cpu(server_pid), time.perf_counter()
    for p in positions:
        ds[p]
    t1, c1, s1 = time.perf_counter(), time.process_time(), _process_cpu(server_pid)
    n, cpus = len(positions), os.cpu_count() or 1
    cpu_ms = ((c1 - c0) + (s1 - s0)) / n * 1e3
    wall_ms = (t1 - t0) / n * 1e3
    return {
        "one_by_one_ms": round(wall_ms, 3),
        "client_cpu_ms": round((c1 - c0) / n * 1e3, 3),
        "server_cpu_ms": round((s1 - s0) / n * 1e3, 3),
        "cpus": cpus,
        "max_gain": round(wall_ms / (cpu_ms / cpus), 2),
        "get_many_share_of_max": round(
            (sec.ratio("get_many", "one_by_one") or 0) / (wall_ms / (cpu_ms / cpus)), 3
        ),
    }


# ----- report ----------------------------------------------------------------------------------------


def ratios(sections: dict[str, Section]) -> list[dict[str, Any]]:
    out = []
    for fig, base, target in TARGETS:
        sec = sections.get(fig)
        ours = "get_many" if fig.startswith("s3") else "shardstore"
        row: dict[str, Any] = {"figure": fig, "against": base, "target": target}
        for clock in ("wall", "cpu"):
            # S3 loops mostly wait on the network: their CPU time says nothing about the speed-up.
            r = (
                sec.ratio(ours, base, clock)
                if sec and not (clock == "cpu" and fig.startswith("s3"))
                else None
            )
            row[clock] = None if r is None else round(r, 3)
            row[f"{clock}_ok"] = None if r is None else r >= target
        out.append(row)
    return out


def _shown(ratio: float | None, target: float) -> str:
    if ratio is None:
        return "-"
    return f"{ratio * 100:.0f}%" if target < 1 else f"{ratio:.1f}x"


def print_report(meta: dict[str, Any], sections: dict[str, Section], checks: list[dict[str, Any]]) -> None:
    print(
        f"read benchmark: {meta['data']} ({meta['samples']} samples in {meta['shards']} shards, "
        f"{meta['gb']:.2f} GB), seed {meta['seed']}, energon {meta['energon']}, warm cache "
        f"({meta['warm_s']:.1f} s to warm), load average {meta['load_avg']:.1f} on {meta['cpus']} CPUs"
    )
    print(f"{'':<15}{'per s (wall)':>14}{'per s (CPU)':>14}{'MB/s (wall)':>13}  best of")
    for sec in sections.values():
        print(f"\n## {sec.name}: {sec.note}")
        if sec.skipped:
            print(f"  skipped: {sec.skipped}")
            continue
        for fig in sec.figures.values():
            print(
                f"  {fig.name:<13}{fig.per_s:>14,.0f}{fig.rate('cpu'):>14,.0f}{fig.mb_per_s:>13,.1f}  {fig.runs}"
            )
        if sec.bound:
            b = sec.bound
            print(
                f"  CPU bound: one by one takes {b['one_by_one_ms']:.2f} ms a sample, of which CPU "
                f"{b['client_cpu_ms']:.2f} ms here + {b['server_cpu_ms']:.2f} ms in the server (busy "
                f"{(b['client_cpu_ms'] + b['server_cpu_ms']) / b['one_by_one_ms'] * 100:.0f}% of the time, "
                f"little waiting to overlap): at that CPU per request, concurrency on {b['cpus']} CPUs gains "
                f"at most {b['max_gain']:.1f}x; get_many gets {b['get_many_share_of_max'] * 100:.0f}% of that"
            )
    print("\n## ratios: wall, CPU (target)")
    for c in checks:
        if c["wall"] is None:
            print(f"  {c['figure']:<10} vs {c['against']:<10} not measured")
            continue
        target = _shown(c["target"], c["target"])
        cpu_ok = c["wall_ok"] if c["cpu"] is None else c["cpu_ok"]
        verdict = "ok" if c["wall_ok"] and cpu_ok else "ok in CPU time" if cpu_ok else "BELOW TARGET"
        print(
            f"  {c['figure']:<10} vs {c['against']:<10} {_shown(c['wall'], c['target']):>7} "
            f"{_shown(c['cpu'], c['target']):>7}   (>= {target}) {verdict}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=DEFAULT_DATA, help=f"prepared dataset (default {DEFAULT_DATA})")
    ap.add_argument("--split", default="train")
    ap.add_argument("--n", type=int, default=20_000, help="random positions / keys / members (default 20000)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each loop, interleaved; the best is kept")
    ap.add_argument(
        "--energon-repeat", type=int, default=None, help="runs of Energon's loops (default: --repeat)"
    )
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    ap.add_argument("--skip-s3", action="store_true", help="skip the S3 section")
    ap.add_argument("--skip-energon", action="store_true", help="skip Energon's readers")
    ap.add_argument("--skip-sequential", action="store_true", help="skip sequential iteration")
    ap.add_argument("--skip-peers", action="store_true", help="skip wids and webdataset.WebDataset")
    ap.add_argument("--out", metavar="FILE", help="also write the results as JSON to FILE (with summary rows)")
    args = ap.parse_args()
    load_before = os.getloadavg()[0]
    if args.energon_repeat is None:
        args.energon_repeat = args.repeat

    ds = shardstore.open(args.data, split=args.split)
    log(f"warming the page cache: {ds}")
    warm_s = warm_cache(ds)
    rng = random.Random(args.seed)
    positions = [rng.randrange(len(ds)) for _ in range(args.n)]
    refs = [ds.locate(p) for p in positions]
    keys = [ds.index.key_at(r.shard.tar_file_id, r.index) or "" for r in refs]
    names = [f"{k}.{rng.choice(('jpg', 'txt', 'json'))}" for k in keys]
    floor = Floor(ds)
    energon = None if args.skip_energon else Energon(args.data, args.split)
    check = min(200, args.n)
    sections: dict[str, Section] = {}
    log("by position")
    sections["position"] = bench_position(
        ds, positions, floor, energon, args.repeat, check, args.energon_repeat
    )
    log("by key")
    sections["key"] = bench_key(
        ds, keys, floor.ranges(positions), energon, args.repeat, check, args.energon_repeat
    )
    log("by member name")
    sections["member"] = bench_member(ds, names, floor, energon, args.repeat, check, args.energon_repeat)
    if not args.skip_sequential:
        log("sequential")
        sections["sequential"] = bench_sequential(ds, args.repeat, not args.skip_peers)
    wids: dict[str, Any] | None = None
    if args.skip_peers:
        pass
    elif peers.wids_python() is None:
        peers.missing("wids", "its random-access and in-order figures")
    else:
        log("wids (its own venv)")
        wids = bench_wids(ds, sections, positions, keys, args.repeat, check, not args.skip_sequential)
    if not args.skip_s3:
        log("S3")
        for sec in bench_s3(ds, args.seed, args.repeat):
            sections[sec.name] = sec
    floor.close()

    meta = {
        "data": args.data,
        "split": args.split,
        "samples": len(ds),
        "shards": len(ds.shards),
        "gb": sum(os.path.getsize(os.path.join(ds.url, s.name)) for s in ds.shards) / 1e9,
        "seed": args.seed,
        "n": args.n,
        "repeat": args.repeat,
        "energon_repeat": args.energon_repeat,
        "warm_s": warm_s,
        "energon": energon.version if energon else "skipped",
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load_avg": os.getloadavg()[0],
    }
    meta["load_before"] = load_before
    meta["wids_index"] = wids
    checks = ratios(sections)
    results = {
        "meta": meta,
        "sections": {
            k: {
                "note": s.note,
                "skipped": s.skipped,
                "bound": s.bound,
                "figures": {n: f.as_dict() for n, f in s.figures.items()},
            }
            for k, s in sections.items()
        },
        "ratios": checks,
        "summary": summary_rows(sections, wids),
        "source": {"script": "tools/bench/read.py", "argv": sys.argv[1:], "data": args.data,
                   "samples": len(ds), "gb": round(meta["gb"], 2), "load": [load_before, os.getloadavg()[0]],
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
    }
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print_report(meta, sections, checks)
        if wids:
            print(f"wids: shard scan (its index) {wids['index_scan_seconds']:.2f} s, opening every shard "
                  f"{wids['open_seconds']:.2f} s, key dict {wids['key_dict_seconds']:.2f} s (not in the rates)")
    if args.out:
        peers.load_bench("prepare").write_json(results, args.out)


#: Summary rows of this script: (section, row title, unit, target ratio against the wids/webdataset
#: column or None).
SUMMARY = [
    ("position", "random access by position", "samples/s", 3.0),
    ("key", "lookup by key", "samples/s", None),
    ("member", "lookup by member name", "members/s", None),
    ("sequential", "sequential, whole split in order", "samples/s", 1.5),
]


def summary_rows(sections: dict[str, Section], wids: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Rows for tools/bench/summary.py (the shape is documented there): one per figure, values per
    second (wall clock, best run) by column."""
    rows = []
    for name, title, unit, target in SUMMARY:
        sec = sections.get(name)
        if sec is None or sec.skipped:
            continue
        figs = sec.figures
        values: dict[str, float] = {}
        labels: dict[str, str] = {}
        notes: dict[str, str] = {}
        for fig, col in (("shardstore", "shardstore"), ("energon", "Energon"), ("floor", "floor")):
            if fig in figs:
                values[col] = round(figs[fig].per_s)
        peer = [f for f in ("wids", "webdataset") if f in figs]
        if peer:
            best = max(peer, key=lambda f: figs[f].per_s)
            values["wids/webdataset"] = round(figs[best].per_s)
            labels["wids/webdataset"] = {"wids": "wids" if name != "key" else "wids + dict of keys",
                                         "webdataset": "WebDataset"}[best]
            if len(peer) > 1:
                other = next(f for f in peer if f != best)
                labels["wids/webdataset"] += f"; {other} {figs[other].per_s:,.0f}"
        elif name == "member":
            notes["wids/webdataset"] = "no lookup by member name"
        elif wids is None:
            notes["wids/webdataset"] = "not measured"
        notes["ratarmount"] = "mount only (see mount rows)"
        row: dict[str, Any] = {"figure": title, "unit": unit, "higher_is_better": True, "values": values,
                               "labels": labels, "notes": notes, "chart": "reading: random access and in order"}
        if target:
            row["target"] = {"column": "wids/webdataset", "ratio": target}
        rows.append(row)
    return rows


if __name__ == "__main__":
    main()
