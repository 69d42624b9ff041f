"""Media metadata: the ``media_metadata`` and ``media_filters`` tables of Energon 7.4's ``index.sqlite``.

``prepare --media-metadata-by-extension | --media-metadata-by-header | --media-metadata-by-glob
PATTERNS`` records, for each member the filter selects, what kind of media it is and its numbers, the
way ``energon prepare`` does (pinned row for row in tests/compat/test_media_compat.py):

- which members: ``EXTENSION`` takes known image and audio/video extensions (the last suffix of
  ``key.part``, any case); ``HEADER`` looks at every member's first 8 KiB with the ``filetype``
  package (``image/*``, ``video/*``, ``audio/*``) and falls back to the extension; ``GLOB`` takes the
  names matching one of the comma-separated patterns (both as written and lowercased) and types them
  as ``HEADER`` does. (Energon 7.4.1's glob strategy fails on the first member a pattern matches --
  an assertion in its type detection expects only the header strategy there -- so only its empty
  result can be compared; typing the matched members by header is what its code does past that
  assertion.)
- what is recorded, as compact JSON with Energon's field names and order: images (through Pillow)
  ``width``, ``height``, ``format``, ``mode``; audio/video (through PyAV) ``video_duration``,
  ``video_num_frames``, ``video_fps``, ``video_width``, ``video_height``, ``audio_duration``,
  ``audio_channels``, ``audio_sample_rate``, ``audio_num_samples``, each only when known.
- a member that is not what its name says (Pillow cannot identify it, PyAV cannot open it) gets no row,
  as in Energon; a container PyAV opens without any stream gets ``{}``, as in Energon.

What differs: members are read through a file object over their byte range, so Pillow reads only the
image's header (Energon decodes every pixel), and the filetype probe reads 8 KiB. An image whose header
is fine but whose data is cut short is therefore recorded from its header, where Energon's prepare
fails on the whole shard; an image that breaks Pillow in any other way is skipped with a warning naming
it (``PrepareReport.problems``), never a crash. Audio and video are demuxed to the end, as Energon does
(frame and sample counts need every packet).
"""

from __future__ import annotations

import io
import json
import os
import posixpath
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fnmatch import fnmatch
from typing import Any, BinaryIO

from .errors import ConfigError, MissingExtraError

__all__ = ["MediaFilter", "MediaIndex", "MediaMetadata", "probe", "IMAGE", "AV", "MemberFile", "media_tables_sql"]

IMAGE = "image"
AV = "av"
EXTENSION, HEADER, GLOB = "EXTENSION", "HEADER", "GLOB"

_IMAGE_EXTENSIONS = frozenset({"bmp", "gif", "ico", "j2k", "jp2", "jpx", "jpeg", "jpg", "png", "tif", "tiff", "webp"})
_AV_EXTENSIONS = frozenset({"aac", "avi", "flac", "m4a", "m4v", "mkv", "mov", "mp3", "mp4", "ogg", "wav", "webm"})
#: What the ``filetype`` package looks at.
_SIGNATURE_BYTES = 8192
#: Buffer of a member's file object: an image header is usually within the first read.
_READ_BUFFER = 64 << 10


def media_tables_sql() -> str:
    """``CREATE TABLE media_metadata ...; CREATE TABLE media_filters ...`` (Energon 7.4's)."""
    import nv_meta_schema

    return nv_meta_schema.optional_tables_sql("energon-7.4")


def _extension_kind(name: str) -> str | None:
    suffix = posixpath.splitext(posixpath.basename(name))[1][1:].lower()
    if suffix in _IMAGE_EXTENSIONS:
        return IMAGE
    if suffix in _AV_EXTENSIONS:
        return AV
    return None


