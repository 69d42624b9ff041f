"""LeRobot -> RLDS exactly as the user's mapping spec (``lerobot-to-rlds.md``) says.

``lerobot_to_rlds`` turns a stream of LeRobot episodes (``schema.source_format == "lerobot"``)
into a stream of RLDS-shaped episodes that ``write_rlds`` writes, and fills a ``MappingReport`` as
the episodes pass:

- cameras: ``observation.images.<cam>`` -> ``observation/image_<cam>``; the main camera ->
  ``observation/image`` (``main_camera``; by default ``observation.images.top`` as in the spec's
  table, else ``observation.image``, else the first camera). CHW float [0, 1] arrays become HWC
  uint8 by the spec's ``chw_to_hwc`` (transpose, ``clip(x * 255, 0, 255).astype(uint8)``);
  encoded images keep their bytes; video frames are extracted (``frames``) with the spec's
  frame-count check; new images are encoded as ``image_encoding`` (png by default: lossless);
- ``observation.state`` copied, ``observation.state.*`` concatenated after it, as float32;
  ``action`` copied as float32; ``reward`` from ``next.reward``/``reward`` (default 0.0),
  ``discount`` 1.0, ``is_terminal`` from ``next.done``/``done`` on the last step (default False),
  ``language_instruction`` from the step's task (default "");
- ``episode_metadata``: ``episode_id`` (the output position), ``source_dataset_version``,
  ``source_episode_index``, ``tasks`` (a JSON array), ``language_instruction``, ``file_path``.

Error handling as the spec says: a default used is logged and reported; a safe dtype conversion
(values unchanged) is done and reported, a lossy one fails with an error naming episode and field;
NaN/Inf become 0.0 and out-of-range image values are clipped, each with a warning; an episode with
missing frames fails, is reported, and the others go on.
"""

from __future__ import annotations

import io
import json
import logging
import os
import posixpath
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...episodes.model import Episode, EpisodeStream, FieldSpec, Schema
from ...errors import DecodeError, EpisodeFormatError

__all__ = [
    "DEFAULT_MAIN_CAMERAS",
    "FramesFn",
    "MappingReport",
    "chw_to_hwc",
    "lerobot_to_rlds",
    "video_frames",
    "write_lerobot_rlds",
]

log = logging.getLogger("shardstore.convert.rlds.lerobot_mapping")

#: The main camera when none is named: the first of these present, else the first camera.
DEFAULT_MAIN_CAMERAS = ("observation.images.top", "observation.image")
CAMERA_PREFIX = "observation.images."
#: ``frames(episode, field, length)``: the decoded HWC uint8 frames of a video field.
FramesFn = Callable[[Episode, FieldSpec, int], Iterable[np.ndarray]]


