"""LeRobot loaders on one dataset: shardstore's drop-in against LeRobotDataset and lerobot-lancedb.

The data: a LeRobot v3.0 dataset written by tools/make_lerobot.py (``--episodes`` x ``--frames``,
two ``--size``-square cameras in AV1 at ``--fps``, keyframe every ``--gop`` frames: LeRobot's
recorder writes 2; ``observation.state`` and ``action``), imported with ``import_lerobot``
(shardstore) and converted with ``lerobot-lance-convert`` (lerobot-lancedb's own converter, in
``--lerobot-python``). Every reader runs in a process of its own with the same random indices:

- ``shardstore``: ``shardstore.lerobot_dataset.LeRobotDataset`` over the import (this interpreter);
- ``lerobot-torchcodec``, ``lerobot-pyav``: lerobot 0.6.1's ``LeRobotDataset`` over the source, with
  each video backend (``--lerobot-python``, ``.venv-lerobot``). torchcodec needs FFmpeg's shared
  libraries: when ``import torchcodec`` fails there, PyAV's own copies (``av.libs``) are linked
  under the names torchcodec loads and put on ``LD_LIBRARY_PATH``;
- ``lance``: lerobot-lancedb 0.3.1's ``LanceDBDataset`` over its conversion (same interpreter);
- ``floor``: PyAV decoding just the frames an item needs (keyframe at or before each run of
  frames through its last, bytes already in memory, one warm decoder per camera) and converting
  them to RGB (a converter kept per camera, one thread: a frame's own ``to_ndarray`` builds a
  scaler per call, which cost more than decoding): what no reader that decodes the videos goes
  below, but for the float conversion LeRobot's items add (a 224x224 frame is 600 KB of floats).

Reads, each in items per second (best of ``--repeat`` in each of ``--rounds``, warm page cache, after a warm-up on other
indices: an item, or a batch for the readers that have batches) of wall time and of the
reader process's CPU time (``item cpu``, ``batch cpu``: what compares on a machine others load),
per item (``ds[i]``) and, for the readers that have one, in batches of 32 (``ds.__getitems__``,
what a DataLoader calls):

- **frame**: no ``delta_timestamps`` (both cameras, state, action);
- **history**: both cameras and the state at the 16 frames t-15..t;
- **policy**: both cameras and the state at t-1 and t, a 50-step action chunk t..t+49;
- **DataLoader**: policy items from a shuffled epoch, batch 32, 2 workers: items per second over
  the first ``--batches`` batches of the epoch (0: none; -1: the whole epoch) from the loader's
  creation, its start-up included, as an epoch costs it; beside it the first batch's wait and the
  rate after it. (Timing only what follows the first batch, as this bench did before, measured
  the batches the workers had made ahead while the first one was awaited: a loader slow to
  start looked fast, and its figure ranged from 14 to 300 items/s over four runs.)

Rounds: every reader runs once per round, one after another, and keeps its best figures over the
rounds. This machine's speed drifts by a fifth over minutes (its neighbours), and one pass per
reader measured a reader in a fast minute against another in a slow one; in rounds each reader
meets the same spread. The ratio of each round, and their median, are printed beside the best-of
ratio, so that the spread shows. Beside the targets against Lance's batches, the floor on all cores: the floor's
single-threaded rate times the cores, above what any reader decoding the same frames can reach
(floats not counted), against what the target asks of Lance's best round.

S3 (``--s3-items``, 0 to skip): the import and the Lance conversion served by the local S3 server
(tools/s3server.py, Ceph's gateway) behind tools/delayproxy.py adding ``--delay-ms`` each way; frame and policy
items in batches of 32. Targets (issue 22) printed against the figures: frame >= 4x LeRobotDataset
and >= 1.5x Lance's batches; history and policy >= 3x LeRobotDataset and >= 1.3x Lance's batches;
DataLoader >= 2x LeRobotDataset and >= 1.3x Lance; on S3 >= Lance.

Example: python tools/bench/lerobot_loader.py --episodes 4 --frames 60 --size 64 --items 32 --batches 3 --repeat 1 --rounds 1 --s3-items 0
"""

from __future__ import annotations

