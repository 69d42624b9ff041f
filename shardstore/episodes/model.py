"""The episode model: the hub that every robot-learning format converts through.

Minari, LeRobot, RLDS and the episode-frame layout each read into these classes and write from
them (``shardstore/convert/<format>.py``), and the shard store is one more reader and writer
(``EpisodeWriter`` in, ``shardstore.episodes(ds)`` out). So N formats need 2N adapters, not N x N
converters, and a lossless round trip through the hub is a lossless round trip between formats.

Three things make an episode:

- its ``metadata``: a mapping with typed values kept (an ``np.int64`` seed stays an int64), stored
  as JSON through ``to_jsonable`` / ``from_jsonable``;
- its ``steps``: one entry per field, keyed by ``FieldSpec.name``: an array with a leading step
  axis, or a list of encoded media bytes, or a list of strings;
- the ``Schema`` (the field tree) shared by the episodes of a dataset: for each field its kind,
  dtype, per-step shape, the path it had in the source's nesting (so a writer rebuilds nested
  groups and dicts exactly) and attributes the source attached to it.

Field names are flat and contain no ``/`` (a tar member's part name cannot): nested sources join
their path with ``.`` (``observations.pixels``), and the path itself is kept in ``FieldSpec.path``
because names like LeRobot's ``observation.state`` contain dots of their own.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Literal

import numpy as np

from ..errors import EpisodeFormatError
from .video import VideoRef

if TYPE_CHECKING:
    from .parts import EpisodePart

__all__ = [
    "FLAG_FIELDS",
    "Episode",
    "EpisodeStream",
    "FieldKind",
    "FieldSpec",
    "Rows",
    "Schema",
    "StepValues",
    "from_jsonable",
    "to_jsonable",
]

#: ``array``: numpy values (``.npy`` in the store); ``media``: encoded bytes per step (``.png``,
#: ``.jpg``...); ``text``: one string per step (``.txt``); ``video``: frames of a video file kept
#: whole elsewhere, one ``episodes.video.VideoRef`` per step (file, timestamp, frame number), the
#: files themselves in ``EpisodeStream.video_files``.
FieldKind = Literal["array", "media", "text", "video"]

#: ``steps``: one row per step. ``steps+1``: one row more, as Minari's observations and infos,
#: whose last row is the observation after the last action; a writer must keep it.
Rows = Literal["steps", "steps+1"]

#: Per-step flags the store writes on every step (RLDS's names); they are derived from the
#: episode's length and ``Episode.terminal``, so no format carries them as fields.
FLAG_FIELDS = ("is_first", "is_last", "is_terminal")

#: The values of one field across an episode's rows.
StepValues = np.ndarray | list[bytes] | list[str]


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field of the field tree.

    ``dtype`` is a numpy dtype string (``"<f4"``, ``"|u1"``) for arrays, the dtype the decoded
    media have where known (``"|u1"``), ``""`` otherwise; ``shape`` is the per-step shape without
    the step axis (``()`` for a scalar). ``encoding`` names the media encoding (``png``, ``jpeg``)
    or the video codec. ``attrs`` holds what the source attached to the field (HDF5 attributes,
    LeRobot's ``names``), as typed JSON values.
    """

    name: str
    kind: FieldKind
    dtype: str = ""
    shape: tuple[int, ...] = ()
    path: tuple[str, ...] = ()
    encoding: str = ""
    rows: Rows = "steps"
    attrs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name or self.name in FLAG_FIELDS:
            raise EpisodeFormatError(f"invalid field name {self.name!r} (empty, has '/', or a reserved flag)")
        if self.kind not in ("array", "media", "text", "video"):
            raise EpisodeFormatError(f"field {self.name!r}: unknown kind {self.kind!r}")
        if self.rows not in ("steps", "steps+1"):
            raise EpisodeFormatError(f"field {self.name!r}: rows must be 'steps' or 'steps+1', not {self.rows!r}")

    @property
    def source_path(self) -> tuple[str, ...]:
        """The path in the source's nesting; a flat source's path is the name itself."""
        return self.path or (self.name,)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "path": list(self.path),
            "encoding": self.encoding,
            "rows": self.rows,
            "attrs": to_jsonable(dict(self.attrs)),
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> FieldSpec:
        try:
            return cls(
                name=obj["name"],
                kind=obj["kind"],
                dtype=obj.get("dtype", ""),
                shape=tuple(int(n) for n in obj.get("shape", ())),
                path=tuple(obj.get("path", ())),
                encoding=obj.get("encoding", ""),
                rows=obj.get("rows", "steps"),
                attrs=from_jsonable(obj.get("attrs", {})),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise EpisodeFormatError(f"invalid field in schema: {e}", member=str(obj.get("name", "?"))) from e


@dataclass(frozen=True, slots=True)
class Schema:
    """The field tree of a dataset's episodes and where they came from.

    ``source_format`` is the format module's name (``minari``, ``lerobot``, ``rlds``,
    ``episode-wds``, or ``""`` for episodes written by user code); ``source_version`` its version
    (``0.4.3``, ``v2.1``); ``attrs`` dataset-level values a writer needs to rebuild the source
    (typed JSON values). Stored as ``.nv-meta/schema.json``.
    """

    fields: tuple[FieldSpec, ...]
    source_format: str = ""
    source_version: str = ""
    attrs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for f in self.fields:
            if f.name in seen:
                raise EpisodeFormatError(f"field {f.name!r} is defined twice in the schema")
            seen.add(f.name)

    def __getitem__(self, name: str) -> FieldSpec:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def to_json(self, layout: Mapping[str, Any] | None = None) -> str:
        """The schema as ``schema.json``'s text; ``layout``: the store's layout entry (the writer's
        ``layout.layout_info``), kept beside the field tree."""
        obj: dict[str, Any] = {
            "format": "shardstore-episodes",
            "version": 1,
            "source_format": self.source_format,
            "source_version": self.source_version,
            "attrs": to_jsonable(dict(self.attrs)),
            "fields": [f.to_json() for f in self.fields],
        }
        if layout is not None:
            obj["layout"] = dict(layout)
        return json.dumps(obj, indent=2)

    @classmethod
    def from_json(cls, text: str | bytes) -> Schema:
        try:
            obj = json.loads(text)
            if obj.get("format") != "shardstore-episodes":
                raise ValueError("not a shardstore episode schema")
            return cls(
                fields=tuple(FieldSpec.from_json(f) for f in obj["fields"]),
                source_format=obj.get("source_format", ""),
                source_version=obj.get("source_version", ""),
                attrs=from_jsonable(obj.get("attrs", {})),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            if isinstance(e, EpisodeFormatError):
                raise
            raise EpisodeFormatError(f"invalid episode schema: {e}", path="schema.json") from e


@dataclass(slots=True)
class Episode:
    """One episode: its number, per-field step values, metadata and whether it ended terminally.

    ``terminal`` is True when the episode ended in a terminal state (Minari's last termination,
    RLDS's ``is_terminal`` on the last step); False when it was cut (truncated, timed out).
    ``split`` is the split the source put it in (RLDS and LeRobot have splits), or None.
    ``source`` says where the episode lies in its source, as typed JSON of the format's own
    choosing (Minari: its HDF5 group; RLDS: shard and record; LeRobot: rows); the store keeps it in
    its episode index so a tool can go back to the original.
    """

    index: int
    steps: dict[str, StepValues]
    metadata: dict[str, Any] = field(default_factory=dict)
    terminal: bool = False
    split: str | None = None
    source: dict[str, Any] = field(default_factory=dict)

    def length(self, schema: Schema) -> int:
        """The number of steps: the rows of a ``steps`` field, or one less than a ``steps+1`` one."""
        for f in schema.fields:
            if f.name in self.steps:
                n = len(self.steps[f.name])
                return n if f.rows == "steps" else n - 1
        return 0

    def validate(self, schema: Schema, source: str | None = None) -> int:
        """Check every field against the schema and the others' lengths; return the step count.

        Raises ``EpisodeFormatError`` naming ``source``, the episode and the field.
        """
        n = self.length(schema)
        for name in self.steps:
            if name not in schema.names:
                raise EpisodeFormatError("field not in the schema", path=source, member=_where(self.index, name))
        for f in schema.fields:
            where = _where(self.index, f.name)
            if f.name not in self.steps:
                raise EpisodeFormatError("field missing", path=source, member=where, noun="")
            values = self.steps[f.name]
            want = n + (1 if f.rows == "steps+1" else 0)
            if len(values) != want:
                raise EpisodeFormatError(
                    f"{len(values)} rows where the episode has {want} ({n} steps)", path=source, member=where, noun=""
                )
            if f.kind == "array":
                if not isinstance(values, np.ndarray):
                    raise EpisodeFormatError("an array field needs a numpy array", path=source, member=where, noun="")
                if values.dtype.str != np.dtype(f.dtype).str or values.shape[1:] != f.shape:
                    raise EpisodeFormatError(
                        f"dtype {values.dtype.str} shape {values.shape[1:]} where the schema says "
                        f"{np.dtype(f.dtype).str} {f.shape}",
                        path=source,
                        member=where, noun="",
                    )
            elif f.kind == "media" and not all(isinstance(v, bytes | bytearray | memoryview) for v in values):
                raise EpisodeFormatError("a media field needs encoded bytes per step", path=source, member=where, noun="")
            elif f.kind == "text" and not all(isinstance(v, str) for v in values):
                raise EpisodeFormatError("a text field needs a string per step", path=source, member=where, noun="")
            elif f.kind == "video" and not all(isinstance(v, VideoRef) for v in values):
                raise EpisodeFormatError("a video field needs a VideoRef per step", path=source, member=where, noun="")
        return n


@dataclass(slots=True)
class EpisodeStream:
    """What a format's reader gives and a format's writer takes: the schema, the episodes (an
    iterable read lazily, once), their count and total step count when known (for progress bars),
    and the source's own metadata files by relative path, kept byte for byte under
    ``.nv-meta/source/`` on import and handed back to the writer on export. ``video_files``
    opens, by name, the video files that the ``VideoRef`` values of video fields name (a seekable
    binary file each, opened lazily: the import copies them whole into its video store, an export
    cuts or copies them). ``parts``: the same episodes as runs that an executor's workers read
    apart (``parts.EpisodePart``: picklable, each yielding its run; in order they are
    ``episodes``), None for a stream that cannot be split."""

    schema: Schema
    episodes: Iterable[Episode]
    count: int | None = None
    source_files: Mapping[str, bytes] = field(default_factory=dict)
    total_steps: int | None = None
    video_files: Mapping[str, Callable[[], IO[bytes]]] = field(default_factory=dict)
    parts: Sequence[EpisodePart] | None = None


def _where(episode: int, name: str) -> str:
    return f"episode {episode}, field {name!r}"


# ----- typed JSON --------------------------------------------------------------------------------
# Metadata must come back with the types it had (an HDF5 int64 attribute stays int64, a float32
# array stays float32), but JSON knows only a few types; tagged objects carry the rest.
_NP = "__np__"
_ND = "__ndarray__"
_BYTES = "__bytes__"
_TUPLE = "__tuple__"
_TAGS = (_NP, _ND, _BYTES, _TUPLE)


def to_jsonable(value: Any) -> Any:
    """``value`` as JSON-able data that ``from_jsonable`` turns back into the same types.

    Python ``bool``, ``int``, ``float``, ``str``, ``None``, lists and str-keyed dicts stay as they
    are; numpy scalars, numpy arrays, bytes and tuples become tagged objects.
    """
    if isinstance(value, np.generic):  # first: np.float64 (and np.str_, np.bytes_) subclass Python types
        if value.dtype.kind in "biuf":
            return {_NP: value.dtype.str, "value": value.item()}
        return {_ND: value.dtype.str, "shape": [], "b64": base64.b64encode(value.tobytes()).decode()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise EpisodeFormatError(f"object arrays cannot be stored as metadata (dtype {value.dtype})")
        data = np.ascontiguousarray(value).tobytes()
        return {_ND: value.dtype.str, "shape": list(value.shape), "b64": base64.b64encode(data).decode()}
    if isinstance(value, bytes | bytearray | memoryview):
        return {_BYTES: base64.b64encode(bytes(value)).decode()}
    if isinstance(value, tuple):
        return {_TUPLE: [to_jsonable(v) for v in value]}
    if isinstance(value, Sequence):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str) or k in _TAGS:
                raise EpisodeFormatError(f"metadata key {k!r} is not storable (a non-string or reserved key)")
            out[k] = to_jsonable(v)
        return out
    raise EpisodeFormatError(f"metadata value of type {type(value).__name__} is not storable")


def from_jsonable(obj: Any) -> Any:
    """The inverse of ``to_jsonable``."""
    if isinstance(obj, list):
        return [from_jsonable(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if _NP in obj:
        return np.dtype(obj[_NP]).type(obj["value"])
    if _ND in obj:
        dtype = np.dtype(obj[_ND])
        shape = tuple(obj["shape"])
        arr = np.frombuffer(base64.b64decode(obj["b64"]), dtype=dtype).reshape(shape)
        return arr[()] if shape == () else arr.copy()
    if _BYTES in obj:
        return base64.b64decode(obj[_BYTES])
    if _TUPLE in obj:
        return tuple(from_jsonable(v) for v in obj[_TUPLE])
    return {k: from_jsonable(v) for k, v in obj.items()}