@dataclass(slots=True)
class MappingReport:
    """What the conversion did, for the report written beside the output."""

    source_version: str = ""
    main_camera: str = ""
    image_encoding: str = "png"
    mapping: list[dict[str, str]] = field(default_factory=list)
    defaults: list[dict[str, Any]] = field(default_factory=list)
    conversions: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[dict[str, Any]] = field(default_factory=list)
    episodes: list[dict[str, Any]] = field(default_factory=list)

    def warn(self, episode: int, fld: str, detail: str) -> None:
        log.warning("episode %d, field %r: %s", episode, fld, detail)
        self.warnings.append({"episode": episode, "field": fld, "detail": detail})

    def to_json(self) -> dict[str, Any]:
        ok = [e for e in self.episodes if e["status"] == "ok"]
        return {
            "source": {"format": "lerobot", "version": self.source_version},
            "main_camera": self.main_camera,
            "image_encoding": self.image_encoding,
            "mapping": self.mapping,
            "defaults": self.defaults,
            "conversions": self.conversions,
            "warnings": self.warnings,
            "episodes": self.episodes,
            "totals": {
                "episodes_in": len(self.episodes),
                "episodes_out": len(ok),
                "episodes_failed": len(self.episodes) - len(ok),
                "steps_in": sum(e["steps_in"] for e in self.episodes),
                "steps_out": sum(e["steps_out"] for e in ok),
            },
        }

    def markdown(self) -> str:
        """The spec's ``mapping.md``: every key mapping, default and dtype conversion, as tables."""
        rows = [
            f"# LeRobot {self.source_version} -> RLDS: mapping",
            "",
            f"Main camera: `{self.main_camera or '(none)'}`; converted images encoded as {self.image_encoding}.",
            "",
            "| LeRobot | RLDS | transformation |",
            "| --- | --- | --- |",
            *(f"| `{m['from']}` | `{m['to']}` | {m['transformation']} |" for m in self.mapping),
            "",
            "| RLDS key | default used | why |",
            "| --- | --- | --- |",
            *(f"| `{d['key']}` | `{d['value']!r}` | {d['reason']} |" for d in self.defaults),
            "",
            "| field | from | to | |",
            "| --- | --- | --- | --- |",
            *(f"| `{c['field']}` | {c['from']} | {c['to']} | {c['detail']} |" for c in self.conversions),
        ]
        return "\n".join(rows) + "\n"

    def text(self) -> str:
        j = self.to_json()
        t = j["totals"]
        lines = [
            f"LeRobot {self.source_version} -> RLDS",
            f"episodes: {t['episodes_in']} in, {t['episodes_out']} out, {t['episodes_failed']} failed; "
            f"steps: {t['steps_in']} in, {t['steps_out']} out",
            f"main camera: {self.main_camera or '(none)'}; images encoded as {self.image_encoding}",
            "mapping:",
            *(f"  {m['from']} -> {m['to']}: {m['transformation']}" for m in self.mapping),
            "defaults used:",
            *(
                f"  {d['key']} = {d['value']!r}: {d['reason']}"
                for d in self.defaults or [{"key": "(none)", "value": "", "reason": ""}]
            ),
            "conversions:",
            *(f"  {c['field']}: {c['from']} -> {c['to']} ({c['detail']})" for c in self.conversions),
            "warnings:",
            *(f"  episode {w['episode']}, {w['field']}: {w['detail']}" for w in self.warnings),
            "episodes (source index: steps in -> out, status):",
            *(
                f"  {e['source_episode_index']}: {e['steps_in']} -> {e['steps_out']}, {e['status']}"
                + (f" ({e['error']})" if e.get("error") else "")
                for e in self.episodes
            ),
        ]
        return "\n".join(lines)


def chw_to_hwc(image: np.ndarray) -> np.ndarray:
    """Convert CHW float [0,1] to HWC uint8 [0,255] (the spec's function, over a step axis too)."""
    if image.ndim not in (3, 4):
        raise ValueError(f"Expected 3D array, got {image.ndim}D")
    hwc = np.moveaxis(image, -3, -1)
    return np.clip(hwc * 255, 0, 255).astype(np.uint8)


@dataclass(frozen=True, slots=True)
class _Camera:
    source: FieldSpec
    key: str  # the RLDS step field name: observation.image or observation.image_<cam>
    shape: tuple[int, int, int]  # H, W, C


