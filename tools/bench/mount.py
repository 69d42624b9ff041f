"""Mount benchmark: ``shardstore mount`` against ``energon mount`` and against reading directly.

Figures (warm page cache; a fresh mount for every run, so the kernel's FUSE caches start cold):

- files: read every file of a 1,000-sample dataset (3,000 members: jpg/txt/json) through the
  flat root, one thread (``os.listdir``, then ``os.open``/``os.read``/``os.close`` per file), files/s for
  ``shardstore mount`` and for ``energon mount`` on the same prepared folder (target >= 2x);
- large member: one 256 MB member read front to back in 1 MB reads through the mount, against
  reading the same byte range of the tar file directly with the same reads into one reused
  buffer (the page-cache floor), and against ``ds.read_file`` (the library's direct read of a
  member: one read into a new buffer) (target >= 50%);
- 256k samples (``/work/bench-data/read``, the benchmark default, if it is prepared; else a
  synthetic 256,000-sample dataset of tiny parts): time until ``mount()`` returns, until
  ``ls -U | head`` prints (the first readdir page), and a full sorted ``ls | head``; the mount
  process's resident memory (target: ready < 1 s, RSS < 100 MB); full-listing entries/s of the
  root in both layouts (DESIGN.md section 7: 100k+ entries/s).

Bytes are checked: both mounts must return the same bytes for every file, the large member the
same bytes as the tar. Each figure keeps the best of ``--repeat`` runs (the machine is shared).

Example: .venv/bin/python tools/bench/mount.py --json /tmp/mount-bench.json
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import peers  # tools/bench, the script's own folder, is first on sys.path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import shardstore  # noqa: E402
from shardstore.mount.process import _fuse_library, _is_mounted  # noqa: E402

DEFAULT_256K = "/work/bench-data/read"
ENERGON = Path(sys.executable).parent / "energon"  # the running venv's
#: (figure, minimum) from the issue and DESIGN.md section 7.
TARGETS = {"files_vs_energon": 2.0, "large_vs_direct": 0.5, "ready_s": 1.0, "rss_mb": 100.0, "listing_per_s": 100_000}


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def wait_mounted(mp: str, proc: subprocess.Popen[bytes], timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not _is_mounted(mp):
        if proc.poll() is not None:
            raise RuntimeError(f"mount process exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{mp} not mounted after {timeout} s")
        time.sleep(0.01)


@contextmanager
def shardstore_mount(data: Path, mp: str, layout: str = "flat") -> Iterator[int]:
    handle = shardstore.mount(data, mp, layout=layout, mkdir=True)
    try:
        yield handle.pid  # type: ignore[misc]
    finally:
        handle.unmount()


@contextmanager
def energon_mount(data: Path, mp: str) -> Iterator[int]:
    """``energon mount PATH MOUNTPOINT`` (flat: one folder of all parts), in the foreground."""
    os.makedirs(mp, exist_ok=True)
    env = dict(os.environ, FUSE_LIBRARY_PATH=_fuse_library())
    proc = subprocess.Popen([str(ENERGON), "mount", str(data), mp], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_mounted(mp, proc)
        yield proc.pid
    finally:
        subprocess.run(["fusermount3", "-u", mp], check=False, capture_output=True)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def read_all(mp: str) -> tuple[int, float, str, float]:
    """Read every file of the mount's root: (files, seconds, digest of names and contents, median
    microseconds per file).

    Only the listing and the reads are timed; the digest is taken afterwards. The median time per
    file (open, read, close) is the figure a busy machine moves least: there a few files that wait
    for a time slice (milliseconds each) make most of the wall time.
    """
    t0 = time.perf_counter()
    names = sorted(n for n in os.listdir(mp) if not n.startswith(".by-"))
    contents = []
    per_file = []
    for name in names:
        t_file = time.perf_counter()
        # os.open/os.read, not open(): Python's open() asks isatty(), one more ioctl round trip
        # through FUSE per file on both mounts that says nothing about either
        fd = os.open(os.path.join(mp, name), os.O_RDONLY)
        try:
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
        finally:
            os.close(fd)
        per_file.append(time.perf_counter() - t_file)
        contents.append(chunks)
    seconds = time.perf_counter() - t0
    digest = hashlib.sha256()
    for name, chunks in zip(names, contents, strict=True):
        digest.update(name.encode() + b"\0" + hashlib.sha256(b"".join(chunks)).digest())
    per_file.sort()
    return len(names), seconds, digest.hexdigest(), per_file[len(per_file) // 2] * 1e6


def best(runs: int, fn: Callable[[], Any], key: Callable[[Any], float]) -> Any:
    return min((fn() for _ in range(runs)), key=key)


# ----- datasets -----------------------------------------------------------------------------------
def small_dataset(work: Path) -> Path:
    from make_dataset import make_dataset

    path = work / "files-1000"
    if not (path / ".nv-meta").exists():
        make_dataset(str(path), shards=4, samples=250, seed=1)
        shardstore.prepare(str(path), split_ratio="8,1,1", num_workers=1)
    return path


def large_dataset(work: Path, mb: int) -> tuple[Path, str, int]:
    """One shard: a small sample, a ``mb`` MB member, another small sample."""
    path = work / f"large-{mb}mb"
    name = "big/blob.bin"
    if not (path / ".nv-meta").exists():
        (path / "parts").mkdir(parents=True, exist_ok=True)
        chunk = os.urandom(1 << 20)
        with tarfile.open(path / "parts" / "large.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
            for member, size in (("a.txt", 10), (name, mb << 20), ("z.txt", 10)):
                info = tarfile.TarInfo(member)
                info.size = size
                tar.addfile(info, _Repeat(chunk, size) if size > 10 else io.BytesIO(b"0123456789"))
        shardstore.prepare(str(path), split_ratio="1,0,0", num_workers=1)
    return path, name, mb << 20


class _Repeat(io.RawIOBase):
    """``size`` bytes made of one random chunk repeated (a big member without a big buffer)."""

    def __init__(self, chunk: bytes, size: int) -> None:
        self.chunk, self.left = chunk, size

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = min(len(b), len(self.chunk), self.left)
        b[:n] = self.chunk[:n]
        self.left -= n
        return n


def tiny_256k(work: Path) -> Path:
    """256 shards x 1,000 samples x 3 parts of 10 bytes, written with tarfile."""
    path = work / "tiny-256k"
    if not (path / ".nv-meta").exists():
        (path / "parts").mkdir(parents=True, exist_ok=True)
        payload = io.BytesIO(b"0123456789")
        for s in range(256):
            with tarfile.open(path / "parts" / f"t-{s:04d}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
                for i in range(1000):
                    for part in ("jpg", "txt", "json"):
                        info = tarfile.TarInfo(f"s{s:05d}_{i:06d}.{part}")
                        info.size = 10
                        payload.seek(0)
                        tar.addfile(info, payload)
        shardstore.prepare(str(path), split_ratio="8,1,1")
    return path


# ----- figures ------------------------------------------------------------------------------------
def bench_files(work: Path, repeat: int, with_peers: bool) -> dict[str, Any]:
    data = small_dataset(work)
    out: dict[str, Any] = {"dataset": str(data)}
    digests = {}
    mounters: list[tuple[str, Any]] = [("shardstore", shardstore_mount), ("energon", energon_mount)]
    if with_peers:
        mounters.append(("ratarmount", lambda d, mp: peers.ratarmount_mount(tars_of(d), mp, str(work / "ratar-index"))))
    for label, mounter in mounters:

        def run(mounter: Any = mounter, label: str = label) -> tuple[int, float, str, float, float, float]:
            mp = str(work / f"mnt-{label}")
            t0 = time.perf_counter()
            with mounter(data, mp) as pid:
                ready = time.perf_counter() - t0
                cpu0 = cpu_seconds(pid) + time.process_time()
                n, seconds, digest, median_us = read_all(mp)
                cpu = cpu_seconds(pid) + time.process_time() - cpu0
            return n, seconds, digest, ready, cpu, median_us

        n, seconds, digest, ready, cpu, median_us = best(repeat, run, key=lambda r: r[1])
        digests[label] = digest
        out[label] = {
            "files": n, "seconds": round(seconds, 3), "files_per_s": round(n / seconds), "ready_s": round(ready, 3),
            "cpu_us_per_file": round(cpu / n * 1e6), "median_us_per_file": round(median_us),
        }
        print(
            f"  {label:10s} {n} files in {seconds:.3f} s: {n / seconds:,.0f} files/s "
            f"(mount ready in {ready:.2f} s; median {median_us:.0f} us a file; {cpu / n * 1e6:.0f} us CPU per file, "
            "mount process + reader)",
            flush=True,
        )
    if len(set(digests.values())) != 1:
        raise SystemExit(f"the mounts returned different names or bytes: {digests}")
    out["ratio"] = round(out["shardstore"]["files_per_s"] / out["energon"]["files_per_s"], 2)
    if "ratarmount" in out:
        out["ratio_vs_ratarmount"] = round(out["shardstore"]["files_per_s"] / out["ratarmount"]["files_per_s"], 2)
    return out


def tars_of(data: Path) -> list[str]:
    """The shards of a prepared dataset, for ratarmount (a union mount of them: its root holds
    every member, as shardstore's flat root does)."""
    ds = shardstore.open(str(data), split=None)
    return [str(data / s.name) for s in ds.shards]


def read_sequential(path: str, offset: int, size: int, block: int = 1 << 20) -> tuple[float, str]:
    """Read ``size`` bytes from ``offset`` in ``block``-byte reads into one buffer: (seconds,
    digest). Only the reads are timed."""
    buf = bytearray(size)
    view = memoryview(buf)
    fd = os.open(path, os.O_RDONLY)
    try:
        t0 = time.perf_counter()
        pos = 0
        while pos < size:
            n = os.preadv(fd, [view[pos : pos + block]], offset + pos)
            if n <= 0:
                break
            pos += n
        seconds = time.perf_counter() - t0
    finally:
        os.close(fd)
    return seconds, hashlib.sha256(view[:pos]).hexdigest()


def bench_large(work: Path, mb: int, repeat: int, with_peers: bool) -> dict[str, Any]:
    data, name, size = large_dataset(work, mb)
    ds = shardstore.open(str(data), split=None)
    shard, rng = ds.member_range(name)
    tar = str(data / shard)
    read_sequential(tar, rng.offset, rng.size)  # warm the page cache
    direct, want = best(repeat, lambda: read_sequential(tar, rng.offset, rng.size), key=lambda r: r[0])

    def through_mount() -> tuple[float, str]:
        mp = str(work / "mnt-large")
        with shardstore_mount(data, mp):
            return read_sequential(os.path.join(mp, name), 0, size)

    mounted, got = best(repeat, through_mount, key=lambda r: r[0])
    if got != want:
        raise SystemExit("the large member read through the mount differs from the tar's bytes")

    def library() -> float:
        t0 = time.perf_counter()
        data = ds.read_file(name)
        seconds = time.perf_counter() - t0
        assert len(data) == size
        return seconds

    lib = best(repeat, library, key=lambda r: r)
    ratar = None
    if with_peers:

        def through_ratarmount() -> tuple[float, str]:
            mp = str(work / "mnt-large-ratarmount")
            with peers.ratarmount_mount([tar], mp, str(work / "ratar-index-large"), fresh=False):
                return read_sequential(os.path.join(mp, name), 0, size)

        ratar, got = best(repeat, through_ratarmount, key=lambda r: r[0])
        if got != want:
            raise SystemExit("the large member read through ratarmount differs from the tar's bytes")
    out = {
        "member_mb": mb,
        "direct_mb_per_s": round(size / direct / 1e6),
        "library_mb_per_s": round(size / lib / 1e6),
        "mount_mb_per_s": round(size / mounted / 1e6),
        "ratio": round(direct / mounted, 2),
        "ratio_vs_library": round(lib / mounted, 2),
    }
    if ratar is not None:
        out["ratarmount_mb_per_s"] = round(size / ratar / 1e6)
        print(f"  through ratarmount {out['ratarmount_mb_per_s']:,} MB/s", flush=True)
    print(
        f"  direct (1 MB preads of the tar into one buffer) {out['direct_mb_per_s']:,} MB/s, "
        f"ds.read_file (one read) {out['library_mb_per_s']:,} MB/s, "
        f"through the mount {out['mount_mb_per_s']:,} MB/s",
        flush=True,
    )
    return out


def real_folder(work: Path, data: Path) -> tuple[Path, int]:
    """A real folder holding one empty file per name of the flat root (the physical bound of
    ``ls | head``: the same names without FUSE), made once per work folder."""
    path = work / "real-flat-root"
    done = path / ".complete"
    if not done.exists():
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        from shardstore.dataset import Dataset
        from shardstore.mount.tree import Tree

        tree = Tree(Dataset(str(data), None))
        for name, _ in tree.listdir("/"):
            os.close(os.open(path / name, os.O_CREAT | os.O_WRONLY, 0o644))
        done.touch()
    return path, len(os.listdir(path)) - 1


def timed_shell(cmd: str) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, shell=True, capture_output=True, check=True)
    return time.perf_counter() - t0


