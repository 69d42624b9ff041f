"""Edit benchmark: delete a third of the episodes of a LeRobot v3.0 dataset, shardstore against
``lerobot-edit-dataset --operation.type delete_episodes`` (lerobot 0.6.1, in ``.venv-lerobot``).

The data: tools/make_lerobot.py, v3.0, ``--episodes`` x ``--frames`` at ``--size`` square and ``--fps``,
two cameras (H.264 and AV1, as LeRobot's recorder writes AV1), keyframe every ``--gop`` frames (the
recorder's 2), all episodes in one file per camera (LeRobot's v3.0 writer packs files up to
500 MB), no image feature. Every third episode (0, 3, 6, ...) is deleted.

- **shardstore**: ``shardstore edit delete-episodes`` on the import, then ``shardstore export lerobot``
  (v3.0): the figure the target is about (DESIGN.md section 9: >= 50x); the same in one command
  (``edit ... --to lerobot``) and in one Python process (``shardstore.edit`` then ``export_lerobot``). The import
  (``shardstore import lerobot``) is timed too, and the whole chain import + edit + export.
- **LeRobot**: ``lerobot-edit-dataset`` on the source folder to a new folder (it decodes and encodes
  the kept frames of every video).

Each command runs once, as a process, warm page cache (the source read once first): wall time and
CPU time (user + system of the process and its children; on a shared machine the fairer figure).
Then the kept frames are compared with the source's: every ``--check-every``-th frame of every kept
episode and camera, decoded with PyAV from each output at the time its episode row gives, against
the source's decode at the source's time: shardstore's must be bit for bit equal.

Example: python tools/bench/edit.py --data /work/bench-data/edit              (50 x 300, 224x224)
         python tools/bench/edit.py --episodes 6 --frames 30 --size 64      (a quick run)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

LEROBOT_PYTHON = Path(os.environ.get("SHARDSTORE_LEROBOT_VENV", ROOT / ".venv-lerobot")) / "bin"


CPU: dict[str, float] = {}  # command label -> CPU seconds (user + system) of its process tree
EXITS: dict[str, int] = {}  # command label -> exit status


def run(cmd: list[str], env: dict[str, str] | None = None, label: str = "", done: Path | None = None) -> float:
    """Wall seconds of ``cmd`` (must succeed, or have written ``done``: lerobot-edit-dataset may
    abort at interpreter exit, "terminate called without an active exception", after saving its
    dataset; the exit status is kept in ``EXITS``); its CPU seconds (children included) go to ``CPU``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    EXITS[label] = res.returncode
    if res.returncode and not (done is not None and done.exists()):
        raise SystemExit(f"{' '.join(cmd)} failed:\n{res.stderr[-3000:]}")
    CPU[label] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall


def warm(path: Path) -> None:
    for dirpath, _, files in os.walk(path):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                while f.read(1 << 22):
                    pass


#: The same edit and export from Python in one process (``shardstore.edit`` then ``export_lerobot``):
#: what a script pays, one interpreter start where the two commands pay two.
API = """
import sys
from shardstore.edit import delete_episodes
from shardstore.convert.lerobot import export_lerobot
store, edited, exported, listed = sys.argv[1:]
delete_episodes(store, edited, episodes=listed)
export_lerobot(edited, exported)
"""


def shardstore_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "shardstore.cli", *args]


