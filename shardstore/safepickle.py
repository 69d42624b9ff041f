"""Pickles from untrusted data: a restricted unpickler, and the classes a pickle names, read
without loading it.

``pickle.loads`` calls whatever callable the data names (``os.system`` with a command is three
opcodes), so a dataset's pickles are never loaded by default. With the opt-in (``allow_pickle=True``,
``--allow-pickle``) they go through ``loads`` here, whose ``find_class`` resolves only what numpy
arrays, scalars and dtypes pickle into (the reconstruct functions numpy's own ``__reduce__`` names)
and Python's plain builtin types; any other global (a gym space, ``os.system``, ``builtins.eval``)
is refused with an ``UnsafePickleError`` naming it and where in the pickle it was, before anything
is called.

``pickle_globals`` walks the opcodes (as ``pickletools`` does) and lists every class or function a
pickle refers to, without loading anything: that is how a research metadata pickle full of classes
of foreign code is described (``foreign_globals``) when it cannot be loaded at all.
"""

from __future__ import annotations

import _compat_pickle
import io
import pickle
import pickletools
from dataclasses import dataclass
from typing import Any

from .errors import DecodeError, UnsafePickleError

__all__ = ["ALLOWED_GLOBALS", "BUILD_SLACK", "PickleGlobal", "foreign_globals", "loads", "pickle_globals", "read_flag"]

_NUMPY_CORE = ("numpy.core", "numpy._core")  # numpy 1.x wrote numpy.core, numpy 2.x numpy._core

#: ``(module, name)`` pairs the restricted unpickler resolves: numpy's reconstruct functions and
#: types, ``_codecs.encode`` (protocol 2 pickles carry array bytes through it) and builtin types that
#: build plain values. No function that reaches outside its arguments (no eval, getattr, open).
ALLOWED_GLOBALS: frozenset[tuple[str, str]] = frozenset(
    {("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}
    | {(f"{core}.multiarray", name) for core in _NUMPY_CORE for name in ("_reconstruct", "scalar")}
    | {(f"{core}.numeric", "_frombuffer") for core in _NUMPY_CORE}
    | {
        ("builtins", name)
        for name in (
            "bool", "int", "float", "complex", "str", "bytes", "bytearray",
            "list", "tuple", "dict", "set", "frozenset", "slice", "range",
        )
    }
)

_STRING_OPS = frozenset({"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING", "SHORT_BINSTRING"})
_GET_OPS = frozenset({"GET", "BINGET", "LONG_BINGET"})
_PUT_OPS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})


@dataclass(frozen=True, slots=True)
class PickleGlobal:
    """A class or function a pickle names: its module, name and the byte of the opcode naming it."""

    module: str
    name: str
    pos: int

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.name}"

    @property
    def allowed(self) -> bool:
        return _canonical(self.module, self.name) in ALLOWED_GLOBALS


