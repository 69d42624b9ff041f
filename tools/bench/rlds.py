"""RLDS benchmark: random steps from an imported RLDS dataset against the best a TFRecord reader can
do, and against TFDS's own sequential reader, in one run on the same data.

Data: an RLDS folder written by ``write_rlds`` (``--episodes`` x ``--steps``, a ``--size`` square
JPEG image, an 8-float state, a 7-float action, a task string per step; 50 episodes per shard).

Figures (warm page cache, one thread, fixed seed):

- import: ``import_rlds`` of the whole folder (steps/s, source MB/s);
- random step, decoded (JPEG decoded to HWC uint8 + state + action) and raw (image bytes + state +
  action): ``shardstore.episodes(ds).step(e, t)`` against an indexed TFRecord reader, given the byte
  offset and length of every episode's record for free (the shards memory-mapped, a parse of the
  whole ``tf.train.Example`` straight from the mapping with protobuf's upb parser into a fresh
  message, step t taken; CRCs not checked, to its advantage; ``IndexedTFRecord`` says why this is its
  best form). Both decode the JPEG with the library's decoder (``shardstore.decode``: simplejpeg when
  installed, else Pillow), so the ratio measures the readers;
- the parts that bound the ratios, on the same pairs: the JPEG decode alone (the library's decoder,
  and Pillow's ``Image.open`` for reference), the peer's parse alone, and the peer reading with one
  ``os.pread`` instead; the decoded ratio can never exceed (peer raw + decode) / decode, the "cap";
- TFDS: ``tfds.builder_from_directory(...).as_dataset()`` iterated over every step (images decoded),
  in the TensorFlow venv (``--tfds-python``; skipped when missing), as steps/s: the sequential rate
  a TFDS pipeline reaches, the best case of a shuffle buffer.

Every reader is checked to return the same values on the first positions before anything is timed.
Each loop runs ``--repeat`` times interleaved, the best run kept, in wall-clock and CPU time.

Example (quick): .venv/bin/python tools/bench/rlds.py --episodes 40 --steps 50 --reads 300
Full (DESIGN.md figure): .venv/bin/python tools/bench/rlds.py --episodes 500 --steps 100 --size 128
"""

from __future__ import annotations

import argparse
import io
import json
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import shardstore  # noqa: E402
from shardstore.convert.rlds import import_rlds, write_rlds  # noqa: E402
from shardstore.convert.rlds.tfrecord import example_class, iter_records  # noqa: E402
from shardstore.decode import DEFAULT_DECODERS  # noqa: E402
from shardstore.episodes import Episode, EpisodeStream, FieldSpec, Schema  # noqa: E402

SEED = 20240601
STATE, ACTION = 8, 7
TARGET = 20.0  # DESIGN.md section 9: random step >= 20x the indexed-TFRecord peer
TFDS_SCRIPT = """
import sys, time
import tensorflow_datasets as tfds
b = tfds.builder_from_directory(sys.argv[1])
t0, c0 = time.perf_counter(), time.process_time()
steps = 0
for split in b.info.splits:
    for ep in b.as_dataset(split=split, shuffle_files=False):
        for s in ep["steps"]:
            s["observation"]["image"].numpy(); s["observation"]["state"].numpy(); s["action"].numpy()
            steps += 1
print(steps, time.perf_counter() - t0, time.process_time() - c0)
"""


def jpeg(img: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


#: The library's decoder of .jpg parts: what a user of shardstore gets; the peer uses it too.
decode_jpeg = DEFAULT_DECODERS["jpg"]


def pillow_jpeg(data: bytes) -> np.ndarray:
    """Pillow's decode, for reference (what both readers would pay without simplejpeg)."""
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(data)))


