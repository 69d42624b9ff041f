"""Prepare benchmark: ``shardstore prepare`` against ``energon prepare`` and a bare header walk, in one run.

What it measures (DESIGN.md section 9, issue 2 point 7), all on the same shards, warm page cache:

- floor: a minimal Python loop that ``pread``s each 512-byte tar header and jumps by the padded
  member size, nothing else (no checksum, no names, no index) -- the least a header walk in
  Python can cost;
- ``shardstore prepare --split-ratio 8,1,1 --force-overwrite --non-interactive``;
- ``energon prepare`` with the same flags;
- flatness: shardstore's peak memory on the first 8 shards against all of them;
- with ``--media-metadata-by-extension``: both tools again with that flag (the media tables; real
  images needed: ``tools/make_dataset.py --real-images``), and whether their rows are identical.

Each tool runs as a subprocess on its own hard-linked copy of the shards (made in a scratch
folder beside the dataset and removed at the end), so neither sees the other's ``.nv-meta`` or
``.tar.idx`` files and the dataset itself is never modified. Both get ``--num-workers`` (default:
the number of CPUs; Energon's default of 16 processes is slower on a small machine) and
``--no-progress``. Wall time is taken around the subprocess (interpreter start-up included, the
floor's too: both are timed the same way); next to it, both are also timed in-process, without
start-up or imports: the floor's loop, and ``prepare()`` as it reports its own ``seconds``
(``--json``; from the call to the return, worker start-up and the final writes included). Peak memory is the largest sum of RSS over the process and all its children,
polled every ``--poll`` seconds with psutil, plus the largest single process (``ru_maxrss`` of
the waited children). shardstore and the floor run ``--repeat`` times and the median is kept,
Energon ``--energon-repeat`` times. At the end both outputs are checked to agree (same
``.info.json`` bytes, same sample and part counts).

Targets: shardstore >= 10x faster than Energon, <= 2x the floor, peak memory on all shards
<= 1.5x that on 8 shards.

Example: .venv/bin/python tools/bench/prepare.py /work/bench-data/default --json /tmp/prepare.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = "/work/bench-data/default"
FLAGS = ["--split-ratio", "8,1,1", "--force-overwrite", "--non-interactive", "--no-progress"]
#: (figure, what it is compared with, how many times faster it must be; < 1 means "at most 1/x slower").
TARGETS = [("shardstore", "energon", 10.0), ("shardstore", "floor", 0.5)]
FLATNESS_MAX = 1.5
FLATNESS_SHARDS = 8


@dataclass
class Run:
    """One timed subprocess: wall seconds, CPU seconds (user + system, all its processes), peak
    memory of its process tree, largest single process."""

    seconds: float
    cpu_seconds: float
    tree_peak_mb: float
    max_process_mb: float
    stdout: str = ""


@dataclass
class Figure:
    """Repeated runs of one command; the median run's figures are the ones reported."""

    name: str
    runs: list[Run] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return statistics.median(r.seconds for r in self.runs)

    @property
    def best(self) -> float:
        return min(r.seconds for r in self.runs)

    @property
    def cpu_seconds(self) -> float:
        return statistics.median(r.cpu_seconds for r in self.runs)

    @property
    def tree_peak_mb(self) -> float:
        return max(r.tree_peak_mb for r in self.runs)

    @property
    def max_process_mb(self) -> float:
        return max(r.max_process_mb for r in self.runs)

    def as_dict(self) -> dict[str, Any]:
        return {
            "seconds_median": round(self.seconds, 3),
            "seconds_best": round(self.best, 3),
            "seconds_all": [round(r.seconds, 3) for r in self.runs],
            "cpu_seconds_median": round(self.cpu_seconds, 3),
            "tree_peak_mb": round(self.tree_peak_mb, 1),
            "max_process_mb": round(self.max_process_mb, 1),
        }


# --------------------------------------------------------------------------------------------------
# The floor: nothing but the unavoidable header reads


def floor_walk(root: str) -> dict[str, Any]:
    """pread every header of every shard under ``root`` and jump over the data; count members.

    The size field is parsed the cheapest correct way for the octal fields ``tarfile`` and
    webdataset write; nothing else of a header is looked at.
    """
    members = 0
    t0 = time.perf_counter()
    for path in shard_paths(root):
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            offset = 0
            while offset < size:
                hdr = os.pread(fd, 512, offset)
                if len(hdr) < 512 or hdr[0] == 0:
                    break
                n = int(hdr[124:136].split(b"\0", 1)[0] or b"0", 8)
                offset += 512 + ((n + 511) & ~511)
                members += 1
        finally:
            os.close(fd)
    return {"members": members, "loop_seconds": time.perf_counter() - t0}


