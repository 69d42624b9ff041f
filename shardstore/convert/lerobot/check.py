"""``shardstore check lerobot``: the LeRobot checklist as a report.

The checks are those of the users' v2.1 document (and their v3.0 counterparts): a known version,
``chunks_size``, the path templates and that every file they name exists (and no data file they
do not name), video keys that are features (``observation.images.*`` advised), zero-padded names,
``episodes.jsonl`` one object per line, parquet rows = video frames = the episode's length per
camera, the video's fps, its codec (AV1 and HEVC are read; on v2.1 they are warnings, since that
document names H.264; v3.0 is what LeRobot 0.6 writes, AV1 by default), parquet columns that are
features, tasks that exist, forward slashes. ``deep.py`` reads every row and packet on top of this.

The import runs the same checks first and refuses a dataset with an error in it, naming the
episode, camera and file, before anything is written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...episodes.mp4 import VideoInfo, probe
from ...episodes.problems import FormatReport, Problem
from ...errors import DecodeError, LeRobotFormatError, ShardstoreError
from ...storage import Storage
from .meta import (
    DEFAULT_COLUMNS,
    TEMPLATE_FIELDS,
    LeRobotMeta,
    load_meta,
    parquet_file,
    template_fields,
)

__all__ = ["Problem", "CheckReport", "check_meta", "check_lerobot", "SPEC_CODECS", "READ_CODECS"]

#: The codec the users' v2.1 document names; others are read but warned about there. v3.0 has no
#: such rule: LeRobot 0.6 itself writes AV1 (``libsvtav1``, its default) and offers H.264 and HEVC.
SPEC_CODECS = ("h264",)
READ_CODECS = ("h264", "av1", "hevc")


@dataclass(slots=True)
class CheckReport(FormatReport):
    """What ``check_lerobot`` found (see ``FormatReport``), and the videos' headers it read."""

    format: str = "LeRobot"
    video_infos: dict[str, VideoInfo] = field(default_factory=dict, repr=False)

    def raise_first(self) -> None:
        """Raise ``LeRobotFormatError`` for the first error, naming its episode, camera and file."""
        for p in self.problems:
            if p.severity == "error":
                member = ", ".join(
                    w
                    for w in (
                        None if p.episode is None else f"episode {p.episode}",
                        None if p.camera is None else f"camera {p.camera!r}",
                    )
                    if w
                )
                raise LeRobotFormatError(p.message, path=p.file or self.source, member=member or None, noun="")


def check_lerobot(storage: Storage) -> tuple[CheckReport, LeRobotMeta | None]:
    """Every check on the dataset at ``storage``; the metadata too when it could be read."""
    report = CheckReport(storage.url())
    report.ran("meta")
    try:
        meta = load_meta(storage)
    except ShardstoreError as e:
        report.add("error", "meta", f"{e.member}: {e.detail}" if e.member else e.detail, file=e.path)
        return report, None
    check_meta(meta, storage, report)
    return report, meta


def check_meta(meta: LeRobotMeta, storage: Storage, report: CheckReport) -> None:
    """The checks that need the metadata read (``check_lerobot`` minus reading it)."""
    report.version = meta.version
    report.episodes = len(meta.episodes)
    report.frames = sum(e.length for e in meta.episodes)
    info_file = storage.url("meta/info.json")
    _check_templates(meta, report, info_file)
    _check_features(meta, report, info_file)
    present = set(storage.list((".parquet", ".mp4")))
    _check_files(meta, present, report, storage)
    if report.ok:
        _check_rows(meta, storage, report)
        _check_videos(meta, storage, present, report)


def _check_templates(meta: LeRobotMeta, report: CheckReport, info_file: str) -> None:
    report.checks += ["templates", "slashes"]
    data_fields, video_fields = TEMPLATE_FIELDS[meta.version]
    for key, want in (("data_path", data_fields), ("video_path", video_fields)):
        template = meta.info.get(key)
        if template is None:
            if key == "video_path" and meta.video_keys:
                report.add("error", "templates", "video features but no video_path", file=info_file)
            continue
        if "\\" in template:
            report.add("error", "slashes", f"{key} {template!r} has backslashes", file=info_file)
        got = template_fields(template)
        if got != want:
            report.add(
                "error",
                "templates",
                f"{key} {template!r} uses {sorted(got)}; {meta.version} names files by {sorted(want)}",
                file=info_file,
            )
        elif meta.version == "v2.1" and "episode_index:06d" not in template:
            report.add(
                "warning",
                "templates",
                f"{key} {template!r}: episode numbers not zero-padded to 6",
                file=info_file,
            )