def episode_rows(root: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    for path in sorted((root / "meta/episodes").rglob("*.parquet")):
        rows += pq.read_table(path).to_pylist()
    return sorted(rows, key=lambda r: r["episode_index"])


def compare(src: Path, out: Path, kept: list[int], frames: int, fps: int, every: int) -> tuple[int, int]:
    """(frames compared, frames not bitwise equal) between ``out``'s kept episodes and ``src``'s."""
    from shardstore.episodes.video import FrameDecoder

    info = json.loads((src / "meta/info.json").read_text())
    cams = [k for k, f in info["features"].items() if f["dtype"] == "video"]
    src_rows, out_rows = episode_rows(src), episode_rows(out)
    out_info = json.loads((out / "meta/info.json").read_text())
    decoder = FrameDecoder(lambda name: open(name, "rb"))  # noqa: SIM115
    compared = differ = 0
    for new, old in enumerate(kept):
        for cam in cams:
            def where(root: Path, inf: dict[str, Any], row: dict[str, Any], cam: str = cam) -> tuple[str, float]:
                rel = inf["video_path"].format(video_key=cam, chunk_index=row[f"videos/{cam}/chunk_index"],
                                               file_index=row[f"videos/{cam}/file_index"])
                return str(root / rel), float(row[f"videos/{cam}/from_timestamp"])

            fs, ts = where(src, info, src_rows[old])
            fo, to = where(out, out_info, out_rows[new])
            for i in range(0, frames, every):
                a = decoder.frame(fo, to + i / fps)
                b = decoder.frame(fs, ts + i / fps)
                compared += 1
                differ += int(not np.array_equal(a, b))
    decoder.close()
    return compared, differ


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--fps", type=int, default=30)
    ap.add_argument("--gop", type=int, default=2)
    ap.add_argument("--check-every", type=int, default=10, help="compare every n-th frame of each kept episode")
    ap.add_argument("--data", default=None, help="keep the source here (made once, reused)")
    ap.add_argument("--json", default=None, help="write the figures to this file")
    a = ap.parse_args()

    from make_lerobot import make_lerobot

    data = Path(a.data or tempfile.mkdtemp(prefix="bench-edit-"))
    tag = f"v30-{a.episodes}x{a.frames}-{a.size}px-{a.fps}fps-g{a.gop}"
    src = data / tag
    if not (src / "meta/info.json").exists():
        print(f"making {src} ...", flush=True)
        shutil.rmtree(src, ignore_errors=True)
        make_lerobot(str(src), version="v3.0", episodes=a.episodes, frames=a.frames, size=a.size, fps=a.fps,
                     gop=a.gop, episodes_per_file=a.episodes, chunks_size=1000, image=False)
    work = Path(tempfile.mkdtemp(prefix="edit-run-", dir=data))
    gone = list(range(0, a.episodes, 3))
    kept = [e for e in range(a.episodes) if e not in gone]
    listed = ",".join(map(str, gone))
    warm(src)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: modules compiled once, not per process
    subprocess.run([sys.executable, "-c", "import shardstore.cli, shardstore.edit, shardstore.convert.lerobot"],
                   env=env, check=True)
    r: dict[str, Any] = {"episodes": a.episodes, "frames": a.frames, "size": a.size, "fps": a.fps, "gop": a.gop,
                         "deleted": len(gone), "source_bytes": sum(p.stat().st_size for p in src.rglob("*") if p.is_file())}
    try:
        store, edited, exported = work / "store", work / "edited", work / "exported"
        r["import_s"] = run(shardstore_cmd("import", "lerobot", str(src), str(store), "-q"), env, "import")
        r["edit_s"] = run(shardstore_cmd("edit", "delete-episodes", str(store), str(edited), "--episodes", listed,
                                         "-q"), env, "edit")
        r["export_s"] = run(shardstore_cmd("export", "lerobot", str(edited), str(exported), "-q"), env, "export")
        r["shardstore_s"] = r["edit_s"] + r["export_s"]
        r["to_s"] = run(shardstore_cmd("edit", "delete-episodes", str(store), str(work / "to-exported"), "--episodes",
                                       listed, "--to", "lerobot", "-q"), env, "to")
        r["api_s"] = run([sys.executable, "-c", API, str(store), str(work / "api-edited"), str(work / "api-exported"),
                          listed], env, "api")
        r["chain_s"] = r["import_s"] + r["shardstore_s"]
        lerobot_out = work / "lerobot"
        lerobot_env = dict(os.environ, HF_HUB_OFFLINE="1")
        lerobot_env.pop("PYTHONPATH", None)
        r["lerobot_s"] = run([str(LEROBOT_PYTHON / "lerobot-edit-dataset"), "--repo_id", "bench/src", "--root", str(src),
                              "--new_repo_id", "bench/edited", "--new_root", str(lerobot_out),
                              "--operation.type", "delete_episodes",
                              "--operation.episode_indices", json.dumps(gone)], lerobot_env, "lerobot",
                             done=lerobot_out / "meta/stats.json")
        r["exits"] = dict(EXITS)
        r["cpu_s"] = dict(CPU)
        r["speedup"] = r["lerobot_s"] / r["shardstore_s"]
        r["speedup_cpu"] = CPU["lerobot"] / (CPU["edit"] + CPU["export"])
        r["speedup_to"], r["speedup_to_cpu"] = r["lerobot_s"] / r["to_s"], CPU["lerobot"] / CPU["to"]
        r["speedup_api"], r["speedup_api_cpu"] = r["lerobot_s"] / r["api_s"], CPU["lerobot"] / CPU["api"]
        r["speedup_chain"] = r["lerobot_s"] / r["chain_s"]
        r["shardstore_checked"], r["shardstore_differ"] = compare(src, exported, kept, a.frames, a.fps, a.check_every)
        r["lerobot_checked"], r["lerobot_differ"] = compare(src, lerobot_out, kept, a.frames, a.fps, a.check_every)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(r)
    if a.json:
        Path(a.json).write_text(json.dumps(r, indent=2))


def report(r: dict[str, Any]) -> None:
    print(f"LeRobot v3.0, {r['episodes']} episodes x {r['frames']} frames, 2 cameras {r['size']}x{r['size']} "
          f"at {r['fps']} fps, GOP {r['gop']} ({r['source_bytes'] / 1e6:.1f} MB); delete {r['deleted']} episodes")
    cpu = r["cpu_s"]
    print("                                     wall s    CPU s")
    print(f"  shardstore edit delete-episodes : {r['edit_s']:8.2f} {cpu['edit']:8.2f}")
    print(f"  shardstore export lerobot       : {r['export_s']:8.2f} {cpu['export']:8.2f}")
    print(f"  shardstore edit + export        : {r['shardstore_s']:8.2f} {cpu['edit'] + cpu['export']:8.2f}"
          f"   {r['speedup']:.1f}x lerobot-edit-dataset's wall time, {r['speedup_cpu']:.1f}x its CPU time")
    print(f"  edit ... --to lerobot (1 command): {r['to_s']:8.2f} {cpu['to']:8.2f}   {r['speedup_to']:.1f}x wall, "
          f"{r['speedup_to_cpu']:.1f}x CPU")
    print(f"  (the same from Python, 1 process: {r['api_s']:8.2f} {cpu['api']:8.2f}   {r['speedup_api']:.1f}x wall, "
          f"{r['speedup_api_cpu']:.1f}x CPU)")
    print(f"  (shardstore import lerobot      : {r['import_s']:8.2f} {cpu['import']:8.2f};  import + edit + export "
          f"{r['chain_s']:.2f} s wall = {r['speedup_chain']:.1f}x)")
    print(f"  lerobot-edit-dataset            : {r['lerobot_s']:8.2f} {cpu['lerobot']:8.2f}")
    print(f"  kept frames bitwise equal to the source: shardstore {r['shardstore_checked'] - r['shardstore_differ']}"
          f"/{r['shardstore_checked']}, LeRobot {r['lerobot_checked'] - r['lerobot_differ']}/{r['lerobot_checked']}")


if __name__ == "__main__":
    main()
