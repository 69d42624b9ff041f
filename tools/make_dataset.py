"""Synthetic WebDataset shards for demos, tests and benchmarks.

Each sample has a ``jpg`` (random bytes of 2-20 KB, not a real image unless ``--real-images``),
a ``txt`` caption and a ``json`` record; keys are ``s{shard:05d}_{i:06d}``. Written with
webdataset's ``TarWriter`` when it is installed, else with ``tarfile``; deterministic for a seed.

Example: python tools/make_dataset.py /tmp/ds --shards 64 --samples 4000
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import tarfile
import time


def _jpeg(rng: random.Random, size: int) -> bytes:
    from PIL import Image

    w = h = max(8, int((size / 3) ** 0.5))
    img = Image.frombytes("RGB", (w, h), rng.randbytes(w * h * 3))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def make_dataset(
    out: str,
    shards: int = 64,
    samples: int = 4000,
    seed: int = 0,
    min_kb: int = 2,
    max_kb: int = 20,
    real_images: bool = False,
    prefix: str = "parts/data",
) -> list[str]:
    """Write ``shards`` tar files of ``samples`` samples each under ``out``; returns their paths."""
    rng = random.Random(seed)
    paths = []
    for s in range(shards):
        path = os.path.join(out, f"{prefix}-{s:06d}.tar")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with tarfile.open(path + ".tmp", "w", format=tarfile.USTAR_FORMAT) as tar:
            for i in range(samples):
                key = f"s{s:05d}_{i:06d}"
                size = rng.randint(min_kb * 1024, max_kb * 1024)
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--shards", type=int, default=64)
    ap.add_argument("--samples", type=int, default=4000, help="samples per shard")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-kb", type=int, default=2)
    ap.add_argument("--max-kb", type=int, default=20)
    ap.add_argument("--real-images", action="store_true", help="encode real JPEGs (slower)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    paths = make_dataset(args.out, args.shards, args.samples, args.seed, args.min_kb, args.max_kb, args.real_images)
    size = sum(os.path.getsize(p) for p in paths)
    print(f"wrote {len(paths)} shards x {args.samples} samples, {size / 1e9:.2f} GB, in {time.perf_counter() - t0:.1f} s to {args.out}")


if __name__ == "__main__":
    main()
