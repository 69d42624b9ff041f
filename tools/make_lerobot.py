"""Write a small LeRobot dataset (v2.1 or v3.0) with pyarrow and PyAV, as LeRobot's recorder lays it out.

Used by the tests, the benchmark (tools/bench/lerobot.py) and the docs' examples: vector features
(``observation.state`` as a variable list, ``action`` as a fixed-size list), a scalar ``next.done``,
an image feature (PNG bytes in ``{bytes, path}`` structs), and one video per camera with the codec
asked (``h264``, ``av1``, ``hevc``). Frames are deterministic (``frame_pixels``), so a test can
compare a decoded frame with PyAV's decode of the same frame of the source file.

    python tools/make_lerobot.py OUT [--version v3.0] [--episodes 4] [--frames 12] [--size 32]
"""

from __future__ import annotations

import argparse
import io
import json
import os
from collections.abc import Mapping, Sequence
from fractions import Fraction

import numpy as np

from shardstore.convert.lerobot.meta import column_numpy, tasks_table
from shardstore.convert.lerobot.stats import image_stats, merge, sample_indices, vector_stats
from shardstore.episodes.video import import_av, scheduling_kept

ENCODER = {"h264": "libx264", "av1": "libsvtav1", "hevc": "libx265"}
DEFAULT_CAMERAS = {"observation.images.front": "h264", "observation.images.wrist": "av1"}
TASKS = ["pick the cube", "push the button"]


def frame_pixels(episode: int, frame: int, camera: int, size: int) -> np.ndarray:
    """A smooth, moving test picture (compresses well, differs per episode, frame and camera)."""
    y, x = np.mgrid[0:size, 0:size]
    r = (x * 4 + frame * 9 + episode * 31) % 256
    g = (y * 4 + camera * 80) % 256
    b = ((x + y) * 2 + frame * 5) % 256
    img = np.stack([r, g, b], axis=-1).astype(np.uint8)
    s = size // 4
    o = (frame * 2 + episode) % (size - s)
    img[o : o + s, o : o + s] = 255
    return img


def _state(episode: int, n: int) -> np.ndarray:
    t = np.arange(n, dtype=np.float32)[:, None]
    return (np.sin(t / 5 + np.arange(6, dtype=np.float32) + episode)).astype(np.float32)


