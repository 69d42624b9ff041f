"""What two cores give a video reader here: one decoder alone against two decoding at once.

A reader that decodes a batch's cameras on two threads cannot run faster than twice the one-thread
rate. On a shared virtual machine it gets less than that: two decoders running at once slow each
other down (shared cache, memory and host cores), whether they are threads of one process or two
processes. This bench measures that slowdown, so that a loader's two-thread figures
(``lerobot_loader.py``) can be read against what two decoders allow, not against twice one.

It decodes the first ``--packets`` packets of an mp4 with PyAV (one thread per decoder, the
packets in memory, no colour conversion), three ways, in each of ``--rounds`` rounds, one after
another:

- ``alone``: one decoder in one process;
- ``threads``: two decoders on two threads of one process (PyAV lets go of the GIL while it decodes);
- ``processes``: two processes, one decoder each.

Printed per way: the CPU ms per frame of each decoder (its thread's CPU time; best round), and
the slowdown of the ways with two against ``alone``.

Example: python tools/bench/decoder_pair.py --video /tmp/lrbench/src/videos/observation.images.front/chunk-000/file-000.mp4 --packets 2000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from typing import Any


def packets(path: str, n: int) -> tuple[str, bytes, list[Any]]:
    """The codec's name, its extradata and the first ``n`` packets of ``path``'s first video."""
    import av

    with av.open(path) as c:
        stream = c.streams.video[0]
        got = []
        for p in c.demux(stream):
            if p.size:
                q = av.Packet(bytes(p))
                q.pts = p.pts
                got.append(q)
            if len(got) == n:
                break
        return stream.codec_context.name, bytes(stream.codec_context.extradata or b""), got


def decode_all(codec: str, extradata: bytes, todo: list[Any]) -> float:
    """CPU ms per frame of this thread decoding ``todo`` with a fresh one-thread decoder."""
    import av

    ctx = av.CodecContext.create(codec, "r")
    if extradata:
        ctx.extradata = extradata
    ctx.thread_count = 1
    t0 = time.thread_time()
    for p in todo:
        ctx.decode(p)
    return (time.thread_time() - t0) / len(todo) * 1e3


def in_threads(path: str, n: int, threads: int) -> list[float]:
    codec, extradata, todo = packets(path, n)
    out: list[float] = []
    workers = [threading.Thread(target=lambda: out.append(decode_all(codec, extradata, todo))) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return out


def in_processes(path: str, n: int) -> list[float]:
    cmd = [sys.executable, __file__, "--video", path, "--packets", str(n), "--one"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    return [json.loads(p.communicate()[0])[0] for p in procs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--video", required=True, help="an mp4 (its first video stream is decoded)")
    ap.add_argument("--packets", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(in_threads(args.video, args.packets, 1)))
        return
    ways = {
        "alone": lambda: in_threads(args.video, args.packets, 1),
        "threads": lambda: in_threads(args.video, args.packets, 2),
        "processes": lambda: in_processes(args.video, args.packets),
    }
    best: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for way, run in ways.items():
            got = sorted(run())
            if way not in best or sum(got) < sum(best[way]):
                best[way] = got
    alone = best["alone"][0]
    for way, got in best.items():
        slower = "" if way == "alone" else f"  ({sum(got) / len(got) / alone:.2f}x alone)"
        print(f"{way:10} CPU ms per frame: {', '.join(f'{x:.3f}' for x in got)}{slower}")


if __name__ == "__main__":
    main()