def _canonical(module: str, name: str) -> tuple[str, str]:
    """Python 3's name for a global a protocol 0-2 pickle names by its Python 2 name
    (``__builtin__.set`` -> ``builtins.set``), as ``Unpickler(fix_imports=True)`` resolves it."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        return _compat_pickle.NAME_MAPPING[(module, name)]
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


def pickle_globals(data: bytes) -> list[PickleGlobal]:
    """Every ``GLOBAL`` / ``STACK_GLOBAL`` of a pickle in order, found by walking its opcodes.

    Nothing is loaded or called. ``STACK_GLOBAL`` takes its module and name from the two strings
    pushed before it (directly or from the memo, as pickle writes them). Raises ``DecodeError`` for
    bytes that are not a pickle.
    """
    found: list[PickleGlobal] = []
    stack: list[Any] = []  # the strings pushed so far (None for anything else): enough for names
    memo: dict[Any, Any] = {}
    try:
        for op, arg, pos in pickletools.genops(data):
            name = op.name
            if name == "GLOBAL":
                text, _, attr = str(arg).partition(" ")
                found.append(PickleGlobal(text, attr, pos or 0))
                stack.append(None)
            elif name == "STACK_GLOBAL":
                pair = (stack[-2], stack[-1]) if len(stack) >= 2 else (None, None)
                found.append(PickleGlobal(str(pair[0]), str(pair[1]), pos or 0))
                del stack[-2:]
                stack.append(None)
            elif name in _STRING_OPS:
                stack.append(arg)
            elif name in _GET_OPS:
                stack.append(memo.get(arg))
            elif name in _PUT_OPS:
                memo[arg] = stack[-1] if stack else None
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1] if stack else None
            elif name not in ("PROTO", "FRAME", "STOP"):
                stack.append(None)
    except (ValueError, EOFError) as e:
        raise DecodeError(f"not a pickle: {e}") from e
    return found


def foreign_globals(data: bytes) -> list[str]:
    """The names (``module.name``) of the classes and functions a pickle refers to that the
    restricted unpickler would refuse, each once, in order of appearance."""
    seen: dict[str, None] = {}
    for g in pickle_globals(data):
        if not g.allowed:
            seen.setdefault(g.qualname, None)
    return list(seen)


#: What a pickle may build beyond its own bytes: an array or a ``bytearray(n)`` is as big as the
#: pickle that carries its bytes, plus this much (an empty array's header, small ranges).
BUILD_SLACK = 1 << 20
class _Checked:
    """An allowed global that can ask for more than a pickle carries (``bytes(1 << 40)``, a
    ``range`` that ``list`` expands, an array shape, a wide dtype), as the unpickler calls it: its
    arguments checked first, the dtype it returns after. Not a type, so ``NEWOBJ`` (which would
    skip the check) refuses it; numpy and the builtins never pickle through ``NEWOBJ``. As the first
    argument of a call (``_reconstruct(ndarray, ...)``) it is given as what it wraps."""

    __slots__ = ("func", "limit", "check")

    def __init__(self, func: Any, limit: int, check: Any) -> None:
        self.func = func
        self.limit = limit
        self.check = check

    def __call__(self, *args: Any) -> Any:
        if args and type(args[0]) is _Checked:
            args = (args[0].func, *args[1:])
        self.check(self.func, args, self.limit)
        out = self.func(*args)
        if self.check is _check_dtype and out.itemsize > self.limit:
            raise _TooBig(self.func, out.itemsize, self.limit)
        return out



class _Restricted(pickle.Unpickler):
    """The C unpickler resolving only ``ALLOWED_GLOBALS``, each call checked (``_Checked``). It
    allocates by two numbers a pickle states before reading what they describe (a byte string's
    length, a memo index), so it is given only pickles ``_check_layout`` has walked."""

    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self.limit = len(data) + BUILD_SLACK

    def find_class(self, module: str, name: str) -> Any:
        found = _RESOLVED.get((module, name))
        if found is None:
            key = _canonical(module, name)
            if key not in ALLOWED_GLOBALS:
                raise _Refused(module, name)
            found = _RESOLVED[module, name] = super().find_class(module, name), _CHECKS.get(key)
        return found[0] if found[1] is None else _Checked(found[0], self.limit, found[1])


#: ``(module, name)`` as a pickle names it -> (the allowed global, its check or None): resolved once
#: per process (a step's pickles name the same few, ten thousand times an episode).
_RESOLVED: dict[tuple[str, str], tuple[Any, Any]] = {}


_FIXED, _LINES, _COUNTED = 0, 1, 2


def _layouts() -> list[tuple[int, int, bool, str] | None]:
    """Per opcode byte, how its argument is laid out, from the standard library's description of
    the pickle format: (``_FIXED``, bytes), (``_LINES``, newline-ended lines) or (``_COUNTED``,
    bytes of the length, signed or not) and that many bytes; ``None`` for a byte that is no opcode."""
    widths = {pickletools.TAKEN_FROM_ARGUMENT1: 1, pickletools.TAKEN_FROM_ARGUMENT4: 4,
              pickletools.TAKEN_FROM_ARGUMENT4U: 4, pickletools.TAKEN_FROM_ARGUMENT8U: 8}
    out: list[tuple[int, int, bool, str] | None] = [None] * 256
    for op in pickletools.opcodes:
        arg, code = op.arg, ord(op.code)
        if arg is None:
            out[code] = (_FIXED, 0, False, op.name)
        elif arg.n >= 0:
            out[code] = (_FIXED, arg.n, False, op.name)
        elif arg.n == pickletools.UP_TO_NEWLINE:
            out[code] = (_LINES, 2 if arg.name == "stringnl_noescape_pair" else 1, False, op.name)
        else:
            out[code] = (_COUNTED, widths[arg.n], arg.n == pickletools.TAKEN_FROM_ARGUMENT4, op.name)
    return out


_LAYOUTS = _layouts()
_STOP, _PUT, _BINPUT, _LONG_BINPUT = (ord(c) for c in (pickle.STOP, pickle.PUT, pickle.BINPUT, pickle.LONG_BINPUT))
#: Per opcode byte, how far to step over an opcode with a fixed argument that needs no look (most
#: of them); 0 for the others (``STOP``, memo puts, counted and text arguments, no opcode).
_PLAIN = [1 + lay[1] if lay and lay[0] == _FIXED and code not in (_STOP, _BINPUT, _LONG_BINPUT) else 0
          for code, lay in enumerate(_LAYOUTS)]


def _check_layout(data: bytes) -> None:
    """Walk a pickle's opcodes without building anything: every stated length must fit in the
    bytes left, every memo index under the pickle's size, and the opcodes must end with ``STOP``.

    What makes the C unpickler safe on hostile bytes: it allocates a byte string's stated length
    and grows its memo to a stated index before reading, so ten bytes could ask for a terabyte.
    Raises ``DecodeError`` naming the opcode and its byte. (Hot: one pass per pickled step part.)
    """
    end, pos, layouts, plain = len(data), 0, _LAYOUTS, _PLAIN
    while pos < end:
        at, code = pos, data[pos]
        step = plain[code]
        if step:
            pos += step
            continue
        layout = layouts[code]
        if layout is None:
            raise DecodeError(f"not a pickle: unknown opcode {bytes([code])!r} at byte {at}")
        kind, width, signed, name = layout
        pos += 1
        if kind == _FIXED:
            if code == _STOP:
                return
            if code == _BINPUT or code == _LONG_BINPUT:
                _memo_index(int.from_bytes(data[pos:pos + width], "little"), name, at, end)
            pos += width
        elif kind == _COUNTED:
            size = int.from_bytes(data[pos:pos + width], "little", signed=signed)
            pos += width
            if not 0 <= size <= end - pos:
                raise DecodeError(f"not a pickle: {name} at byte {at} states {size} bytes where {max(end - pos, 0)} are left")
            pos += size
        else:
            for _ in range(width):
                eol = data.find(b"\n", pos)
                if eol < 0:
                    raise DecodeError(f"not a pickle: {name} at byte {at} has no end of line")
                if code == _PUT:
                    _memo_index(_decimal(data[pos:eol], name, at), name, at, end)
                pos = eol + 1
    raise DecodeError(f"not a pickle: it ends at byte {end} before its STOP")


def _decimal(raw: bytes, name: str, at: int) -> int:
    try:
        return int(raw)
    except ValueError:
        raise DecodeError(f"not a pickle: {name} at byte {at} has no index") from None


def _memo_index(index: int, name: str, at: int, size: int) -> None:
    """A memo index past the pickle's size is a lie (a pickle stores fewer objects than bytes)."""
    if not 0 <= index <= size:
        raise DecodeError(f"not a pickle: {name} at byte {at} stores at {index}, past its {size} bytes")


