"""Episodes of another format shaped as the LeRobot writer takes them (``write.py`` maps the rest:
default columns, tasks, fps, images as video, the final observation, stats).

- pickled steps (the episode-frame layout) decoded into arrays through the restricted unpickler,
  only with ``allow_pickle`` (the user's decision: ``--allow-pickle``); otherwise the error names the
  fields and the flag, before anything is written;
- the layout's ``X``/``next_X`` pairs (``obs``/``next_obs``) joined into ``X`` with the observation
  after the last action as its final row, so that ``--final-observation keep|drop`` decides it as
  for Minari's ``steps+1`` fields, and a LeRobot import of a kept one gives the pair back.
"""

from __future__ import annotations

from ...episodes import conventions as conv
from ...episodes.mapping import ConversionReport
from ...episodes.model import EpisodeStream

__all__ = ["to_lerobot"]

FORMAT = "lerobot"


def to_lerobot(stream: EpisodeStream, report: ConversionReport, *, allow_pickle: bool = False) -> EpisodeStream:
    """``stream`` as the LeRobot writer takes it (a LeRobot source is returned as it is)."""
    if stream.schema.source_format == FORMAT:
        return stream
    stream = conv.decode_pickles(stream, report, allow_pickle)
    return conv.join_next_rows(stream, report)
