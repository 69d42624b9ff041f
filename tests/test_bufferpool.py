"""bufferpool: a buffer goes back to the pool only when no array or tensor over it is left."""

from __future__ import annotations

import gc

import numpy as np

from shardstore.bufferpool import SMALLEST, BufferPool


def test_buffer_comes_back_after_the_last_view() -> None:
    pool = BufferPool(np.float32, limit=64 * SMALLEST)
    shape = (4, SMALLEST // 4)  # 4 x SMALLEST bytes of float32
    a = pool.take(shape)
    a[...] = 1.0
    view = a[1:]  # numpy's view points past ``a``: it must still hold the buffer
    del a
    gc.collect()
    assert pool.kept == 0
    b = pool.take(shape)
    b[...] = 2.0
    assert (view == 1.0).all()  # not handed out again while the view lives
    del view, b
    gc.collect()
    assert pool.kept == 2 * 4 * SMALLEST


def test_freed_buffer_is_reused_and_the_limit_holds() -> None:
    pool = BufferPool(np.float32, limit=4 * SMALLEST)
    shape = (SMALLEST // 4, 4)
    first = pool.take(shape)
    address = first.__array_interface__["data"][0]
    del first
    again = pool.take(shape)
    assert again.__array_interface__["data"][0] == address and again.shape == shape and again.flags.writeable
    many = [pool.take(shape) for _ in range(8)]
    del again, many
    gc.collect()
    assert pool.kept <= 4 * SMALLEST


def test_torch_tensor_holds_its_buffer() -> None:
    import pytest

    torch = pytest.importorskip("torch")
    pool = BufferPool(np.float32)
    t = torch.from_numpy(pool.take((2, SMALLEST))).movedim(-1, -2)
    gc.collect()
    assert pool.kept == 0
    del t
    gc.collect()
    assert pool.kept == 2 * SMALLEST * 4


def test_small_arrays_are_left_to_malloc() -> None:
    pool = BufferPool(np.float32)
    small = pool.take((16,))
    del small
    assert pool.kept == 0


def test_a_full_pool_makes_room_for_the_size_given_back_lately() -> None:
    """A loader that moves from one window size to another (history to policy windows, train to
    eval) keeps buffers of the new size: the old size's give way, least lately given back first."""
    pool = BufferPool(np.float32, limit=8 * SMALLEST)
    big, small = (4, SMALLEST // 4), (2, SMALLEST // 4)  # 4 and 2 x SMALLEST bytes
    olds = [pool.take(big) for _ in range(2)]
    del olds
    gc.collect()
    assert pool.kept == 8 * SMALLEST  # full of the big size
    news = [pool.take(small) for _ in range(3)]
    addresses = {a.__array_interface__["data"][0] for a in news}
    del news
    gc.collect()
    assert pool.kept <= 8 * SMALLEST
    again = [pool.take(small) for _ in range(3)]
    assert {a.__array_interface__["data"][0] for a in again} == addresses  # all three kept, reused
    assert pool.kept == 0  # both big buffers gave way to the three small ones
    too_big = pool.take((9, SMALLEST // 4))
    del again
    gc.collect()
    del too_big
    gc.collect()
    assert pool.kept == 6 * SMALLEST  # the one over the limit was not kept, nor made room for