def _qualname(func: Any) -> str:
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__name__', type(func).__name__)}"


def _check_sizes(func: Any, args: tuple[Any, ...], limit: int) -> None:
    """``bytes(n)``, ``bytearray(n)``, ``range(a, b)``: an integer argument is a size."""
    for a in args:
        _check_size(a, func, limit)


def _check_shape(func: Any, args: tuple[Any, ...], limit: int) -> None:
    """``ndarray(shape, dtype)``, ``_reconstruct(cls, shape, dtype)``: the array they allocate."""
    _check_sizes(func, args, limit)
    pos = 1 if getattr(func, "__name__", "") == "_reconstruct" else 0
    shape = args[pos] if len(args) > pos else ()
    shape = shape if isinstance(shape, tuple | list) else (shape,)
    count = 1
    for n in shape:
        count *= int(n) if isinstance(n, int) else 1
    width = _itemsize(args[pos + 1] if len(args) > pos + 1 else "f8") if count else 0
    if count * width > limit:
        raise _TooBig(func, count * width, limit)


def _check_dtype(func: Any, args: tuple[Any, ...], limit: int) -> None:
    """A dtype is checked once made (its width: ``V2000000000``), by ``_Checked``."""


#: The allowed globals that a call can make build more than the pickle carries, and their checks;
#: the others (numpy's scalar and buffer readers, ``_codecs.encode``, containers, numbers, strings)
#: build at most what their arguments hold, and a container's only lazy argument is a ``range``.
_CHECKS = {
    ("builtins", "bytes"): _check_sizes, ("builtins", "bytearray"): _check_sizes, ("builtins", "range"): _check_sizes,
    ("numpy", "ndarray"): _check_shape, ("numpy", "dtype"): _check_dtype,
    **{(f"{core}.multiarray", "_reconstruct"): _check_shape for core in _NUMPY_CORE},
}