def bench_256k(work: Path, data: Path | None, repeat: int, with_peers: bool) -> dict[str, Any]:
    if data is None:
        data = tiny_256k(work)
    samples = sum(shardstore.open(str(data), split=None).info.shard_counts.values())
    out: dict[str, Any] = {"dataset": str(data), "samples": samples}
    real, real_entries = real_folder(work, data)
    bound = {
        "entries": real_entries,
        "ls_head_s": round(min(timed_shell(f"ls {real} | head -3") for _ in range(repeat)), 3),
        "ls_head_c_locale_s": round(min(timed_shell(f"LC_ALL=C ls {real} | head -3") for _ in range(repeat)), 3),
        "ls_unsorted_s": round(min(timed_shell(f"ls -U {real} | wc -l") for _ in range(repeat)), 3),
    }
    out["real_folder"] = bound
    print(
        f"  a real folder of the same {real_entries:,} names ({real.parent.name}/{real.name}): ls | head "
        f"{bound['ls_head_s']:.2f} s (LC_ALL=C {bound['ls_head_c_locale_s']:.2f} s), "
        f"ls -U | wc -l {bound['ls_unsorted_s']:.2f} s",
        flush=True,
    )
    mp = str(work / "mnt-256k")
    for layout in ("flat", "samples"):

        def run(layout: str = layout) -> dict[str, Any]:
            t0 = time.perf_counter()
            with shardstore_mount(data, mp, layout) as pid:
                ready = time.perf_counter() - t0
                first = subprocess.run(f"ls -U {mp} | head -3", shell=True, capture_output=True, text=True, check=True)
                first_page = time.perf_counter() - t0
                rss_ready = rss_mb(pid)
                t1 = time.perf_counter()
                head = subprocess.run(f"ls {mp} | head -3", shell=True, capture_output=True, text=True, check=True)
                ls_head = time.perf_counter() - t1
                ls_head_again = timed_shell(f"ls {mp} | head -3")
                t1 = time.perf_counter()
                entries = len(os.listdir(mp))
                listing = time.perf_counter() - t1
                return {
                    "ready_s": round(ready, 3), "first_page_s": round(first_page, 3), "ls_head_s": round(ls_head, 3),
                    "ls_head_again_s": round(ls_head_again, 3),
                    "rss_ready_mb": round(rss_ready, 1), "rss_after_listing_mb": round(rss_mb(pid), 1),
                    "entries": entries, "listing_per_s": round(entries / listing),
                    "first": first.stdout.split(), "head": head.stdout.split(),
                }

        fig = best(repeat, run, key=lambda r: r["ls_head_s"])
        out[layout] = fig
        print(
            f"  {layout:8s} ready {fig['ready_s']:.2f} s, first page (ls -U | head) {fig['first_page_s']:.2f} s, "
            f"ls | head {fig['ls_head_s']:.2f} s (again {fig['ls_head_again_s']:.2f} s), RSS {fig['rss_ready_mb']:.0f} MB "
            f"({fig['rss_after_listing_mb']:.0f} MB after listing all), "
            f"{fig['entries']:,} entries at {fig['listing_per_s']:,}/s",
            flush=True,
        )
    if with_peers:
        out["ratarmount"] = bench_256k_ratarmount(work, data, repeat)
    return out