@dataclass(frozen=True)
class MediaFilter:
    """Which members get media metadata: one strategy (and the glob's patterns)."""

    strategy: str
    patterns: tuple[str, ...] = ()

    @classmethod
    def parse(cls, by_glob: str | None = None, by_header: bool = False, by_extension: bool = False) -> MediaFilter | None:
        """The filter of the three options (None when none is given); more than one is a ``ConfigError``."""
        given = sum(bool(x) for x in (by_glob, by_header, by_extension))
        if given == 0:
            return None
        if given > 1:
            raise ConfigError(
                "give one of media_metadata_by_glob, media_metadata_by_header, media_metadata_by_extension "
                "(several glob patterns go in one, separated by commas)"
            )
        if by_glob:
            return cls(GLOB, tuple(by_glob.split(",")))
        return cls(HEADER if by_header else EXTENSION)

    @property
    def patterns_text(self) -> str:
        """``media_filters.patterns`` as Energon writes it (the glob patterns joined by commas; else empty)."""
        return ",".join(self.patterns)

    def considers(self, name: str) -> bool:
        """Whether member ``name`` is looked at (its bytes are read only then)."""
        if self.strategy == HEADER:
            return True
        lower = name.lower()
        if self.strategy == EXTENSION:
            return _extension_kind(lower) is not None
        return any(fnmatch(lower, p) for p in self.patterns)

    def kind(self, name: str, head: bytes) -> str | None:
        """``image``, ``av`` or None for member ``name`` whose first bytes are ``head`` (HEADER only)."""
        if self.strategy == GLOB and not any(fnmatch(name, p) for p in self.patterns):
            return None
        by_extension = _extension_kind(name)
        if self.strategy == EXTENSION:
            return by_extension
        return _header_kind(head) or by_extension

    @property
    def reads_header(self) -> bool:
        """The type of a selected member comes from its first bytes (HEADER, and GLOB: see the module)."""
        return self.strategy != EXTENSION


def _header_kind(head: bytes) -> str | None:
    try:
        import filetype
    except ImportError as e:
        raise MissingExtraError("media metadata by header needs the filetype package: pip install 'shardstore[images]'") from e
    found = filetype.guess(head)
    mime = getattr(found, "mime", None) if found is not None else None
    if not mime:
        return None
    if mime.startswith("image/"):
        return IMAGE
    if mime.startswith(("video/", "audio/")):
        return AV
    return None


#: Bytes of a probed member read at once: an image's headers (a JPEG's, which the fast path parses),
#: and most small images whole, fit in them.
HEAD_BYTES = 64 << 10


def open_member(read_at: Callable[[int, int], bytes], offset: int, size: int) -> BinaryIO:
    """The ``size`` bytes at ``offset`` of what ``read_at`` reads, as a file for ``probe``: read whole
    in one read when they fit ``HEAD_BYTES`` (most images), else read ahead by ``HEAD_BYTES`` as
    Pillow or PyAV asks (a video's index may sit at its end)."""
    if size <= HEAD_BYTES:
        return io.BytesIO(read_at(offset, size))
    return io.BufferedReader(MemberFile(read_at, offset, size), HEAD_BYTES)


class MemberFile(io.RawIOBase):
    """A read-only, seekable file over ``size`` bytes at ``offset`` of something read by ``read_at``
    (a shard member): Pillow and PyAV read only the parts they need."""

    def __init__(self, read_at: Callable[[int, int], bytes], offset: int, size: int) -> None:
        self._read_at = read_at
        self._offset = offset
        self._size = size
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + pos)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), self._size - self._pos)
        if n <= 0:
            return 0
        data = self._read_at(self._offset + self._pos, n)
        buffer[: len(data)] = data
        self._pos += len(data)
        return len(data)


def probe(media: MediaFilter, name: str, open_member: Callable[[], BinaryIO]) -> tuple[str, str] | None:
    """(``metadata_type``, ``metadata_json``) of member ``name`` under ``media``, or None when the
    filter does not select it or it is not readable media. Pillow errors other than "cannot identify"
    raise ``ValueError`` naming the member (the scan records it as a problem and goes on)."""
    if not media.considers(name):
        return None
    with open_member() as f:
        head = f.read(_SIGNATURE_BYTES) if media.reads_header else b""
        kind = media.kind(name, head)
        if kind is None:
            return None
        f.seek(0)
        meta = _image_metadata(f, name) if kind == IMAGE else _av_metadata(f)
    if meta is None:
        return None
    return kind, json.dumps(meta, separators=(",", ":"))


#: JPEG markers a plain file's headers hold before its scan: SOF0-15 but DHT (C4), JPG (C8) and DAC
#: (CC) define the frame; DHT, DAC, DQT, DRI, APP0-15 and COM are skipped by their length.
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_SKIPPED = frozenset({0xC4, 0xCC, 0xDB, 0xDD, 0xFE, *range(0xE0, 0xF0)})
_JPEG_MODES = {1: "L", 3: "RGB", 4: "CMYK"}


