"""Conversion benchmark: each robot format into each other with ``shardstore convert``, in steps/s,
against the floor: the formats' own libraries reading the source and writing the target, nothing else.

Sources (``--episodes`` x ``--steps``, a ``--size`` square uint8 image and a float vector per step),
each written by its own library: minari's ``create_dataset_from_buffers`` (HDF5 and Arrow), LeRobot's
layout by pyarrow + PyAV (tools/make_lerobot.py, an H.264 camera), TFDS's ``store_as_tfds_dataset``
(in .venv-tfds), webdataset's ``TarWriter`` (the episode-frame layout).

The floor of a pair A -> B is the read of A by A's library plus the write of B by B's, each timed
alone right after the pair's conversion (so both see the same load on a shared machine; ``--repeat N``
keeps the fastest of N of each), on the same number of steps and shapes, and on the same pictures where the encode's cost
depends on them (``pictures``: a LeRobot source's frames as decoded from its H.264 files, whose PNG
encode takes TFDS 2.6x its encode of noise at 64 px; noise for the other sources): minari ``iterate_episodes`` / ``create_dataset_from_buffers``;
pyarrow + PyAV decoding every frame / LeRobot's ``LeRobotDataset`` recorder (in .venv-lerobot,
v3.0); TFDS ``as_dataset`` iterated / ``store_as_tfds_dataset`` (in .venv-tfds); tarfile + pickle
/ ``TarWriter`` of pickles. A figure whose library or venv is missing is left out and said so.
shardstore's figure is ``shardstore.convert(src, out, to=...)`` end to end (import into a
temporary dataset, export), the ratio its time over the floor's (target: within 1.5x), in wall time and in CPU time (user +
system of this process, its threads and children; a peer's own clock: steadier than wall time on a
shared machine).

RLDS -> LeRobot v3.0 is also held against the conversion LeRobot users run today (the peer: LeRobot's
port script, examples/port_datasets/port_droid.py of lerobot 0.6.1, done on this source by
tools/bench/port_rlds_lerobot.py: tfds reads, ``LeRobotDataset`` writes, in .venv-lerobot-rlds, which
``make bench-rlds-peer`` makes), timed by its own clock from after its imports, its output and
shardstore's loaded with ``LeRobotDataset`` (episode and frame counts checked). Without that venv the
bench says so and goes on.

Example (quick): .venv/bin/python tools/bench/convert.py --episodes 20 --steps 20 --work /tmp/bench-convert
Without the venvs: .venv/bin/python tools/bench/convert.py --formats minari-hdf5,minari-arrow,episode-wds
One pair (its two formats' floors alone): .venv/bin/python tools/bench/convert.py --pairs lerobot-v2.1:rlds
The peer's pair: .venv/bin/python tools/bench/convert.py --pairs rlds:lerobot-v3.0 --episodes 200 --steps 20 --size 64
Full: .venv/bin/python tools/bench/convert.py --episodes 200 --steps 50 --json docs/bench/convert.json
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import shutil
import subprocess
import sys
import tarfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import numpy as np  # noqa: E402

FORMATS = ("minari-hdf5", "minari-arrow", "lerobot-v2.1", "lerobot-v3.0", "rlds", "episode-wds")
TO = {"minari-hdf5": ("minari", {"backend": "hdf5"}), "minari-arrow": ("minari", {"backend": "arrow"}),
      "lerobot-v2.1": ("lerobot", {"version": "2.1", "fps": 10}), "lerobot-v3.0": ("lerobot", {"version": "3.0", "fps": 10}),
      "rlds": ("rlds", {}), "episode-wds": ("episode-wds", {})}
CAMERA = "observation.images.front"
PEER_PAIR, PEER_VENV = ("rlds", "lerobot-v3.0"), ".venv-lerobot-rlds"
PEER = "LeRobot's port script"

TFDS_WRITE = """
import sys, time, numpy as np, tensorflow as tf, tensorflow_datasets as tfds
out, episodes, steps, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
pics = np.load(sys.argv[5]) if len(sys.argv) > 5 else None
f = tfds.features
feats = f.FeaturesDict({"steps": f.Dataset({
    "observation": f.FeaturesDict({"image": f.Image(shape=(size, size, 3), encoding_format="png"),
                                   "vector": f.Tensor(shape=(8,), dtype=np.float32)}),
    "action": f.Tensor(shape=(4,), dtype=np.float32), "reward": f.Scalar(dtype=np.float32),
    "is_first": f.Scalar(dtype=np.bool_), "is_last": f.Scalar(dtype=np.bool_), "is_terminal": f.Scalar(dtype=np.bool_)})})