import argparse
import glob
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CAMERAS = ("observation.images.front", "observation.images.wrist")
READERS = ("shardstore", "lerobot-torchcodec", "lerobot-pyav", "lance", "floor")
#: LeRobotDataset's two video backends: the targets against LeRobotDataset are given against each.
LEROBOT = ("lerobot-torchcodec", "lerobot-pyav")
READS = ("frame", "history", "policy")
BATCH = 32
#: (read, reader it is compared with, what of that reader, least ratio)
TARGETS = tuple(
    row
    for read, least_lerobot, least_lance in (("frame", 4.0, 1.5), ("history", 3.0, 1.3), ("policy", 3.0, 1.3),
                                             ("DataLoader", 2.0, 1.3))
    for row in (
        *((read, peer, "items/s" if read == "DataLoader" else "item", least_lerobot) for peer in LEROBOT),
        (read, "lance", "items/s" if read == "DataLoader" else "batch", least_lance),
    )
)


def deltas(read: str, fps: int) -> dict[str, list[float]] | None:
    """The ``delta_timestamps`` of a read."""
    if read == "frame":
        return None
    obs = [k / fps for k in range(-15, 1)] if read == "history" else [-1 / fps, 0.0]
    out = {key: obs for key in (*CAMERAS, "observation.state")}
    if read == "policy":
        out["action"] = [k / fps for k in range(50)]
    return out


# -- the readers (each in its own process) ------------------------------------------------------


def open_dataset(kind: str, path: str, delta: dict[str, list[float]] | None, options: dict[str, Any] | None) -> Any:
    if kind == "shardstore":
        from shardstore.lerobot_dataset import LeRobotDataset

        return LeRobotDataset(path, delta_timestamps=delta, storage_options=options)
    if kind == "lance":
        from lerobot_lancedb import LanceDBDataset

        return LanceDBDataset(root=path, delta_timestamps=delta, storage_options=options)
    if kind == "floor":
        return Floor(path, delta)
    from lerobot.datasets.lerobot_dataset import LeRobotDataset as Theirs

    return Theirs("local/bench", root=path, delta_timestamps=delta, video_backend=kind.split("-")[1])


class Floor:
    """PyAV decoding the frames of each item and nothing else (see the module's docstring)."""

    def __init__(self, root: str, delta: dict[str, list[float]] | None) -> None:
        import av
        import pyarrow.parquet as pq

        eps = pq.read_table(glob.glob(os.path.join(root, "meta", "episodes", "*", "*.parquet"))).to_pydict()
        self.bounds = sorted(zip(eps["dataset_from_index"], eps["dataset_to_index"], strict=True))
        fps = json.loads(Path(root, "meta", "info.json").read_text())["fps"]
        self.offsets = [0] if delta is None else sorted({round(d * fps) for d in delta[CAMERAS[0]]})
        self.cams = []
        for cam in CAMERAS:
            files = sorted(glob.glob(os.path.join(root, "videos", cam, "*", "*.mp4")))
            if len(files) != 1:
                raise SystemExit(f"floor: {cam}: one video file expected (episodes_per_file = episodes), got {len(files)}")
            with av.open(files[0]) as c:
                packets = [p for p in c.demux(video=0) if p.size]
                stream = c.streams.video[0]
                codec = stream.codec_context.name, stream.codec_context.extradata
            packets.sort(key=lambda p: p.pts)
            keys = [k for k, p in enumerate(packets) if p.is_keyframe]
            decoder = av.CodecContext.create(codec[0], "r")
            decoder.extradata = codec[1]
            decoder.thread_count = 1
            self.cams.append((packets, keys, decoder, av.video.reformatter.VideoReformatter()))

    def __len__(self) -> int:
        return self.bounds[-1][1]

    def __getitem__(self, idx: int) -> list[Any]:
        import bisect

        lo, hi = next((a, b) for a, b in self.bounds if a <= idx < b)
        want = sorted({min(max(idx + o, lo), hi - 1) for o in self.offsets})
        out = []
        for packets, keys, decoder, rgb in self.cams:
            got: dict[int, Any] = {}
            k = 0
            while k < len(want):
                start = keys[bisect.bisect_right(keys, want[k]) - 1]
                last = want[k]
                while k + 1 < len(want) and keys[bisect.bisect_right(keys, want[k + 1]) - 1] <= last:
                    k += 1
                    last = want[k]
                decoder.flush_buffers()
                frames = [f for p in packets[start:last + 1] for f in decoder.decode(p)] + list(decoder.decode(None))
                for n, f in enumerate(frames, start):
                    if n in want:
                        got[n] = rgb.reformat(f, format="rgb24", threads=1).to_ndarray()
                k += 1
            out.append([got[n] for n in want])
        return out


