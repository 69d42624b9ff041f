"""Episodes of another format shaped as the LeRobot writer takes them (``write.py`` maps the rest:
default columns, tasks, fps, images as video, the final observation, stats).

- pickled steps (the episode-frame layout) decoded into arrays through the restricted unpickler,
  only with ``allow_pickle`` (the user's decision: ``--allow-pickle``); otherwise the error names the
  fields and the flag, before anything is written;
- the layout's ``X``/``next_X`` pairs (``obs``/``next_obs``) joined into ``X`` with the observation
  after the last action as its final row, so that ``--final-observation keep|drop`` decides it as
  for Minari's ``steps+1`` fields, and a LeRobot import of a kept one gives the pair back.

``describe_write`` then puts into the conversion report what the writer derived (default columns,
tasks, stats) and approximated (image fields encoded as video, with the PSNR measured).
"""

from __future__ import annotations

from ...episodes import conventions as conv
from ...episodes.mapping import ConversionReport
from ...episodes.model import EpisodeStream, Schema
from .meta import DEFAULT_COLUMNS
from .write import WriteReport

__all__ = ["describe_write", "to_lerobot"]

FORMAT = "lerobot"
_DERIVED = {"timestamp": "frame / fps", "frame_index": "the frame's number in its episode",
            "episode_index": "the episode's number", "index": "the running frame number of the dataset",
            "task_index": "the frame's task's number in meta/tasks"}


def to_lerobot(stream: EpisodeStream, report: ConversionReport, *, allow_pickle: bool = False) -> EpisodeStream:
    """``stream`` as the LeRobot writer takes it (a LeRobot source is returned as it is)."""
    if stream.schema.source_format == FORMAT:
        return stream
    stream = conv.decode_pickles(stream, report, allow_pickle)
    return conv.join_next_rows(stream, report)


def describe_write(schema: Schema, written: WriteReport, report: ConversionReport) -> None:
    """What the LeRobot writer derived and approximated for a stream of another format, into
    ``report``: LeRobot's default columns the source lacks, the tasks, the stats, and each image
    field encoded as video with its PSNR (the lowest of its episodes)."""
    if schema.source_format == FORMAT:
        return
    for name in DEFAULT_COLUMNS:
        if name not in schema.names:
            report.derive(name, _DERIVED[name])
    report.derive("meta/tasks, task_index", "the episodes' tasks (language fields, task metadata, or --task)")
    report.derive("meta/stats.json, per-episode stats", "computed from every row's values and frames, with "
                  "lerobot 0.6's quantiles")
    for key, db in sorted(written.psnr_db.items()):
        report.approximate(key, key, "uint8 frames encoded as video (lossy)", psnr_db=db)