def _png(img: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    return buf.getvalue()


def _features(cameras: Mapping[str, str], size: int, fps: int, image: bool) -> dict:
    feats: dict = {
        "observation.state": {"dtype": "float32", "shape": [6], "names": [f"j{i}" for i in range(6)]},
        "action": {"dtype": "float32", "shape": [6], "names": [f"j{i}" for i in range(6)]},
        "next.done": {"dtype": "bool", "shape": [1], "names": None},
    }
    if image:
        feats["observation.image"] = {
            "dtype": "image",
            "shape": [size, size, 3],
            "names": ["height", "width", "channel"],
        }
    for key, codec in cameras.items():
        feats[key] = {
            "dtype": "video",
            "shape": [size, size, 3],
            "names": ["height", "width", "channels"],
            "info": {
                "video.height": size,
                "video.width": size,
                "video.codec": codec,
                "video.pix_fmt": "yuv420p",
                "video.is_depth_map": False,
                "video.fps": float(fps),
                "video.channels": 3,
                "has_audio": False,
            },
        }
    for key in ("timestamp",):
        feats[key] = {"dtype": "float32", "shape": [1], "names": None}
    for key in ("frame_index", "episode_index", "index", "task_index"):
        feats[key] = {"dtype": "int64", "shape": [1], "names": None}
    return feats


def _hf_features(feats: Mapping[str, dict]) -> dict:
    out: dict = {}
    for key, f in feats.items():
        if f["dtype"] == "video":
            continue
        if f["dtype"] == "image":
            out[key] = {"_type": "Image"}
        elif f["shape"] == [1]:
            out[key] = {"dtype": f["dtype"], "_type": "Value"}
        else:
            out[key] = {
                "feature": {"dtype": f["dtype"], "_type": "Value"},
                "length": f["shape"][0],
                "_type": "Sequence",
            }
    return out


def episode_table(
    episode: int, n: int, first_index: int, fps: int, size: int, image: bool, feats: Mapping
) -> object:
    """The parquet table of one episode, columns in LeRobot's order."""
    import pyarrow as pa

    state = _state(episode, n)
    cols: dict = {
        "observation.state": pa.array(list(state), type=pa.list_(pa.float32())),
        "action": pa.FixedSizeListArray.from_arrays(pa.array((state * 0.5).ravel()), 6),
        "next.done": pa.array([i == n - 1 for i in range(n)]),
    }
    if image:
        pngs = [_png(frame_pixels(episode, i, 9, size)) for i in range(n)]
        cols["observation.image"] = pa.array(
            [{"bytes": b, "path": None} for b in pngs],
            type=pa.struct([("bytes", pa.binary()), ("path", pa.string())]),
        )
    cols["timestamp"] = pa.array(np.arange(n, dtype=np.float32) / np.float32(fps))
    cols["frame_index"] = pa.array(np.arange(n, dtype=np.int64))
    cols["episode_index"] = pa.array(np.full(n, episode, dtype=np.int64))
    cols["index"] = pa.array(np.arange(first_index, first_index + n, dtype=np.int64))
    cols["task_index"] = pa.array(np.full(n, episode % len(TASKS), dtype=np.int64))
    meta = {b"huggingface": json.dumps({"info": {"features": _hf_features(feats)}}).encode()}
    return pa.table(cols).replace_schema_metadata(meta)


def encode_video(
    path: str,
    clips: Sequence[tuple[int, int]],
    camera: int,
    codec: str,
    fps: int,
    size: int,
    gop: int,
    align: bool = True,
    drop_last: bool = False,
) -> None:
    """Encode the frames of ``clips`` ((episode, frames) each) into one mp4. With ``align`` every
    clip starts on a keyframe (as LeRobot's per-episode files and its concatenations of them do);
    ``drop_last`` leaves out the last frame (a broken file for the tests)."""
    av = import_av()  # FFmpeg's log and SVT-AV1's banner silenced, as in shardstore's own encoder
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with scheduling_kept(), av.open(path, "w") as c:  # libsvtav1 as root would leave us SCHED_FIFO
        s = c.add_stream(ENCODER[codec], rate=Fraction(fps))
        s.width = s.height = size
        s.pix_fmt = "yuv420p"
        s.options = {"g": str(gop), "preset": "12"} if codec == "av1" else {"g": str(gop)}
        if not align:  # no scene-cut keyframes either: episodes then start where the GOP falls
            s.options = {**s.options, "sc_threshold": "0", "svtav1-params": "scd=0"}
        pts = 0
        for k, (episode, n) in enumerate(clips):
            for i in range(n - 1 if drop_last and k == len(clips) - 1 else n):
                f = av.VideoFrame.from_ndarray(frame_pixels(episode, i, camera, size), format="rgb24")
                f.pts = pts
                if i == 0 and align:
                    f.pict_type = av.video.frame.PictureType.I
                pts += 1
                for p in s.encode(f):
                    c.mux(p)
        for p in s.encode():
            c.mux(p)


def make_lerobot(
    out: str,
    *,
    version: str = "v2.1",
    episodes: int = 4,
    frames: int | Sequence[int] = 12,
    size: int = 32,
    fps: int = 10,
    cameras: Mapping[str, str] = DEFAULT_CAMERAS,
    chunks_size: int = 2,
    episodes_per_file: int = 2,
    image: bool = True,
    gop: int = 4,
    align_keyframes: bool = True,
) -> str:
    """Write the dataset to ``out`` and return it. ``frames`` is one length or one per episode."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    lengths = [frames] * episodes if isinstance(frames, int) else list(frames)
    feats = _features(cameras, size, fps, image)
    total = sum(lengths)
    info: dict = {
        "codebase_version": version,
        "robot_type": "so100",
        "total_episodes": episodes,
        "total_frames": total,
        "total_tasks": len(TASKS),
        "chunks_size": chunks_size,
        "fps": fps,
        "splits": {"train": f"0:{episodes}"},
        "features": feats,
    }
    tables, starts = [], np.concatenate([[0], np.cumsum(lengths)]).astype(int)
    for ep in range(episodes):
        tables.append(episode_table(ep, lengths[ep], int(starts[ep]), fps, size, image, feats))
    ep_rows = [
        {"episode_index": ep, "tasks": [TASKS[ep % len(TASKS)]], "length": lengths[ep]}
        for ep in range(episodes)
    ]
    stats = [_episode_stats(t) for t in tables]
    os.makedirs(os.path.join(out, "meta"), exist_ok=True)
    if version == "v2.1":
        info.update(
            total_chunks=(episodes - 1) // chunks_size + 1,
            total_videos=episodes * len(cameras),
            data_path="data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
            video_path="videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4",
        )
        for ep, table in enumerate(tables):
            chunk = ep // chunks_size
            path = os.path.join(out, info["data_path"].format(episode_chunk=chunk, episode_index=ep))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            pq.write_table(table, path)
            for cam, (key, codec) in enumerate(cameras.items()):
                vpath = info["video_path"].format(episode_chunk=chunk, video_key=key, episode_index=ep)
                encode_video(
                    os.path.join(out, vpath), [(ep, lengths[ep])], cam, codec, fps, size, gop, align_keyframes
                )
        _write_lines(os.path.join(out, "meta/episodes.jsonl"), ep_rows)
        _write_lines(
            os.path.join(out, "meta/episodes_stats.jsonl"),
            [{"episode_index": ep, "stats": s} for ep, s in enumerate(stats)],
        )
        _write_lines(
            os.path.join(out, "meta/tasks.jsonl"), [{"task_index": i, "task": t} for i, t in enumerate(TASKS)]
        )
    else:
        info.update(
            data_files_size_in_mb=100,
            video_files_size_in_mb=200,
            data_path="data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
            video_path="videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
        )
        groups = [
            list(range(i, min(i + episodes_per_file, episodes)))
            for i in range(0, episodes, episodes_per_file)
        ]
        rows = []
        for g, eps in enumerate(groups):
            chunk, file = divmod(g, chunks_size)
            path = os.path.join(out, info["data_path"].format(chunk_index=chunk, file_index=file))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            pq.write_table(pa.concat_tables([tables[e] for e in eps]), path)
            t0 = 0.0
            for ep in eps:
                row = dict(ep_rows[ep])
                row.update({"data/chunk_index": chunk, "data/file_index": file})
                row.update({"dataset_from_index": int(starts[ep]), "dataset_to_index": int(starts[ep + 1])})
                for key in cameras:
                    row.update(
                        {
                            f"videos/{key}/chunk_index": chunk,
                            f"videos/{key}/file_index": file,
                            f"videos/{key}/from_timestamp": t0,
                            f"videos/{key}/to_timestamp": t0 + lengths[ep] / fps,
                        }
                    )
                t0 += lengths[ep] / fps
                row.update(
                    {
                        f"stats/{k}/{s}": np.asarray(v).tolist()
                        for k, d in stats[ep].items()
                        for s, v in d.items()
                    }
                )
                row.update({"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0})
                rows.append(row)
            for cam, (key, codec) in enumerate(cameras.items()):
                vpath = info["video_path"].format(video_key=key, chunk_index=chunk, file_index=file)
                encode_video(
                    os.path.join(out, vpath),
                    [(e, lengths[e]) for e in eps],
                    cam,
                    codec,
                    fps,
                    size,
                    gop,
                    align_keyframes,
                )
        os.makedirs(os.path.join(out, "meta/episodes/chunk-000"), exist_ok=True)
        pq.write_table(
            pa.Table.from_pylist(rows), os.path.join(out, "meta/episodes/chunk-000/file-000.parquet")
        )
        pq.write_table(tasks_table(TASKS), os.path.join(out, "meta/tasks.parquet"))  # as LeRobot's to_parquet
        with open(os.path.join(out, "meta/stats.json"), "w") as f:
            json.dump(  # the episodes' stats merged as LeRobot merges them (stats.merge)
                {k: {s: np.asarray(v).tolist() for s, v in merge([e[k] for e in stats]).items()} for k in stats[0]},
                f,
                indent=4,
            )
    with open(os.path.join(out, "meta/info.json"), "w") as f:
        json.dump(info, f, indent=4)
    return out


def _episode_stats(table: object) -> dict:
    """LeRobot 0.6's per-episode stats of every numeric and image column (quantiles included),
    computed by the formulas shardstore's deep check pins (shardstore.convert.lerobot.stats)."""
    from PIL import Image

    out = {}
    n = table.num_rows  # type: ignore[attr-defined]
    for key in table.column_names:  # type: ignore[attr-defined]
        column = table.column(key)  # type: ignore[attr-defined]
        if key == "observation.image":
            cells = column.to_pylist()
            frames = [np.asarray(Image.open(io.BytesIO(cells[i]["bytes"]))) for i in sample_indices(n)]
            out[key] = image_stats(frames)
        else:
            out[key] = vector_stats(column_numpy(column, n))
    return out


def _write_lines(path: str, rows: Sequence[dict]) -> None:
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r, default=_np_default) + "\n")


