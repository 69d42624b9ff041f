"""Where the formats' conventions differ, the mappings between them: stream -> stream transforms
that a format's export applies to episodes from another format, each recording what it did in a
``mapping.ConversionReport``. The formats choose which they need; none of them knows another.

- **The observation after the last action.** Minari keeps it as one more observation row
  (``rows="steps+1"``); RLDS as one more step, its last (``is_last``; its action and reward are
  not taken, so zero); the episode-frame layout as ``next_obs`` beside ``obs``.
  ``final_row_as_last_step`` and ``last_step_as_final_row`` are RLDS's pair, ``split_next_rows``
  and ``join_next_rows`` the ``X``/``next_X`` pair; each undoes the other exactly.
- **Video into formats without video**: ``decode_videos`` decodes each frame (frame-accurate,
  ``video.FrameDecoder``) into a uint8 HWC array or its PNG (lossless) bytes.
- **Encoded images into formats of arrays**: ``decode_media`` (PNG/JPEG bytes -> uint8 HWC).
- **Pickled steps** (the episode-frame layout): ``decode_pickles`` turns them into arrays through
  the restricted unpickler, only when the user allowed it (``--allow-pickle``).
- **A target's first step**: ``decode_for`` runs the three above as a format without video needs.
- **Roles**: ``role`` names what a field is for (observation, action, reward, flag, bookkeeping,
  task, other) from the names the formats use, so a target can place it under its own names.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Literal

import numpy as np

from ..errors import DecodeError, EpisodeFormatError, PickleNotAllowedError
from .mapping import ConversionReport
from .model import Episode, EpisodeStream, FieldSpec, Schema, StepValues
from .tasks import TASK_FIELDS

__all__ = [
    "EPISODE_BOOKKEEPING",
    "Role",
    "decode_for",
    "decode_media",
    "decode_pickles",
    "decode_videos",
    "final_row_as_last_step",
    "join_next_rows",
    "last_step_as_final_row",
    "map_stream",
    "next_pairs",
    "pad_row",
    "peek",
    "parts",
    "role",
    "split_next_rows",
]

Role = Literal["observation", "action", "reward", "flag", "bookkeeping", "task", "other"]

OBSERVATION = ("observation", "observations", "obs")
ACTION = ("action", "actions", "acts")
REWARD = ("reward", "rewards", "rews", "next.reward")
#: Per-step episode-end flags the formats carry as fields (the hub derives them from the episode).
FLAG = ("terminations", "truncations", "dones", "next.done", "discount", "is_first", "is_last", "is_terminal")
#: LeRobot's columns of every frame: rebuilt by a LeRobot writer, meaningless elsewhere.
BOOKKEEPING = ("timestamp", "frame_index", "episode_index", "index", "task_index")
#: LeRobot's per-episode bookkeeping in ``Episode.metadata``: its episodes row (file locations, time
#: ranges), per-episode stats of its columns, image paths and row count. A LeRobot writer derives
#: them again; in another format they would describe files and names that are not there.
EPISODE_BOOKKEEPING = ("source_row", "stats", "image_paths", "length")
#: The name prefix of the ``X``/``next_X`` pair (the episode-frame layout's ``obs``/``next_obs``).
NEXT = "next_"


def parts(spec: FieldSpec) -> tuple[str, ...]:
    """The field's path: the source's nesting, else its dotted name split (LeRobot's flat names)."""
    return spec.path or tuple(spec.name.split("."))


def role(spec: FieldSpec) -> Role:
    """What the field is for, from the names Minari, LeRobot, RLDS and the episode-frame layout use."""
    head = parts(spec)[0]
    if spec.name in REWARD or head in REWARD:
        return "reward"
    if spec.name in FLAG or head in FLAG:
        return "flag"
    if spec.name in BOOKKEEPING:
        return "bookkeeping"
    if spec.kind == "text" and spec.name in TASK_FIELDS:
        return "task"
    if head in ACTION:
        return "action"
    if head in OBSERVATION or head.startswith(NEXT):
        return "observation"
    return "other"


def map_stream(stream: EpisodeStream, schema: Schema, fn: Callable[[Episode], Episode]) -> EpisodeStream:
    """``stream`` with the new ``schema``, each episode through ``fn`` (lazily); it can no longer
    be read in parts (``parts`` None), since its workers would read the old episodes."""
    return replace(stream, schema=schema, episodes=(fn(e) for e in stream.episodes), parts=None)


def _refield(schema: Schema, fields: Iterable[FieldSpec], **attrs: object) -> Schema:
    return replace(schema, fields=tuple(fields), attrs={**schema.attrs, **attrs})


# ----- the observation after the last action -----------------------------------------------------
def pad_row(spec: FieldSpec, values: StepValues) -> StepValues:
    """One more row of ``values``: zero for arrays (a step's action that was never taken), ""
    for text, a copy of the last for encoded media (a decodable image)."""
    if isinstance(values, np.ndarray):
        return np.concatenate([values, np.zeros((1, *values.shape[1:]), values.dtype)])
    if spec.kind == "text":
        return [*values, ""]  # type: ignore[list-item]
    return [*values, values[-1]] if len(values) else values  # type: ignore[list-item]


def final_row_as_last_step(stream: EpisodeStream, report: ConversionReport) -> EpisodeStream:
    """Minari's ``steps+1`` fields -> RLDS's convention: the episode gets one more step, its last,
    holding the final observation; the other fields get a zero (``""``) row there."""
    extra = [f for f in stream.schema.fields if f.rows == "steps+1"]
    if not extra:
        return stream
    schema = _refield(stream.schema, (replace(f, rows="steps") for f in stream.schema.fields))
    for f in extra:
        report.derive(f"last step's {f.name}", f"{f.name}'s extra row (the observation after the last action)")
    for f in stream.schema.fields:
        if f.rows == "steps":
            report.derive(f"last step's {f.name}", "zero: the last step's action is not taken (RLDS's convention)")

    def last_step(ep: Episode) -> Episode:
        steps = {f.name: ep.steps[f.name] if f.rows == "steps+1" else pad_row(f, ep.steps[f.name])
                 for f in stream.schema.fields}
        return replace(ep, steps=steps)

    return map_stream(stream, schema, last_step)


def last_step_as_final_row(stream: EpisodeStream, report: ConversionReport, final: Sequence[str]) -> EpisodeStream:
    """The inverse: the ``final`` fields (observations) keep every row as ``steps+1``; the others
    lose their last row (the step that only holds the final observation)."""
    keep = set(final)
    fields = tuple(replace(f, rows="steps+1") if f.name in keep else f for f in stream.schema.fields)
    for f in stream.schema.fields:
        if f.name not in keep and f.rows == "steps":
            report.drop(f"last step's {f.name}", "the last step holds only the final observation (RLDS's convention)")

    def final_row(ep: Episode) -> Episode:
        steps = {f.name: v if f.name in keep or f.rows == "steps+1" else v[:-1]
                 for f, v in ((f, ep.steps[f.name]) for f in stream.schema.fields)}
        return replace(ep, steps=steps)

    return map_stream(stream, _refield(stream.schema, fields), final_row)


def split_next_rows(stream: EpisodeStream, report: ConversionReport) -> EpisodeStream:
    """Each ``steps+1`` field ``X`` -> ``X`` (its first n rows) and ``next_X`` (its last n), the
    episode-frame layout's ``obs``/``next_obs``."""
    extra = [f for f in stream.schema.fields if f.rows == "steps+1"]
    if not extra:
        return stream
    fields: list[FieldSpec] = []
    for f in stream.schema.fields:
        if f.rows == "steps+1":
            nxt = NEXT + f.name
            fields += [replace(f, rows="steps"), replace(f, name=nxt, path=(), rows="steps")]
            report.derive(nxt, f"{f.name}'s rows 1..n (the observation after each action)")

    def split(ep: Episode) -> Episode:
        steps = dict(ep.steps)
        for f in extra:
            values = steps[f.name]
            steps[f.name], steps[NEXT + f.name] = values[:-1], values[1:]
        return replace(ep, steps=steps)

    fields += [f for f in stream.schema.fields if f.rows == "steps"]
    order = {f.name: i for i, f in enumerate(stream.schema.fields)}
    fields.sort(key=lambda f: order.get(f.name, order.get(f.name.removeprefix(NEXT), 0)))
    return map_stream(stream, _refield(stream.schema, fields), split)


def next_pairs(schema: Schema) -> list[tuple[FieldSpec, FieldSpec]]:
    """``(X, next_X)`` field pairs of the same kind, dtype and shape."""
    out = []
    for f in schema.fields:
        if f.name.startswith(NEXT) and f.rows == "steps":
            base = f.name.removeprefix(NEXT)
            if base in schema.names:
                b = schema[base]
                if (b.kind, b.dtype, b.shape, b.rows) == (f.kind, f.dtype, f.shape, "steps"):
                    out.append((b, f))
    return out


def join_next_rows(stream: EpisodeStream, report: ConversionReport) -> EpisodeStream:
    """The inverse of ``split_next_rows``: ``X`` and ``next_X`` -> ``X`` with ``steps+1`` rows
    (``X``'s rows and ``next_X``'s last), where every ``next_X[t]`` equals ``X[t+1]`` (checked per
    episode; an episode where they differ is an error naming it)."""
    pairs = next_pairs(stream.schema)
    if not pairs:
        return stream
    gone = {n.name for _, n in pairs}
    fields = tuple(replace(f, rows="steps+1") if any(f.name == b.name for b, _ in pairs) else f
                   for f in stream.schema.fields if f.name not in gone)
    for b, n in pairs:
        report.derive(f"{b.name}'s final row", f"{n.name}'s last row")
        report.drop(n.name, f"rows 0..n-2 repeat {b.name}'s rows 1..n-1")

    def join(ep: Episode) -> Episode:
        steps = {k: v for k, v in ep.steps.items() if k not in gone}
        for b, n in pairs:
            x, nx = ep.steps[b.name], ep.steps[n.name]
            if not all(_same(x[t + 1], nx[t]) for t in range(len(x) - 1)):
                raise EpisodeFormatError(f"{n.name} is not {b.name} one step later, so it cannot become its "
                                         "final row", member=f"episode {ep.index}, field {n.name!r}")
            steps[b.name] = (np.concatenate([x, nx[-1:]]) if isinstance(x, np.ndarray)
                             else [*x, *nx[-1:]])  # type: ignore[list-item]
        return replace(ep, steps=steps)

    return map_stream(stream, _refield(stream.schema, fields), join)


def _same(a: object, b: object) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))
    return a == b