def make_source(out: str, episodes: int, steps: int, size: int) -> None:
    """The benchmark's RLDS folder: smooth moving pictures (JPEG-sized like camera frames)."""
    schema = Schema(
        (
            FieldSpec("observation.image", "media", "|u1", (size, size, 3), ("observation", "image"), "jpeg"),
            FieldSpec("observation.state", "array", "<f4", (STATE,), ("observation", "state")),
            FieldSpec("action", "array", "<f4", (ACTION,), ("action",)),
            FieldSpec("language_instruction", "text", "", (), ("language_instruction",)),
        ),
        source_format="bench",
    )
    y, x = np.mgrid[0:size, 0:size].astype(np.float32)
    rng = np.random.default_rng(SEED)

    def gen() -> Iterator[Episode]:
        for e in range(episodes):
            imgs = []
            for t in range(steps):
                r = (np.sin((x + 3 * t + 7 * e) / 9) + np.cos((y - 2 * t) / 13)) * 60 + 128
                img = np.stack([r, r[::-1], r.T], axis=-1) + rng.normal(0, 4, (size, size, 3))
                imgs.append(jpeg(np.clip(img, 0, 255).astype(np.uint8)))
            ep_steps = {
                "observation.image": imgs,
                "observation.state": rng.standard_normal((steps, STATE)).astype(np.float32),
                "action": rng.standard_normal((steps, ACTION)).astype(np.float32),
                "language_instruction": [f"task {e % 7}"] * steps,
            }
            meta = {"episode_metadata": {"episode_id": np.int64(e), "file_path": f"/src/{e}"}}
            yield Episode(e, ep_steps, meta, terminal=e % 2 == 0, split="train")

    write_rlds(EpisodeStream(schema, gen(), episodes), out, name="benchrlds", episodes_per_shard=50)


class IndexedTFRecord:
    """The peer: a table of every episode's record (file, payload offset and length; built
    beforehand, not timed); a step is a parse of the whole Example (upb) + step t taken from its
    lists, then the same JPEG decode as ours.

    Where the payload comes from and into what it is parsed matter more than the parse itself, so
    ``read`` picks the best of what was measured (tools/bench/rlds.py's ``peer_variants`` figures):
    ``"mmap"`` (the default: the shards memory-mapped, the payload parsed straight from a
    memoryview of the page cache, no syscall, no 440 KB buffer allocated per step), ``"pread"`` (one
    ``os.pread`` of the payload). Each parse makes a fresh message: parsing again into one kept
    message (``ParseFromString``), as this peer first did, was ~7x slower (429 us a step instead of
    64 at 500 x 100 steps) and its memory grew with every parse (upb allocates each parse in the
    message's arena, which is freed only with the message: 23 GB after a few thousand 4.4 MB records).
    """

    def __init__(self, folder: str, read: str = "mmap") -> None:
        from google.protobuf.internal import api_implementation

        self.backend = api_implementation.Type()
        assert self.backend == "upb", f"protobuf's {self.backend} backend: the peer would be slowed, install protobuf>=4.22"
        self.fds: list[int] = []
        self.maps: list[memoryview] = []
        self.where: list[tuple[int, int, int]] = []  # episode -> (file, payload offset, payload length)
        for i, name in enumerate(sorted(p for p in os.listdir(folder) if ".tfrecord-" in p)):
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                self.where += [(i, r.offset + 12, len(r.payload)) for r in iter_records(f, path)]
            self.fds.append(os.open(path, os.O_RDONLY))
            if read == "mmap":
                self.maps.append(memoryview(mmap.mmap(self.fds[-1], 0, prot=mmap.PROT_READ)))
        self.payload = self._mapped if read == "mmap" else self._pread
        self.cls = example_class()

    def _mapped(self, e: int) -> memoryview:
        i, offset, length = self.where[e]
        return self.maps[i][offset : offset + length]

    def _pread(self, e: int) -> bytes:
        i, offset, length = self.where[e]
        return os.pread(self.fds[i], length, offset)

    def close(self) -> None:
        for m in self.maps:
            m.release()  # the mmap objects close when collected
        for fd in self.fds:
            os.close(fd)

    def parse(self, e: int, t: int, decode: bool) -> Any:
        """The read and parse alone."""
        return self.cls.FromString(self.payload(e))

    def step(self, e: int, t: int, decode: bool) -> tuple[Any, np.ndarray, np.ndarray]:
        feat = self.parse(e, t, decode).features.feature
        img = feat["steps/observation/image"].bytes_list.value[t]
        state = np.array(feat["steps/observation/state"].float_list.value[t * STATE : (t + 1) * STATE], np.float32)
        action = np.array(feat["steps/action"].float_list.value[t * ACTION : (t + 1) * ACTION], np.float32)
        return (decode_jpeg(img) if decode else img), state, action


def ours(view: Any) -> Callable[[int, int, bool], tuple[Any, np.ndarray, np.ndarray]]:
    def step(e: int, t: int, decode: bool) -> tuple[Any, np.ndarray, np.ndarray]:
        s = view.step(e, t)
        img = s["observation.image"]
        return (decode_jpeg(img) if decode else img), s["observation.state"], s["action"]

    return step


def decode_only(images: dict[tuple[int, int], bytes], decoder: Callable[[bytes], np.ndarray]) -> Callable[[int, int, bool], Any]:
    """The JPEG decode of step (e, t)'s image, nothing else."""
    return lambda e, t, decode: decoder(images[e, t])


