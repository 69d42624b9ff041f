"""LeRobot benchmark: random frames, 16-frame windows and import, against the way LeRobotDataset reads.

The data: a LeRobot v2.1 dataset written by tools/make_lerobot.py (``--episodes`` x ``--frames``,
``observation.state`` and ``action`` vectors, one ``--size``-square camera in AV1 (libsvtav1, as
LeRobot's recorder) and one in H.264 (libx264), keyframe every ``--gop`` frames: the recorder's
default is 2). It is imported as is (mp4s whole in the video store) and with ``--frames jpg``; a
dataset of the first ``--npy-episodes`` episodes (the same frames: the generator is deterministic)
is imported with ``--frames npy`` (raw uint8 frames, 150 KB each at 224x224: the whole data set
would not stay in the page cache). Each import is made in both store layouts (``IMPORTS``): layout
2, the default ``--granularity columns``, and layout 1, ``--granularity step``; every shardstore
figure below is printed for both, with each import's size against the source's.

The loaders that LeRobot training code runs (the drop-in ``shardstore.lerobot_dataset.LeRobotDataset``
against LeRobotDataset with torchcodec and PyAV and against lerobot-lancedb, per item, in batches, in a
DataLoader and over S3; issue 22's targets) are compared by ``tools/bench/lerobot_loader.py``.

Figures, each per second, warm page cache (every file read once before timing), one process,
fixed seed, best of ``--repeat`` runs interleaved so that machine load hits every reader alike:

- **random frame**: a random (episode, frame) item: state + action + both cameras decoded to HWC
  uint8. Peer: what LeRobotDataset does per item, reading the source: the episode's parquet read
  with pyarrow for the row, and per camera the mp4 opened with PyAV, sought to the keyframe at or
  before the frame's timestamp and decoded forward to it. shardstore: ``episodes(ds).step(e, t)``
  (frames decoded from the video store at the packet level), ``step`` on the ``--frames jpg``
  import with the JPEGs decoded (PIL with libjpeg-turbo: measured the cheapest installed decoder)
  so it also hands out arrays, and on the ``--frames npy`` import (episode ``e % --npy-episodes``).
- **decode floor**: just decoding the packets each camera's frame needs (keyframe at or before it
  through the frame, bytes already in memory) with a warm decoder per camera, and the RGB
  conversion: what neither reader can go below, so peer / floor caps the speed-up of any reader
  that decodes the videos.
- **window**: 16 consecutive frames ending at a random frame (an observation history), same three
  readers: the peer reads the rows and decodes each camera once from the keyframe before the first
  frame through the last (one seek per camera, as LeRobot's decoder does for a set of timestamps);
  the floor decodes from the keyframe before the first frame through the last.
- **episode**: a whole random episode (its rows and frame references, no frames decoded).
- **import**: frames/s and MB/s of ``import_lerobot`` (as is, and ``--frames jpg``), against
  ``cp -r`` of the same source files.
- **S3** (``--s3-items``): random ``--frames jpg`` items, windows and episodes of both layouts over
  the local S3 server with 10 ms added each way (``episode_s3.py``), ms and GET requests per item.

Targets (DESIGN.md section 9): random frame >= 3x the peer, windows >= 5x, ``--frames`` >= 20x.
Printed per reader: items per wall second and per CPU second of the process, each against the
peer; the JSON (``--json``) holds the same.

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
from episode_s3 import print_s3, s3_reads  # noqa: E402
from make_lerobot import make_lerobot  # noqa: E402
from PIL import Image  # noqa: E402

import shardstore  # noqa: E402
from shardstore.convert.lerobot import import_lerobot  # noqa: E402
from shardstore.episodes import video  # noqa: E402
from shardstore.episodes.packets import RGB_THREADS  # noqa: E402

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
        # the same kept RGB converters as shardstore's decoder, one thread each (not a frame's own
        # to_ndarray, which builds a scaler per call and runs FFmpeg's automatic threads): the
        # comparison is about reading, not about a PyAV detail
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
                out.append(r.reformat(f, format="rgb24", threads=RGB_THREADS).to_ndarray())
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


def jpeg_array(data: bytes) -> np.ndarray:
    """A JPEG as HWC uint8: PIL (libjpeg-turbo), the format named so nothing probes; measured
    against PyAV's mjpeg decoder (slower, and not the same pixels) and PIL with a convert()."""
    im = Image.open(io.BytesIO(data), formats=("JPEG",))
    return np.asarray(im if im.mode == "RGB" else im.convert("RGB"))