def per_item(ds: Any, indices: list[int], repeat: int) -> tuple[float, float]:
    """Items per second of wall and of the process's CPU time (best of ``repeat`` each)."""
    best, cpu = 0.0, 0.0
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        for i in indices:
            ds[i]
        best = max(best, len(indices) / (time.perf_counter() - t0))
        cpu = max(cpu, len(indices) / max(time.process_time() - c0, 1e-9))
    return best, cpu


def batched(ds: Any, indices: list[int], repeat: int) -> tuple[float, float]:
    best, cpu = 0.0, 0.0
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        for k in range(0, len(indices), BATCH):
            ds.__getitems__(indices[k:k + BATCH])
        best = max(best, len(indices) / (time.perf_counter() - t0))
        cpu = max(cpu, len(indices) / max(time.process_time() - c0, 1e-9))
    return best, cpu


def loader(kind: str, ds: Any, batches: int, repeat: int) -> dict[str, float]:
    """Items per second over ``batches`` batches of a shuffled epoch (-1: all of it), start-up
    included; the first batch's wait and the rate after it (of the best run)."""
    import torch

    context = None
    if kind == "lance":
        from lerobot_lancedb import lance_mp_context

        context = lance_mp_context()
    best = {"items/s": 0.0, "first batch s": 0.0, "after first items/s": 0.0}
    for r in range(repeat):
        g = torch.Generator().manual_seed(r)
        dl = torch.utils.data.DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=2, generator=g,
                                         multiprocessing_context=context)
        t0 = time.perf_counter()
        it = iter(dl)
        n = len(next(it)["index"])
        t1 = time.perf_counter()
        rest = itertools.islice(it, batches - 1) if batches > 0 else it
        for batch in rest:
            n += len(batch["index"])
        t2 = time.perf_counter()
        del it
        rate = n / (t2 - t0)
        if rate > best["items/s"]:
            best = {"items/s": rate, "first batch s": t1 - t0,
                    "after first items/s": (n - BATCH) / (t2 - t1) if t2 > t1 else 0.0, "items": n}
    return best