rng = np.random.default_rng(0)
data = [(e, {"steps": [{"observation": {"image": rng.integers(0, 255, (size, size, 3), dtype=np.uint8)
                                                 if pics is None else pics[e * steps + i],
                                        "vector": rng.standard_normal(8).astype(np.float32)},
                        "action": rng.standard_normal(4).astype(np.float32), "reward": np.float32(0),
                        "is_first": i == 0, "is_last": i == steps - 1, "is_terminal": i == steps - 1}
                       for i in range(steps)]}) for e in range(episodes)]
t0, c0 = time.perf_counter(), time.process_time()
tfds.dataset_builders.store_as_tfds_dataset(name="bench", version="1.0.0", features=feats, data_dir=out,
    split_datasets={"train": data}, disable_shuffling=True)
print("TIME", time.perf_counter() - t0, time.process_time() - c0)
"""

TFDS_READ = """
import sys, time, tensorflow as tf, tensorflow_datasets as tfds
t0, c0 = time.perf_counter(), time.process_time()
b = tfds.builder_from_directory(sys.argv[1])
n = 0
for ep in tfds.as_numpy(b.as_dataset(split="train")):
    for step in ep["steps"]:
        n += 1
print("TIME", time.perf_counter() - t0, time.process_time() - c0, n)
"""  # TensorFlow is imported before the clock starts: the floor is TFDS's work, not its start-up

LEROBOT_WRITE = """
import sys, time, numpy as np
from lerobot.datasets.lerobot_dataset import LeRobotDataset
out, episodes, steps, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
pics = np.load(sys.argv[5]) if len(sys.argv) > 5 else None
feats = {"observation.images.front": {"dtype": "video", "shape": [size, size, 3], "names": ["height", "width", "channels"]},
         "observation.state": {"dtype": "float32", "shape": [8], "names": None},
         "action": {"dtype": "float32", "shape": [4], "names": None}}
rng = np.random.default_rng(0)
frames = [[{"observation.images.front": rng.integers(0, 255, (size, size, 3), dtype=np.uint8)
                                        if pics is None else pics[e * steps + i],
            "observation.state": rng.standard_normal(8).astype(np.float32),
            "action": rng.standard_normal(4).astype(np.float32), "task": "bench"} for i in range(steps)]
          for e in range(episodes)]
t0, c0 = time.perf_counter(), time.process_time()
ds = LeRobotDataset.create("bench/convert", 10, feats, root=out, use_videos=True)
for ep in frames:
    for fr in ep:
        ds.add_frame(fr)
    ds.save_episode()
ds.finalize()
print("TIME", time.perf_counter() - t0, time.process_time() - c0)
"""


Times = tuple[float, float]  # wall seconds, CPU seconds (user + system, threads and children included)


def start() -> Times:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter(), own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def since(t0: Times) -> Times:
    now = start()
    return now[0] - t0[0], now[1] - t0[1]


def venv_python(name: str) -> Path | None:
    p = ROOT / name / "bin" / "python"
    return p if p.exists() else None


def clean_env() -> dict[str, str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    env.pop("PYTHONPATH", None)
    return env


def run_peer(python: Path, code: str, *args: object) -> list[float]:
    """The numbers of the peer's ``TIME`` line: its own clock (wall, CPU), its start-up left out."""
    return [float(x) for x in tagged(run([str(python), "-c", code, *map(str, args)]), "TIME")]


def run(argv: list[str], **env: str) -> str:
    """A peer's standard output; its last error line (or the tail of its stderr) raised if it fails."""
    res = subprocess.run(argv, capture_output=True, text=True, timeout=3600, env={**clean_env(), **env})
    if res.returncode != 0:
        errors = [x for x in res.stderr.splitlines() if "Error" in x and "libav" not in x and "torchcodec" not in x]
        raise RuntimeError(f"exit {res.returncode}: {errors[-1] if errors else res.stderr[-300:]}")
    return res.stdout