def jpg_item(view: Any, ep: int, t: int) -> dict[str, Any]:
    step = view.step(ep, t)
    for key in CAMS:
        step[key] = jpeg_array(step[key])
    return step


def jpg_window(view: Any, ep: int, t: int) -> dict[str, Any]:
    w = view.window(ep, t, WINDOW - 1, 0)
    for key in CAMS:
        w[key] = np.stack([jpeg_array(b) for b in w[key]])
    return w


class Floor:
    """The decode floor: per camera, the packets from the keyframe at or before the first frame
    through the last, bytes in memory, sent to a warm decoder (one per camera), the frames
    converted to RGB. The packet index is shardstore's (``index_packets``) of the source files."""

    def __init__(self, peer: Peer, episodes: int) -> None:
        from shardstore.episodes.packets import index_packets

        self.files: dict[tuple[int, str], tuple[Any, bytes]] = {}
        self.decoders: dict[str, Any] = {}
        self.reformatter = VideoReformatter()
        for ep in range(episodes):
            for key in CAMS:
                path = peer._video(ep, key)
                index = index_packets(lambda p=path: open(p, "rb"), str(path))
                assert index is not None, path
                self.files[(ep, key)] = (index, path.read_bytes())
                if key not in self.decoders:
                    ctx = av.CodecContext.create(index.codec, "r")
                    ctx.extradata = index.extradata
                    ctx.thread_type, ctx.thread_count = "SLICE", 1
                    self.decoders[key] = ctx

    def frames(self, ep: int, first: int, last: int) -> dict[str, list[np.ndarray]]:
        out = {}
        for key in CAMS:
            index, data = self.files[(ep, key)]
            ctx = self.decoders[key]
            ctx.flush_buffers()
            got = []
            for j in range(index.keyframe_before(first), last + 1):
                p = av.Packet(data[index.pos[j] : index.pos[j] + index.size[j]])
                p.pts = p.dts = int(index.pts[j])
                got += ctx.decode(p)
            if not got or got[-1].pts != index.shown[last]:
                got += ctx.decode(None)  # a decoder that holds a frame back (H.264): drain it
            shown = got[first - last - 1 :]
            out[key] = [
                self.reformatter.reformat(f, format="rgb24", threads=RGB_THREADS).to_ndarray() for f in shown
            ]
        return out

    def item(self, ep: int, t: int) -> Any:
        return self.frames(ep, t, t)

    def window(self, ep: int, t: int) -> Any:
        return self.frames(ep, t - WINDOW + 1, t)


