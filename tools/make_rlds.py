"""Make a small RLDS dataset (a TFDS version folder of TFRecord shards) with shardstore's own RLDS writer,
for the docs: ``--episodes`` episodes of 2..``--steps`` steps, each step a PNG image, a float32 state, a
float32 action and a language instruction; the last ``--val`` episodes in split ``val``, the others in
``train``; ``--episodes-per-shard`` records per TFRecord shard. No TensorFlow needed.

Example: python tools/make_rlds.py ./robo/1.0.0 --episodes 7 --val 2 --episodes-per-shard 1
"""

from __future__ import annotations

import argparse
import io

import numpy as np


def main() -> None:
    from PIL import Image

    from shardstore.convert.rlds import write_rlds
    from shardstore.episodes import Episode, EpisodeStream, FieldSpec, Schema

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="the version folder to write, e.g. ./robo/1.0.0 (dataset name: robo)")
    ap.add_argument("--episodes", type=int, default=7)
    ap.add_argument("--steps", type=int, default=4, help="longest episode (episodes have 2..STEPS steps)")
    ap.add_argument("--val", type=int, default=2, help="how many of the last episodes go to split val")
    ap.add_argument("--episodes-per-shard", type=int, default=2)
    ap.add_argument("--image", type=int, default=16, help="image side in pixels")
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    schema = Schema((
        FieldSpec("observation.image", "media", "|u1", (args.image, args.image, 3), ("observation", "image"), "png"),
        FieldSpec("observation.state", "array", "<f4", (3,), ("observation", "state")),
        FieldSpec("action", "array", "<f4", (2,), ("action",)),
        FieldSpec("language_instruction", "text", "", (), ("language_instruction",)),
    ))

    def png() -> bytes:
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (args.image, args.image, 3), dtype=np.uint8)).save(buf, "PNG")
        return buf.getvalue()

    lengths = [2 + e % (args.steps - 1) for e in range(args.episodes)]
    episodes = [
        Episode(e, {"observation.image": [png() for _ in range(n)],
                    "observation.state": rng.random((n, 3), dtype=np.float32),
                    "action": rng.random((n, 2), dtype=np.float32),
                    "language_instruction": ["pick the cube"] * n},
                {"episode_metadata": {"episode_id": np.int64(e)}}, terminal=True,
                split="val" if e >= args.episodes - args.val else "train")
        for e, n in enumerate(lengths)
    ]
    info = write_rlds(EpisodeStream(schema, episodes), args.out, episodes_per_shard=args.episodes_per_shard)
    print(f"wrote {args.out}: RLDS, {args.episodes} episodes, {sum(lengths)} steps, splits "
          + ", ".join(s["name"] for s in info.get("splits", [])))


if __name__ == "__main__":
    main()
