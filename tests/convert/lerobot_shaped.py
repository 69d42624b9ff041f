"""An episode stream shaped like LeRobot's (the fields, dtypes and metadata files a LeRobot v2.1
dataset has), built directly on the episode model for the LeRobot -> RLDS tests."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
from PIL import Image

from shardstore.episodes.model import Episode, EpisodeStream, FieldSpec, Schema

H, W = 6, 8
TASKS = ["pick the cube", "open the drawer"]
LENGTHS = [4, 3, 5]


def png(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def lerobot_stream(
    *, video: bool = False, nan_episode: int = 1, wrist: bool = True, reward: bool = True
) -> EpisodeStream:
    """Three episodes: a CHW float32 [0,1] top camera (frame arrays), a png wrist camera (or a video
    camera), state split in ``observation.state`` + ``observation.state.gripper`` (float64 of
    float32-exact values), action, ``next.reward``, ``next.done``, ``task_index`` and LeRobot's
    bookkeeping columns. Episode ``nan_episode`` has a NaN in its state and image values outside
    [0, 1]."""
    fields = [FieldSpec("observation.images.top", "array", "<f4", (3, H, W), ("observation.images.top",))]
    if wrist:
        kind = ("video", "|u1", "h264") if video else ("media", "|u1", "png")
        fields.append(
            FieldSpec(
                "observation.images.wrist",
                kind[0],
                kind[1],
                (H, W, 3),
                ("observation.images.wrist",),
                kind[2],
            )
        )
    fields += [
        FieldSpec("observation.state", "array", "<f4", (3,), ("observation.state",)),
        FieldSpec("observation.state.gripper", "array", "<f8", (1,), ("observation.state.gripper",)),
        FieldSpec("action", "array", "<f4", (4,), ("action",)),
        FieldSpec("next.done", "array", "|b1", (1,), ("next.done",)),
        FieldSpec("task_index", "array", "<i8", (1,), ("task_index",)),
        FieldSpec("timestamp", "array", "<f4", (1,), ("timestamp",)),
        FieldSpec("frame_index", "array", "<i8", (1,), ("frame_index",)),
    ]
    if reward:
        fields.append(FieldSpec("next.reward", "array", "<f4", (1,), ("next.reward",)))
    schema = Schema(tuple(fields), source_format="lerobot", source_version="v2.1")
    info = {
        "codebase_version": "v2.1",
        "chunks_size": 1000,
        "fps": 10,
        "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
    }
    files = {
        "meta/info.json": json.dumps(info).encode(),
        "meta/tasks.jsonl": "\n".join(
            json.dumps({"task_index": i, "task": t}) for i, t in enumerate(TASKS)
        ).encode(),
    }

    def episodes() -> Iterator[Episode]:
        for e, n in enumerate(LENGTHS):
            yield make_episode(e, n, nan=e == nan_episode, wrist=wrist, video=video, reward=reward)

    return EpisodeStream(schema, episodes(), len(LENGTHS), files)


def make_episode(e: int, n: int, *, nan: bool, wrist: bool, video: bool, reward: bool) -> Episode:
    rng = np.random.default_rng(e)
    top = rng.random((n, 3, H, W), dtype=np.float32)
    state = rng.standard_normal((n, 3)).astype(np.float32)
    if nan:
        top[0, 0, 0, 0] = 1.5
        top[1, 1, 1, 1] = -0.25
        state[1, 2] = np.nan
    steps: dict[str, Any] = {
        "observation.images.top": top,
        "observation.state": state,
        "observation.state.gripper": rng.standard_normal((n, 1)).astype(np.float32).astype(np.float64),
        "action": rng.standard_normal((n, 4)).astype(np.float32),
        "next.done": (np.arange(n) == n - 1)[:, None] & (e != 2),
        "task_index": np.full((n, 1), e % 2, np.int64),
        "timestamp": (np.arange(n, dtype=np.float32) / 10)[:, None],
        "frame_index": np.arange(n, dtype=np.int64)[:, None],
    }
    if reward:
        steps["next.reward"] = rng.random((n, 1), dtype=np.float32)
    if wrist:
        frames = [rng.integers(0, 256, (H, W, 3), dtype=np.uint8) for _ in range(n)]
        steps["observation.images.wrist"] = [b"" for _ in frames] if video else [png(f) for f in frames]
        if video:
            VIDEO_FRAMES[e] = frames
    return Episode(
        e, steps, {"episode_index": np.int64(e), "tasks": [TASKS[e % 2]], "length": n}, False, "train"
    )


#: episode -> its "video" frames (what a decoder would give), for the video camera case
VIDEO_FRAMES: dict[int, list[np.ndarray]] = {}