def jpeg_metadata(data: bytes) -> dict[str, Any] | None:
    """Pillow's image metadata of a plain JPEG, read from its first bytes without Pillow (its marker
    parser is most of a probe's cost: ~38 us, this ~3 us); None for anything Pillow might see
    otherwise (junk between markers, another marker, a multi-picture APP2 that makes it an MPO,
    not 8-bit, cut off before the scan), which then goes to Pillow itself. As Pillow, the last
    frame header before the scan gives the size and, by its number of components, the mode."""
    if data[:3] != b"\xff\xd8\xff":
        return None
    i, found, n = 2, None, len(data)
    while i + 4 <= n:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker == 0xDA:  # start of scan: the headers are over
            return found
        if marker not in _SOF and marker not in _SKIPPED:
            return None
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        if length < 2 or i + 2 + length > n:
            return None
        if marker in _SOF:
            if length < 8 or data[i + 4] != 8 or data[i + 9] not in _JPEG_MODES:
                return None
            found = {"width": int.from_bytes(data[i + 7 : i + 9], "big"), "height": int.from_bytes(data[i + 5 : i + 7], "big"),
                     "format": "JPEG", "mode": _JPEG_MODES[data[i + 9]]}
        elif marker == 0xE2 and data[i + 4 : i + 8] == b"MPF\0":
            return None
        i += 2 + length
    return None


def _image_metadata(f: BinaryIO, name: str) -> dict[str, Any] | None:
    head = f.read(3)
    fast = jpeg_metadata(head + f.read(HEAD_BYTES - 3)) if head == b"\xff\xd8\xff" else None
    if fast is not None:
        return fast
    f.seek(0)
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError as e:
        raise MissingExtraError("image metadata needs Pillow: pip install 'shardstore[images]'") from e
    try:
        with Image.open(f) as image:
            return {"width": image.width, "height": image.height, "format": image.format or "UNKNOWN", "mode": image.mode or "UNKNOWN"}
    except UnidentifiedImageError:
        return None  # not an image after all: no row, as in Energon
    except Exception as e:  # Energon's prepare fails on the shard; skipped here, and said
        raise ValueError(f"{name}: Pillow cannot read the image ({type(e).__name__}: {e}); no media metadata recorded") from None


def _av_metadata(f: BinaryIO) -> dict[str, Any] | None:
    """Energon's ``AVDecoder.get_metadata(get_audio_num_samples=True)``: the same steps, so the same numbers."""
    try:
        import av
    except ImportError as e:
        raise MissingExtraError("audio/video metadata needs PyAV: pip install 'shardstore[convert]'") from e
    try:
        container = av.open(f, "r")
    except Exception:
        return None
    try:
        for stream in container.streams:
            cc = stream.codec_context
            if cc is not None:
                cc.thread_type = "NONE"
                cc.thread_count = 0
        out: dict[str, Any] = {}
        if container.streams.video:
            out.update(_video_fields(container, container.streams.video[0]))
        if container.streams.audio:
            out.update(_audio_fields(container, container.streams.audio[0]))
        return {k: v for k, v in out.items() if v is not None}
    except Exception:
        return None  # as in Energon: a stream PyAV cannot read gives no row
    finally:
        container.close()


def _scaled(duration: Any, stream: Any) -> Any:
    if duration is None:
        return None
    if stream.start_time is not None:
        duration -= stream.start_time
    if stream.time_base is not None:
        duration *= float(stream.time_base)
    return duration


def _end_of_last(items: Any) -> tuple[Any, int]:
    """(pts + duration of the last item with a pts, or None; how many items had a pts)."""
    last, count = None, 0
    for item in items:
        if item.pts is not None:
            count += 1
            last = item
    end = last.pts + last.duration if last is not None and last.duration is not None else None
    return end, count