def bench_256k_ratarmount(work: Path, data: Path, repeat: int) -> dict[str, Any]:
    """ratarmount's union mount of the same shards: time to ready with its index built first (a
    fresh index folder: what a first mount costs) and with the index already there, then the
    first page and ``ls | head`` of its root, and its memory."""
    tars = tars_of(data)
    mp, index_dir = str(work / "mnt-256k-ratarmount"), str(work / "ratar-index-256k")

    def run(fresh: bool) -> dict[str, Any]:
        t0 = time.perf_counter()
        with peers.ratarmount_mount(tars, mp, index_dir, fresh=fresh) as pid:
            ready = time.perf_counter() - t0
            subprocess.run(f"ls -U {mp} | head -3", shell=True, capture_output=True, check=True)
            first_page = time.perf_counter() - t0
            ls_head = timed_shell(f"ls {mp} | head -3")
            return {"ready_s": round(ready, 3), "first_page_s": round(first_page, 3), "ls_head_s": round(ls_head, 3),
                    "rss_mb": round(rss_mb(pid), 1)}

    first = run(True)  # with its index build: once, it takes long on the full data
    again = best(repeat, lambda: run(False), key=lambda r: r["first_page_s"])
    out = {"with_index_build": first, "index_present": again}
    print(
        f"  ratarmount: ready + first page {first['first_page_s']:.2f} s with its index build "
        f"({again['first_page_s']:.2f} s with the index there), ls | head {again['ls_head_s']:.2f} s, "
        f"RSS {again['rss_mb']:.0f} MB",
        flush=True,
    )
    return out


