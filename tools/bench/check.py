"""``check lerobot --deep``: its speed against the floor, and what it finds against lerobot-doctor.

Speed. The data: a LeRobot v3.0 dataset written by tools/make_lerobot.py (``--episodes`` x
``--frames``, two ``--size``-square cameras, one H.264 and one AV1, every episode in one data file
and one video file per camera, as LeRobot packs them). Timed, warm page cache, best of
``--repeat``:

- ``check --deep``: ``shardstore.convert.lerobot.deep.check_deep`` (every row, stat and packet);
- ``check``: the structural pass alone, for scale;
- **read floor**: what the deep check cannot avoid: every data parquet read whole with pyarrow,
  every video's packets demuxed with PyAV (no decode), the metadata files read;
- **decode floor**: decoding every frame of every video once (the design's bound for a check that
  decodes; this one does not need to).

Faults. With ``--doctor EXE`` (lerobot-doctor's command, installed in a venv of its own: ``pip
install lerobot-doctor``) and ``--clean DIR`` (a dataset LeRobot's own recorder wrote:
tests/convert/lerobot_own_writer.py), each fault of tools/lerobot_faults.py is seeded into a copy
and both checkers run on it: shardstore finds a fault when it reports an error; lerobot-doctor
when a check of its report gets a WARN or FAIL message the clean dataset's report does not have.

The figures are printed; ``--json PATH`` also writes them there (``make bench`` does, as the step
``check`` of tools/bench/all.py), with the load average before and after.

Example: python tools/bench/check.py --episodes 50 --frames 300 --size 96 --data /work/bench-data/check
         python tools/bench/check.py --episodes 4 --frames 30 --size 32   (a quick run)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT))


def _best(fn: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """The best wall and the best CPU seconds (this process) of ``repeat`` runs: on a shared machine
    the CPU figure is the steadier one."""
    wall, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return min(wall), min(cpu)


def make_data(path: Path, episodes: int, frames: int, size: int) -> Path:
    from make_lerobot import make_lerobot

    if not (path / "meta/info.json").exists():
        shutil.rmtree(path, ignore_errors=True)
        make_lerobot(
            str(path), version="v3.0", episodes=episodes, frames=frames, size=size, image=False,
            episodes_per_file=episodes, chunks_size=1000, gop=2,
            cameras={"observation.images.front": "h264", "observation.images.wrist": "av1"},
        )
    return path


def read_floor(path: Path) -> None:
    """Every parquet read whole, every video's packets demuxed, the metadata read."""
    import av
    import pyarrow.parquet as pq

    for p in sorted(path.rglob("*")):
        if p.suffix == ".parquet":
            pq.read_table(p)
        elif p.suffix == ".mp4":
            with av.open(str(p)) as c:
                for _ in c.demux(c.streams.video[0]):
                    pass
        elif p.is_file():
            p.read_bytes()


def decode_floor(path: Path) -> None:
    import av

    for p in sorted(path.rglob("*.mp4")):
        with av.open(str(p)) as c:
            for _ in c.decode(video=0):
                pass


def speed(args: argparse.Namespace) -> dict[str, Any]:
    from shardstore.convert.lerobot import check
    from shardstore.convert.lerobot.deep import check_deep

    data = make_data(Path(args.data), args.episodes, args.frames, args.size)
    report = check_deep(str(data))
    assert report.ok, report.lines()
    read_floor(data)  # warm the page cache
    out = {
        "episodes": args.episodes,
        "frames": args.episodes * args.frames,
        "size": args.size,
        "bytes": sum(p.stat().st_size for p in data.rglob("*") if p.is_file()),
    }
    for key, fn in (("check_deep", lambda: check_deep(str(data))), ("check", lambda: check(str(data))),
                    ("read_floor", lambda: read_floor(data)), ("decode_floor", lambda: decode_floor(data))):
        out[f"{key}_s"], out[f"{key}_cpu_s"] = _best(fn, args.repeat)
    for suffix in ("s", "cpu_s"):
        kind = "" if suffix == "s" else "_cpu"
        out[f"deep_vs_read_floor{kind}"] = round(out[f"check_deep_{suffix}"] / out[f"read_floor_{suffix}"], 2)
        out[f"deep_vs_decode_floor{kind}"] = round(out[f"check_deep_{suffix}"] / out[f"decode_floor_{suffix}"], 2)
    return out


def _doctor_findings(exe: str, path: Path) -> set[tuple[str, str, str]]:
    result = subprocess.run([exe, "check", str(path), "--json"], capture_output=True, text=True, timeout=600)
    try:
        report = json.loads(result.stdout)
    except ValueError:
        return {("crash", "FAIL", (result.stderr or result.stdout)[-200:])}
    return {
        (c["name"], m["severity"], m["message"])
        for c in report.get("checks", [])
        for m in c.get("messages", [])
        if m.get("severity") in ("WARN", "FAIL")
    }


def faults(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    from lerobot_faults import FAULTS, seeded

    from shardstore.convert.lerobot.deep import check_deep

    baseline = _doctor_findings(args.doctor, Path(args.clean))
    out: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in FAULTS:
            ds = seeded(args.clean, Path(tmp) / name, name)
            ours = [str(p) for p in check_deep(str(ds)).problems if p.severity == "error"]
            theirs = sorted(f"{c}: {s} {m}" for c, s, m in _doctor_findings(args.doctor, ds) - baseline)
            out[name] = {"shardstore": ours[:3], "lerobot_doctor": theirs[:3],
                         "shardstore_found": bool(ours), "lerobot_doctor_found": bool(theirs)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--size", type=int, default=96)
    ap.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "shardstore-bench-check"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--doctor", default=None, help="lerobot-doctor's command, to compare findings")
    ap.add_argument("--clean", default=None, help="with --doctor: a dataset LeRobot's recorder wrote")
    ap.add_argument("--json", metavar="PATH", help="also write the figures to this JSON file")
    a = ap.parse_args()
    load = [round(os.getloadavg()[0], 1)]
    result: dict[str, Any] = {"speed": speed(a)}
    if a.doctor and a.clean:
        result["faults"] = faults(a)
    result["source"] = {"script": "tools/bench/check.py", "argv": sys.argv[1:], "load": [*load, round(os.getloadavg()[0], 1)],
                        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=2) + "\n")
    s = result["speed"]
    print(f"LeRobot v3.0, {s['episodes']} episodes x {s['frames'] // s['episodes']} frames, two {s['size']}px cameras, "
          f"{s['bytes'] / 1e6:.1f} MB; load average {result['source']['load']}")
    for key in ("check_deep", "check", "read_floor", "decode_floor"):
        print(f"  {key:<14} {s[key + '_s']:8.3f} s wall {s[key + '_cpu_s']:8.3f} s CPU")
    print(f"  check --deep / read floor: {s['deep_vs_read_floor']}x wall, {s['deep_vs_read_floor_cpu']}x CPU; "
          f"/ decode floor: {s['deep_vs_decode_floor']}x wall, {s['deep_vs_decode_floor_cpu']}x CPU")
    for name, f in result.get("faults", {}).items():
        print(f"  {name:<26} shardstore {'found' if f['shardstore_found'] else 'MISSED':<7} "
              f"lerobot-doctor {'found' if f['lerobot_doctor_found'] else 'missed'}")


if __name__ == "__main__":
    main()