def _itemsize(spec: Any) -> int:
    """Bytes per element of a dtype argument (8 when it names none numpy knows)."""
    import numpy as np

    if isinstance(spec, bytes):
        spec = spec.decode("latin1")
    if not isinstance(spec, str | np.dtype):
        return 8
    try:
        return max(np.dtype(spec).itemsize, 1)
    except TypeError:
        return 8


def _check_size(value: Any, func: Any, limit: int) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > limit:
        raise _TooBig(func, abs(value), limit)
    if isinstance(value, range) and len(value) > limit:
        raise _TooBig(func, len(value), limit)
    if isinstance(value, tuple | list) and len(value) <= 64:
        for v in value:
            if isinstance(v, int | range) and not isinstance(v, bool):
                _check_size(v, func, limit)


class _TooBig(Exception):
    def __init__(self, func: Any, size: int, limit: int) -> None:
        super().__init__(f"pickle asks {_qualname(func)} for {size} where it carries at most {limit} bytes")


class _Refused(Exception):
    def __init__(self, module: str, name: str) -> None:
        super().__init__(f"{module}.{name}")
        self.module = module
        self.name = name


def loads(data: bytes) -> Any:
    """Unpickle ``data`` resolving only numpy arrays/scalars/dtypes and builtin types.

    Raises ``UnsafePickleError`` naming the first class or function outside those (nothing it
    names is called) and the byte of the pickle that names it, or ``DecodeError`` for bytes that are
    not a whole pickle. Callers add the file and member (``ShardstoreError`` fields).
    """
    _check_layout(data)
    try:
        return _Restricted(data).load()
    except _TooBig as e:
        raise UnsafePickleError(f"{e}: refused, nothing built") from None
    except _Refused as e:
        pos = next((g.pos for g in _safe_globals(data) if (g.module, g.name) == (e.module, e.name)), None)
        at = f" (byte {pos} of the pickle)" if pos is not None else ""
        raise UnsafePickleError(
            f"pickle refers to {e.module}.{e.name}{at}, which is neither a numpy array/scalar/dtype nor a "
            "builtin type: refused, nothing loaded"
        ) from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError, ImportError) as e:
        raise DecodeError(f"cannot unpickle: {type(e).__name__}: {e}") from e