def summary_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """This script's rows for tools/bench/summary.py (shape documented there)."""
    rows: list[dict[str, Any]] = []
    na = "not measured"
    if "files" in results:
        f = results["files"]
        values = {col: f[k]["files_per_s"] for k, col in (("shardstore", "shardstore"), ("energon", "Energon"),
                                                          ("ratarmount", "ratarmount")) if k in f}
        rows.append({"figure": "mount: read every file (1,000 samples)", "unit": "files/s", "higher_is_better": True,
                     "values": values, "notes": {"wids/webdataset": "no mount", "floor": na,
                                                  **({} if "ratarmount" in values else {"ratarmount": na})},
                     "chart": "mount: every file of 1,000 samples", "target": {"column": "ratarmount", "ratio": 3.0}})
        # the same loop's median time per file and CPU per file (mount process + reader): what the
        # load on the machine moves least
        for key, title in (("median_us_per_file", "median time per file read"),
                           ("cpu_us_per_file", "CPU per file read, mount process + reader")):
            per = {col: f[k][key] for k, col in (("shardstore", "shardstore"), ("energon", "Energon"),
                                                 ("ratarmount", "ratarmount")) if k in f and key in f[k]}
            rows.append({"figure": f"mount: {title}", "unit": "us", "higher_is_better": False, "values": per,
                         "notes": {"wids/webdataset": "no mount", "floor": na,
                                   **({} if "ratarmount" in per else {"ratarmount": na})}})
    if "large" in results:
        g = results["large"]
        values = {"shardstore": g["mount_mb_per_s"], "floor": g["direct_mb_per_s"]}
        if "ratarmount_mb_per_s" in g:
            values["ratarmount"] = g["ratarmount_mb_per_s"]
        rows.append({"figure": f"mount: one {g['member_mb']} MB member, 1 MB reads", "unit": "MB/s",
                     "higher_is_better": True, "values": values,
                     "notes": {"Energon": na, "wids/webdataset": "no mount"}, "chart": "mount: one large member"})
    if "256k" in results:
        k = results["256k"]
        n = f"{k['flat']['entries']:,}"
        ready = {"shardstore": k["flat"]["first_page_s"]}
        ls = {"shardstore": k["flat"]["ls_head_s"], "floor": k["real_folder"]["ls_head_s"]}
        labels = {}
        if "ratarmount" in k:
            r = k["ratarmount"]
            ready["ratarmount"] = r["with_index_build"]["first_page_s"]
            labels["ratarmount"] = f"index build included; {r['index_present']['first_page_s']:.2f} s with it built"
            ls["ratarmount"] = r["index_present"]["ls_head_s"]
        notes = {"Energon": na, "wids/webdataset": "no mount"}
        rows.append({"figure": f"mount: ready + first listing page ({n} entries)", "unit": "s", "higher_is_better": False,
                     "values": ready, "labels": labels, "notes": {**notes, "floor": "-"}, "chart": "mount: start and listing of the flat root",
                     "target": {"column": "ratarmount", "ratio": 1.0}})
        rows.append({"figure": f"mount: `ls | head` of the {n}-entry root", "unit": "s", "higher_is_better": False,
                     "values": ls, "labels": {"floor": "a real folder of the same names"}, "notes": notes,
                     "chart": "mount: start and listing of the flat root"})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", help="folder for generated datasets and mount points (default: a temp folder)")
    ap.add_argument("--data-256k", default=DEFAULT_256K, help="prepared 256k-sample dataset (default: %(default)s)")
    ap.add_argument("--large-mb", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=["files", "large", "256k"], action="append")
    ap.add_argument("--json", help="write the figures here as JSON")
    ap.add_argument("--skip-peers", action="store_true", help="leave ratarmount out")
    args = ap.parse_args()
    with_peers = not args.skip_peers and peers.ratarmount_bin() is not None
    if not args.skip_peers and not with_peers:
        peers.missing("ratarmount", "its mount figures")
    os.environ.setdefault("FUSE_LIBRARY_PATH", _fuse_library())
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="shardstore-mount-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    only = set(args.only or ["files", "large", "256k"])
    results: dict[str, Any] = {"cpus": os.cpu_count(), "load_before": os.getloadavg()[0]}
    if "files" in only:
        print("1,000 samples, every file through the flat root:", flush=True)
        results["files"] = bench_files(work, args.repeat, with_peers)
    if "large" in only:
        print(f"one {args.large_mb} MB member, 1 MB reads:", flush=True)
        results["large"] = bench_large(work, args.large_mb, args.repeat, with_peers)
    if "256k" in only:
        data = Path(args.data_256k) if (Path(args.data_256k) / ".nv-meta" / "index.sqlite").exists() else None
        print(f"256k samples ({data or 'synthetic tiny parts'}):", flush=True)
        results["256k"] = bench_256k(work, data, args.repeat, with_peers)
    results["load_after"] = os.getloadavg()[0]
    checks = []
    if "files" in results:
        checks.append(("files/s vs energon mount", results["files"]["ratio"], TARGETS["files_vs_energon"], True))
    if "large" in results:
        checks.append(("large member vs direct 1 MB preads", results["large"]["ratio"], TARGETS["large_vs_direct"], True))
        checks.append(("large member vs ds.read_file", results["large"]["ratio_vs_library"], TARGETS["large_vs_direct"], True))
    if "ratio_vs_ratarmount" in results.get("files", {}):
        checks.append(("files/s vs ratarmount", results["files"]["ratio_vs_ratarmount"], 3.0, True))
    if "ratarmount" in results.get("256k", {}):
        r = results["256k"]["ratarmount"]["with_index_build"]["first_page_s"]
        checks.append(("256k ready + first page: ratarmount's (s) / shardstore's", round(r / results["256k"]["flat"]["first_page_s"], 2), 1.0, True))
    if "256k" in results:
        flat = results["256k"]["flat"]
        checks += [
            ("256k ready + first page (s)", flat["first_page_s"], TARGETS["ready_s"], False),
            ("256k flat root: ls | head (s)", flat["ls_head_s"], TARGETS["ready_s"], False),
            ("  the same of a real folder of those names (bound, s)", results["256k"]["real_folder"]["ls_head_s"],
             TARGETS["ready_s"], False),
            ("256k RSS (MB)", max(flat["rss_after_listing_mb"], results["256k"]["samples"]["rss_after_listing_mb"]),
             TARGETS["rss_mb"], False),
            ("full listing entries/s (flat)", flat["listing_per_s"], TARGETS["listing_per_s"], True),
        ]
    print("\ntargets:")
    for label, value, target, higher in checks:
        ok = value >= target if higher else value <= target
        print(f"  {'ok  ' if ok else 'MISS'} {label}: {value} ({'>=' if higher else '<='} {target})")
    results["targets_met"] = all((v >= t) if h else (v <= t) for _, v, t, h in checks)
    results["summary"] = summary_rows(results)
    results["source"] = {"script": "tools/bench/mount.py", "argv": sys.argv[1:], "data": args.data_256k,
                         "load": [results["load_before"], results["load_after"]],
                         "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if args.json:
        peers.load_bench("prepare").write_json(results, args.json)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
