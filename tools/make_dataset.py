"""Synthetic WebDataset shards for demos, tests and benchmarks.

Each sample has a ``jpg``, a ``txt`` caption and a ``json`` record; keys are
``s{shard:05d}_{i:06d}``. The ``jpg`` is random bytes of 2-20 KB by default (the benchmarks measure
I/O, not decoding), a JPEG of random pixels of about that size with ``--real-images``, or a small
picture of one fixed size (``--image-size 96x64``: a gradient and a shape, a few KB, so
``decode=True`` works and decoded images batch together, as the demo uses). Written with
``tarfile``; deterministic for a seed.

Without options it writes the demo's size (8 shards x 500 samples, about 45 MB), never the
benchmarks' 3.6 GB by surprise. The benchmarks' default dataset (``/work/bench-data/default``) is:

Example: python tools/make_dataset.py /work/bench-data/default --shards 64 --samples 4000
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import re
import tarfile
import time


def _jpeg(rng: random.Random, size: int) -> bytes:
    from PIL import Image

    w = h = max(8, int((size / 3) ** 0.5))
    img = Image.frombytes("RGB", (w, h), rng.randbytes(w * h * 3))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def _picture(rng: random.Random, size: tuple[int, int]) -> bytes:
    """A small real picture: a colour gradient with a filled ellipse, JPEG-encoded (a few KB)."""
    from PIL import Image, ImageDraw

    w, h = size
    top, bottom = (tuple(rng.randrange(256) for _ in range(3)) for _ in range(2))
    mask = Image.linear_gradient("L").resize((w, h))
    img = Image.composite(Image.new("RGB", (w, h), top), Image.new("RGB", (w, h), bottom), mask)
    x, y = rng.randrange(w // 2), rng.randrange(h // 2)
    fill = tuple(rng.randrange(256) for _ in range(3))
    ImageDraw.Draw(img).ellipse((x, y, x + w // 3, y + h // 3), fill=fill)
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=85)
    return buf.getvalue()


def parse_size(text: str) -> tuple[int, int]:
    """``"96x64"`` -> ``(96, 64)`` (width x height, each 8-4096)."""
    m = re.fullmatch(r"(\d+)x(\d+)", text.strip())
    if not m or not all(8 <= int(v) <= 4096 for v in m.groups()):
        raise argparse.ArgumentTypeError(f"image size {text!r}: expected WIDTHxHEIGHT, each 8-4096, e.g. 96x64")
    return int(m.group(1)), int(m.group(2))


def make_dataset(
    out: str,
    shards: int = 8,
    samples: int = 500,
    seed: int = 0,
    min_kb: int = 2,
    max_kb: int = 20,
    real_images: bool = False,
    prefix: str = "parts/data",
    image_size: tuple[int, int] | None = None,
) -> list[str]:
    """Write ``shards`` tar files of ``samples`` samples each under ``out``; returns their paths.

    ``image_size`` (width, height) makes every ``jpg`` a small real picture of that size (the
    sizes ``min_kb``/``max_kb`` then do not apply); ``real_images`` a JPEG of random pixels of
    about the drawn size; neither, random bytes of that size.
    """
    rng = random.Random(seed)
    paths = []
    for s in range(shards):
        path = os.path.join(out, f"{prefix}-{s:06d}.tar")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with tarfile.open(path + ".tmp", "w", format=tarfile.USTAR_FORMAT) as tar:
            for i in range(samples):
                key = f"s{s:05d}_{i:06d}"
                size = rng.randint(min_kb * 1024, max_kb * 1024)
                if image_size:
                    jpg = _picture(rng, image_size)
                else:
                    jpg = _jpeg(rng, size) if real_images else rng.randbytes(size)
                parts = {
                    "jpg": jpg,
                    "txt": f"caption {s} {i} {rng.random():.6f}".encode(),
                    "json": json.dumps({"shard": s, "index": i, "label": rng.randrange(1000)}).encode(),
                }
                for ext, data in parts.items():
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    info.mtime = 1_700_000_000
                    info.mode = 0o644
                    tar.addfile(info, io.BytesIO(data))
        os.replace(path + ".tmp", path)
        paths.append(path)
    return paths


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The module docstring as written, and each option's default in ``--help``."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=_HelpFormatter)
    ap.add_argument("out", help="folder to write the shards into (as OUT/parts/data-NNNNNN.tar)")
    ap.add_argument("--shards", type=int, default=8, help="how many shards")
    ap.add_argument("--samples", type=int, default=500, help="samples per shard")
    ap.add_argument("--seed", type=int, default=0, help="random seed: the same seed writes the same bytes")
    ap.add_argument("--min-kb", type=int, default=2, help="smallest jpg part, KB")
    ap.add_argument("--max-kb", type=int, default=20, help="largest jpg part, KB")
    ap.add_argument("--real-images", action="store_true", help="jpg parts are JPEGs of random pixels (slower)")
    ap.add_argument("--image-size", type=parse_size, default=None, metavar="WxH",
                    help="jpg parts are small real pictures of this size, e.g. 96x64 (--min-kb/--max-kb then unused)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    paths = make_dataset(args.out, args.shards, args.samples, args.seed, args.min_kb, args.max_kb, args.real_images,
                         image_size=args.image_size)
    size = sum(os.path.getsize(p) for p in paths)
    print(f"wrote {len(paths)} shards x {args.samples} samples, {size / 1e6:,.1f} MB, in {time.perf_counter() - t0:.1f} s to {args.out}")


if __name__ == "__main__":
    main()