def tagged(stdout: str, tag: str) -> list[str]:
    """The words after ``tag`` on the peer's last line that starts with it."""
    line = next((x for x in reversed(stdout.splitlines()) if x.startswith(tag + " ")), None)
    if line is None:
        raise RuntimeError(f"no {tag} line in the peer's output")
    return line.split()[1:]


# ----- sources --------------------------------------------------------------------------------------
def make_sources(work: Path, episodes: int, steps: int, size: int, chosen: list[str]) -> dict[str, Path]:
    from make_episode_wds import rollouts, write_shard
    from make_lerobot import make_lerobot
    from make_minari import make_minari

    src = work / "sources"
    out: dict[str, Path] = {}
    out["minari-hdf5"] = make_minari(src / "minari", "bench/hdf5-v0", episodes, steps, image=(size, size, 3))
    out["minari-arrow"] = make_minari(src / "minari", "bench/arrow-v0", episodes, steps, image=(size, size, 3),
                                      data_format="arrow")
    for v in ("v2.1", "v3.0"):
        path = src / f"lerobot-{v}"
        if f"lerobot-{v}" not in chosen:
            continue
        if not path.exists():
            make_lerobot(str(path), version=v, episodes=episodes, frames=steps, size=size, cameras={CAMERA: "h264"},
                         chunks_size=1000, episodes_per_file=50, image=False)
        out[f"lerobot-{v}"] = path
    tfds = venv_python(".venv-tfds")
    if tfds is not None and "rlds" in chosen:
        if not (src / "tfds" / "bench" / "1.0.0").exists():
            run_peer(tfds, TFDS_WRITE, src / "tfds", episodes, steps, size)
        out["rlds"] = src / "tfds" / "bench" / "1.0.0"
    task = src / "episode-frame" / "demos" / "bench" / "reach"
    if not task.exists():
        write_shard(task / "shard-000000.tar", {"task_name": "reach"},
                    rollouts(np.random.default_rng(0), [steps] * episodes, (size, size, 3)))
    out["episode-wds"] = task
    return out


# ----- the floor: each format's own library --------------------------------------------------------
def read_floor(fmt: str, path: Path) -> Times | None:
    t0 = start()
    if fmt.startswith("minari"):
        from minari.dataset.minari_dataset import MinariDataset

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in MinariDataset(str(path / "data")).iterate_episodes():
                pass
    elif fmt.startswith("lerobot"):
        import av
        import pyarrow.parquet as pq

        for p in sorted((path / "data").rglob("*.parquet")):
            pq.read_table(p)
        for p in sorted((path / "videos").rglob("*.mp4")):
            with av.open(str(p)) as c:
                for frame in c.decode(video=0):
                    frame.to_ndarray(format="rgb24")
    elif fmt == "rlds":
        tfds = venv_python(".venv-tfds")
        return None if tfds is None else _times(run_peer(tfds, TFDS_READ, path))
    else:
        for shard in sorted(path.glob("*.tar")):
            with tarfile.open(shard) as tar:
                for m in tar:
                    if m.isfile():
                        pickle.loads(tar.extractfile(m).read())  # type: ignore[union-attr]
    return since(t0)


def _times(peer: list[float]) -> Times:
    return peer[0], peer[1]