def _np_default(value: object) -> object:
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    raise TypeError(type(value).__name__)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    ap.add_argument("out", help="folder to write (the dataset's root: meta/, data/, videos/)")
    ap.add_argument("--version", default="v2.1", choices=["v2.1", "v3.0"], help="LeRobot codebase_version to write")
    ap.add_argument("--episodes", type=int, default=4, help="number of episodes")
    ap.add_argument("--frames", type=int, default=12, help="frames per episode")
    ap.add_argument("--size", type=int, default=32, help="width and height of every camera's frames, in pixels")
    ap.add_argument("--fps", type=int, default=10, help="frames per second (info.json's fps and the videos' rate)")
    ap.add_argument("--chunks-size", type=int, default=2, help="episodes per chunk folder (info.json's chunks_size)")
    ap.add_argument("--episodes-per-file", type=int, default=2,
                    help="v3.0: episodes per data parquet and video file")
    ap.add_argument("--gop", type=int, default=4, help="keyframe interval of the videos, in frames")
    ap.add_argument("--no-image", action="store_true", help="leave out the PNG image feature (observation.image)")
    a = ap.parse_args()
    make_lerobot(
        a.out,
        version=a.version,
        episodes=a.episodes,
        frames=a.frames,
        size=a.size,
        fps=a.fps,
        chunks_size=a.chunks_size,
        episodes_per_file=a.episodes_per_file,
        gop=a.gop,
        image=not a.no_image,
    )
    print(f"wrote {a.out}: LeRobot {a.version}, {a.episodes} episodes x {a.frames} frames")


if __name__ == "__main__":
    main()