def lerobot_to_rlds(
    stream: EpisodeStream,
    *,
    main_camera: str | None = None,
    image_encoding: str = "png",
    frames: FramesFn | None = None,
) -> tuple[EpisodeStream, MappingReport]:
    """The RLDS stream of a LeRobot stream (episodes mapped lazily) and the report it fills.

    ``main_camera`` names the LeRobot key whose images become ``observation/image`` (default: see
    ``DEFAULT_MAIN_CAMERAS``); ``frames`` decodes a video field's frames (LeRobot's reader gives
    it). Raises ``EpisodeFormatError`` for a camera that does not exist or a lossy conversion.
    """
    if image_encoding not in ("png", "jpeg"):
        raise EpisodeFormatError(f"image encoding {image_encoding!r}: png or jpeg")
    src = stream.schema
    report = MappingReport(source_version=src.source_version, image_encoding=image_encoding)
    cameras = _cameras(src, main_camera, image_encoding, report)
    states = [f for f in src.fields if f.name == "observation.state"] + [
        f for f in src.fields if f.name.startswith("observation.state.")
    ]
    names = set(src.names)
    reward = next((n for n in ("next.reward", "reward") if n in names), None)
    done = next((n for n in ("next.done", "done") if n in names), None)
    state_dim = sum(int(np.prod(f.shape, dtype=np.int64)) for f in states)
    action = src["action"] if "action" in names else None
    action_dim = int(np.prod(action.shape, dtype=np.int64)) if action else 0
    for f in states:
        how = (
            "direct copy"
            if f.name == "observation.state" and len(states) == 1
            else "concatenate (in this order)"
        )
        report.mapping.append({"from": f.name, "to": "observation/state", "transformation": how})
    if action:
        report.mapping.append({"from": "action", "to": "action", "transformation": "direct copy"})
    for key, value, src_name, reason in (
        ("observation/state", "float32[0]", states, "no observation.state in the source"),
        ("action", "float32[0]", action, "no action in the source"),
        ("reward", 0.0, reward, "no next.reward or reward in the source"),
        ("is_terminal", False, done, "no next.done or done in the source"),
        ("language_instruction", "", _has_tasks(src), "no tasks in the source"),
    ):
        if src_name:
            derived = {
                "reward": "float32 per step",
                "is_terminal": "is_terminal = done on the last step",
                "language_instruction": "the step's task text (task_index -> tasks)",
            }.get(key)
            if derived:
                report.mapping.append({"from": str(src_name), "to": key, "transformation": derived})
            continue
        log.warning("LeRobot -> RLDS: %s, using the default %r for %s", reason, value, key)
        report.defaults.append({"key": key, "value": value, "reason": reason})
    report.defaults.append({"key": "discount", "value": 1.0, "reason": "the standard RL convention (spec)"})
    fields = [
        FieldSpec(
            c.key,
            "media",
            "|u1",
            c.shape,
            tuple(c.key.split(".")),
            image_encoding if c.source.kind != "media" else c.source.encoding,
        )
        for c in cameras
    ]
    fields += [
        FieldSpec("observation.state", "array", "<f4", (state_dim,), ("observation", "state")),
        FieldSpec("action", "array", "<f4", (action_dim,), ("action",)),
        FieldSpec("reward", "array", "<f4", (), ("reward",)),
        FieldSpec("discount", "array", "<f4", (), ("discount",)),
        FieldSpec("language_instruction", "text", "", (), ("language_instruction",)),
    ]
    schema = Schema(
        tuple(fields),
        source_format="rlds",
        source_version="1.0.0",
        attrs={"converted_from": f"lerobot {src.source_version}"},
    )
    if frames is None and any(c.source.kind == "video" for c in cameras):
        frames = video_frames(stream)
    mapper = _Mapper(
        src, stream.source_files, cameras, states, action, reward, done, frames, report, image_encoding
    )
    return EpisodeStream(schema, mapper.run(stream.episodes), stream.count, {}), report


def _cameras(src: Schema, main: str | None, encoding: str, report: MappingReport) -> list[_Camera]:
    found = [f for f in src.fields if f.name.startswith(CAMERA_PREFIX) or f.name == "observation.image"]
    if main is not None and main not in {f.name for f in found}:
        raise EpisodeFormatError(
            f"main camera {main!r} is not a camera of the source ({', '.join(f.name for f in found) or 'none'})"
        )
    if main is None and found:
        main = next((n for n in DEFAULT_MAIN_CAMERAS if n in {f.name for f in found}), found[0].name)
    report.main_camera = main or ""
    out = []
    for f in found:
        cam = f.name[len(CAMERA_PREFIX) :] if f.name.startswith(CAMERA_PREFIX) else "image"
        key = "observation.image" if f.name == main else f"observation.image_{cam}"
        shape: tuple[int, ...]
        if f.kind == "array" and len(f.shape) == 3 and np.dtype(f.dtype).kind == "f":
            shape, how = (
                (f.shape[1], f.shape[2], f.shape[0]),
                "CHW float [0,1] -> HWC uint8 [0,255] (transpose + scale)",
            )
        elif f.kind == "array" and len(f.shape) == 3 and np.dtype(f.dtype) == np.uint8:
            shape, how = f.shape, "HWC uint8 (direct copy)"
        elif f.kind == "media":
            shape, how = f.shape, f"encoded {f.encoding} image kept byte for byte (HWC uint8 when decoded)"
        elif f.kind == "video":
            shape, how = f.shape, "video frames extracted (HWC uint8, frame count checked)"
        else:
            raise EpisodeFormatError(
                f"camera of kind {f.kind} {f.dtype} {list(f.shape)} cannot become an RLDS image",
                member=f.name,
            )
        if f.kind != "media":
            how += f", encoded as {encoding}"
        if len(shape) != 3:
            raise EpisodeFormatError(f"camera shape {list(shape)} is not H, W, C", member=f.name)
        out.append(_Camera(f, key, (int(shape[0]), int(shape[1]), int(shape[2]))))
        report.mapping.append({"from": f.name, "to": key.replace(".", "/"), "transformation": how})
    return out