def run(kind: str, path: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The figures of one reader (in this process)."""
    fps, repeat, options = spec["fps"], spec["repeat"], spec.get("options")
    out: dict[str, Any] = {}
    for read in spec["reads"]:
        t0 = time.perf_counter()
        ds = open_dataset(kind, path, deltas(read, fps), options)
        opened = time.perf_counter() - t0
        rng = random.Random(read)
        indices = [rng.randrange(len(ds)) for _ in range(spec["items"] if read == "frame" else spec["windows"])]
        has_batch = hasattr(ds, "__getitems__")
        # open and warm up on other indices: a batch reader on a whole batch (its first batch
        # allocates what later ones reuse: the steady state of a training loop is what is timed)
        warm = random.Random(f"{read} warm-up")
        if has_batch:
            ds.__getitems__([warm.randrange(len(ds)) for _ in range(BATCH)])
        else:
            ds[warm.randrange(len(ds))]
        out[read] = {"open s": opened}
        if not spec.get("batch_only"):
            out[read]["item"], out[read]["item cpu"] = per_item(ds, indices, repeat)
        if has_batch:
            out[read]["batch"], out[read]["batch cpu"] = batched(ds, indices, repeat)
    if spec["batches"] and kind != "floor":
        out["DataLoader"] = loader(kind, open_dataset(kind, path, deltas("policy", fps), options), spec["batches"], repeat)
    return out


# -- the driver ---------------------------------------------------------------------------------


def torchcodec_env(python: str, scratch: Path) -> dict[str, str] | None:
    """An environment in which ``python`` imports torchcodec (None when none can be made)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if _imports(python, "torchcodec.decoders", env):
        return env
    libs = subprocess.run([python, "-c", "import av, os; print(os.path.dirname(os.path.dirname(av.__file__)))"],
                          capture_output=True, text=True, env=env, check=False).stdout.strip()
    folder = scratch / "ffmpeg-libs"
    folder.mkdir(parents=True, exist_ok=True)
    for lib in glob.glob(os.path.join(libs, "av.libs", "lib*-*.so.*")):
        name = os.path.basename(lib)  # libavutil-a63ffd27.so.59.39.100 -> libavutil.so.59
        link = folder / f"{name.split('-')[0]}.so.{name.split('.so.')[1].split('.')[0]}"
        if link.is_symlink() and not link.exists():  # left by a venv installed since (dangling)
            link.unlink()
        if not link.exists():
            link.symlink_to(lib)
    env["LD_LIBRARY_PATH"] = os.pathsep.join([str(folder), os.path.join(libs, "av.libs"), env.get("LD_LIBRARY_PATH", "")])
    return env if _imports(python, "torchcodec.decoders", env) else None


def _imports(python: str, module: str, env: dict[str, str]) -> bool:
    return subprocess.run([python, "-c", f"import {module}"], capture_output=True, env=env, check=False).returncode == 0


def reader(kind: str, python: str, path: Path | str, spec: dict[str, Any], env: dict[str, str]) -> dict[str, Any] | None:
    # -P: this folder must not shadow the packages
    cmd = ["nice", python, "-P", __file__, "--run", kind, str(path), "--spec", json.dumps(spec)]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if res.returncode:
        tail = res.stderr.strip().splitlines()[-1] if res.stderr.strip() else "failed"
        print(f"{kind}: {tail}", file=sys.stderr)
        return None
    return json.loads(res.stdout.strip().splitlines()[-1])


def make_data(args: argparse.Namespace, data: Path, lerobot_env: dict[str, str]) -> dict[str, Any]:
    """The source, its import and its Lance conversion (each made once), with the times and sizes."""
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "tools"))
    from make_lerobot import make_lerobot

    from shardstore.convert.lerobot import import_lerobot

    src, ds, lance = data / "src", data / "shardstore", data / "lance"
    made: dict[str, Any] = {}
    if not src.exists():
        make_lerobot(str(src), version="v3.0", episodes=args.episodes, frames=args.frames, size=args.size,
                     fps=args.fps, gop=args.gop, image=False, episodes_per_file=args.episodes,
                     cameras={cam: "av1" for cam in CAMERAS})
    if not ds.exists():
        t0 = time.perf_counter()
        import_lerobot(str(src), str(ds))
        made["shardstore import s"] = time.perf_counter() - t0
    if not lance.exists():
        convert = str(Path(args.lerobot_python).parent / "lerobot-lance-convert")
        t0 = time.perf_counter()
        subprocess.run(["nice", convert, "--root", str(src), "--out", str(lance)], check=True, env=lerobot_env,
                       capture_output=True)
        made["lance convert s"] = time.perf_counter() - t0
    for name, folder in (("source", src), ("shardstore", ds), ("lance", lance)):
        made[f"{name} MB"] = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e6
    return made


def s3_figures(args: argparse.Namespace, data: Path, spec: dict[str, Any], envs: dict[str, dict[str, str]]) -> dict[str, Any]:
    """Frame and policy batches of shardstore and Lance over the local S3 server and the delay proxy."""
    sys.path.insert(0, str(ROOT / "tools"))
    import delayproxy
    import s3server

    try:  # Ceph's gateway: Lance's object store refuses rclone's 200 answers to range requests
        server = s3server.start(data / "rgw", kind="rgw")
    except s3server.Unavailable as e:
        print(f"S3 figures skipped: no S3 server here ({e})", file=sys.stderr)
        return {}
    out: dict[str, Any] = {}
    s3spec = {**spec, "reads": ["frame", "policy"], "items": args.s3_items, "windows": args.s3_items,
              "batches": 0, "repeat": 1, "batch_only": True}
    try:
        for name in ("shardstore", "lance"):
            server.make_bucket(name)
            server.upload(data / name, f"s3://{name}")
        with delayproxy.delay_proxy(server.endpoint, args.delay_ms, process=True) as proxy:
            ours = {**s3spec, "options": server.storage_options(proxy.endpoint)}
            out["shardstore"] = reader("shardstore", sys.executable, "s3://shardstore", ours, envs["shardstore"])
            theirs = {**s3spec, "options": {"aws_access_key_id": server.key, "aws_secret_access_key": server.secret,
                                            "aws_endpoint": proxy.endpoint, "aws_region": server.region,
                                            "allow_http": "true"}}
            lance_env = {**envs["lance"], "HF_LEROBOT_HOME": str(data / "lance-meta-cache")}
            out["lance"] = reader("lance", args.lerobot_python, "s3://lance", theirs, lance_env)
    finally:
        server.stop()
    return out


