"""A shard's fingerprint: a hash of its bytes at a sample of its index's offsets, kept at prepare.

A copy (``cp -r``, ``scp``, ``aws s3 sync``, a download) gives every shard a new mtime (or, between
object stores, possibly a new ETag) without changing a byte; a same-size rewrite in place changes
the bytes and the mtime. The stamp alone cannot tell the two apart, so prepare records, beside the
stamp in ``shardstore.json`` (shardstore's own file, never Energon's tables), a hash of the first
``SPAN`` bytes (the tar headers) of up to ``SAMPLES`` samples spread over the shard, at the offsets of
its ``.tar.idx``. When a reader finds the stamp changed it reads those few ranges once per shard
(one batched read) and goes on if they still hash the same; a rewrite that moves, renames or
resizes members changes the headers there and is refused, as ratarmount validates an index on
mount by looking at a few of its members' headers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np

from .storage import ByteRange, Storage

__all__ = ["SAMPLES", "SPAN", "SCHEME", "sample_ranges", "fingerprints", "matches"]

#: How many samples of a shard are looked at, spread evenly from the first to the last.
SAMPLES = 16
#: Bytes hashed from each sample's first header on (its header, and a GNU/PAX extension's data).
SPAN = 1024
#: Names how a fingerprint was taken; a recorded one of another scheme is not compared.
SCHEME = f"b2-{SAMPLES}x{SPAN}"


def sample_ranges(offsets: np.ndarray) -> list[ByteRange]:
    """The ranges hashed for a shard whose ``.tar.idx`` is ``offsets`` (count + 1 values): from
    each sampled sample's first header, ``SPAN`` bytes or to the next sample, whichever is less."""
    count = len(offsets) - 1
    if count <= 0:
        return []
    picks = sorted({int(round(x)) for x in np.linspace(0, count - 1, min(count, SAMPLES))})
    return [ByteRange(int(offsets[i]), min(SPAN, int(offsets[i + 1]) - int(offsets[i]))) for i in picks]


def _digest(chunks: Sequence[bytes]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for chunk in chunks:
        h.update(len(chunk).to_bytes(8, "little"))
        h.update(chunk)
    return f"{SCHEME}:{h.hexdigest()}"


def fingerprints(storage: Storage, ranges: Mapping[str, Sequence[ByteRange]]) -> dict[str, str]:
    """Shard -> its fingerprint, for the shards of ``ranges`` (``sample_ranges`` of each), all
    read in one batch (concurrent range requests on object stores)."""
    requests = [(shard, rng) for shard, rngs in ranges.items() for rng in rngs]
    datas = iter(storage.read_ranges(requests)) if requests else iter(())
    return {shard: _digest([next(datas) for _ in rngs]) for shard, rngs in ranges.items()}


def matches(storage: Storage, shard: str, offsets: np.ndarray, recorded: object) -> bool | None:
    """Whether ``shard``'s bytes at its sampled offsets still hash to the ``recorded`` fingerprint;
    None when there is none of this scheme to compare (a dataset prepared before fingerprints)."""
    if not isinstance(recorded, str) or not recorded.startswith(SCHEME + ":"):
        return None
    return fingerprints(storage, {shard: sample_ranges(offsets)})[shard] == recorded