def _video_fields(container: Any, stream: Any) -> dict[str, Any]:
    duration, frames = stream.duration, None
    if duration is None:
        duration, frames = _end_of_last(container.demux(video=0))
    duration = _scaled(duration, stream)
    if frames is None:
        frames = sum(1 for p in container.demux(video=0) if p.pts is not None)
    if stream.average_rate is not None:
        fps = float(stream.average_rate)
    elif duration is not None:
        fps = frames / duration
    else:
        fps = None
    container.seek(0)
    width, height = stream.width, stream.height
    for frame in container.decode(video=0):
        width, height = frame.width, frame.height
        break
    return {"video_duration": duration, "video_num_frames": frames, "video_fps": fps, "video_width": width, "video_height": height}


def _audio_fields(container: Any, stream: Any) -> dict[str, Any]:
    rate, duration = stream.sample_rate, stream.duration
    samples = 0
    last = None
    container.seek(0)
    for frame in container.decode(audio=0):
        if frame.pts is not None:
            last = frame
        samples += frame.samples
    if last is not None and last.duration is not None:
        duration = last.pts + last.duration
    if duration is None:
        container.seek(0)
        duration, _ = _end_of_last(container.demux(audio=0))
    return {
        "audio_duration": _scaled(duration, stream),
        "audio_channels": stream.channels,
        "audio_sample_rate": rate,
        "audio_num_samples": samples,
    }


# ----- reading the tables ------------------------------------------------------------------------
@dataclass(frozen=True)
class MediaMetadata:
    """One member's media metadata: ``metadata_type`` (``image`` or ``av``) and the recorded values
    (``meta["width"]``, ``meta.get("video_fps")``), as Energon's ``get_media_metadata`` gives them
    (its ``ImageMetadata`` / ``AVMetadata`` fields)."""

    entry_key: str
    metadata_type: str
    values: dict[str, Any]

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def to_dict(self) -> dict[str, Any]:
        return {"entry_key": self.entry_key, "metadata_type": self.metadata_type, **self.values}


class MediaIndex:
    """The media tables of one local ``index.sqlite`` (a prepared dataset's, or a media folder's
    from ``prepare-media``), read-only; safe to share between threads."""

    def __init__(self, path: str, where: str, db: Any = None) -> None:
        """``db``: an open connection to the index (a ``Dataset``'s, of the index generation it
        pinned) instead of opening ``path`` again."""
        import sqlite3
        import threading
        import urllib.parse

        self.path = path
        self.where = where
        uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro&immutable=1"
        self._db = db if db is not None else sqlite3.connect(uri, uri=True, check_same_thread=False)
        self._lock = threading.Lock()
        tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        self.available = "media_metadata" in tables
        self._has_filters = "media_filters" in tables

    def _rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def require(self) -> None:
        if not self.available:
            raise ConfigError(
                "no media metadata in this dataset: prepare it with --media-metadata-by-extension (or "
                "-by-header, -by-glob), or run `shardstore prepare-media`", path=self.where
            )

    def get(self, entry_key: str) -> MediaMetadata | None:
        self.require()
        rows = self._rows("SELECT metadata_type, metadata_json FROM media_metadata WHERE entry_key = ?", (entry_key,))
        if not rows:
            return None
        kind, text = rows[0]
        return MediaMetadata(entry_key, kind, json.loads(text) if text else {})

    def filters(self) -> list[dict[str, Any]]:
        if not self._has_filters:
            return []
        rows = self._rows("SELECT strategy, patterns, created_at_utc FROM media_filters ORDER BY filter_id")
        return [{"strategy": s, "patterns": p, "created_at_utc": t} for s, p, t in rows]

    def counts(self) -> dict[str, int]:
        if not self.available:
            return {}
        return dict(self._rows("SELECT metadata_type, COUNT(*) FROM media_metadata GROUP BY 1 ORDER BY 1"))

    def iter(self, limit: int | None = None) -> Iterator[MediaMetadata]:
        """Every row in ``entry_key`` order, a page at a time."""
        self.require()
        last, sent = "", 0
        while limit is None or sent < limit:
            page = self._rows(
                "SELECT entry_key, metadata_type, metadata_json FROM media_metadata WHERE entry_key > ? "
                "ORDER BY entry_key LIMIT 1024", (last,)
            )
            if not page:
                return
            for key, kind, text in page:
                if limit is not None and sent >= limit:
                    return
                yield MediaMetadata(key, kind, json.loads(text) if text else {})
                sent += 1
            last = page[-1][0]

    def close(self) -> None:
        self._db.close()
