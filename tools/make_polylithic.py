"""A small polylithic dataset for demos, tests and the aux benchmark.

Writes, under OUT:

- ``aux_tar/``: a prepared dataset whose members are media named as a path inside the tar
  (``images/00000.jpg``: key ``images/00000``, part ``jpg``);
- ``aux_folder/``: the same kind of media as plain files (``photos/00000.png``);
- ``primary_a/``, ``primary_b/``, ...: prepared crude datasets whose samples are a ``json``
  naming one image of each (``{"image": "images/00007.jpg", "photo": "photos/00003.png", ...}``)
  and a ``txt``; keys ``a_000000``, ``b_000000``, ...;
- ``meta.yaml``: an Energon MetadatasetV2 blending the primaries with both aux stores.

Every file's bytes are deterministic for a seed. Example:
    python tools/make_polylithic.py /tmp/poly --samples 200 --images 500
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import tarfile
from typing import Any


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 1_700_000_000
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def media_bytes(kind: str, i: int, seed: int = 0, size: int = 600) -> bytes:
    """The deterministic content of media file ``i`` of ``kind`` (a tag that makes it recognisable)."""
    rng = random.Random(f"{seed}/{kind}/{i}")
    return f"{kind}-{i:05d}|".encode() + rng.randbytes(size + rng.randrange(size))


def write_aux_tar(out: str, images: int, shards: int = 2, seed: int = 0, prefix: str = "images") -> list[str]:
    """Shards of media members ``{prefix}/{i:05d}.jpg`` split over ``shards`` tars (not prepared)."""
    os.makedirs(os.path.join(out, "parts"), exist_ok=True)
    per = -(-images // shards)
    paths = []
    for s in range(shards):
        path = os.path.join(out, "parts", f"aux-{s:06d}.tar")
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for i in range(s * per, min(images, (s + 1) * per)):
                _add(tar, f"{prefix}/{i:05d}.jpg", media_bytes("image", i, seed))
        paths.append(path)
    return paths


def write_aux_folder(out: str, photos: int, seed: int = 0) -> None:
    """Plain files ``photos/{i:05d}.png`` under ``out``."""
    os.makedirs(os.path.join(out, "photos"), exist_ok=True)
    for i in range(photos):
        with open(os.path.join(out, "photos", f"{i:05d}.png"), "wb") as f:
            f.write(media_bytes("photo", i, seed))


def primary_record(tag: str, i: int, images: int, photos: int, seed: int = 0) -> dict[str, Any]:
    """The json of sample ``i`` of primary ``tag``: which image and photo it names."""
    rng = random.Random(f"{seed}/{tag}/{i}")
    return {
        "image": f"images/{rng.randrange(images):05d}.jpg",
        "photo": f"photos/{rng.randrange(photos):05d}.png",
        "caption": f"{tag} sample {i}",
    }


def write_primary(out: str, tag: str, samples: int, images: int, photos: int, shards: int = 2, seed: int = 0) -> None:
    """Shards of ``{tag}_{i:06d}.json`` / ``.txt`` samples (not prepared)."""
    os.makedirs(os.path.join(out, "parts"), exist_ok=True)
    per = -(-samples // shards)
    for s in range(shards):
        with tarfile.open(os.path.join(out, "parts", f"{tag}-{s:06d}.tar"), "w", format=tarfile.USTAR_FORMAT) as tar:
            for i in range(s * per, min(samples, (s + 1) * per)):
                rec = primary_record(tag, i, images, photos, seed)
                _add(tar, f"{tag}_{i:06d}.json", json.dumps(rec).encode())
                _add(tar, f"{tag}_{i:06d}.txt", rec["caption"].encode())


META_YAML = """\
__module__: megatron.energon
__class__: MetadatasetV2
splits:
  train:
    blend:
{blend}
"""

ENTRY = """\
      - weight: {weight}
        path: {path}
        subflavors:
          origin: {tag}
        aux:
          images: aux_tar
          photos: filesystem://aux_folder
"""


def make_polylithic(
    out: str,
    primaries: int = 2,
    samples: int = 40,
    images: int = 60,
    photos: int = 30,
    shards: int = 2,
    seed: int = 0,
    split_ratio: str = "1,0,0",
) -> dict[str, Any]:
    """Write and prepare the datasets above; returns their paths (``meta``, ``aux_tar``, ...)."""
    import shardstore

    os.makedirs(out, exist_ok=True)
    write_aux_tar(os.path.join(out, "aux_tar"), images, shards, seed)
    shardstore.prepare(os.path.join(out, "aux_tar"), split_ratio="1,0,0", num_workers=1, sample_type="CrudeWebdataset")
    write_aux_folder(os.path.join(out, "aux_folder"), photos, seed)
    tags = [chr(ord("a") + k) for k in range(primaries)]
    for tag in tags:
        path = os.path.join(out, f"primary_{tag}")
        write_primary(path, tag, samples, images, photos, shards, seed)
        shardstore.prepare(path, split_ratio=split_ratio, num_workers=1, sample_type="CrudeWebdataset")
    blend = "".join(ENTRY.format(weight=k + 1, path=f"primary_{t}", tag=t) for k, t in enumerate(tags))
    with open(os.path.join(out, "meta.yaml"), "w") as f:
        f.write(META_YAML.format(blend=blend))
    return {
        "root": out,
        "meta": os.path.join(out, "meta.yaml"),
        "aux_tar": os.path.join(out, "aux_tar"),
        "aux_folder": os.path.join(out, "aux_folder"),
        "primaries": {t: os.path.join(out, f"primary_{t}") for t in tags},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--primaries", type=int, default=2)
    ap.add_argument("--samples", type=int, default=40, help="samples per primary dataset")
    ap.add_argument("--images", type=int, default=60)
    ap.add_argument("--photos", type=int, default=30)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    paths = make_polylithic(args.out, args.primaries, args.samples, args.images, args.photos, args.shards, args.seed)
    print(f"wrote {paths['meta']}")


if __name__ == "__main__":
    main()
