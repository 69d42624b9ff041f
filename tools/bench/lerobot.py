"""LeRobot benchmark: random frames, 16-frame windows and import, against the way LeRobotDataset reads.

The data: a LeRobot v2.1 dataset written by tools/make_lerobot.py (``--episodes`` x ``--frames``,
``observation.state`` and ``action`` vectors, one ``--size``-square camera in AV1 (libsvtav1, as
LeRobot's recorder) and one in H.264 (libx264), keyframe every ``--gop`` frames: the recorder's
default is 2). It is imported three times: as is (mp4s whole in the video store), the same with
``--granularity episode`` (one sample per episode: far smaller), and with ``--frames jpg``.

Figures, each per second, warm page cache, one process, fixed seed, best of ``--repeat`` runs
interleaved so that machine load hits every reader alike:

- **random frame**: a random (episode, frame) item: state + action + both cameras decoded to HWC
  uint8. Peer: what LeRobotDataset does per item, reading the source: the episode's parquet read
  with pyarrow for the row, and per camera the mp4 opened with PyAV, sought to the keyframe at or
  before the frame's timestamp and decoded forward to it. shardstore: ``episodes(ds).step(e, t)``
  (frames decoded from the video store, open decoders cached), and ``step`` on the ``--frames jpg``
  import with the JPEGs decoded (PIL) so it also hands out arrays.
- **window**: 16 consecutive frames ending at a random frame (an observation history), same three
  readers: the peer reads the rows and decodes each camera once from the keyframe before the first
  frame through the last (one seek per camera, as LeRobot's decoder does for a set of timestamps).
- **import**: frames/s and MB/s of ``import_lerobot`` (as is, and ``--frames jpg``), against
  ``cp -r`` of the same source files.

Targets (DESIGN.md section 9): random frame >= 3x the peer, windows >= 5x, ``--frames`` >= 20x.

Example: python tools/bench/lerobot.py --episodes 200 --frames 300 --data /work/bench-data/lerobot
         python tools/bench/lerobot.py --episodes 8 --frames 60 --items 100   (a quick run)
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import av  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from av.video.reformatter import VideoReformatter  # noqa: E402
from make_lerobot import make_lerobot  # noqa: E402
from PIL import Image  # noqa: E402

import shardstore  # noqa: E402
from shardstore.convert.lerobot import import_lerobot  # noqa: E402
from shardstore.episodes import video  # noqa: E402

CAMS = {"observation.images.front": "av1", "observation.images.wrist": "h264"}
SEED = 20240601
WINDOW = 16


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# ----- the peer: LeRobotDataset's way, one item at a time from the source files ----------------------
class Peer:
    """Reads items as LeRobotDataset does, without its caches: parquet row(s) + PyAV per camera."""

    def __init__(self, src: Path, fps: float) -> None:
        self.src, self.fps = src, fps
        self.info = json.loads((src / "meta/info.json").read_text())
        # the same kept RGB converters as shardstore's decoder (not a frame's own to_ndarray, which
        # builds a scaler per call): the comparison is about reading, not about a PyAV detail
        self.reformatters: dict[Any, Any] = {}

    def _data(self, ep: int) -> Path:
        return self.src / self.info["data_path"].format(
            episode_chunk=ep // self.info["chunks_size"], episode_index=ep
        )

    def _video(self, ep: int, key: str) -> Path:
        chunk = ep // self.info["chunks_size"]
        return self.src / self.info["video_path"].format(episode_chunk=chunk, video_key=key, episode_index=ep)

    def _frames(self, path: Path, first: float, last: float) -> list[np.ndarray]:
        out = []
        with av.open(str(path)) as c:
            s = c.streams.video[0]
            cc = s.codec_context
            r = self.reformatters.setdefault((cc.name, cc.width, cc.height, cc.pix_fmt), VideoReformatter())
            c.seek(int(first / s.time_base), stream=s, backward=True, any_frame=False)
            for f in c.decode(s):
                if f.time < first - 0.5 / self.fps:
                    continue
                out.append(r.reformat(f, format="rgb24").to_ndarray())
                if f.time >= last - 0.5 / self.fps:
                    break
        return out

    def item(self, ep: int, t: int) -> dict[str, Any]:
        rows = pq.read_table(self._data(ep), columns=["observation.state", "action", "timestamp"]).slice(t, 1)
        ts = float(rows.column("timestamp")[0].as_py())
        out: dict[str, Any] = {
            "observation.state": np.asarray(rows.column("observation.state")[0].as_py(), np.float32),
            "action": np.asarray(rows.column("action")[0].as_py(), np.float32),
        }
        for key in CAMS:
            out[key] = self._frames(self._video(ep, key), ts, ts)[0]
        return out

    def window(self, ep: int, t: int) -> dict[str, Any]:
        lo = max(0, t - WINDOW + 1)
        rows = pq.read_table(self._data(ep), columns=["observation.state", "action", "timestamp"]).slice(
            lo, t - lo + 1
        )
        ts = rows.column("timestamp").to_numpy()
        out: dict[str, Any] = {
            "observation.state": np.stack(rows.column("observation.state").to_numpy(zero_copy_only=False)),
            "action": np.stack(rows.column("action").to_numpy(zero_copy_only=False)),
        }
        for key in CAMS:
            out[key] = np.stack(self._frames(self._video(ep, key), float(ts[0]), float(ts[-1])))
        return out


def jpg_item(view: Any, ep: int, t: int) -> dict[str, Any]:
    step = view.step(ep, t)
    for key in CAMS:
        step[key] = np.asarray(Image.open(io.BytesIO(step[key])).convert("RGB"))
    return step


def jpg_window(view: Any, ep: int, t: int) -> dict[str, Any]:
    w = view.window(ep, t, WINDOW - 1, 0)
    for key in CAMS:
        w[key] = np.stack([np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for b in w[key]])
    return w


# ----- timing -------------------------------------------------------------------------------------------
def timed(fn: Callable[[int, int], Any], items: list[tuple[int, int]]) -> tuple[float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    for e, t in items:
        fn(e, t)
    return time.perf_counter() - t0, time.process_time() - c0


def race(
    readers: dict[str, Callable[[int, int], Any]], draw: Callable[[], list[tuple[int, int]]], repeat: int
) -> dict[str, Any]:
    """Best of ``repeat`` runs per reader; every run draws new items (the same for every reader in
    that run), so no run meets the frames an earlier one decoded (shardstore keeps the last decoded
    frames of its open videos: repeating items would time that cache, not reading)."""
    best: dict[str, tuple[float, float]] = {}
    n = 0
    for _ in range(repeat):
        items = draw()
        n = len(items)
        for name, fn in readers.items():
            wall, cpu = timed(fn, items)
            if name not in best or wall < best[name][0]:
                best[name] = (wall, cpu)
    return {name: {"per_s": n / w, "cpu_per_s": n / max(c, 1e-9)} for name, (w, c) in best.items()}


def verify(peer: Peer, view: Any, items: list[tuple[int, int]]) -> None:
    """Every reader gives the same values before anything is timed (the frames bit for bit)."""
    for e, t in items[:20]:
        a, b = peer.item(e, t), view.step(e, t)
        for key in ("observation.state", "action", *CAMS):
            if not np.array_equal(a[key], b[key]):
                raise SystemExit(f"mismatch: episode {e} frame {t} field {key}")
        wa, wb = peer.window(e, t), view.window(e, t, WINDOW - 1, 0)
        for key in CAMS:
            pad = int(wb["is_pad"].sum())
            if not np.array_equal(wa[key], wb[key][pad:]):
                raise SystemExit(f"window mismatch: episode {e} frame {t} camera {key}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--fps", type=int, default=30)
    ap.add_argument("--gop", type=int, default=2)
    ap.add_argument("--items", type=int, default=300, help="random frames per run")
    ap.add_argument("--windows", type=int, default=60, help="random windows per run")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--data", default=None, help="folder for the source and imports (kept; reused if present)"
    )
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--reuse-imports", action="store_true", help="keep imports already in --data (no import figures)"
    )
    a = ap.parse_args()

    work = Path(a.data) if a.data else Path(tempfile.mkdtemp(prefix="bench-lerobot-"))
    src = work / f"src-{a.episodes}x{a.frames}-{a.size}"
    results: dict[str, Any] = {"episodes": a.episodes, "frames": a.frames, "size": a.size, "gop": a.gop}
    if not (src / "meta/info.json").exists():
        t0 = time.perf_counter()
        make_lerobot(
            str(src),
            version="v2.1",
            episodes=a.episodes,
            frames=a.frames,
            size=a.size,
            fps=a.fps,
            cameras=CAMS,
            chunks_size=1000,
            image=False,
            gop=a.gop,
        )
        print(f"generated {src} in {time.perf_counter() - t0:.0f} s")
    total = a.episodes * a.frames
    results["source_mb"] = du(src) / 1e6

    # import, against cp -r
    cp = work / "cp"
    shutil.rmtree(cp, ignore_errors=True)
    t0 = time.perf_counter()
    subprocess.run(["cp", "-r", str(src), str(cp)], check=True)
    cp_s = time.perf_counter() - t0
    shutil.rmtree(cp)
    imports = {}
    for mode, frames, granularity in (
        ("video", None, "step"),
        ("video-episode", None, "episode"),
        ("jpg", "jpg", "step"),
    ):
        out = work / f"ds-{mode}"
        if a.reuse_imports and (out / ".nv-meta").is_dir():
            continue
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.perf_counter()
        import_lerobot(str(src), str(out), frames=frames, granularity=granularity)
        secs = time.perf_counter() - t0
        imports[mode] = {
            "seconds": secs,
            "frames_per_s": total / secs,
            "mb_per_s": results["source_mb"] / secs,
            "size_mb": du(out) / 1e6,
        }
    results["import"] = {**imports, "cp": {"seconds": cp_s, "mb_per_s": results["source_mb"] / cp_s}}
    results["open_videos"] = video.OPEN_VIDEOS

    peer = Peer(src, a.fps)
    view = shardstore.episodes(str(work / "ds-video"))
    jview = shardstore.episodes(str(work / "ds-jpg"))
    eview = shardstore.episodes(str(work / "ds-video-episode"))
    rng = random.Random(SEED)

    def items() -> list[tuple[int, int]]:
        return [(rng.randrange(a.episodes), rng.randrange(a.frames)) for _ in range(a.items)]

    def wins() -> list[tuple[int, int]]:
        return [(rng.randrange(a.episodes), rng.randrange(WINDOW - 1, a.frames)) for _ in range(a.windows)]

    verify(peer, view, items())
    results["random_frame"] = race(
        {
            "peer": peer.item,
            "shardstore": view.step,
            "shardstore --granularity episode": eview.step,
            "shardstore --frames jpg": lambda e, t: jpg_item(jview, e, t),
        },
        items,
        a.repeat,
    )
    results["window16"] = race(
        {
            "peer": peer.window,
            "shardstore": lambda e, t: view.window(e, t, WINDOW - 1, 0),
            "shardstore --granularity episode": lambda e, t: eview.window(e, t, WINDOW - 1, 0),
            "shardstore --frames jpg": lambda e, t: jpg_window(jview, e, t),
        },
        wins,
        a.repeat,
    )
    results["load"] = os.getloadavg()[0]
    report(results)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=2))
    if not a.data:
        shutil.rmtree(work, ignore_errors=True)


def report(r: dict[str, Any]) -> None:
    print(
        f"\nLeRobot v2.1, {r['episodes']} episodes x {r['frames']} frames, {r['size']}x{r['size']} AV1 + H.264, "
        f"GOP {r['gop']}; source {r['source_mb']:.1f} MB; {r['open_videos']} open videos kept per reader"
    )
    for fig in ("random_frame", "window16"):
        peer = r[fig]["peer"]["per_s"]
        print(f"{fig}:")
        for name, v in r[fig].items():
            print(
                f"  {name:<26} {v['per_s']:>9.1f} /s  ({v['per_s'] / peer:5.2f}x peer; CPU {v['cpu_per_s']:.1f} /s)"
            )
    imp = r["import"]
    print("import:")
    for name in ("video", "video-episode", "jpg"):
        if name not in imp:
            continue
        v = imp[name]
        print(
            f"  {name:<13} {v['seconds']:7.1f} s  {v['frames_per_s']:8.0f} frames/s  {v['mb_per_s']:7.1f} MB/s  "
            f"size {v['size_mb']:.1f} MB"
        )
    print(f"  cp -r         {imp['cp']['seconds']:7.1f} s  {imp['cp']['mb_per_s']:7.1f} MB/s")
    print(f"machine load (1 min) at the end: {r['load']:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