# ----- timing -------------------------------------------------------------------------------------------
def timed(fn: Callable[[int, int], Any], items: list[tuple[int, int]]) -> tuple[float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    for e, t in items:
        fn(e, t)
    return time.perf_counter() - t0, time.process_time() - c0


#: The imports timed and read: (name, --frames, --granularity, source: "all" or the npy subset).
#: Layout 2 is the default ``--granularity columns``; each has its layout 1 twin (``step``).
IMPORTS = (
    ("video", None, "columns", "all"), ("video-layout1", None, "step", "all"),
    ("jpg", "jpg", "columns", "all"), ("jpg-layout1", "jpg", "step", "all"),
    ("npy", "npy", "columns", "npy"), ("npy-layout1", "npy", "step", "npy"),
)
S3_DELAY_MS = 10.0


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


def warm(*roots: Path) -> None:
    """Read every file once so that the readers start from the page cache (other work on a shared
    machine evicts it: an evicted dataset times the disk, not the reader)."""
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                with open(path, "rb") as f:
                    while f.read(1 << 22):
                        pass


def verify(peer: Peer, view: Any, items: list[tuple[int, int]], floor: Floor | None = None) -> None:
    """Every reader gives the same values before anything is timed (the frames bit for bit)."""
    for e, t in items[:20]:
        a, b = peer.item(e, t), view.step(e, t)
        for key in ("observation.state", "action", *CAMS):
            if not np.array_equal(a[key], b[key]):
                raise SystemExit(f"mismatch: episode {e} frame {t} field {key}")
        if t < WINDOW - 1:
            continue
        wa, wb = peer.window(e, t), view.window(e, t, WINDOW - 1, 0)
        wf = floor.window(e, t) if floor is not None else None
        for key in CAMS:
            if not np.array_equal(wa[key], wb[key]):
                raise SystemExit(f"window mismatch: episode {e} frame {t} camera {key}")
            if wf is not None and not np.array_equal(wa[key], np.stack(wf[key])):
                raise SystemExit(f"floor mismatch: episode {e} frame {t} camera {key}")


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
        "--npy-episodes", type=int, default=40, help="episodes of the --frames npy import (150 KB a frame)"
    )
    ap.add_argument(
        "--data", default=None, help="folder for the source and imports (kept; reused if present)"
    )
    ap.add_argument("--json", default=None)
    ap.add_argument("--s3-items", type=int, default=60,
                    help="random --frames jpg items and windows (a quarter as many episodes) per layout over S3; 0: none")
    ap.add_argument(
        "--reuse-imports", action="store_true", help="keep imports already in --data (no import figures)"
    )
    a = ap.parse_args()

    work = Path(a.data) if a.data else Path(tempfile.mkdtemp(prefix="bench-lerobot-"))
    src = work / f"src-{a.episodes}x{a.frames}-{a.size}"
    results: dict[str, Any] = {"episodes": a.episodes, "frames": a.frames, "size": a.size, "gop": a.gop}
    n_npy = min(a.npy_episodes, a.episodes)
    src_npy = work / f"src-{n_npy}x{a.frames}-{a.size}"
    for path, episodes in ((src, a.episodes), (src_npy, n_npy)):
        if not (path / "meta/info.json").exists():
            t0 = time.perf_counter()
            make_lerobot(
                str(path),
                version="v2.1",
                episodes=episodes,
                frames=a.frames,
                size=a.size,
                fps=a.fps,
                cameras=CAMS,
                chunks_size=1000,
                image=False,
                gop=a.gop,
            )
            print(f"generated {path} in {time.perf_counter() - t0:.0f} s")
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
    for mode, frames, granularity, which in IMPORTS:
        source = src if which == "all" else src_npy
        out = work / f"ds-{mode}"
        if a.reuse_imports and (out / ".nv-meta").is_dir():
            continue
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.perf_counter()
        import_lerobot(str(source), str(out), frames=frames, granularity=granularity)
        secs = time.perf_counter() - t0
        n = total if source == src else n_npy * a.frames
        imports[mode] = {
            "seconds": secs,
            "frames_per_s": n / secs,
            "mb_per_s": du(source) / 1e6 / secs,
            "size_mb": du(out) / 1e6,
            "episodes": n // a.frames,
        }
    results["import"] = {**imports, "cp": {"seconds": cp_s, "mb_per_s": results["source_mb"] / cp_s}}
    results["open_videos"] = video.OPEN_VIDEOS
    results["npy_episodes"] = n_npy

    peer = Peer(src, a.fps)
    floor = Floor(peer, a.episodes)
    view = shardstore.episodes(str(work / "ds-video"))
    jview = shardstore.episodes(str(work / "ds-jpg"))
    nview = shardstore.episodes(str(work / "ds-npy"))
    v1 = {mode: shardstore.episodes(str(work / f"ds-{mode}")) for mode in ("video-layout1", "jpg-layout1", "npy-layout1")}
    rng = random.Random(SEED)

    def items() -> list[tuple[int, int]]:
        return [(rng.randrange(a.episodes), rng.randrange(a.frames)) for _ in range(a.items)]

    def wins() -> list[tuple[int, int]]:
        return [(rng.randrange(a.episodes), rng.randrange(WINDOW - 1, a.frames)) for _ in range(a.windows)]

    warm(src, src_npy, *(work / f"ds-{mode}" for mode, *_ in IMPORTS))
    for v in (view, v1["video-layout1"]):
        verify(peer, v, items(), floor)
    for v in (nview, v1["npy-layout1"]):
        verify(Peer(src_npy, a.fps), v, [(e % n_npy, t) for e, t in items()])
    results["random_frame"] = race(
        {
            "peer": peer.item,
            "decode floor": floor.item,
            "shardstore": view.step,
            "shardstore layout 1": v1["video-layout1"].step,
            "shardstore --frames jpg": lambda e, t: jpg_item(jview, e, t),
            "shardstore --frames jpg, layout 1": lambda e, t: jpg_item(v1["jpg-layout1"], e, t),
            "shardstore --frames npy": lambda e, t: nview.step(e % n_npy, t),
            "shardstore --frames npy, layout 1": lambda e, t: v1["npy-layout1"].step(e % n_npy, t),
        },
        items,
        a.repeat,
    )
    results["window16"] = race(
        {
            "peer": peer.window,
            "decode floor": floor.window,
            "shardstore": lambda e, t: view.window(e, t, WINDOW - 1, 0),
            "shardstore layout 1": lambda e, t: v1["video-layout1"].window(e, t, WINDOW - 1, 0),
            "shardstore --frames jpg": lambda e, t: jpg_window(jview, e, t),
            "shardstore --frames jpg, layout 1": lambda e, t: jpg_window(v1["jpg-layout1"], e, t),
            "shardstore --frames npy": lambda e, t: nview.window(e % n_npy, t, WINDOW - 1, 0),
            "shardstore --frames npy, layout 1": lambda e, t: v1["npy-layout1"].window(e % n_npy, t, WINDOW - 1, 0),
        },
        wins,
        a.repeat,
    )
    results["episode"] = race(
        {"shardstore": lambda e, t: view[e], "shardstore layout 1": lambda e, t: v1["video-layout1"][e]},
        lambda: [(rng.randrange(a.episodes), 0) for _ in range(a.windows)],
        a.repeat,
    )
    if a.s3_items:
        picks, spans, whole = items()[: a.s3_items], wins()[: a.s3_items], [e for e, _ in items()[: a.s3_items // 4]]
        reads = {
            "step": lambda v: lambda: sum(1 for e, t in picks if jpg_item(v, e, t) is not None),
            "window": lambda v: lambda: sum(1 for e, t in spans if jpg_window(v, e, t) is not None),
            "episode": lambda v: lambda: sum(1 for e in whole if v[e] is not None),
        }
        results["s3"] = s3_reads({m: work / f"ds-{m}" for m in ("jpg", "jpg-layout1")}, reads, S3_DELAY_MS)
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
    for fig in ("random_frame", "window16", "episode"):
        if fig == "episode":
            new, old = r[fig]["shardstore"]["per_s"], r[fig]["shardstore layout 1"]["per_s"]
            print(f"episode (rows and frame references, no frames): layout 2 {new:8.1f} /s, layout 1 {old:8.1f} /s")
            continue
        peer, peer_cpu = r[fig]["peer"]["per_s"], r[fig]["peer"]["cpu_per_s"]
        print(f"{fig}:  (wall /s, x peer | CPU /s, x peer)")
        for name, v in r[fig].items():
            print(
                f"  {name:<34} {v['per_s']:>8.1f} /s {v['per_s'] / peer:6.2f}x | "
                f"{v['cpu_per_s']:>8.1f} /s {v['cpu_per_s'] / peer_cpu:6.2f}x"
            )
        fl = r[fig]["decode floor"]["cpu_per_s"]
        print(
            f"  CPU time over the decode floor's: peer {fl / peer_cpu:.2f}x, "
            f"shardstore {fl / r[fig]['shardstore']['cpu_per_s']:.2f}x"
        )
    imp = r["import"]
    print("import:")
    for name, *_ in IMPORTS:
        if name not in imp:
            continue
        v = imp[name]
        print(
            f"  {name:<13} {v['seconds']:7.1f} s  {v['frames_per_s']:8.0f} frames/s  {v['mb_per_s']:7.1f} MB/s  "
            f"size {v['size_mb']:.1f} MB ({v['episodes']} episodes)"
        )
    print(f"  cp -r         {imp['cp']['seconds']:7.1f} s  {imp['cp']['mb_per_s']:7.1f} MB/s")
    if "video" in imp:
        print(f"  layout 2 (video) is {imp['video']['size_mb'] / r['source_mb']:.2f}x the source's "
              f"{r['source_mb']:.1f} MB; layout 1 {imp['video-layout1']['size_mb'] / r['source_mb']:.2f}x")
    print_s3(r.get("s3"), S3_DELAY_MS)
    print(f"machine load (1 min) at the end: {r['load']:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