def shard_paths(root: str) -> list[str]:
    """Every ``*.tar`` under ``root`` outside hidden folders, in path order (as prepare orders them)."""
    out = []
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        out += [os.path.join(dirpath, f) for f in files if f.endswith(".tar") and not f.startswith(".")]
    return sorted(out, key=lambda p: os.path.relpath(p, root).split(os.sep))


# --------------------------------------------------------------------------------------------------
# Running and measuring one command


def _tree_rss(helper: Any) -> int:
    """RSS summed over everything the helper started (the helper itself left out)."""
    import psutil

    total = 0
    try:
        procs = helper.children(recursive=True)
    except psutil.NoSuchProcess:
        return 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def measure(cmd: list[str], poll: float) -> Run:
    """Run ``cmd``; wall time, the largest RSS sum of its process tree, its largest single process.

    ``ru_maxrss`` of RUSAGE_CHILDREN only ever grows, so each command is started from a fresh
    helper process (this file with ``--exec``) that times it and reports the figure for its own
    children; the helper's start-up is in neither figure.
    """
    import psutil

    helper = [sys.executable, __file__, "--exec", *cmd]
    proc = subprocess.Popen(helper, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ps = psutil.Process(proc.pid)
    peak = 0
    stop = threading.Event()

    def poller() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, _tree_rss(ps))
            stop.wait(poll)

    thread = threading.Thread(target=poller, daemon=True)
    thread.start()
    out, err = proc.communicate()
    stop.set()
    thread.join()
    if proc.returncode != 0:
        raise SystemExit(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{out}\n{err}")
    report = json.loads(out.strip().splitlines()[-1])
    return Run(report["seconds"], report["cpu_seconds"], peak / 2**20, report["maxrss_kb"] / 1024, report["stdout"])


def exec_and_report(cmd: list[str]) -> None:
    """``--exec``: run ``cmd``; print its wall time, its output and the largest RSS among its
    (waited) children."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        sys.stdout.write(proc.stdout)
        raise SystemExit(proc.returncode)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    report = {"seconds": seconds, "cpu_seconds": usage.ru_utime + usage.ru_stime, "maxrss_kb": usage.ru_maxrss}
    print(json.dumps({**report, "stdout": proc.stdout}))


# --------------------------------------------------------------------------------------------------
# Work folders


def link_copy(shards: list[str], root: str, dest: str) -> None:
    """``dest`` with the given shards of ``root`` at the same relative paths, as hard links
    (symbolic links if the scratch folder is on another file system)."""
    for src in shards:
        rel = os.path.relpath(src, root)
        target = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        try:
            os.link(src, target)
        except OSError:
            os.symlink(os.path.abspath(src), target)


def warm(shards: list[str]) -> tuple[int, float]:
    """Read every shard once so all tools start from a warm page cache; (bytes, seconds)."""
    t0 = time.perf_counter()
    total = 0
    buf = bytearray(8 << 20)
    for path in shards:
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                total += n
    return total, time.perf_counter() - t0


def index_counts(folder: str) -> tuple[int, int]:
    con = sqlite3.connect(f"file:{folder}/.nv-meta/index.sqlite?mode=ro", uri=True)
    try:
        return (
            con.execute("SELECT COUNT(*) FROM samples").fetchone()[0],
            con.execute("SELECT COUNT(*) FROM sample_parts").fetchone()[0],
        )
    finally:
        con.close()


# --------------------------------------------------------------------------------------------------


def main() -> None:
    if sys.argv[1:2] == ["--exec"]:  # internal: the measuring helper (see ``measure``)
        exec_and_report(sys.argv[2:])
        return
    if sys.argv[1:2] == ["--floor-walk"]:  # internal: the floor, in its own process
        print(json.dumps(floor_walk(sys.argv[2])))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", nargs="?", default=DEFAULT_DATA, help=f"dataset folder (default {DEFAULT_DATA})")
    ap.add_argument("--shards", type=int, help="use only the first N shards")
    ap.add_argument("--num-workers", type=int, default=os.cpu_count() or 1, help="for both tools (default: CPUs)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of shardstore and the floor (median kept)")
    ap.add_argument("--energon-repeat", type=int, default=1, help="runs of energon prepare")
    ap.add_argument("--skip-energon", action="store_true", help="leave energon out (no ratio against it)")
    ap.add_argument("--skip-peers", action="store_true", help="leave out ratarmount's and wids' index builds")
    ap.add_argument("--skip-flatness", action="store_true", help=f"leave out the {FLATNESS_SHARDS}-shard run")
    ap.add_argument("--poll", type=float, default=0.02, help="memory polling interval in seconds")
    ap.add_argument("--scratch", help="folder for the linked copies (default: beside the dataset)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON to FILE ('-': stdout)")
    ap.add_argument(
        "--media-metadata-by-extension", dest="media", action="store_true",
        help="also time both tools with --media-metadata-by-extension (needs real images: make_dataset.py --real-images)",
    )
    args = ap.parse_args()

    root = os.path.abspath(args.path)
    shards = shard_paths(root)
    if args.shards:
        shards = shards[: args.shards]
    if not shards:
        raise SystemExit(f"no shards under {root}")
    scratch = tempfile.mkdtemp(prefix=".prepare-bench-", dir=args.scratch or os.path.dirname(root))
    venv_bin = Path(sys.executable).parent
    try:
        results = run_all(args, root, shards, scratch, venv_bin)
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    print_report(results)
    if args.json:
        write_json(results, args.json)


def write_json(results: dict[str, Any], dest: str) -> None:
    """The figures as JSON, to ``dest`` (``-``: standard output)."""
    text = json.dumps(results, indent=2)
    if dest == "-":
        print(text)
    else:
        Path(dest).write_text(text + "\n")


def run_all(args: argparse.Namespace, root: str, shards: list[str], scratch: str, venv_bin: Path) -> dict[str, Any]:
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    ss_dir, en_dir, flat_dir = (os.path.join(scratch, n) for n in ("shardstore", "energon", f"first{FLATNESS_SHARDS}"))
    link_copy(shards, root, ss_dir)
    link_copy(shards, root, en_dir)
    load_before = os.getloadavg()[0]
    nbytes, warm_s = warm(shards)
    log(f"{len(shards)} shards, {nbytes / 1e9:.2f} GB; page cache warmed in {warm_s:.1f} s")
    workers = ["--num-workers", str(args.num_workers)]
    # --json: prepare()'s own seconds (in-process, no interpreter start-up or imports) for the report
    shardstore_cmd = [str(venv_bin / "shardstore"), "prepare", ss_dir, *FLAGS, *workers, "--quiet", "--json"]
    energon_cmd = [str(venv_bin / "energon"), "prepare", en_dir, *FLAGS, *workers]
    floor_cmd = [sys.executable, __file__, "--floor-walk", ss_dir]

    floor, shardstore, energon = Figure("floor"), Figure("shardstore"), Figure("energon")
    for i in range(args.repeat):  # interleaved, so a burst of load elsewhere hits both alike
        floor.runs.append(measure(floor_cmd, args.poll))
        shardstore.runs.append(measure(shardstore_cmd, args.poll))
        log(f"run {i + 1}/{args.repeat}: floor {floor.runs[-1].seconds:.2f} s, shardstore {shardstore.runs[-1].seconds:.2f} s")
    floor_info = json.loads(floor.runs[-1].stdout.strip().splitlines()[-1]) if floor.runs[-1].stdout else {}
    samples, parts = index_counts(ss_dir)
    figures = {"floor": floor, "shardstore": shardstore}
    if not args.skip_energon:
        for i in range(args.energon_repeat):
            energon.runs.append(measure(energon_cmd, args.poll))
            log(f"energon run {i + 1}/{args.energon_repeat}: {energon.runs[-1].seconds:.2f} s")
        figures["energon"] = energon
    if not args.skip_peers:
        figures.update(peer_index_builds(shards, scratch, args))

    results: dict[str, Any] = {
        "dataset": {
            "path": root, "shards": len(shards), "bytes": nbytes, "samples": samples, "parts": parts,
            "members_walked_by_floor": floor_info.get("members"),
        },
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "load_avg_1m": os.getloadavg()[0]},
        "num_workers": args.num_workers,
        "figures": {name: fig.as_dict() for name, fig in figures.items()},
        "floor_loop_seconds": round(floor_info.get("loop_seconds", 0.0), 3),
        "in_process": in_process(floor, shardstore),
    }
    ratios: dict[str, float] = {
        "shardstore_over_floor": shardstore.seconds / floor.seconds,
        "shardstore_over_floor_cpu": shardstore.cpu_seconds / floor.cpu_seconds,
        "shardstore_over_floor_best": shardstore.best / floor.best,
    }
    if not args.skip_energon:
        ratios["energon_over_shardstore"] = energon.seconds / shardstore.seconds
        ratios["energon_over_shardstore_cpu"] = energon.cpu_seconds / shardstore.cpu_seconds
        ratios["energon_over_shardstore_memory"] = energon.tree_peak_mb / shardstore.tree_peak_mb
        results["outputs_agree"] = outputs_agree(ss_dir, en_dir)
    if args.media:
        ratios.update(media_figures(args, shardstore_cmd, energon_cmd, ss_dir, en_dir, figures, results, log))
    results["figures"] = {name: fig.as_dict() for name, fig in figures.items()}
    results["ratios"] = {k: round(v, 2) for k, v in ratios.items()}

    if not args.skip_flatness and len(shards) > FLATNESS_SHARDS:
        link_copy(shards[:FLATNESS_SHARDS], root, flat_dir)
        small = Figure(f"shardstore_{FLATNESS_SHARDS}")
        small_cmd = [str(venv_bin / "shardstore"), "prepare", flat_dir, *FLAGS, *workers, "--quiet"]
        for _ in range(args.repeat):
            small.runs.append(measure(small_cmd, args.poll))
        results["flatness"] = {
            "shards_small": FLATNESS_SHARDS,
            "shards_large": len(shards),
            "small": small.as_dict(),
            "large": shardstore.as_dict(),
            "tree_peak_ratio": round(shardstore.tree_peak_mb / small.tree_peak_mb, 3),
            "max_process_ratio": round(shardstore.max_process_mb / small.max_process_mb, 3),
        }
    results["ratios"].update(peer_ratios(figures, shardstore))
    results["targets"] = check_targets(results)
    results["summary"] = summary_rows(results)
    results["source"] = {
        "script": "tools/bench/prepare.py", "argv": sys.argv[1:], "data": root, "samples": samples,
        "gb": round(nbytes / 1e9, 2), "load": [load_before, os.getloadavg()[0]],
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    return results


def media_figures(
    args: argparse.Namespace, shardstore_cmd: list[str], energon_cmd: list[str], ss_dir: str, en_dir: str,
    figures: dict[str, Figure], results: dict[str, Any], log: Any,
) -> dict[str, float]:
    """Both tools again with ``--media-metadata-by-extension``: the media row of the report (the
    same 10x target), and whether the two ``media_metadata`` tables hold the same rows."""
    flag = ["--media-metadata-by-extension"]
    ours, theirs = Figure("shardstore_media"), Figure("energon_media")
    for i in range(args.repeat):
        ours.runs.append(measure(shardstore_cmd + flag, args.poll))
        log(f"media run {i + 1}/{args.repeat}: shardstore {ours.runs[-1].seconds:.2f} s")
    figures["shardstore_media"] = ours
    out = {"shardstore_media_over_shardstore": ours.seconds / figures["shardstore"].seconds}
    if not args.skip_energon:
        for i in range(args.energon_repeat):
            theirs.runs.append(measure(energon_cmd + flag, args.poll))
            log(f"energon media run {i + 1}/{args.energon_repeat}: {theirs.runs[-1].seconds:.2f} s")
        figures["energon_media"] = theirs
        out["energon_media_over_shardstore_media"] = theirs.seconds / ours.seconds
        out["energon_media_over_shardstore_media_cpu"] = theirs.cpu_seconds / ours.cpu_seconds
        rows = [media_rows(d) for d in (ss_dir, en_dir)]
        results["media_rows"] = {"shardstore": len(rows[0]), "energon": len(rows[1]), "identical": rows[0] == rows[1]}
    else:
        results["media_rows"] = {"shardstore": len(media_rows(ss_dir))}
    return out


def media_rows(folder: str) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(f"file:{os.path.join(folder, '.nv-meta', 'index.sqlite')}?mode=ro", uri=True)
    try:
        return sorted(con.execute("SELECT entry_key, metadata_type, metadata_json FROM media_metadata"))
    finally:
        con.close()
def peer_index_builds(shards: list[str], scratch: str, args: argparse.Namespace) -> dict[str, Figure]:
    """The index builds of the tools users would pick instead, on the same shards, ``--repeat``
    times each (median kept), timed like the others (subprocess wall, CPU, memory):

    - ratarmount: ``ratarmount --recreate-index --no-mount`` (one ``.index.sqlite`` per shard, in a
      scratch folder; the build it does before its mount is ready);
    - wids: ``widsindex create`` (its command: copies each shard to ``/tmp/shard.tar``, takes its
      MD5 and counts its samples) and, kinder to wids, the sample count alone (``wids_scan``:
      ``compute_num_samples`` over every shard, the in-memory scan each wids process also repeats
      when it opens a shard).
    """
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import peers

    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    cmds: dict[str, list[str]] = {}
    if peers.ratarmount_bin():
        index_dir = os.path.join(scratch, "ratarmount-index")
        os.makedirs(index_dir, exist_ok=True)
        cmds["ratarmount"] = [*peers.ratarmount_cmd(shards, index_dir, "--recreate-index", "--no-mount")]
    else:
        peers.missing("ratarmount", "its index build")
    if peers.wids_python() and peers.widsindex_bin():
        cmds["widsindex"] = [peers.widsindex_bin() or "", "create", "-o", os.path.join(scratch, "widsindex.json"), *shards]
        cmds["wids_scan"] = [peers.wids_python() or "", str(peers.WIDS_WORKER), "index",
                             os.path.join(scratch, "wids-scan.json"), *shards]
    else:
        peers.missing("wids", "its index build")
    out = {name: Figure(name) for name in cmds}
    for i in range(args.repeat):
        for name, cmd in cmds.items():
            out[name].runs.append(measure(cmd, args.poll))
            log(f"{name} run {i + 1}/{args.repeat}: {out[name].runs[-1].seconds:.2f} s")
    return out


def peer_ratios(figures: dict[str, Figure], shardstore: Figure) -> dict[str, float]:
    """How many times longer each peer's index build took than shardstore's prepare (wall, CPU)."""
    out = {}
    for peer in ("ratarmount", "widsindex", "wids_scan"):
        if peer in figures:
            out[f"{peer}_over_shardstore"] = round(figures[peer].seconds / shardstore.seconds, 2)
            out[f"{peer}_over_shardstore_cpu"] = round(figures[peer].cpu_seconds / shardstore.cpu_seconds, 2)
    return out


def summary_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary row of this script for tools/bench/summary.py (shape documented there):
    seconds to prepare / build the index, median of the runs. wids' figure is its index command,
    ``widsindex create``; the sample count alone (no copy, no MD5) is given beside it."""
    figs = results["figures"]
    sec = lambda name: figs[name]["seconds_median"]  # noqa: E731
    values = {col: sec(name) for name, col in (("shardstore", "shardstore"), ("energon", "Energon"), ("floor", "floor"))
              if name in figs}
    labels, notes = {}, {}
    if "widsindex" in figs:
        values["wids/webdataset"] = sec("widsindex")
        labels["wids/webdataset"] = f"widsindex create; the sample count alone {sec('wids_scan'):.1f} s"
    else:
        notes["wids/webdataset"] = "not measured"
    if "ratarmount" in figs:
        values["ratarmount"] = sec("ratarmount")
    else:
        notes["ratarmount"] = "not measured"
    return [{
        "figure": "prepare / index build", "unit": "s", "higher_is_better": False, "values": values,
        "labels": labels, "notes": notes, "chart": "prepare and index builds",
        "target": {"column": "wids/webdataset", "ratio": 3.0, "also": ["ratarmount"]},
    }]


def in_process(floor: Figure, shardstore: Figure) -> dict[str, float]:
    """Both timed inside their process, medians: the floor's loop and ``prepare()``'s own figure.

    Leaves out what the subprocess figures include for both: interpreter start-up and imports
    (about 0.02 s for the floor, 0.15 s for shardstore)."""
    floor_s = statistics.median(json.loads(r.stdout.strip().splitlines()[-1])["loop_seconds"] for r in floor.runs)
    ss_s = statistics.median(json.loads(r.stdout)["seconds"] for r in shardstore.runs)
    return {
        "floor_loop_seconds_median": round(floor_s, 3),
        "shardstore_prepare_seconds_median": round(ss_s, 3),
        "shardstore_over_floor": round(ss_s / floor_s, 2),
    }


def outputs_agree(ours: str, theirs: str) -> dict[str, Any]:
    """The two preparations describe the same dataset: same ``.info.json`` bytes, same row counts."""
    a = Path(ours, ".nv-meta", ".info.json").read_bytes()
    b = Path(theirs, ".nv-meta", ".info.json").read_bytes()
    return {"info_json_identical": a == b, "counts": {"shardstore": index_counts(ours), "energon": index_counts(theirs)}}


def check_targets(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    ratios = results["ratios"]
    if "energon_over_shardstore" in ratios:
        out["10x_faster_than_energon"] = {"value": ratios["energon_over_shardstore"], "met": ratios["energon_over_shardstore"] >= 10}
    if "energon_media_over_shardstore_media" in ratios:
        r = ratios["energon_media_over_shardstore_media"]
        out["media_10x_faster_than_energon"] = {"value": r, "met": r >= 10}
    out["within_2x_of_floor"] = {"value": ratios["shardstore_over_floor"], "met": ratios["shardstore_over_floor"] <= 2}
    for peer in ("ratarmount", "wids_scan", "widsindex"):
        if f"{peer}_over_shardstore" in ratios:
            v = ratios[f"{peer}_over_shardstore"]
            out[f"3x_faster_than_{peer}"] = {"value": v, "met": v >= 3}
    if "flatness" in results:
        r = results["flatness"]["tree_peak_ratio"]
        out["memory_flat"] = {"value": r, "met": r <= FLATNESS_MAX}
    return out


def print_report(results: dict[str, Any]) -> None:
    d, figs = results["dataset"], results["figures"]
    print(
        f"\nprepare benchmark: {d['shards']} shards, {d['samples']:,} samples, {d['parts']:,} parts, "
        f"{d['bytes'] / 1e9:.2f} GB, warm page cache; {results['machine']['cpus']} CPUs, "
        f"--num-workers {results['num_workers']}, load {results['machine']['load_avg_1m']:.1f}"
    )
    print(f"{'':12s} {'median s':>9s} {'best s':>8s} {'CPU s':>7s} {'tree peak MB':>13s} {'max proc MB':>12s}")
    for name, f in figs.items():
        print(
            f"{name:12s} {f['seconds_median']:9.3f} {f['seconds_best']:8.3f} {f['cpu_seconds_median']:7.2f} "
            f"{f['tree_peak_mb']:13.1f} {f['max_process_mb']:12.1f}"
        )
    print("(wall: around each subprocess, interpreter start-up and imports included for both)")
    ip = results["in_process"]
    print(
        f"in-process, medians, no start-up or imports: floor loop {ip['floor_loop_seconds_median']:.3f} s, "
        f"shardstore prepare() {ip['shardstore_prepare_seconds_median']:.3f} s -> {ip['shardstore_over_floor']:.2f}x"
    )
    r = results["ratios"]
    if "energon_over_shardstore" in r:
        print(
            f"energon / shardstore: {r['energon_over_shardstore']:.1f}x time ({r['energon_over_shardstore_cpu']:.1f}x CPU), "
            f"{r['energon_over_shardstore_memory']:.2f}x memory"
        )
    print(
        f"shardstore / floor:   {r['shardstore_over_floor']:.2f}x wall, subprocesses, medians "
        f"({r['shardstore_over_floor_best']:.2f}x best / best; {r['shardstore_over_floor_cpu']:.2f}x CPU)"
    )
    if "energon_media_over_shardstore_media" in r:
        print(
            f"--media-metadata-by-extension: energon / shardstore {r['energon_media_over_shardstore_media']:.1f}x time "
            f"({r['energon_media_over_shardstore_media_cpu']:.1f}x CPU); media rows {results['media_rows']}"
        )
    if "shardstore_media_over_shardstore" in r:
        print(f"shardstore with / without media metadata: {r['shardstore_media_over_shardstore']:.2f}x")
    if "flatness" in results:
        fl = results["flatness"]
        print(
            f"memory flatness: {fl['shards_large']} shards {fl['large']['tree_peak_mb']:.1f} MB vs "
            f"{fl['shards_small']} shards {fl['small']['tree_peak_mb']:.1f} MB -> {fl['tree_peak_ratio']:.2f}x "
            f"(largest process {fl['max_process_ratio']:.2f}x)"
        )
    for peer in ("ratarmount", "widsindex", "wids_scan"):
        if f"{peer}_over_shardstore" in r:
            print(f"{peer} / shardstore: {r[f'{peer}_over_shardstore']:.1f}x time ({r[f'{peer}_over_shardstore_cpu']:.1f}x CPU)")
    if "outputs_agree" in results:
        oa = results["outputs_agree"]
        print(f"outputs agree: .info.json identical={oa['info_json_identical']}, rows {oa['counts']}")
    for name, t in results["targets"].items():
        print(f"  {'MET ' if t['met'] else 'MISS'} {name} ({t['value']})")


if __name__ == "__main__":
    main()
