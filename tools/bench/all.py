"""Every benchmark in one run, then the summary table and charts of docs/benchmarks.md.

``make bench`` runs ``python tools/bench/all.py``: on the default dataset of
``tools/make_dataset.py`` (64 shards x 4,000 samples, 3.6 GB, made under ``--data`` if missing,
and a hard-linked copy prepared by shardstore for the read and mount benchmarks), each script of
``STEPS`` writes its JSON to the results folder (``docs/bench/``), then ``summary.py`` rewrites
the summary block of docs/benchmarks.md and the charts under docs/img/.

``make bench-quick`` (``--quick``) is the same path on a tiny dataset made in a scratch folder
(4 shards x 200 samples), one run of everything, small sizes; the JSON, the summary page and the
charts go to that scratch folder, never into docs/. It checks that the scripts still work (the
test suite runs it); its figures mean nothing and no target is checked.

Peers (wids, ratarmount) come from the venvs ``make bench-peers`` makes; when they are missing
the scripts leave them out and say so. A benchmark joins by adding a ``Step`` here; a script
that writes JSON with a ``summary`` list (the shape is in ``summary.py``) to the path it is given
adds rows to the summary table (the robot-learning ones write their figures without one).

Example: python tools/bench/all.py --quick --work /tmp/bench-quick
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DEFAULT_DATA = "/work/benchdata/default"
#: The default dataset of tools/make_dataset.py, spelled out (another branch may change its defaults).
FULL_SIZE, QUICK_SIZE = (64, 4000), (4, 200)


@dataclass
class Paths:
    data: str  # the raw shards
    read: str  # a hard-linked copy, prepared by shardstore with every sample in the train split
    work: str  # scratch (mount points, generated datasets)
    results: str  # one JSON per step


@dataclass
class Step:
    """One benchmark: its JSON file's stem, and its script and arguments (given the paths and the
    JSON file to write) for the full run and the quick one."""

    name: str
    args: Callable[[Paths, str], list[str]]
    quick: Callable[[Paths, str], list[str]] | None  # None: left out of the quick run


STEPS = [
    Step("prepare", lambda p, out: ["prepare.py", p.data, "--repeat", "3", "--json", out],
         lambda p, out: ["prepare.py", p.data, "--repeat", "1", "--json", out]),
    Step("read", lambda p, out: ["read.py", "--data", p.read, "--repeat", "3", "--out", out],
         lambda p, out: ["read.py", "--data", p.read, "--n", "200", "--repeat", "1", "--skip-s3", "--out", out]),
    Step("mount", lambda p, out: ["mount.py", "--data-256k", p.read, "--work", os.path.join(p.work, "mount"),
                                  "--json", out],
         lambda p, out: ["mount.py", "--data-256k", p.read, "--work", os.path.join(p.work, "mount"), "--repeat", "1",
                         "--large-mb", "4", "--json", out]),
    Step("aux", lambda p, out: ["aux.py", "--data", p.read, "--json", out], None),
    Step("scale", lambda p, out: ["scale.py", "--json", out], None),
    # the robot-learning formats: their own data, made under WORK; no summary rows (their tables are
    # the sections "episodes", "rlds", "lerobot", "check --deep" and the cluster import of docs/benchmarks.md)
    Step("episodes", lambda p, out: ["episodes.py", "--data", os.path.join(p.work, "episodes"), "--json", out],
         lambda p, out: ["episodes.py", "--data", os.path.join(p.work, "episodes"), "--episodes", "100", "--steps", "50",
                         "--repeat", "1", "--s3-items", "0", "--json", out]),
    Step("episode-wds", lambda p, out: ["episodes.py", "--episode-wds", "--data", os.path.join(p.work, "ewds"), "--episodes",
                                        "100", "--steps", "200", "--image", "3", "32", "32", "--samples", "2000", "--json", out],
         None),
    Step("rlds", lambda p, out: ["rlds.py", "--episodes", "500", "--steps", "100", "--size", "128", "--reads", "3000",
                                 "--repeat", "3", "--work", os.path.join(p.work, "rlds"), "--json", out],
         lambda p, out: ["rlds.py", "--episodes", "20", "--steps", "20", "--reads", "100", "--repeat", "1",
                         "--work", os.path.join(p.work, "rlds"), "--json", out]),
    Step("lerobot", lambda p, out: ["lerobot.py", "--episodes", "200", "--frames", "300", "--data",
                                    os.path.join(p.work, "lerobot"), "--json", out],
         lambda p, out: ["lerobot.py", "--episodes", "4", "--frames", "30", "--items", "20", "--windows", "4",
                         "--npy-episodes", "2", "--repeat", "1", "--s3-items", "0", "--data", os.path.join(p.work, "lerobot"),
                         "--json", out]),
    # LeRobot loaders (shardstore's drop-in, LeRobotDataset, lerobot-lancedb): needs .venv-lerobot
    # with lerobot-lancedb (`make bench-lerobot` installs it); too long for the quick run
    Step("lerobot-loader", lambda p, out: ["lerobot_loader.py", "--data", os.path.join(p.work, "lerobot-loader"),
                                           "--json", out], None),
    Step("convert", lambda p, out: ["convert.py", "--episodes", "200", "--steps", "50", "--work",
                                    os.path.join(p.work, "convert"), "--json", out],
         lambda p, out: ["convert.py", "--episodes", "3", "--steps", "5", "--formats", "minari-hdf5,minari-arrow,episode-wds",
                         "--work", os.path.join(p.work, "convert"), "--json", out]),
    Step("check", lambda p, out: ["check.py", "--episodes", "50", "--frames", "300", "--size", "96", "--repeat", "5",
                                  "--data", os.path.join(p.work, "check"), "--json", out],
         lambda p, out: ["check.py", "--episodes", "4", "--frames", "30", "--size", "32", "--repeat", "1",
                         "--data", os.path.join(p.work, "check"), "--json", out]),
    Step("import-cluster", lambda p, out: ["import_cluster.py", "--episodes", "200", "--steps", "50", "--lerobot", "40",
                                           "--repeat", "2", "--work", os.path.join(p.work, "import-cluster")],
         lambda p, out: ["import_cluster.py", "--episodes", "20", "--steps", "10", "--repeat", "1",
                         "--work", os.path.join(p.work, "import-cluster")]),
]


def make_data(data: str, shards: int, samples: int) -> None:
    """The dataset of tools/make_dataset.py, made once (a ``.complete`` marker says it is whole)."""
    if os.path.exists(os.path.join(data, ".complete")):
        return
    subprocess.run([sys.executable, str(ROOT / "tools" / "make_dataset.py"), data, "--shards", str(shards),
                    "--samples", str(samples)], check=True)
    Path(data, ".complete").touch()


def prepared_copy(data: str, dest: str) -> None:
    """``dest``: hard links to ``data``'s shards, prepared once by shardstore (``--split-ratio 1,0,0``)."""
    if os.path.exists(os.path.join(dest, ".nv-meta", "index.sqlite")):
        return
    for dirpath, _, files in os.walk(data):
        for f in files:
            if f.endswith(".tar"):
                rel = os.path.relpath(os.path.join(dirpath, f), data)
                os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
                if not os.path.exists(os.path.join(dest, rel)):
                    os.link(os.path.join(dirpath, f), os.path.join(dest, rel))
    import shardstore

    shardstore.prepare(dest, split_ratio="1,0,0")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny data in a scratch folder; nothing written to docs/")
    ap.add_argument("--data", help=f"raw shards (default {DEFAULT_DATA}; quick: WORK/data), made if missing")
    ap.add_argument("--work", help="scratch folder (default: a temporary folder)")
    ap.add_argument("--results", help="JSON folder (default docs/bench; quick: WORK/results)")
    ap.add_argument("--only", action="append", choices=[s.name for s in STEPS], help="run only these steps")
    ap.add_argument("--skip", action="append", default=[], choices=[s.name for s in STEPS], help="leave a step out")
    ap.add_argument("--shards", type=int, help="shards of the made dataset (default 64; quick: 4)")
    ap.add_argument("--samples", type=int, help="samples per shard (default 4000; quick: 200)")
    args = ap.parse_args()

    work = args.work or tempfile.mkdtemp(prefix="shardstore-bench-")
    os.makedirs(work, exist_ok=True)
    data = args.data or (os.path.join(work, "data") if args.quick else DEFAULT_DATA)
    results = args.results or (os.path.join(work, "results") if args.quick else str(ROOT / "docs" / "bench"))
    os.makedirs(results, exist_ok=True)
    shards, samples = QUICK_SIZE if args.quick else FULL_SIZE
    make_data(data, args.shards or shards, args.samples or samples)
    paths = Paths(data, data.rstrip("/") + "-read", work, results)
    prepared_copy(data, paths.read)

    for step in STEPS:
        if (args.only and step.name not in args.only) or step.name in args.skip:
            continue
        make_args = step.quick if args.quick else step.args
        if make_args is None:
            continue
        script, *rest = make_args(paths, os.path.join(results, f"{step.name}.json"))
        cmd = [sys.executable, str(HERE / script), *rest]
        print(f"== {step.name}: {' '.join(cmd[1:])} (load {os.getloadavg()[0]:.1f})", flush=True)
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True)
        print(f"== {step.name} done in {time.perf_counter() - t0:.0f} s", flush=True)

    summary = [sys.executable, str(HERE / "summary.py"), "--results", results]
    if args.quick:
        summary += ["--img", os.path.join(work, "img"), "--doc", _quick_doc(work)]
    else:
        summary += ["--img", str(ROOT / "docs" / "img"), "--doc", str(ROOT / "docs" / "benchmarks.md")]
    subprocess.run(summary, check=True)


def _quick_doc(work: str) -> str:
    """A page with just the summary markers, for the quick run's table."""
    from summary import END, START

    doc = os.path.join(work, "summary.md")
    Path(doc).write_text(f"# Benchmarks (quick run)\n\n{START}\n{END}\n")
    return doc


if __name__ == "__main__":
    main()
