"""JPEG parts decode through simplejpeg when it is installed (shardstore.decode._jpeg): the arrays
must be Pillow's bit for bit (both are libjpeg-turbo with the ISLOW IDCT and fancy upsampling), and
whatever simplejpeg refuses must reach Pillow and behave exactly as before."""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest

from shardstore import decode
from shardstore.decode import decode_part
from shardstore.errors import DecodeError

Image = pytest.importorskip("PIL.Image")
pil_features = pytest.importorskip("PIL.features")
simplejpeg = pytest.importorskip("simplejpeg")


def _picture(h: int = 61, w: int = 77) -> np.ndarray:
    """Odd sizes (partial MCUs at both edges), gradients and noise (every DCT coefficient in use)."""
    y, x = np.mgrid[0:h, 0:w]
    rng = np.random.default_rng(7)
    base = np.stack([(x * 3) % 256, (y * 4) % 256, ((x + y) * 2) % 256], axis=-1) + rng.normal(0, 20, (h, w, 3))
    return np.clip(base, 0, 255).astype(np.uint8)


def _pillow_jpeg(img: np.ndarray, **options: object) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="JPEG", **options)
    return buf.getvalue()


def _pillow_array(data: bytes) -> np.ndarray:
    return np.array(Image.open(io.BytesIO(data)))


PIC = _picture()
CASES = {
    "444 q95": _pillow_jpeg(PIC, subsampling=0, quality=95),
    "422": _pillow_jpeg(PIC, subsampling=1),
    "420 q30": _pillow_jpeg(PIC, subsampling=2, quality=30),
    "progressive": _pillow_jpeg(PIC, progressive=True),
    "optimized, restart markers": _pillow_jpeg(PIC, optimize=True, restart_marker_blocks=2),
    "grey": _pillow_jpeg(PIC[..., 0]),
    "440 (simplejpeg)": simplejpeg.encode_jpeg(PIC, colorsubsampling="440"),
    "411 (simplejpeg)": simplejpeg.encode_jpeg(PIC, colorsubsampling="411"),
    "128x128 camera frame": _pillow_jpeg(_picture(128, 128), quality=90),
}


@pytest.mark.skipif(not pil_features.check_feature("libjpeg_turbo"),
                    reason="Pillow built on IJG libjpeg: its chroma upsampling differs from libjpeg-turbo's")
@pytest.mark.parametrize("name", list(CASES))
def test_jpeg_equals_pillow_bit_for_bit(name: str) -> None:
    data = CASES[name]
    assert decode._jpeg is decode.DEFAULT_DECODERS["jpg"] is decode.DEFAULT_DECODERS["jpeg"]
    assert simplejpeg.decode_jpeg_header(data)[2] in ("YCbCr", "Gray")  # the fast path is the one taken
    got = decode_part("image.jpg", data)
    want = _pillow_array(data)
    assert got.dtype == want.dtype == np.uint8 and got.shape == want.shape
    assert np.array_equal(got, want)
    assert got.flags.writeable and got.flags.c_contiguous
    got[0, 0] = 0  # torch.as_tensor and in-place transforms take it


def test_what_simplejpeg_refuses_goes_to_pillow() -> None:
    # CMYK: Pillow's conversion to RGB, as before
    buf = io.BytesIO()
    Image.fromarray(PIC).convert("CMYK").save(buf, format="JPEG")
    cmyk = buf.getvalue()
    assert np.array_equal(decode_part("a.jpg", cmyk), np.array(Image.open(io.BytesIO(cmyk)).convert("RGB")))
    # junk before the EOI marker: libjpeg warns, simplejpeg's strict mode refuses, Pillow decodes
    good = CASES["422"]
    padded = good[:-2] + b"\x00\x00\x00" + good[-2:]
    assert np.array_equal(decode_part("a.jpg", padded), _pillow_array(padded))
    # a PNG under a JPEG name decodes as the PNG it is
    png = io.BytesIO()
    Image.fromarray(PIC).save(png, format="PNG")
    assert np.array_equal(decode_part("a.jpeg", png.getvalue()), PIC)
    # a truncated JPEG is Pillow's error, typed and naming the member
    with pytest.raises(DecodeError, match=r"shard\.tar, member 'k1\.a\.jpg': cannot decode as \.jpg: OSError: image file is truncated"):
        decode_part("a.jpg", good[: len(good) // 2], where="shard.tar", key="k1")


def test_without_simplejpeg_pillow_decodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "simplejpeg", None)  # what `import simplejpeg` meets when it is absent
    decode._simplejpeg.cache_clear()
    try:
        assert decode._simplejpeg() is None
        for name in ("420 q30", "grey"):
            assert np.array_equal(decode_part("x.jpg", CASES[name]), _pillow_array(CASES[name]))
    finally:
        decode._simplejpeg.cache_clear()
