"""`make demo`: make a small dataset, prepare it with shardstore, read samples at random, say what happened.

Writes ./demo-data (8 shards x 500 samples, about 16 MB; gitignored), each sample a small real
JPEG picture (96x64, so ``decode=True`` works and decoded images batch together), a caption and a
json record; it reuses the shards of an earlier run made with the same options, and prepares the
dataset again each time. Everything it does goes through the public API
(``shardstore.prepare``, ``shardstore.open``), the same calls a training script makes.

Example: .venv/bin/python tools/demo.py [--shards 8] [--samples 500] [--out demo-data]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from make_dataset import make_dataset  # noqa: E402

import shardstore  # noqa: E402
from shardstore.inspection import check  # noqa: E402


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _rate(n: int, seconds: float) -> str:
    each = seconds / n * 1e6
    return f"{n:>5} in {seconds * 1000:7.1f} ms  ({each:6.1f} us each, {n / seconds:>9,.0f}/s)"


IMAGE_SIZE = (96, 64)
STAMP = ".demo-options.json"  # hidden: not a shard, and prepare skips hidden names


def _options(args: argparse.Namespace) -> dict[str, Any]:
    return {"shards": args.shards, "samples": args.samples, "seed": args.seed, "image_size": list(IMAGE_SIZE)}


def _shards_present(out: Path, options: dict[str, Any]) -> bool:
    """Whether ``out`` holds the shards of an earlier run with the same options (not older demo data)."""
    found = sorted(out.glob("parts/data-*.tar"))
    try:
        same = json.loads((out / STAMP).read_text()) == options
    except (OSError, ValueError):
        return False
    return same and len(found) == options["shards"] and all(
        p.name == f"data-{i:06d}.tar" for i, p in enumerate(found))


def _preview(value: bytes, part: str) -> str:
    if part in ("txt", "json"):
        text = value.decode("utf-8", "replace")
        return repr(text if len(text) <= 60 else text[:57] + "...")
    return f"<{len(value):,} bytes>"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "demo-data"))
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--samples", type=int, default=500, help="samples per shard")
    ap.add_argument("--reads", type=int, default=2000, help="random reads per access method")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    out = Path(args.out)
    rng = random.Random(args.seed)
    print("shardstore demo")

    # 1. Data: WebDataset shards of jpg (a small picture), txt caption and json record per sample.
    options = _options(args)
    if _shards_present(out, options):
        print(f"  1. shards        reusing {args.shards} shards in {out}")
    else:
        shutil.rmtree(out, ignore_errors=True)
        _, secs = _timed(lambda: make_dataset(str(out), shards=args.shards, samples=args.samples, seed=args.seed,
                                              image_size=IMAGE_SIZE))
        (out / STAMP).write_text(json.dumps(options))
        size = sum(p.stat().st_size for p in out.glob("parts/*.tar"))
        print(f"  1. shards        wrote {args.shards} x {args.samples} samples ({size / 1e6:.1f} MB) to {out} in {secs:.1f} s")

    # 2. Prepare: index the tar headers, write Energon's .nv-meta and a .tar.idx beside each shard.
    report, secs = _timed(lambda: shardstore.prepare(
        str(out), split_ratio="8,1,1", sample_type="CaptioningSample",
        field_map={"image": "jpg", "caption": "txt"}, force_overwrite=True,
    ))
    splits = ", ".join(f"{k} {v['samples']}" for k, v in report.splits.items())
    print(f"  2. prepare       {report.samples} samples, {report.parts} parts, {report.shards} shards "
          f"in {secs:.2f} s (splits: {splits})")

    # 3. Random access on the train split, by position, by key, by member name, and in one batch.
    ds, secs = _timed(lambda: shardstore.open(str(out), split="train"))
    n = len(ds)
    print(f"  3. open          split 'train': {n} samples in {secs * 1000:.1f} ms")
    positions = [rng.randrange(n) for _ in range(args.reads)]
    ds[0]  # warm up: the first read opens the shard files
    samples, secs = _timed(lambda: [ds[i] for i in positions])
    print(f"     by position   ds[i]                     {_rate(len(positions), secs)}")
    keys = [s["__key__"] for s in samples]
    rng.shuffle(keys)
    by_key, secs = _timed(lambda: [ds.get(k) for k in keys])
    print(f"     by key        ds.get(key)               {_rate(len(keys), secs)}")
    names = [f"{k}.{rng.choice(('jpg', 'txt', 'json'))}" for k in keys]
    files, secs = _timed(lambda: [ds.read_file(name) for name in names])
    print(f"     by member     ds.read_file('key.part')  {_rate(len(names), secs)}")
    batch = positions[:256]
    many, secs = _timed(lambda: ds.get_many(batch))
    print(f"     batch         ds.get_many(256 items)    {_rate(len(batch), secs)}")

    # 4. Show one sample, and check what was read against the tar files themselves.
    sample = ds[positions[0]]
    parts = ", ".join(f"{p}={_preview(sample[p], p)}" for p in sample if not p.startswith("__"))
    print(f"  4. ds[{positions[0]}]  key {sample['__key__']!r} from {sample['__shard__']}: {parts}")
    wrong = 0
    for name, data in zip(names[:20], files[:20], strict=True):
        shard = ds.get(name.split(".", 1)[0])["__shard__"]
        with tarfile.open(out / shard) as tar:
            member = tar.extractfile(name)
            wrong += member is None or member.read() != data
    same = many == [ds[i] for i in batch]
    by_key_ok = [s["__key__"] for s in by_key] == keys
    ok = wrong == 0 and same and by_key_ok
    print(f"     verified      20 members equal Python tarfile's bytes, get_many/get agree with ds[i]: "
          f"{'yes' if ok else 'NO'}")

    # 5. The dataset is whole: every shard has its prepared size and the headers match the index.
    result, secs = _timed(lambda: check(str(out), deep=True))
    print(f"  5. check --deep  {'OK' if result.ok else f'{len(result.problems)} problems'}: "
          f"{result.parts} parts walked in {secs:.2f} s")
    rel = out if not out.is_relative_to(Path.cwd()) else out.relative_to(Path.cwd())
    cli = ".venv/bin/shardstore"
    print(f"Next, try:  {cli} info {rel}")
    print(f"            {cli} ls {rel} --split val -n 3")
    print(f"            {cli} cat {rel} {keys[0]}.txt")
    return 0 if ok and result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