def best_of(runs: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """A reader's figures over its rounds: per read the best of each figure (``open s``: the
    least), the DataLoader's of its best round (its first batch's wait goes with that round)."""
    done = [r for r in runs if r]
    if not done:
        return None
    out: dict[str, Any] = {}
    for read in dict.fromkeys(k for r in done for k in r):
        seen = [r[read] for r in done if read in r]
        if read == "DataLoader":
            out[read] = max(seen, key=lambda d: d["items/s"])
            continue
        out[read] = {how: (min if how == "open s" else max)(d[how] for d in seen if how in d)
                     for how in dict.fromkeys(h for d in seen for h in d)}
    return out


def _rate(figures: dict[str, Any] | None, read: str, how: str) -> float | None:
    return ((figures or {}).get(read) or {}).get(how)


def report(figures: dict[str, Any], s3: dict[str, Any], delay_ms: float,
           rounds: list[dict[str, Any]] | None = None) -> list[str]:
    """The table and the targets' ratios (best of the rounds, then each round's), as lines."""
    lines = [f"{'items/s':22}" + "".join(f"{k:>20}" for k in figures)]
    rows = [(read, how) for read in READS for how in ("item", "batch", "item cpu", "batch cpu")]
    rows += [("DataLoader", "items/s"), ("DataLoader", "first batch s"), ("DataLoader", "after first items/s")]
    for read, how in rows:
        cells = [_rate(figures[k], read, how) for k in figures]
        if any(c is not None for c in cells):
            lines.append(f"{read + ' ' + how:22}" + "".join(f"{c:20.2f}" if c is not None else f"{'-':>20}" for c in cells))
    lines.append("targets (shardstore: per item against LeRobotDataset, batches against Lance's batches):")
    for read, peer, how, least in TARGETS:
        mine_how = "items/s" if read == "DataLoader" else how
        theirs, mine = _rate(figures.get(peer), read, how), _rate(figures.get("shardstore"), read, mine_how)
        if theirs and mine:
            ratio = mine / theirs
            cpu, mine_cpu = _rate(figures.get(peer), read, f"{how} cpu"), _rate(figures.get("shardstore"), read, f"{how} cpu")
            in_cpu = f", {mine_cpu / cpu:.2f}x in CPU time" if cpu and mine_cpu else ""
            per_round = [a / b for a, b in ((_rate(r.get("shardstore"), read, mine_how), _rate(r.get(peer), read, how))
                                            for r in rounds or []) if a and b]
            by_round = (f"; rounds {', '.join(f'{x:.2f}' for x in per_round)} (median {statistics.median(per_round):.2f})"
                        if len(per_round) > 1 else "")
            lines.append(f"  {read:10} vs {peer} {how:8} {ratio:6.2f}x{in_cpu}{by_round}  (target {least}x: "
                         f"{'met' if ratio >= least else 'MISSED'})")
            floor = _rate(figures.get("floor"), read, "item")
            if peer == "lance" and floor:
                cores = os.cpu_count() or 1
                lines.append(f"  {'':10}    the floor on {cores} cores {floor * cores:.1f} items/s; "
                             f"{least}x Lance's best asks {least * theirs:.1f}")
    if s3:
        lines.append(f"S3 (local Ceph gateway, {delay_ms:g} ms added each way), batches of {BATCH}, items/s:")
        for read in ("frame", "policy"):
            a, b = _rate(s3.get("shardstore"), read, "batch"), _rate(s3.get("lance"), read, "batch")
            verdict = f"{a / b:6.2f}x (target 1x: {'met' if a >= b else 'MISSED'})" if a and b else ""
            ca, cb = _rate(s3.get("shardstore"), read, "batch cpu"), _rate(s3.get("lance"), read, "batch cpu")
            per_cpu = f"; per CPU second {ca:.1f} and {cb:.1f}" if ca and cb else ""
            lines.append(f"  {read:8} shardstore {a or 0:8.2f}  lance {b or 0:8.2f}  {verdict}{per_cpu}")
    return lines


def one_round(args: argparse.Namespace, data: Path, spec: dict[str, Any], envs: dict[str, Any], kinds: list[str],
              r: int) -> dict[str, Any]:
    """Every reader of ``kinds`` once, one after another: its reads, then its DataLoader."""
    figures: dict[str, Any] = {}
    paths = {"shardstore": data / "shardstore", "lance": data / "lance"}
    for kind in kinds:
        env = envs[kind]
        python = sys.executable if kind in ("shardstore", "floor") else args.lerobot_python
        t0 = time.perf_counter()
        path = paths.get(kind, data / "src")
        figures[kind] = reader(kind, python, path, {**spec, "batches": 0}, env)
        if args.batches and kind != "floor":
            # the DataLoader in a process of its own: LeRobotDataset's torchcodec decoders, cached
            # per process, fail in the forked workers of a process that has decoded already
            # ("Could not push packet to decoder: Invalid data")
            loaded = reader(kind, python, path, {**spec, "reads": []}, env)
            if loaded is not None:
                figures[kind] = {**(figures[kind] or {}), **loaded}
        print(f"round {r + 1}: {kind} ({time.perf_counter() - t0:.0f} s, load {os.getloadavg()[0]:.1f}): "
              f"{json.dumps(figures[kind])}", file=sys.stderr, flush=True)
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--fps", type=int, default=30)
    ap.add_argument("--gop", type=int, default=2)
    ap.add_argument("--items", type=int, default=256, help="random frames per run")
    ap.add_argument("--windows", type=int, default=96, help="history and policy windows per run")
    ap.add_argument("--batches", type=int, default=100,
                    help="DataLoader batches timed from its start (0: no DataLoader; -1: a whole epoch)")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each read in a reader's process (best kept)")
    ap.add_argument("--rounds", type=int, default=3, help="passes over all readers, one after another (best kept)")
    ap.add_argument("--s3-items", type=int, default=64, help="frame and policy items over S3 (0: no S3)")
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--readers", default=",".join(READERS), help="comma-separated subset of " + ",".join(READERS))
    ap.add_argument("--lerobot-python", default=str(ROOT / ".venv-lerobot" / "bin" / "python"))
    ap.add_argument("--data", default=None, help="folder for the data (default: a temporary one; reused when given)")
    ap.add_argument("--json", default=None, help="write the figures here")
    ap.add_argument("--run", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--spec", default="{}", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        print(json.dumps(run(args.run[0], args.run[1], json.loads(args.spec))))
        return

    data = Path(args.data or tempfile.mkdtemp(prefix="bench-lerobot-loader-")).resolve()
    plain = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    codec_env = torchcodec_env(args.lerobot_python, data)
    if codec_env is None:
        print("torchcodec does not import in --lerobot-python: its readers are left out", file=sys.stderr)
    envs = {"shardstore": {**os.environ, "PYTHONPATH": str(ROOT)}, "lerobot-torchcodec": codec_env,
            "lerobot-pyav": plain, "lance": codec_env, "floor": {**os.environ, "PYTHONPATH": str(ROOT)}}
    made = make_data(args, data, codec_env or plain)
    spec = {"fps": args.fps, "items": args.items, "windows": args.windows, "batches": args.batches,
            "repeat": args.repeat, "reads": list(READS)}
    kinds = [k for k in args.readers.split(",") if k and envs[k] is not None]
    rounds = [one_round(args, data, spec, envs, kinds, r) for r in range(max(1, args.rounds))]
    figures = {kind: best_of([r.get(kind) for r in rounds]) for kind in kinds}
    s3 = s3_figures(args, data, spec, envs) if args.s3_items else {}
    load = os.getloadavg()
    lines = [f"{args.episodes} episodes x {args.frames} frames, 2 cameras {args.size}x{args.size} AV1 at {args.fps} fps, "
             f"gop {args.gop}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
             "  " + ", ".join(f"{k} {v:.1f}" for k, v in made.items()), *report(figures, s3, args.delay_ms, rounds)]
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps({"data": made, "figures": figures, "rounds": rounds, "s3": s3, "load": load},
                                              indent=1))


if __name__ == "__main__":
    main()