def _check_features(meta: LeRobotMeta, report: CheckReport, info_file: str) -> None:
    report.checks += ["video_keys", "codebase_version", "chunks_size"]
    for key in meta.video_keys:
        if not key.startswith("observation.images."):
            report.add(
                "warning",
                "video_keys",
                f"video feature {key!r} is not under observation.images.*",
                file=info_file,
            )
    report.checks.append("default_features")
    for name, dtype in DEFAULT_COLUMNS.items():
        feature = meta.features.get(name)
        if not isinstance(feature, dict) or feature.get("dtype") != dtype:
            report.add(
                "error",
                "default_features",
                f"no {dtype} feature {name!r}: LeRobot's loader needs its default features "
                f"({', '.join(DEFAULT_COLUMNS)})",
                file=info_file,
            )
    known = set(meta.tasks)
    report.checks.append("tasks")
    if meta.episodes and not meta.tasks:
        report.add("error", "tasks", "the tasks table is empty: LeRobot gives every frame a task", file=info_file)
    for e in meta.episodes:
        for t in e.tasks:
            if t not in known:
                report.add("error", "tasks", f"task {t!r} is not in the tasks table", episode=e.index)


def _check_files(meta: LeRobotMeta, present: set[str], report: CheckReport, storage: Storage) -> None:
    """Every file the templates name exists, and no data file is outside the templates."""
    report.checks += ["files", "zero_padding"]
    named: set[str] = set()
    for e in meta.episodes:
        for camera, span in [(None, e.data_file), *((k, v.file) for k, v in e.videos.items())]:
            path = span  # checked when the template was filled (meta.fill)
            named.add(path)
            if path not in present:
                what = "video" if camera else "data"
                report.add(
                    "error",
                    "files",
                    f"missing {what} file",
                    file=storage.url(path),
                    episode=e.index,
                    camera=camera,
                )
    for path in sorted(present - named):
        if path.startswith(("data/", "videos/")):
            hint = " (a number not zero-padded?)" if re.search(r"[_-]\d+\.", path) else ""
            report.add(
                "error", "templates", f"file not named by the path templates{hint}", file=storage.url(path)
            )


def _check_rows(meta: LeRobotMeta, storage: Storage, report: CheckReport) -> None:
    """Parquet rows per episode = its length; columns = the non-video features."""
    report.checks += ["rows", "columns"]
    want = {k for k, f in meta.features.items() if f.get("dtype") != "video"}
    by_file: dict[str, list[int]] = {}
    by_index = {e.index: e for e in meta.episodes}
    for e in meta.episodes:
        by_file.setdefault(e.data_file, []).append(e.index)
    for path, eps in by_file.items():
        try:
            with parquet_file(storage, path) as pf:  # the schema, and one column: images are not read here
                cols = set(pf.schema_arrow.names) - {"__index_level_0__"}
                table = pf.read(columns=["episode_index"]) if "episode_index" in cols else None
        except LeRobotFormatError as err:
            report.add("error", "rows", err.detail, file=err.path, episode=eps[0])
            continue
        for c in sorted(cols - want):
            report.add(
                "error",
                "columns",
                f"parquet column {c!r} is not in info.json features",
                file=storage.url(path),
            )
        for c in sorted(want - cols):
            report.add("error", "columns", f"feature {c!r} has no parquet column", file=storage.url(path))
        if table is None:
            continue
        counts = dict(
            zip(*np.unique(table.column("episode_index").to_numpy(), return_counts=True), strict=True)
        )
        for ep in eps:
            entry = by_index[ep]
            rows = int(counts.get(ep, 0))
            if rows != entry.length:
                report.add(
                    "error",
                    "rows",
                    f"{rows} parquet rows where the episode's length is {entry.length}",
                    file=storage.url(path),
                    episode=ep,
                    field="episode_index",
                    expected=f"{entry.length} rows with episode_index {ep}",
                )


