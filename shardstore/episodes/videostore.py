"""Write a video store: the video files of an episode dataset whole, as members of tar shards in a
prepared dataset (``video.VIDEO_STORE`` of the episode dataset), with their packet index.

An import fills one from the source's files; an edit from the kept files of its inputs (copied
byte for byte, their packet indexes carried over: a member's packets lie at the same offsets of
its bytes wherever the member is). ``video.VideoStore`` reads it.
"""

from __future__ import annotations

import functools
import os
import tarfile
from collections.abc import Callable, Mapping, Sequence
from typing import IO

from .packets import PACKETS_FILE, PacketIndex, index_packets, save_packets
from .video import VideoStore

__all__ = ["VIDEO_SHARD_SIZE", "write_video_store"]

#: A video store's shards are closed past this size (a video file is never split).
VIDEO_SHARD_SIZE = 1 << 30


def write_video_store(
    files: Mapping[str, Callable[[], IO[bytes]]],
    names: Sequence[str],
    root: str,
    packets: Mapping[str, PacketIndex] | None = None,
) -> int:
    """The files ``names`` (opened by ``files[name]()``) whole as members of tar shards under
    ``root``, prepared, with their packet index (``packets.npz``: ``packets`` when given, which
    must describe the same bytes, else each file indexed from the member just written; files
    that do not qualify left out); returns their bytes."""
    from ..prepare import prepare

    os.makedirs(root)
    shard, size, number, total = None, 0, -1, 0
    try:
        for name in names:
            if shard is None or size >= VIDEO_SHARD_SIZE:
                if shard is not None:
                    shard.close()
                number += 1
                shard = tarfile.open(
                    os.path.join(root, f"videos-{number:06d}.tar"), "w", format=tarfile.PAX_FORMAT
                )
                size = 0
            with files[name]() as f:
                f.seek(0, os.SEEK_END)
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode = f.tell(), 0, 0o644
                f.seek(0)
                shard.addfile(info, f)
            size += info.size
            total += info.size
    finally:
        if shard is not None:
            shard.close()
    prepare(root, split_ratio="1,0,0", sample_type="CrudeWebdataset")
    if packets is None:
        # indexed from the members just written (local, and what readers will read), not the source
        store = VideoStore(root, names)
        found = {name: index_packets(functools.partial(store.open, name), name) for name in names}
        packets = {n: i for n, i in found.items() if i is not None}
    save_packets({n: packets[n] for n in names if n in packets}, os.path.join(root, PACKETS_FILE))
    return total