def timed(fn: Callable[[int, int, bool], Any], pairs: list[tuple[int, int]], decode: bool) -> tuple[float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    for e, t in pairs:
        fn(e, t, decode)
    return time.perf_counter() - t0, time.process_time() - c0


def _decoder_is_simplejpeg() -> bool:
    from shardstore import decode

    return decode._simplejpeg() is not None


def run_tfds(python: str, folder: str) -> dict[str, Any] | None:
    if not os.path.exists(python):
        print(f"tfds: {python} missing (make tfds); skipped", file=sys.stderr)
        return None
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    env.pop("PYTHONPATH", None)
    res = subprocess.run([python, "-c", TFDS_SCRIPT, folder], capture_output=True, text=True, env=env, check=True)
    steps, wall, cpu = res.stdout.split()[-3:]
    return {"steps": int(steps), "wall_s": round(float(wall), 3), "cpu_s": round(float(cpu), 3),
            "steps_per_s": round(int(steps) / float(wall), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=500)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--size", type=int, default=128, help="image side (JPEG, 3 channels)")
    ap.add_argument("--reads", type=int, default=3000, help="random steps per timed loop")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", default=None, help="folder for the data (default: a temporary one, removed)")
    ap.add_argument("--tfds-python", default=str(ROOT / ".venv-tfds" / "bin" / "python"))
    ap.add_argument("--json", default=None, help="write the figures as JSON here")
    args = ap.parse_args()
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    work = args.work or tempfile.mkdtemp(prefix="bench-rlds-")
    src, ds = os.path.join(work, "benchrlds", "1.0.0"), os.path.join(work, "ds")
    try:
        if not os.path.exists(os.path.join(src, "dataset_info.json")):
            t0 = time.perf_counter()
            make_source(src, args.episodes, args.steps, args.size)
            log(f"source written in {time.perf_counter() - t0:.1f} s")
        src_bytes = sum(os.path.getsize(os.path.join(src, p)) for p in os.listdir(src))
        shutil.rmtree(ds, ignore_errors=True)
        t0, c0 = time.perf_counter(), time.process_time()
        rep = import_rlds(src, ds)
        imp_wall, imp_cpu = time.perf_counter() - t0, time.process_time() - c0
        steps_total = rep.steps
        log(f"import: {rep.episodes} episodes, {steps_total} steps, {src_bytes / 1e6:.0f} MB in {imp_wall:.1f} s")
        ds1 = os.path.join(work, "ds-layout1")  # layout 1 (a member per field and step), for its size and reads
        shutil.rmtree(ds1, ignore_errors=True)
        t0 = time.perf_counter()
        import_rlds(src, ds1, granularity="step")
        imp1_wall = time.perf_counter() - t0
        sizes = {name: sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(path) for n in names)
                 for name, path in (("layout2", ds), ("layout1", ds1))}
        log(f"dataset size: layout 2 {sizes['layout2'] / src_bytes:.2f}x the TFRecords, layout 1 "
            f"{sizes['layout1'] / src_bytes:.2f}x; layout 1 import {imp1_wall:.1f} s")
        view = shardstore.episodes(ds)
        view1 = shardstore.episodes(ds1)
        peer = IndexedTFRecord(src)
        variants = {"pread": IndexedTFRecord(src, read="pread")}
        for folder in (src, ds):  # warm the page cache for both
            for dirpath, _, names in os.walk(folder):
                for n in names:
                    with open(os.path.join(dirpath, n), "rb") as f:
                        while f.read(1 << 24):
                            pass
        rng = np.random.default_rng(SEED)
        pairs = [(int(rng.integers(args.episodes)), int(rng.integers(args.steps))) for _ in range(args.reads)]
        mine = ours(view)
        for e, t in pairs[:50]:  # the same values from both
            a = mine(e, t, True)
            for reader in (peer, *variants.values()):
                b = reader.step(e, t, True)
                assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True)), (e, t)
        results: dict[str, Any] = {
            "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "load_avg_1m": os.getloadavg()[0]},
            "data": {"episodes": args.episodes, "steps": args.steps, "image": f"{args.size}x{args.size}x3 jpeg",
                     "source_mb": round(src_bytes / 1e6, 1), "reads": args.reads},
            "import": {"wall_s": round(imp_wall, 2), "cpu_s": round(imp_cpu, 2),
                       "steps_per_s": round(steps_total / imp_wall), "mb_per_s": round(src_bytes / 1e6 / imp_wall, 1),
                       "layout1_wall_s": round(imp1_wall, 2),
                       "size_x_source": {k: round(v / src_bytes, 3) for k, v in sizes.items()}},
        }
        results["machine"]["protobuf_backend"] = peer.backend
        results["machine"]["jpeg_decoder"] = "simplejpeg" if _decoder_is_simplejpeg() else "pillow"
        images = {(e, t): view.step(e, t)["observation.image"] for e, t in pairs}
        loops: dict[str, tuple[Callable[[int, int, bool], Any], bool]] = {
            "shardstore_decoded": (mine, True), "peer_decoded": (peer.step, True),
            "shardstore_raw": (mine, False), "peer_raw": (peer.step, False),
            "shardstore_layout1_raw": (ours(view1), False),
            "peer_parse_only": (peer.parse, False), "decode_only": (decode_only(images, decode_jpeg), True),
            "pillow_decode_only": (decode_only(images, pillow_jpeg), True),
            **{f"variant_{k}": (v.step, False) for k, v in variants.items()},
        }
        best = {name: [1e9, 1e9] for name in loops}
        for _ in range(args.repeat):  # interleaved: a burst of load hits every loop alike
            for name, (fn, decode) in loops.items():
                w, c = timed(fn, pairs, decode)
                best[name] = [min(best[name][0], w), min(best[name][1], c)]
        us = {name: (w / args.reads * 1e6, c / args.reads * 1e6) for name, (w, c) in best.items()}
        for key, suffix in (("random_step_decoded", "decoded"), ("random_step_raw", "raw")):
            results[key] = {
                label: {"steps_per_s": round(1e6 / us[f"{name}_{suffix}"][0]),
                        "us_per_step_wall": round(us[f"{name}_{suffix}"][0], 1),
                        "us_per_step_cpu": round(us[f"{name}_{suffix}"][1], 1)}
                for label, name in (("shardstore", "shardstore"), ("indexed_tfrecord", "peer"))
            }
            for i, clock in enumerate(("wall", "cpu")):
                results[key][f"ratio_{clock}"] = round(us[f"peer_{suffix}"][i] / us[f"shardstore_{suffix}"][i], 2)
        # what bounds the decoded ratio: both readers pay the decode, so even a free read of ours gives
        # (peer raw + decode) / decode
        results["parts_us_per_step"] = {
            clock: {"jpeg_decode": round(us["decode_only"][i], 1), "pillow_jpeg_decode": round(us["pillow_decode_only"][i], 1),
                    "peer_parse": round(us["peer_parse_only"][i], 1),
                    "peer_take_step": round(us["peer_raw"][i] - us["peer_parse_only"][i], 1),
                    "shardstore_read_and_parts": round(us["shardstore_raw"][i], 1),
                    "shardstore_layout1_read_and_parts": round(us["shardstore_layout1_raw"][i], 1),
                    "decoded_ratio_cap": round((us["peer_raw"][i] + us["decode_only"][i]) / us["decode_only"][i], 2),
                    "decoded_ratio_cap_pillow": round((us["peer_raw"][i] + us["pillow_decode_only"][i]) / us["pillow_decode_only"][i], 2)}
            for i, clock in enumerate(("wall", "cpu"))
        }
        results["peer_variants_raw_us_per_step"] = {
            "mmap (the peer)": {"wall": round(us["peer_raw"][0], 1), "cpu": round(us["peer_raw"][1], 1)},
            **{k: {"wall": round(us[f"variant_{k}"][0], 1), "cpu": round(us[f"variant_{k}"][1], 1)} for k in variants},
        }
        for reader in (peer, *variants.values()):
            reader.close()
        tf = run_tfds(args.tfds_python, src)
        if tf is not None:
            results["tfds_as_dataset"] = tf
            results["tfds_as_dataset"]["shardstore_random_vs_tfds_sequential"] = round(
                results["random_step_decoded"]["shardstore"]["steps_per_s"] / tf["steps_per_s"], 2)
        results["machine"]["load_avg_1m_after"] = os.getloadavg()[0]
        text = json.dumps(results, indent=2)
        print(text)
        if args.json:
            Path(args.json).write_text(text + "\n")
        for key in ("random_step_decoded", "random_step_raw"):
            r = results[key]["ratio_wall"]
            print(f"{key}: {r}x the indexed TFRecord reader (target {TARGET}x: {'met' if r >= TARGET else 'NOT met'})",
                  file=sys.stderr)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
