"""``safepickle``: numpy and builtins load, anything else is refused by name before it runs; the
classes of a pickle are listed without loading it; ``decode``'s pickle opt-in goes through it."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from shardstore import safepickle
from shardstore.decode import decode_part
from shardstore.errors import DecodeError, PickleNotAllowedError, UnsafePickleError

ROOT = Path(__file__).resolve().parents[1]


class _System:
    """Unpickling this calls ``os.system(command)``: what a hostile dataset would ship."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (self.command,))


class EnvSpec:
    """A class of this test's own, as the research metadata pickles classes of their code."""

    def __init__(self) -> None:
        self.shape = (3, 8, 8)


VALUES = [
    np.arange(12, dtype=np.float32).reshape(3, 4),
    np.zeros((2, 2), dtype=[("a", "<i4"), ("b", "<f8")]),
    np.array(["ab", "c"]),
    np.arange(6)[::2],  # not contiguous
    np.bool_(True),
    np.float64(1.5),
    np.int16(-3),
    np.dtype(">u2"),
    {"a": [1, 2.5, "x", b"y", None, True], "b": (1, {2, 3}, frozenset({4}))},
    bytearray(b"raw"),
    complex(1, 2),
]


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_numpy_and_builtins_load_exactly(protocol: int) -> None:
    for value in VALUES:
        got = safepickle.loads(pickle.dumps(value, protocol=protocol))
        if isinstance(value, np.ndarray):
            assert got.dtype == value.dtype and got.shape == value.shape and np.array_equal(got, value)
        else:
            assert got == value and type(got) is type(value)


def test_os_system_is_refused_by_name_and_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    data = pickle.dumps(_System(f"touch {marker}"), protocol=2)
    with pytest.raises(UnsafePickleError) as info:
        safepickle.loads(data)
    assert not marker.exists()
    assert f"{os.system.__module__}.system" in str(info.value)  # posix.system on Linux
    assert "byte " in str(info.value)
    assert isinstance(info.value, PickleNotAllowedError)  # callers catching the opt-in error catch it


@pytest.mark.parametrize("target", [eval, getattr, open, __import__])
def test_dangerous_builtins_are_refused(target: object) -> None:
    class Call:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (target, ("1",))

    with pytest.raises(UnsafePickleError, match=f"{target.__module__}.{target.__name__}"):  # type: ignore[attr-defined]
        safepickle.loads(pickle.dumps(Call()))


def test_foreign_classes_are_listed_without_loading() -> None:
    meta = {"spec": EnvSpec(), "obs": np.zeros(3), "cfg": {"task": "x"}}
    for protocol in (2, 4, 5):
        data = pickle.dumps(meta, protocol=protocol)
        names = [g.qualname for g in safepickle.pickle_globals(data)]
        assert f"{__name__}.EnvSpec" in names and "numpy.ndarray" in names or "numpy._core.numeric._frombuffer" in names
        assert safepickle.foreign_globals(data) == [f"{__name__}.EnvSpec"]
        with pytest.raises(UnsafePickleError, match="EnvSpec"):
            safepickle.loads(data)


def test_not_a_pickle() -> None:
    with pytest.raises(DecodeError):
        safepickle.loads(pickle.dumps(np.arange(100))[:-20])
    with pytest.raises(DecodeError):
        safepickle.pickle_globals(b"\x80\x04garbage")


def test_decode_opt_in_goes_through_the_restricted_unpickler(tmp_path: Path) -> None:
    assert np.array_equal(decode_part("obs.pickle", pickle.dumps(np.arange(3)), allow_pickle=True), np.arange(3))
    marker = tmp_path / "ran"
    with pytest.raises(UnsafePickleError) as info:
        decode_part("x.pyd", pickle.dumps(_System(f"touch {marker}")), allow_pickle=True, where="s.tar", key="k")
    assert not marker.exists()
    assert info.value.path == "s.tar" and info.value.member == "k.x.pyd"
    # a caller who trusts the data more says so with its own decoder
    assert decode_part("x.pyd", pickle.dumps(EnvSpec()), {"pyd": pickle.loads}).shape == (3, 8, 8)


def test_pickles_written_by_numpy_1_load() -> None:
    """Research data was pickled by numpy 1.x, whose reconstruct functions live in ``numpy.core``
    (protocol 2 names globals as text, so the module can be renamed in place)."""
    for value in (np.arange(3.0), np.float32(2), np.bool_(True)):
        old = pickle.dumps(value, protocol=2).replace(b"numpy._core", b"numpy.core")
        assert b"numpy._core" not in old
        got = safepickle.loads(old)
        assert type(got) is type(value) and np.array_equal(got, value)


class _Calls:
    """Pickles as a call of ``func`` with ``args``: what a hostile pickle can ask for."""

    def __init__(self, func: object, *args: object) -> None:
        self.func, self.args = func, args

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (self.func, self.args)


