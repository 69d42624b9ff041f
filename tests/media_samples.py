"""Real media files for the media-metadata tests, made with Pillow and PyAV (no fixtures on disk)."""

from __future__ import annotations

import io
import tarfile
import wave
from pathlib import Path

import numpy as np


def image(fmt: str, mode: str = "RGB", size: tuple[int, int] = (40, 30)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new(mode, size, 128).save(buf, format=fmt)
    return buf.getvalue()


def video(audio: bool, frames: int = 12) -> bytes:
    """An MPEG-4 part 2 video in MP4 (24 fps, 64x48), with a mono AAC track if ``audio``."""
    import av

    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as c:
        v = c.add_stream("mpeg4", rate=24)
        v.width, v.height, v.pix_fmt = 64, 48, "yuv420p"
        a = c.add_stream("aac", rate=16000) if audio else None
        if a is not None:
            a.layout = "mono"
        for i in range(frames):
            pixels = np.full((48, 64, 3), i * 20 % 255, dtype=np.uint8)
            for p in v.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                c.mux(p)
        for p in v.encode():
            c.mux(p)
        if a is not None:
            for i in range(8):
                frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), dtype=np.float32), format="fltp", layout="mono")
                frame.sample_rate, frame.pts = 16000, i * 1024
                for p in a.encode(frame):
                    c.mux(p)
            for p in a.encode():
                c.mux(p)
    return buf.getvalue()


def wav() -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(np.zeros(8000 * 2, dtype=np.int16).tobytes())
    return buf.getvalue()


def members() -> list[tuple[str, bytes]]:
    """jpg, png, webp, gif, mp4 with and without audio, wav; a PNG named .bin (only the header strategy
    finds it); an upper-case extension; a two-dot part; and broken media: bytes that are no image, no
    container, and an MP4 cut short (PyAV opens it without streams)."""
    return [
        ("s00.jpg", image("JPEG")), ("s00.txt", b"caption"),
        ("s01.png", image("PNG", "RGBA")), ("s01.json", b"{}"),
        ("s02.webp", image("WEBP")), ("s03.gif", image("GIF", "P")),
        ("s04.mp4", video(True)), ("s05.mp4", video(False)), ("s06.wav", wav()),
        ("s07.bin", image("PNG", "L")), ("s08.JPG", image("JPEG", "L")), ("s09.seg.png", image("PNG", "1")),
        ("s10.jpg", b"not an image at all" * 10), ("s11.mp4", b"\0" * 100), ("s12.mp4", video(True)[:900]),
    ]


def write_shards(root: Path, items: list[tuple[str, bytes]] | None = None, shards: int = 2) -> Path:
    """``items`` (default ``members()``) spread over ``shards`` tar files under ``root/parts``."""
    items = members() if items is None else items
    (root / "parts").mkdir(parents=True, exist_ok=True)
    per = -(-len(items) // shards)
    for s in range(shards):
        with tarfile.open(root / "parts" / f"m{s}.tar", "w") as tar:
            for name, data in items[s * per : (s + 1) * per]:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return root