def decode_for(stream: EpisodeStream, report: ConversionReport, frames: Literal["array", "png"], allow_pickle: bool
               ) -> EpisodeStream:
    """What an export to a format without video (Minari, RLDS, the episode-frame layout) does first:
    pickled steps as arrays (``decode_pickles``: refused without ``allow_pickle``), videos decoded
    into ``frames`` (``decode_videos``) and, for a format of arrays (``"array"``), PNG/JPEG images
    too (``decode_media``); a ``"png"`` format keeps encoded images as they are."""
    stream = decode_pickles(stream, report, allow_pickle)
    stream = decode_videos(stream, report, frames)
    return decode_media(stream, report) if frames == "array" else stream


# ----- video and encoded images ----------------------------------------------------------------------
def decode_videos(stream: EpisodeStream, report: ConversionReport, to: Literal["array", "png"]) -> EpisodeStream:
    """Every ``video`` field decoded frame by frame: uint8 HWC arrays (``to="array"``) or their PNG
    bytes (``"png"``, media); lossless from the decoded frames."""
    videos = [f for f in stream.schema.fields if f.kind == "video"]
    if not videos:
        return stream
    from .video import FrameDecoder

    decoder = FrameDecoder(lambda name: stream.video_files[name]())
    kind: Literal["array", "media"] = "array" if to == "array" else "media"
    fields = tuple(replace(f, kind=kind, dtype="|u1", encoding="" if to == "array" else "png")
                   if f.kind == "video" else f for f in stream.schema.fields)
    for f in videos:
        report.map(f.name, f.name, encoding=f"video ({f.encoding or '?'}) -> {'uint8 HWC' if to == 'array' else 'png'}")

    def decoded(ep: Episode) -> Episode:
        steps = dict(ep.steps)
        for f in videos:
            try:
                frames = decoder.frames(ep.steps[f.name])  # type: ignore[arg-type]
            except (DecodeError, KeyError) as e:
                raise DecodeError(f"cannot decode its video: {e}", member=f"episode {ep.index}, field {f.name!r}") from e
            if any(fr.shape != f.shape for fr in frames) and f.shape:
                raise DecodeError(f"frames of shape {frames[0].shape} where the schema says {f.shape}",
                                  member=f"episode {ep.index}, field {f.name!r}")
            steps[f.name] = np.stack(frames) if to == "array" else [_png(fr) for fr in frames]
        return replace(ep, steps=steps)

    schema = _refield(stream.schema, fields)
    schema = replace(schema, attrs={k: v for k, v in schema.attrs.items()
                                    if k not in ("video_store", "video_files", "video_packets")})
    return replace(map_stream(stream, schema, decoded), video_files={})