def _has_tasks(src: Schema) -> bool | str:
    return (
        "task"
        if "task" in src.names or "task_index" in src.names or src.attrs.get("tasks") is not None
        else False
    )


class _Mapper:
    """Maps episode after episode, counting output positions and filling the report."""

    def __init__(
        self,
        src: Schema,
        files: Any,
        cameras: list[_Camera],
        states: list[FieldSpec],
        action: FieldSpec | None,
        reward: str | None,
        done: str | None,
        frames: FramesFn | None,
        report: MappingReport,
        encoding: str,
    ) -> None:
        self.src, self.cameras, self.states, self.action = src, cameras, states, action
        self.reward, self.done, self.frames, self.report, self.encoding = (
            reward,
            done,
            frames,
            report,
            encoding,
        )
        self.info = _json_file(files, "meta/info.json") or {}
        self.task_table = _task_table(src, files)
        self.converted: set[str] = set()

    def run(self, episodes: Iterable[Episode]) -> Iterator[Episode]:
        out_index = 0
        for ep in episodes:
            n = ep.length(self.src)
            row = ep.metadata.get("source_row")
            source_index = int((row if isinstance(row, dict) else ep.metadata).get("episode_index", ep.index))
            entry: dict[str, Any] = {
                "episode_id": None,
                "source_episode_index": source_index,
                "steps_in": n,
                "steps_out": 0,
                "status": "ok",
            }
            self.report.episodes.append(entry)
            try:
                mapped = self.map(ep, n, out_index, source_index)
            except _EpisodeFailed as e:
                entry.update(status="failed", error=str(e))
                log.warning("LeRobot -> RLDS: episode %d failed: %s", source_index, e)
                continue
            entry.update(episode_id=out_index, steps_out=len(mapped.steps["reward"]))
            out_index += 1
            yield mapped

    def map(self, ep: Episode, n: int, out_index: int, source_index: int) -> Episode:
        steps: dict[str, Any] = {}
        for cam in self.cameras:
            steps[cam.key] = self.images(ep, cam, n, source_index)
        parts = [self.floats(ep, f, n, source_index).reshape(n, -1) for f in self.states]
        steps["observation.state"] = np.concatenate(parts, axis=1) if parts else np.zeros((n, 0), np.float32)
        steps["action"] = (
            self.floats(ep, self.action, n, source_index).reshape(n, -1)
            if self.action
            else np.zeros((n, 0), np.float32)
        )
        rsrc = self.src[self.reward] if self.reward else None
        steps["reward"] = (
            self.floats(ep, rsrc, n, source_index).reshape(n) if rsrc else np.zeros(n, np.float32)
        )
        steps["discount"] = np.ones(n, np.float32)
        tasks = self.tasks(ep, n)
        steps["language_instruction"] = tasks
        terminal = False
        if self.done:
            d = np.asarray(ep.steps[self.done]).reshape(n, -1)[:, 0].astype(bool)
            terminal = bool(n and d[-1])
            if d[:-1].any():
                self.report.warn(
                    source_index,
                    self.done,
                    f"done on steps {np.flatnonzero(d[:-1]).tolist()[:5]} before the last; RLDS marks only the last step",
                )
        ep_tasks = _episode_tasks(ep, tasks)
        meta = {
            "episode_id": np.int64(out_index),
            "source_dataset_version": self.src.source_version,
            "source_episode_index": np.int64(source_index),
            "tasks": json.dumps(ep_tasks),
            "language_instruction": ep_tasks[0] if ep_tasks else "",
            "file_path": self.file_path(ep, source_index),
        }
        return Episode(out_index, steps, {"episode_metadata": meta}, terminal, ep.split or "train")

    def floats(self, ep: Episode, f: FieldSpec, n: int, source_index: int) -> np.ndarray:
        arr = np.asarray(ep.steps[f.name])
        if arr.dtype != np.float32:
            out = arr.astype(np.float32)
            same = np.array_equal(out.astype(arr.dtype), arr, equal_nan=arr.dtype.kind == "f")
            if not same:
                raise EpisodeFormatError(
                    f"{arr.dtype} -> float32 would change values (lossy)",
                    member=f"episode {source_index}, field {f.name!r}", noun="",
                )
            if f.name not in self.converted:
                self.converted.add(f.name)
                self.report.conversions.append(
                    {
                        "field": f.name,
                        "from": str(arr.dtype),
                        "to": "float32",
                        "detail": "safe: every value unchanged",
                    }
                )
            arr = out
        bad = ~np.isfinite(arr)
        if bad.any():
            arr = np.where(bad, np.float32(0.0), arr)
            self.report.warn(source_index, f.name, f"{int(bad.sum())} NaN/Inf values replaced by 0.0")
        return arr

    def images(self, ep: Episode, cam: _Camera, n: int, source_index: int) -> list[bytes]:
        f = cam.source
        if f.kind == "media":
            return [bytes(b) for b in ep.steps[f.name]]  # type: ignore[arg-type]
        if f.kind == "video":
            if self.frames is None:
                raise EpisodeFormatError("a video camera needs a frame decoder (frames=)", member=f.name)
            got: list[np.ndarray] = []
            for frame in self.frames(ep, f, n):
                if len(got) >= n:
                    break
                got.append(np.asarray(frame, np.uint8))
            if len(got) != n:
                raise _EpisodeFailed(f"{f.name}: expected {n} frames, got {len(got)}")
            return [self.encode(x) for x in got]
        arr = np.asarray(ep.steps[f.name])
        if arr.dtype.kind == "f":
            bad = ~np.isfinite(arr)
            if bad.any():
                arr = np.where(bad, 0.0, arr)
                self.report.warn(source_index, f.name, f"{int(bad.sum())} NaN/Inf values replaced by 0.0")
            out = (arr < 0) | (arr > 1)
            if out.any():
                self.report.warn(source_index, f.name, f"{int(out.sum())} values outside [0, 1] clipped")
            arr = chw_to_hwc(arr)
        return [self.encode(x) for x in arr]

    def encode(self, image: np.ndarray) -> bytes:
        from PIL import Image

        buf = io.BytesIO()
        img = Image.fromarray(image[..., 0] if image.shape[-1] == 1 else image)
        img.save(buf, format="PNG" if self.encoding == "png" else "JPEG", quality=95)
        return buf.getvalue()

    def tasks(self, ep: Episode, n: int) -> list[str]:
        if "task" in ep.steps:
            return [str(t) for t in ep.steps["task"]]
        if "task_index" in ep.steps and self.task_table:
            idx = np.asarray(ep.steps["task_index"]).reshape(n, -1)[:, 0]
            return [self.task_table.get(int(i), "") for i in idx]
        one = _episode_tasks(ep, [])
        return [one[0] if len(one) == 1 else ""] * n

    def file_path(self, ep: Episode, source_index: int) -> str:
        for key in ("file_path", "data_path", "data_file"):
            if isinstance(ep.metadata.get(key), str):
                return str(ep.metadata[key])
        template = self.info.get("data_path")
        if not isinstance(template, str):
            return ""
        row = ep.metadata.get("source_row")
        row = row if isinstance(row, dict) else ep.metadata
        chunk = int(row.get("data/chunk_index", source_index // int(self.info.get("chunks_size", 1000))))
        values = {
            "episode_chunk": chunk,
            "episode_index": source_index,
            "chunk_index": chunk,
            "file_index": int(row.get("data/file_index", 0)),
        }
        try:
            return posixpath.normpath(template.format(**values))
        except (KeyError, IndexError, ValueError):
            return ""


def video_frames(stream: EpisodeStream) -> FramesFn:
    """The frames of a video field's ``VideoRef`` values, decoded from ``stream.video_files`` as the
    spec's ``extract_frames``: in order, stopping where the video has no more frames (the frame
    count check then fails the episode)."""
    from ...episodes.video import FrameDecoder, VideoRef

    decoder = FrameDecoder(lambda name: stream.video_files[name]())

    def frames(ep: Episode, f: FieldSpec, n: int) -> Iterator[np.ndarray]:
        refs: list[VideoRef] = list(ep.steps[f.name][:n])  # type: ignore[arg-type]
        for ref in refs:
            try:
                yield decoder.frame(ref.file, ref.timestamp)
            except (DecodeError, KeyError):
                return

    return frames


class _EpisodeFailed(Exception):
    """This episode cannot be converted (missing frames); the others go on."""


def _episode_tasks(ep: Episode, steps: list[str]) -> list[str]:
    tasks = ep.metadata.get("tasks")
    if isinstance(tasks, list | tuple) and all(isinstance(t, str) for t in tasks):
        return list(tasks)
    return list(dict.fromkeys(t for t in steps if t))


def _json_file(files: Any, name: str) -> Any:
    data = files.get(name) if files else None
    try:
        return json.loads(data) if data else None
    except ValueError:
        return None


def _task_table(src: Schema, files: Any) -> dict[int, str]:
    """task_index -> task text: the schema's ``tasks`` attribute or ``meta/tasks.jsonl``."""
    table = src.attrs.get("tasks")
    if isinstance(table, dict):
        return {int(k): str(v) for k, v in table.items()}
    if isinstance(table, list):
        return dict(enumerate(str(t) for t in table))
    data = files.get("meta/tasks.jsonl") if files else None
    out: dict[int, str] = {}
    for line in (data or b"").decode("utf-8", "replace").splitlines():
        try:
            row = json.loads(line)
            out[int(row["task_index"])] = str(row["task"])
        except (ValueError, KeyError, TypeError):
            continue
    return out


def write_lerobot_rlds(
    stream: EpisodeStream,
    out: str,
    *,
    main_camera: str | None = None,
    image_encoding: str = "png",
    frames: FramesFn | None = None,
    name: str | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Convert a LeRobot stream and write it as the RLDS folder ``out``, then the validation report
    beside it (``<out>.report.json`` and ``<out>.report.txt``): the mapping, every default and
    conversion, the warnings, per-episode step counts in and out, and ``check_rlds``'s run of the
    spec's rules on the output (cross-validated with the counts in); and ``<out>.mapping.md``, the
    spec's "document all conversions in mapping.md". Returns the report's JSON."""
    from .api import write_rlds
    from .check import check_rlds, report_path

    mapped, report = lerobot_to_rlds(
        stream, main_camera=main_camera, image_encoding=image_encoding, frames=frames
    )
    write_rlds(mapped, out, name=name, force=force)
    result = report.to_json()
    _write_text(report_path(out, "json"), json.dumps(result, indent=2, default=str))
    # the images this writer encoded are checked by their headers; a source's encoded images, kept
    # byte for byte, are decoded (nothing has decoded them before)
    check = check_rlds(out, decode_images=any(f.kind == "media" for f in stream.schema.fields))
    result["validation"] = check.to_json()
    _write_text(report_path(out, "json"), json.dumps(result, indent=2, default=str))
    _write_text(report_path(out, "txt"), report.text() + "\n\n" + check.text() + "\n")
    _write_text(f"{out.rstrip('/')}.mapping.md", report.markdown())
    return result


def _write_text(path: str, text: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