def _check_videos(meta: LeRobotMeta, storage: Storage, present: set[str], report: CheckReport) -> None:
    """Frames per episode and camera = its length; fps; codec."""
    report.checks += ["frames", "fps", "codec", "resolution", "spans"]
    fps = meta.fps
    files: dict[str, list[tuple[int, str, float, float | None]]] = {}
    for e in meta.episodes:
        for camera, span in e.videos.items():
            files.setdefault(span.file, []).append((e.index, camera, span.from_timestamp, span.to_timestamp))
    lengths = {e.index: e.length for e in meta.episodes}
    for path, uses in files.items():
        if path not in present:
            continue
        url = storage.url(path)
        try:
            with storage.open(path) as f:
                info = probe(f, url, packets=False)  # the sample table: the header only
        except DecodeError as err:
            report.add("error", "frames", err.detail, file=url, episode=uses[0][0], camera=uses[0][1])
            continue
        report.videos += 1
        report.video_infos[path] = info
        camera = uses[0][1]
        if abs(info.fps - fps) > 1e-3:
            report.add(
                "error",
                "fps",
                f"video at {info.fps:g} fps where info.json says {fps:g}",
                file=url,
                camera=camera,
            )
        if info.codec not in READ_CODECS:
            report.add(
                "error", "codec", f"codec {info.codec!r} is not one LeRobot records", file=url, camera=camera
            )
        elif info.codec not in SPEC_CODECS and meta.version == "v2.1":
            report.add(
                "warning",
                "codec",
                f"codec {info.codec!r}; the v2.1 document names H.264 (avc1)",
                file=url,
                camera=camera,
            )
        want = declared_size(meta.features.get(camera) or {})
        if want is not None and want != (info.width, info.height):
            report.add(
                "error",
                "resolution",
                f"video of {info.width}x{info.height} where info.json says {want[0]}x{want[1]}",
                file=url,
                camera=camera,
            )
        if meta.version == "v2.1":
            ep = uses[0][0]
            if info.frames != lengths[ep]:
                report.add(
                    "error",
                    "frames",
                    f"{info.frames} video frames where the episode has {lengths[ep]} rows",
                    file=url,
                    episode=ep,
                    camera=camera,
                )
            continue
        total = 0
        for ep, cam, start, end in uses:
            frames = round(((end or 0.0) - start) * fps)
            total += lengths[ep]
            if frames != lengths[ep]:
                report.add(
                    "error",
                    "frames",
                    f"time range {start:g}..{end:g} s holds {frames} frames where the episode has {lengths[ep]} rows",
                    file=url,
                    episode=ep,
                    camera=cam,
                )
        if info.frames != total:  # more: a cut's whole-GOP padding, which --deep tells from an appended take
            report.add(
                "error" if info.frames < total else "warning",
                "frames",
                f"{info.frames} video frames where its episodes have {total} rows",
                file=url,
                episode=uses[-1][0],
                camera=camera,
                expected=None if info.frames < total else "frames outside every episode's range only as a cut's "
                "padding to whole GOPs (check --deep tells them from an appended take)",
            )
        _check_spans(uses, info.frames, fps, url, report)


def declared_size(feature: dict[str, Any]) -> tuple[int, int] | None:
    """(width, height) a video feature of ``info.json`` declares: from ``shape`` by its ``names``
    (``height``, ``width``), else from ``video.width``/``video.height``; None if it says neither."""
    shape, names = feature.get("shape"), feature.get("names")
    if isinstance(shape, list) and isinstance(names, list) and len(shape) == len(names):
        by = dict(zip(names, shape, strict=True))
        if isinstance(by.get("width"), int) and isinstance(by.get("height"), int):
            return by["width"], by["height"]
    vinfo = feature.get("info") or feature.get("video_info") or {}
    width, height = vinfo.get("video.width"), vinfo.get("video.height")
    return (width, height) if isinstance(width, int) and isinstance(height, int) else None


def _check_spans(uses: list[tuple[int, str, float, float | None]], frames: int, fps: float, url: str,
                 report: CheckReport) -> None:
    """v3.0: the episodes' time ranges in one video file are ordered, disjoint and inside it (half a
    frame of slack for rounding): a range that copies another's would show that episode's frames."""
    slack = 0.5 / fps
    length = frames / fps
    prev: tuple[int, float] | None = None
    for ep, cam, start, end in sorted(uses, key=lambda u: (u[2], u[0])):
        if end is None or not (0 - slack <= start <= end <= length + slack):
            report.add("error", "spans", f"time range {start:g}..{end} s is not inside the video's {length:g} s",
                       file=url, episode=ep, camera=cam)
        elif prev is not None and start < prev[1] - slack:
            report.add("error", "spans", f"time range {start:g}..{end:g} s overlaps episode {prev[0]}'s",
                       file=url, episode=ep, camera=cam)
        prev = (ep, max(end or 0.0, prev[1] if prev else 0.0))