def pictures(src: str, path: Path, work: Path) -> tuple[str, Path | None]:
    """The camera pictures of source ``src`` (at ``path``) for the floors that encode images (TFDS's
    PNG, LeRobot's AV1), whose cost depends on the picture: a LeRobot source's frames as its read floor
    decodes them (PyAV), saved as .npy for the peer; the other sources hold noise, which the peers draw
    themselves. Minari and the episode-frame layout store raw bytes, the same cost for any picture."""
    if not src.startswith("lerobot"):
        return "noise", None
    import av

    out = work / "floor" / f"pictures-{src}.npy"
    if not out.exists():
        frames = []
        for p in sorted((path / "videos").rglob("*.mp4")):
            with av.open(str(p)) as c:
                frames += [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
        out.parent.mkdir(parents=True, exist_ok=True)
        np.save(out, np.stack(frames))
    return src, out


def write_floor(fmt: str, work: Path, episodes: int, steps: int, size: int, pics: Path | None = None) -> Times | None:
    out = work / "floor" / fmt
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    if fmt.startswith("minari"):
        import gymnasium as gym
        import minari
        from minari.data_collector import EpisodeBuffer

        os.environ["MINARI_DATASETS_PATH"] = str(out)
        obs_space = gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (size, size, 3), np.uint8),
                                     "vector": gym.spaces.Box(-np.inf, np.inf, (8,), np.float32)})
        buffers = [EpisodeBuffer(id=i, observations={"image": rng.integers(0, 256, (steps + 1, size, size, 3), dtype=np.uint8),
                                                     "vector": rng.standard_normal((steps + 1, 8), dtype=np.float32)},
                                 actions=rng.uniform(-1, 1, (steps, 4)).astype(np.float32), rewards=np.zeros(steps),
                                 terminations=np.arange(steps) == steps - 1, truncations=np.zeros(steps, bool))
                   for i in range(episodes)]
        t0 = start()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            minari.create_dataset_from_buffers("floor/w-v0", buffers, observation_space=obs_space,
                                               action_space=gym.spaces.Box(-1, 1, (4,), np.float32),
                                               data_format=fmt.split("-")[1], jpeg_encoding=False)
        return since(t0)
    if fmt == "lerobot-v3.0":
        py = venv_python(".venv-lerobot")
        return None if py is None else _times(run_peer(py, LEROBOT_WRITE, out, episodes, steps, size, *([pics] if pics else [])))
    if fmt == "rlds":
        py = venv_python(".venv-tfds")
        return None if py is None else _times(run_peer(py, TFDS_WRITE, out, episodes, steps, size, *([pics] if pics else [])))
    if fmt == "episode-wds":
        from make_episode_wds import rollouts, write_shard

        frames = rollouts(rng, [steps] * episodes, (size, size, 3))
        t0 = start()
        write_shard(out / "shard-000000.tar", {"task_name": "floor"}, frames)
        return since(t0)
    return None  # LeRobot v2.1: lerobot 0.6 no longer writes it


# ----- shardstore ------------------------------------------------------------------------------------
def floor_write(tgt: str, kind: str, work: Path, episodes: int, steps: int, size: int, pics: Path | None) -> Times | None:
    """The write floor of ``tgt`` on ``kind`` pictures; a peer that fails is said, and the pair has no floor."""
    try:
        return write_floor(tgt, work, episodes, steps, size, pics)
    except RuntimeError as e:
        print(f"write floor of {tgt} ({kind} pictures): {e}")
        return None


def fastest(best: Times | None, new: Times | None) -> Times | None:
    """The run of the two with less wall time (the least disturbed by the machine's other work)."""
    if best is None or new is None:
        return best or new
    return new if new[0] < best[0] else best


def decisions(fmt: str, tgt: str) -> dict[str, object]:
    """What a user decides for the pair (the flags the error names): pickled steps, a task for
    episodes that name none, the observation after the last action (kept, as the floor's sources have it)."""
    out: dict[str, object] = {"allow_pickle": True} if fmt == "episode-wds" else {}
    if tgt.startswith("lerobot") and not fmt.startswith("lerobot"):
        out["task"] = "bench"
        if fmt.startswith("minari") or fmt == "episode-wds":
            out["final_observation"] = "keep"
    return out


def convert_time(src: Path, fmt: str, tgt: str, work: Path) -> tuple[Times | None, str]:
    import shardstore

    to, options = TO[tgt]
    out = work / "out" / f"{fmt}-to-{tgt}"
    if to == "rlds":
        out = out / "1.0.0"
    shutil.rmtree(out.parent if to == "rlds" else out, ignore_errors=True)
    options = {**options, **decisions(fmt, tgt)}
    t0 = start()
    try:
        shardstore.convert(src, out, to=to, **options)
    except Exception as e:  # noqa: BLE001  (a failed pair is a figure too: reported, not timed)
        return None, f"{type(e).__name__}: {str(e)[:120]}"
    return since(t0), ""