def _png(frame: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(frame).save(buf, "PNG")
    return buf.getvalue()


def decode_media(stream: EpisodeStream, report: ConversionReport, keep: Callable[[FieldSpec], bool] | None = None
                 ) -> EpisodeStream:
    """Every ``media`` field of images (PNG, JPEG) decoded into uint8 arrays, except those ``keep``
    accepts. Pickled media are ``decode_pickles``'s."""
    chosen = [f for f in stream.schema.fields
              if f.kind == "media" and f.encoding != "pickle" and not (keep and keep(f))]
    if not chosen:
        return stream
    for f in chosen:
        report.map(f.name, f.name, encoding=f"{f.encoding or 'image'} -> uint8 HWC")
    names = {f.name for f in chosen}

    def decode(ep: Episode) -> Episode:
        steps = dict(ep.steps)
        for name in names:
            steps[name] = _images(ep.steps[name], ep.index, name)  # type: ignore[arg-type]
        return replace(ep, steps=steps)

    first, episodes = peek(stream.episodes)
    fields = []
    for f in stream.schema.fields:
        if f.name in names:
            shape = f.shape
            if first is not None and len(first.steps[f.name]):
                shape = _images(first.steps[f.name][:1], first.index, f.name).shape[1:]  # type: ignore[arg-type]
            f = replace(f, kind="array", dtype="|u1", shape=tuple(shape), encoding="")
        fields.append(f)
    return map_stream(replace(stream, episodes=episodes), _refield(stream.schema, fields), decode)


def _images(values: Sequence[bytes], episode: int, name: str) -> np.ndarray:
    """Encoded images as one uint8 array (RGB unless the image is grayscale)."""
    from PIL import Image

    out = []
    for t, data in enumerate(values):
        try:
            img = Image.open(io.BytesIO(bytes(data)))
            out.append(np.asarray(img if img.mode in ("L", "RGB") else img.convert("RGB")))
        except (OSError, ValueError) as e:
            raise DecodeError(f"an image does not decode: {e}", member=f"episode {episode}, field {name!r}, step {t}") from e
    return np.stack(out)


def peek(episodes: Iterable[Episode]) -> tuple[Episode | None, Iterator[Episode]]:
    it = iter(episodes)
    first = next(it, None)
    return first, (it if first is None else itertools.chain([first], it))


# ----- pickled steps ----------------------------------------------------------------------------------
def decode_pickles(stream: EpisodeStream, report: ConversionReport, allow_pickle: bool) -> EpisodeStream:
    """Pickled ``media`` fields (encoding ``pickle``) as arrays, unpickled through the restricted
    unpickler (``safepickle``: numpy and builtins only). Without ``allow_pickle`` a
    ``PickleNotAllowedError`` names the flag. A field whose values are not numbers or arrays (a
    dict of infos) is dropped and the report says so."""
    pickled = [f for f in stream.schema.fields if f.kind == "media" and f.encoding == "pickle"]
    if not pickled:
        return stream
    if not allow_pickle:
        raise PickleNotAllowedError(
            f"fields {', '.join(f.name for f in pickled)} hold pickles; pass --allow-pickle (allow_pickle=True) to "
            "decode them into arrays through the restricted unpickler (numpy and builtins only)")
    from .. import safepickle

    def values(ep: Episode, name: str) -> list[object]:
        out = []
        for t, data in enumerate(ep.steps[name]):
            if not data:
                raise DecodeError("a step lacks this part", member=f"episode {ep.index}, field {name!r}, step {t}")
            out.append(safepickle.loads(bytes(data)))  # type: ignore[arg-type]
        return out

    first, episodes = peek(stream.episodes)
    specs: dict[str, FieldSpec | None] = {}
    for f in pickled:
        sample = values(replace(first, steps={f.name: first.steps[f.name][:1]}), f.name) if first is not None else []
        value = sample[0] if sample else None
        if isinstance(value, np.ndarray | np.generic | bool | int | float) and np.asarray(value).dtype.kind in "biuf":
            arr = np.asarray(value)
            specs[f.name] = replace(f, kind="array", dtype=arr.dtype.str, shape=arr.shape, encoding="", attrs={})
            report.map(f.name, f.name, encoding="pickle -> array (restricted unpickler)")
        else:
            specs[f.name] = None
            report.drop(f.name, f"pickled {type(value).__name__} values have no array form")
    fields = [specs.get(f.name, f) if f.name in specs else f for f in stream.schema.fields]

    def decode(ep: Episode) -> Episode:
        steps = {k: v for k, v in ep.steps.items() if specs.get(k, True) is not None}
        for name, spec in specs.items():
            if spec is None:
                continue
            arr = np.asarray(values(ep, name))
            if arr.shape[1:] != spec.shape or arr.dtype.str != spec.dtype:
                raise DecodeError(f"steps of dtype {arr.dtype.str} shape {arr.shape[1:]} where the first episode's are "
                                  f"{spec.dtype} {spec.shape}", member=f"episode {ep.index}, field {name!r}")
            steps[name] = arr
        return replace(ep, steps=steps)

    schema = _refield(stream.schema, (f for f in fields if f is not None))
    return map_stream(replace(stream, episodes=episodes), schema, decode)
