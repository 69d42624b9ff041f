"""The compiled frame cast (``shardstore/_unitfloat.c``) against numpy, its reference, and
``chw_float`` on both paths against torch's ``float() / 255``, LeRobot's own conversion."""

from __future__ import annotations

import numpy as np
import pytest
from ci import in_ci

from shardstore import compiled

torch = pytest.importorskip("torch")
import shardstore.torch as shardstore_torch  # noqa: E402  (after the skip: it needs torch)
from shardstore.episodes.packets import Planes  # noqa: E402

COMPILED = compiled.load("_unitfloat")
if COMPILED is None and in_ci():  # CI installs from a fresh clone with a compiler: it must be there
    raise AssertionError("shardstore._unitfloat was not built (or SHARDSTORE_PURE_PYTHON is set)")
needs_compiled = pytest.mark.skipif(COMPILED is None, reason="shardstore._unitfloat is not built here")


def reference(plane: np.ndarray) -> np.ndarray:
    return plane.astype(np.float32) / np.float32(255)


@needs_compiled
def test_every_value_is_numpys_float32_division() -> None:
    values = np.arange(256, dtype=np.uint8).reshape(16, 16)
    out = np.full((16, 16), np.nan, np.float32)
    COMPILED.unit_float(values, out)
    assert out.tobytes() == reference(values).tobytes()


@needs_compiled
@pytest.mark.parametrize(
    "rows, cols, pad, shift",
    [(224, 224, 32, 0), (7, 13, 3, 0), (1, 1, 0, 0), (5, 100, 28, 1), (3, 47, 0, 3), (64, 16, 0, 2)],
)
def test_padded_rows_odd_widths_and_unaligned_outputs(rows: int, cols: int, pad: int, shift: int) -> None:
    """Rows of a padded buffer (the converter's line size), widths that are no multiple of the
    vector, and outputs that start off a 16-byte boundary (the scalar head and tail)."""
    rng = np.random.default_rng(rows * cols + pad + shift)
    plane = rng.integers(0, 256, (rows, cols + pad), dtype=np.uint8)[:, :cols]
    out = np.full(rows * cols + shift, np.nan, np.float32)[shift:].reshape(rows, cols)
    COMPILED.unit_float(plane, out)
    np.testing.assert_array_equal(out, reference(plane))


@needs_compiled
@pytest.mark.parametrize(
    "src, dst, message",
    [
        (np.zeros((3, 3), np.int16), np.zeros((3, 3), np.float32), "a uint8 source"),
        (np.zeros((3, 3), np.uint8), np.zeros((3, 3), np.float64), "a float32 destination"),
        (np.zeros((3, 3), np.uint8), np.zeros((3, 4), np.float32), "the same shape"),
        (np.zeros((3, 6), np.uint8)[:, ::2], np.zeros((3, 3), np.float32), "contiguous source columns"),
        (np.zeros(9, np.uint8), np.zeros(9, np.float32), "two 2-D buffers"),
        (np.zeros((3, 3), np.uint8), np.zeros((3, 6), np.float32)[:, ::2], "C-contiguous"),
    ],
)
def test_what_it_refuses(src: np.ndarray, dst: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        COMPILED.unit_float(src, dst)


@needs_compiled
def test_a_read_only_output_is_refused() -> None:
    out = np.zeros((2, 2), np.float32)
    out.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        COMPILED.unit_float(np.ones((2, 2), np.uint8), out)
    assert not out.any()


@pytest.mark.parametrize("compiled_cast", [True, False], ids=["compiled", "numpy"])
def test_chw_float_is_lerobots_conversion_on_both_paths(compiled_cast: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Frames as ``Planes`` (padded rows, as the converter gives them), as CHW arrays and as HWC
    arrays: every float equals torch's ``float() / 255`` of the CHW uint8 frames."""
    if compiled_cast and COMPILED is None:
        pytest.skip("shardstore._unitfloat is not built here")
    monkeypatch.setattr(shardstore_torch, "_unitfloat", COMPILED if compiled_cast else None)
    rng = np.random.default_rng(7)
    padded = rng.integers(0, 256, (4, 3, 24, 40), dtype=np.uint8)
    chw = np.ascontiguousarray(padded[..., :30])
    want = torch.from_numpy(chw).float() / 255
    planes = [Planes(*frame) for frame in padded[..., :30]]
    for got in (
        shardstore_torch.chw_float(planes, planar=True),
        shardstore_torch.chw_float(list(chw), planar=True),
        shardstore_torch.chw_float(chw.transpose(0, 2, 3, 1)),
    ):
        assert got.dtype == torch.float32 and got.is_contiguous()
        assert torch.equal(got, want)
    assert torch.equal(shardstore_torch.chw_float(chw[0].transpose(1, 2, 0)), want[0])


def test_pure_python_turns_the_compiled_helpers_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHARDSTORE_PURE_PYTHON", "1")
    assert compiled.load("_unitfloat") is None and compiled.load("_tarwalk") is None
    monkeypatch.setenv("SHARDSTORE_PURE_PYTHON", "0")
    assert (compiled.load("_unitfloat") is None) == (COMPILED is None)
    assert compiled.load("_no_such_helper") is None