@pytest.mark.parametrize(
    "bomb",
    [
        _Calls(bytearray, 2_500_000_000),
        _Calls(bytes, 1 << 40),
        _Calls(list, range(10**9)),
        _Calls(np.ndarray, (100_000, 100_000), "f8"),
        _Calls(np.dtype, "V2000000000"),
    ],
    ids=["bytearray", "bytes", "list-of-range", "ndarray", "dtype"],
)
def test_loads_refuses_to_build_more_than_the_pickle_carries(bomb: _Calls) -> None:
    data = pickle.dumps(bomb, protocol=4)
    assert len(data) < 200
    with pytest.raises(UnsafePickleError, match="refused, nothing built"):
        safepickle.loads(data)


def test_loads_still_builds_what_the_pickle_carries() -> None:
    value = {"big": np.arange(300_000, dtype=np.float64), "buf": bytearray(b"x" * 2_000_000), "r": list(range(10))}
    for protocol in (2, 4, 5):
        got = safepickle.loads(pickle.dumps(value, protocol=protocol))
        assert got["buf"] == value["buf"] and got["r"] == value["r"]
        np.testing.assert_array_equal(got["big"], value["big"])


@pytest.mark.parametrize("protocol", [2, 4, 5])
@pytest.mark.parametrize("value", [True, False, np.bool_(True), np.bool_(False), np.array([True]), np.array(False)])
def test_read_flag_reads_a_pickled_bool_without_unpickling(value: object, protocol: int) -> None:
    assert safepickle.read_flag(pickle.dumps(value, protocol=protocol)) is bool(value)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (_Calls(bytearray, 2_500_000_000), UnsafePickleError),
        (_Calls(os.system, "echo pwned"), UnsafePickleError),
        (np.array([True, False]), DecodeError),
        (np.int8(1), DecodeError),
        (1, DecodeError),
        (np.zeros(2000, bool), DecodeError),
    ],
    ids=["bytearray", "system", "two-bools", "int8", "int", "too-long"],
)
def test_read_flag_refuses_anything_else(value: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        safepickle.read_flag(pickle.dumps(value, protocol=4))


#: Pickles of a few bytes whose stated numbers make the C unpickler allocate before it reads: a
#: byte string's length (BINBYTES8, BINBYTES, BYTEARRAY8, BINUNICODE8) and a memo index it grows
#: its memo array to (LONG_BINPUT, PUT). Each is answered with a DecodeError naming the opcode.
_LYING = {
    "BINBYTES8": b"\x80\x04\x8e" + (1 << 40).to_bytes(8, "little") + b"ab.",
    "BINBYTES": b"\x80\x03B" + (1 << 31).to_bytes(4, "little") + b"ab.",
    "BYTEARRAY8": b"\x80\x05\x96" + (1 << 40).to_bytes(8, "little") + b"ab.",
    "BINUNICODE8": b"\x80\x04\x8d" + (1 << 40).to_bytes(8, "little") + b"ab.",
    "LONG_BINPUT": b"\x80\x02Nr" + (1 << 31).to_bytes(4, "little") + b".",
    "PUT": b"\x80\x02Np99999999999\n.",
}

_UNDER_LIMIT = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from shardstore import safepickle
from shardstore.errors import DecodeError
out = {}
for name, hexed in json.loads(sys.argv[1]).items():
    for f in (safepickle.loads, safepickle.read_flag):
        try:
            f(bytes.fromhex(hexed))
            out[f"{name} {f.__name__}"] = "loaded"
        except DecodeError as e:
            out[f"{name} {f.__name__}"] = str(e)
print(json.dumps(out))
"""


def test_lying_lengths_and_memo_indices_are_refused_before_any_allocation() -> None:
    """Under 1 GB of address space: a MemoryError (the C unpickler's allocation) would end the
    child with a traceback instead of printing the errors."""
    res = subprocess.run(
        [sys.executable, "-c", _UNDER_LIMIT, json.dumps({k: v.hex() for k, v in _LYING.items()})],
        capture_output=True, text=True, timeout=60, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout)
    for name in _LYING:
        for f in ("loads", "read_flag"):
            assert name in out[f"{name} {f}"] and "not a pickle" in out[f"{name} {f}"], out[f"{name} {f}"]


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5])
def test_every_protocol_passes_the_layout_walk(protocol: int) -> None:
    """The walk reads each protocol's opcodes as the unpickler does (text lines, counted strings,
    frames, memo puts), so honest pickles of every protocol still load."""
    value = {"a": np.arange(5.0), "s": "x" * 300, "b": b"y" * 70_000, "n": [None, 1.5, -(10**30)], "t": (1, 1, 1)}
    got = safepickle.loads(pickle.dumps(value, protocol=protocol))
    assert got["s"] == value["s"] and got["b"] == value["b"] and got["n"] == value["n"] and got["t"] == value["t"]
    np.testing.assert_array_equal(got["a"], value["a"])
