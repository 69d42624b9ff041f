"""How episodes lie in the shards: sample keys, part names, the flag parts. Shared by the writer
and the view so the two cannot drift apart.

Two layouts, named by ``schema.json``'s ``"layout"`` (``layout_info``): layout 2,
``granularity="columns"`` (the default: one sample per episode, its small fields as the records of
one ``steps.npy``, media and text packed in ``blobs.bin``; ``columns.py``), and layout 1, where
every field of every row is a member of its own, in one of two granularities (a dataset whose
``schema.json`` names no layout is layout 1):

- ``granularity="step"``: one sample per step, key ``e{episode:08d}_s{step:06d}`` (no dots; sorted
  keys are episode then step order). An episode with ``steps+1`` fields (Minari's observations)
  has one more sample, ``s{steps:06d}``, holding only those fields' last row, with ``is_last`` set
  (RLDS's convention: the last step carries the final observation); otherwise ``is_last`` is on
  the last step. ``is_terminal`` is set on the sample that has ``is_last`` when the episode ended
  terminally.
- ``granularity="episode"``: one sample per episode, key ``e{episode:08d}``: arrays stacked over
  all rows, media and text one part per row (``<field>.{row:06d}.<ext>``), a video field's frame
  references one ``<field>.json`` (``video.refs_to_bytes``), flags stacked.

Parts: ``<field>.npy`` (``np.save`` bytes, ``allow_pickle=False``) per array, media as their
encoded bytes with their extension (``<field>.png``, ``<field>.jpg``), text ``<field>.txt`` (UTF-8),
a video field's frame reference ``<field>.json`` (``video.VideoRef``: file, timestamp, frame),
and ``is_first.npy``, ``is_last.npy``, ``is_terminal.npy`` (numpy bool scalars, or bool vectors in
an episode sample).
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from ..errors import EpisodeFormatError, IndexVersionError
from .model import FLAG_FIELDS, FieldSpec
from .npy import encode_row

__all__ = [
    "GRANULARITIES",
    "DEFAULT_GRANULARITY",
    "LAYOUT_VERSION",
    "layout_info",
    "read_layout",
    "describe_layout",
    "step_key",
    "episode_key",
    "extension",
    "part_name",
    "row_part_name",
    "FLAG_PARTS",
    "TRUE_NPY",
    "FALSE_NPY",
]

GRANULARITIES = ("columns", "step", "episode")
DEFAULT_GRANULARITY = "columns"
#: The newest layout this version writes and reads.
LAYOUT_VERSION = 2
#: Media encodings whose usual file extension is not their name.
_EXTENSIONS = {"jpeg": "jpg", "tiff": "tif", "mpeg4": "mp4", "h264": "mp4"}
_ENCODING_RE = re.compile(r"^[a-z0-9]+$")
#: Part names of the flags, in ``FLAG_FIELDS`` order.
FLAG_PARTS = tuple(f"{name}.npy" for name in FLAG_FIELDS)
TRUE_NPY = encode_row(np.array(True))
FALSE_NPY = encode_row(np.array(False))


def layout_info(granularity: str) -> dict[str, Any]:
    """``schema.json``'s ``"layout"`` entry for a dataset written with ``granularity``."""
    return {"version": 2 if granularity == "columns" else 1, "granularity": granularity}


def read_layout(schema_text: str | bytes, where: str) -> int:
    """The layout version ``schema.json`` names (1 when it names none, as before layouts had
    numbers); ``IndexVersionError`` for one newer than this version reads."""
    try:
        entry = json.loads(schema_text).get("layout") or {}
        version = int(entry.get("version", 1))
    except (ValueError, TypeError, AttributeError) as e:
        raise EpisodeFormatError(f"invalid layout entry: {e}", path=where) from None
    if not 1 <= version <= LAYOUT_VERSION:
        raise IndexVersionError(f"episode layout {version}; this shardstore reads layouts 1 to {LAYOUT_VERSION}", path=where)
    return version


_DESCRIPTIONS = {
    "columns": "one sample per episode, small fields as the records of steps.npy, media and text in blobs.bin",
    "step": "one sample per step, a tar member per field",
    "episode": "one sample per episode, a tar member per field and media or text row",
}


def describe_layout(schema_text: str | bytes, index_path: str, where: str) -> str:
    """``layout N (granularity: what it means)`` for ``shardstore check``: the version from
    ``schema.json``, the granularity from the episode index at ``index_path`` (where layout 1
    kept it)."""
    from .index import EpisodeIndexReader

    version = read_layout(schema_text, where)
    granularity = EpisodeIndexReader(index_path).granularity
    return f"layout {version} ({granularity}: {_DESCRIPTIONS.get(granularity, 'unknown')})"


def step_key(episode: int, step: int) -> str:
    return f"e{episode:08d}_s{step:06d}"


def episode_key(episode: int) -> str:
    return f"e{episode:08d}"


def extension(spec: FieldSpec) -> str:
    """The part extension of a field: ``npy`` for arrays, ``txt`` for text, ``json`` for a video
    field's per-step frame reference, the encoding's usual extension for media."""
    if spec.kind == "video":
        return "json"
    if spec.kind == "media":
        enc = spec.encoding.lower()
        if not _ENCODING_RE.match(enc):
            raise EpisodeFormatError(f"media encoding {spec.encoding!r} is not a file extension", member=f"field {spec.name!r}", noun="")
        return _EXTENSIONS.get(enc, enc)
    return "txt" if spec.kind == "text" else "npy"


def part_name(spec: FieldSpec) -> str:
    """The part of a step sample (or an episode sample's array) holding ``spec``."""
    return f"{spec.name}.{extension(spec)}"


def row_part_name(spec: FieldSpec, row: int) -> str:
    """The part of an episode sample holding row ``row`` of a media or text field."""
    return f"{spec.name}.{row:06d}.{extension(spec)}"
