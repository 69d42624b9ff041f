"""Large numpy arrays handed out and taken back: frames as float32 without a page fault per page.

A 16-frame 224x224 history window is 9.6 MB of float32 per camera. glibc gives an allocation that
large fresh pages from the kernel (``mmap``) and hands them back on ``free`` (or trims the heap
past its threshold), so every item's output pays a page fault and the kernel's zeroing per 4 KiB:
measured on a 16-frame window, that took 5 ms of CPU where filling the same floats into memory
already touched took 1.4 ms, and on a busy machine the faults cost the loader half its wall time.

``BufferPool.take(shape)`` gives a new C-contiguous array over a buffer of the pool; when the last
reference to that array goes (the tensor ``torch.from_numpy`` made of it, and every view of either),
a finalizer puts the buffer back, for the next item of the same size. Buffers nobody uses cost no
more than ``limit`` bytes: a buffer given back to a full pool makes room by letting go of the buffers of
the size given back least lately (a loader that moves from 16-frame windows to 2-frame ones keeps the
new size, not 600 MB of the old one). One pool per process (DataLoader workers each fill their own);
thread-safe.
"""

from __future__ import annotations

import math
import os
import threading
import weakref
from collections import OrderedDict

import numpy as np

__all__ = ["BufferPool", "FRAMES"]

#: Free bytes a pool keeps at most (``SHARDSTORE_BUFFER_POOL_MB``): a batch of 32 16-frame windows
#: of two 224x224 cameras is 600 MB of floats, freed when the DataLoader has collated it; what is
#: kept is what the next batch takes, so the pool holds no more than the batches use at once.
LIMIT = int(float(os.environ.get("SHARDSTORE_BUFFER_POOL_MB", "640")) * 2**20)
#: Below this, malloc's own free lists serve as well (glibc maps anything from 128 KiB on afresh
#: until a free raises its threshold, and a batch keeps many alive: one 224x224 frame is 600 KB).
SMALLEST = 128 << 10


class BufferPool:
    """Arrays of a dtype over buffers taken back when their arrays are freed."""

    def __init__(self, dtype: type | np.dtype = np.float32, limit: int = LIMIT) -> None:
        self.dtype = np.dtype(dtype)
        self.limit = limit
        self._free: OrderedDict[int, list[np.ndarray]] = OrderedDict()  # per size, the one given back last at the end
        self._kept = 0
        self._lock = threading.Lock()
        self._pid = os.getpid()

    @property
    def kept(self) -> int:
        """Free bytes the pool holds now."""
        return self._kept

    def take(self, shape: tuple[int, ...]) -> np.ndarray:
        """A new array of ``shape`` (contents undefined, as ``np.empty``'s)."""
        count = math.prod(shape)
        if count * self.dtype.itemsize < SMALLEST:
            return np.empty(shape, self.dtype)
        buf = None
        with self._lock:
            if self._pid != os.getpid():  # a forked child: the parent's arrays are not its own
                self._free, self._kept, self._pid = OrderedDict(), 0, os.getpid()
            free = self._free.get(count)
            if free:
                buf = free.pop()
                self._kept -= buf.nbytes
        if buf is None:
            buf = np.empty(count, self.dtype)
        lease = _Lease(buf, shape)
        weakref.finalize(lease, self._give, buf, os.getpid())
        return np.asarray(lease)

    def _give(self, buf: np.ndarray, pid: int) -> None:
        with self._lock:
            if pid != self._pid or buf.nbytes > self.limit:
                return
            while self._kept + buf.nbytes > self.limit:  # room made by the size given back least lately
                size, bufs = next(iter(self._free.items()))
                self._kept -= bufs.pop().nbytes
                if not bufs:
                    del self._free[size]
            self._free.setdefault(buf.size, []).append(buf)
            self._free.move_to_end(buf.size)
            self._kept += buf.nbytes


class _Lease:
    """What the arrays handed out stand on: numpy's views of an array over an ndarray point to that
    ndarray and would outlive a finalizer on the array itself; over this object they keep it (and
    so the buffer's place out of the pool) alive until the last view goes."""

    __slots__ = ("buf", "__array_interface__", "__weakref__")

    def __init__(self, buf: np.ndarray, shape: tuple[int, ...]) -> None:
        self.buf = buf
        self.__array_interface__ = {**buf.__array_interface__, "shape": shape, "strides": None}


#: The pool of decoded frames as float32 (``torch.chw_float``).
FRAMES = BufferPool(np.float32)