# ----- the peer: what LeRobot users run (RLDS -> LeRobot v3.0) -------------------------------------
def peer_port(src: Path, work: Path, episodes: int, steps: int) -> dict[str, object]:
    """LeRobot's port script on the RLDS source (tools/bench/port_rlds_lerobot.py in its venv), with the
    decisions shardstore is given (fps, task), and both outputs loaded by ``LeRobotDataset`` there."""
    py = venv_python(PEER_VENV)
    if py is None:
        return {"error": f"no {PEER_VENV} (`make bench-rlds-peer` makes it: tfds and lerobot 0.6.1 in one Python)"}
    script = str(ROOT / "tools" / "bench" / "port_rlds_lerobot.py")
    out = work / "out" / "rlds-to-lerobot-v3.0-peer"
    shutil.rmtree(out, ignore_errors=True)
    task = str(decisions(*PEER_PAIR)["task"])
    try:
        stdout = run([str(py), script, str(src), str(out), "--fps", str(TO[PEER_PAIR[1]][1]["fps"]), "--task", task],
                     HF_HUB_OFFLINE="1")
        wall, cpu = (float(x) for x in tagged(stdout, "TIME"))
        peer_loaded = tagged(stdout, "LOADED")
        ours = work / "out" / f"{PEER_PAIR[0]}-to-{PEER_PAIR[1]}"
        ours_loaded = tagged(run([str(py), script, str(src), str(ours), "--load-only"], HF_HUB_OFFLINE="1"), "LOADED")
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        return {"error": str(e)}
    expected = [str(episodes), str(episodes * steps)]
    wrong = [f"{who} loads {got[0]} episodes, {got[1]} frames" for who, got in (("the peer's output", peer_loaded),
             ("shardstore's output", ours_loaded)) if got[:2] != expected]
    return {"name": PEER, "script": "lerobot 0.6.1 examples/port_datasets/port_droid.py (tools/bench/port_rlds_lerobot.py)",
            "seconds": wall, "cpu_seconds": cpu, "steps_per_s": episodes * steps / wall,
            "loaded": {"peer": peer_loaded, "shardstore": ours_loaded},
            "error": "; ".join(wrong) + (f" (expected {expected[0]} episodes, {expected[1]} frames)" if wrong else "")}