def _safe_globals(data: bytes) -> list[PickleGlobal]:
    try:
        return pickle_globals(data)
    except DecodeError:
        return []


#: A pickled bool, numpy bool or one-element bool array takes under 250 bytes.
FLAG_MAX = 1024
_BOOL_DTYPES = frozenset({"b1", "?", "bool"})


class _Inert:
    """What ``read_flag``'s unpickler gives for a global, and for a call of one: the name and the
    arguments, nothing called."""

    def __init__(self, name: str, args: tuple[Any, ...] = ()) -> None:
        self.name = name
        self.args = args
        self.state: Any = None

    def __call__(self, *args: Any) -> _Inert:
        return _Inert(self.name, args)

    def __setstate__(self, state: Any) -> None:
        self.state = state


class _InertUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if _canonical(module, name) in ALLOWED_GLOBALS and module.split(".")[0] in ("numpy", "_codecs"):
            return _Inert(name)
        raise _Refused(module, name)


def read_flag(data: bytes) -> bool:
    """A pickled bool (Python's, a numpy bool scalar or a one-element numpy bool array) read without
    decoding the pickle: every global it names becomes an inert placeholder, so nothing of numpy or
    Python is called and nothing is built but the pickle's own small values. What a layout needs to
    cut episodes (``dones``) without the pickle opt-in. Raises ``UnsafePickleError`` for a pickle
    naming anything else, ``DecodeError`` for one that is not such a bool or over ``FLAG_MAX`` bytes.
    """
    if len(data) > FLAG_MAX:
        raise DecodeError(f"a pickled flag of {len(data)} bytes (a bool takes under {FLAG_MAX}): read it with the pickle opt-in")
    _check_layout(data)
    try:
        value = _InertUnpickler(io.BytesIO(data)).load()
    except _Refused as e:
        raise UnsafePickleError(f"pickle refers to {e.module}.{e.name}, which a flag never needs: refused, nothing loaded") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError) as e:
        raise DecodeError(f"not a pickled bool: {type(e).__name__}: {e}") from e
    flag = _flag_of(value)
    if flag is None:
        raise DecodeError("not a pickled bool (Python's, a numpy bool or a one-element bool array)")
    return flag


def _flag_of(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if not isinstance(value, _Inert):
        return None
    if value.name == "scalar" and len(value.args) == 2 and _is_bool_dtype(value.args[0]):
        return _one_byte(value.args[1])
    if value.name == "_frombuffer" and len(value.args) >= 3 and value.args[2] in ((), (1,)):
        return _one_byte(value.args[0]) if _is_bool_dtype(value.args[1]) else None
    if value.name == "_reconstruct" and isinstance(value.state, tuple) and len(value.state) == 5:
        _, shape, dtype, _, raw = value.state
        if shape in ((), (1,)) and _is_bool_dtype(dtype):
            return _one_byte(raw)
    return None


def _is_bool_dtype(value: Any) -> bool:
    return isinstance(value, _Inert) and value.name == "dtype" and bool(value.args) and value.args[0] in _BOOL_DTYPES


def _one_byte(raw: Any) -> bool | None:
    if isinstance(raw, _Inert) and raw.name == "encode" and len(raw.args) == 2 and raw.args[1] == "latin1":
        raw = raw.args[0].encode("latin1") if isinstance(raw.args[0], str) and len(raw.args[0]) == 1 else None
    return bool(raw[0]) if isinstance(raw, bytes | bytearray) and len(raw) == 1 and raw[0] in (0, 1) else None