def print_peer(row: dict) -> None:
    """The peer's line under its pair: steps/s, wall and CPU seconds beside shardstore's and the floor's."""
    peer = row["peer"]
    if peer.get("seconds") is None:
        print(f"  peer: {PEER}: left out: {peer['error']}")
        return
    print(f"  peer: {PEER + ' (lerobot 0.6.1)':32} {peer['steps_per_s']:11,.0f}  wall / CPU seconds: peer "
          f"{peer['seconds']:.1f} / {peer['cpu_seconds']:.1f}" + (
              f", shardstore {row['seconds']:.1f} / {row['cpu_seconds']:.1f}" if row["seconds"] else "") + (
              f", floor {row['floor_seconds']:.1f} / {row['floor_cpu_seconds']:.1f}" if row["floor_seconds"] else "") + (
              f"; loaded: peer {' '.join(peer['loaded']['peer'][:2])}, shardstore "
              f"{' '.join(peer['loaded']['shardstore'][:2])} (episodes frames)") + (
              f"; shardstore's time / the peer's: {peer['ratio']:.2f}x wall, {peer['cpu_ratio']:.2f}x CPU" if "ratio" in peer
              else "") + (f"  {peer['error']}" if peer["error"] else ""))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=200)
    p.add_argument("--steps", type=int, default=50, help="Steps per episode.")
    p.add_argument("--size", type=int, default=64, help="Side of the square uint8 image (LeRobot's AV1 encoder needs 64 or so).")
    p.add_argument("--work", default="/work/bench-data/convert", help="Folder for the sources and outputs.")
    p.add_argument("--json", default=None, help="Write the figures as JSON here.")
    p.add_argument("--formats", default=",".join(FORMATS), help="Comma-separated formats to convert between.")
    p.add_argument("--pairs", default=None,
                   help="Only these pairs, comma-separated SOURCE:TARGET (e.g. lerobot-v2.1:rlds); their formats alone are read.")
    p.add_argument("--repeat", type=int, default=1, help="Time each pair and its floor this many times; the fastest counts.")
    args = p.parse_args()
    pairs = [tuple(x.split(":", 1)) for x in args.pairs.split(",") if x] if args.pairs else None
    chosen = list(dict.fromkeys(f for pair in pairs for f in pair)) if pairs else [f for f in args.formats.split(",") if f]
    unknown = sorted(set(chosen) - set(FORMATS))
    if unknown:
        p.error(f"unknown formats {unknown}; of {', '.join(FORMATS)}")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    steps = args.episodes * args.steps
    sources = {f: p for f, p in make_sources(work, args.episodes, args.steps, args.size, chosen).items() if f in chosen}
    missing = [f for f in chosen if f not in sources]
    todo = [(a, b) for a in sources for b in chosen if a != b and (pairs is None or (a, b) in pairs)]
    reads: dict[str, Times | None] = {}
    writes: dict[str, Times | None] = {}  # per "target (pictures)"
    rows = []
    print(f"{args.episodes} episodes x {args.steps} steps, {args.size}x{args.size} images; steps/s (floor: the "
          f"formats' own read + write, timed next to each conversion; fastest of {args.repeat})")
    print(f"{'source -> target':34} {'shardstore':>11} {'floor':>11} {'ratio':>6} {'CPU ratio':>9}")
    for fmt, tgt in todo:
        kind, pics = pictures(fmt, sources[fmt], work)
        took, read, write, error = None, None, None, ""
        for _ in range(args.repeat):  # the pair and its floor back to back: the same load for both
            t, error = convert_time(sources[fmt], fmt, tgt, work)
            r = read_floor(fmt, sources[fmt])
            w = floor_write(tgt, kind, work, args.episodes, args.steps, args.size, pics)
            took, read, write = fastest(took, t), fastest(read, r), fastest(write, w)
        reads[fmt], writes[f"{tgt} ({kind})"] = read, write
        floor = (read[0] + write[0], read[1] + write[1]) if read is not None and write is not None else None
        seconds = took[0] if took else None
        row = {"source": fmt, "target": tgt, "steps": steps, "seconds": seconds,
               "floor_seconds": floor[0] if floor else None,
               "cpu_seconds": took[1] if took else None, "floor_cpu_seconds": floor[1] if floor else None,
               "steps_per_s": steps / seconds if seconds else None,
               "floor_steps_per_s": steps / floor[0] if floor else None,
               "ratio": seconds / floor[0] if seconds and floor else None,
               "cpu_ratio": took[1] / floor[1] if took and floor else None, "error": error}
        rows.append(row)
        fig = f"{row['steps_per_s']:11,.0f}" if seconds else f"{'failed':>11}"
        fl = f"{row['floor_steps_per_s']:11,.0f}" if floor else f"{'n/a':>11}"
        ratio = f"{row['ratio']:5.2f}x" if row["ratio"] else f"{'':>6}"
        cpu = f"{row['cpu_ratio']:8.2f}x" if row["cpu_ratio"] else f"{'':>9}"
        print(f"{fmt + ' -> ' + tgt:34} {fig} {fl} {ratio} {cpu}" + (f"  {error}" if error else ""))
        if (fmt, tgt) == PEER_PAIR:
            row["peer"] = peer = peer_port(sources[fmt], work, args.episodes, args.steps)
            if took and peer.get("seconds"):  # shardstore's time over the peer's
                peer.update(ratio=took[0] / peer["seconds"], cpu_ratio=took[1] / peer["cpu_seconds"])
            print_peer(row)
    if missing:
        print(f"left out (no library or venv): {', '.join(missing)}")
    result = {"episodes": args.episodes, "steps_per_episode": args.steps, "size": args.size,
              "load_average": os.getloadavg(),
              "read_floor_seconds": {f: t and t[0] for f, t in reads.items()},
              "read_floor_cpu_seconds": {f: t and t[1] for f, t in reads.items()},
              "write_floor_seconds": {f: t and t[0] for f, t in writes.items()},
              "write_floor_cpu_seconds": {f: t and t[1] for f, t in writes.items()}, "pairs": rows, "missing": missing}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
