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
_SHAPED = frozenset({"_reconstruct", "ndarray"})


#: The pure-Python unpickler, typed loosely: typeshed gives it the C one's interface, without the
#: ``stack``, ``append`` and ``dispatch`` that hooking its opcodes uses.
_PyUnpickler: Any = pickle._Unpickler  # type: ignore[attr-defined]


class _Restricted(_PyUnpickler):
    """The pure-Python unpickler (its opcodes can be hooked; the C one's cannot) resolving only
    ``ALLOWED_GLOBALS`` and checking every call's arguments before making it (``_check_call``)."""

    dispatch = dict(_PyUnpickler.dispatch)

    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self.limit = len(data) + BUILD_SLACK

    def find_class(self, module: str, name: str) -> Any:
        if _canonical(module, name) in ALLOWED_GLOBALS:
            return super().find_class(module, name)
        raise _Refused(module, name)

    def _call(self, func: Any, args: tuple[Any, ...]) -> Any:
        _check_call(func, args, self.limit)
        out = func(*args)
        if _is_dtype(out) and out.itemsize > self.limit:
            raise _TooBig(_qualname(func), out.itemsize, self.limit)
        return out

    def load_reduce(self) -> None:
        args = self.stack.pop()
        self.stack[-1] = self._call(self.stack[-1], tuple(args))

    dispatch[pickle.REDUCE[0]] = load_reduce

    def load_newobj(self) -> None:
        args = self.stack.pop()
        cls = self.stack.pop()
        _check_call(cls, tuple(args), self.limit)
        self.append(cls.__new__(cls, *args))

    dispatch[pickle.NEWOBJ[0]] = load_newobj

    def load_newobj_ex(self) -> None:
        kwargs = self.stack.pop()
        args = self.stack.pop()
        cls = self.stack.pop()
        _check_call(cls, (*args, *kwargs.values()), self.limit)
        self.append(cls.__new__(cls, *args, **kwargs))

    dispatch[pickle.NEWOBJ_EX[0]] = load_newobj_ex

    def _instantiate(self, klass: Any, args: Any) -> None:
        self.append(self._call(klass, tuple(args)))


def _is_dtype(value: Any) -> bool:
    import numpy as np

    return isinstance(value, np.dtype)


def _qualname(func: Any) -> str:
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__name__', type(func).__name__)}"


def _check_call(func: Any, args: tuple[Any, ...], limit: int) -> None:
    """Refuse a call that would build more than ``limit`` bytes: an integer size
    (``bytearray(2_500_000_000)``), a long range, an array shape (``_reconstruct``, ``ndarray``),
    a wide dtype. A pickle carries the bytes of what it builds; one that asks for more lies."""
    qualname = _qualname(func)
    for a in args:
        _check_size(a, qualname, limit)
    if getattr(func, "__name__", "") in _SHAPED and args:

        pos = 1 if func.__name__ == "_reconstruct" else 0
        shape = args[pos] if len(args) > pos else ()
        shape = shape if isinstance(shape, tuple | list) else (shape,)
        count = 1
        for n in shape:
            count *= int(n) if isinstance(n, int) else 1
        width = _itemsize(args[pos + 1] if len(args) > pos + 1 else "f8")
        if count * width > limit:
            raise _TooBig(qualname, count * width, limit)


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


def _check_size(value: Any, qualname: str, limit: int) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > limit:
        raise _TooBig(qualname, abs(value), limit)
    if isinstance(value, range) and len(value) > limit:
        raise _TooBig(qualname, len(value), limit)
    if isinstance(value, tuple | list) and len(value) <= 64:
        for v in value:
            if isinstance(v, int | range) and not isinstance(v, bool):
                _check_size(v, qualname, limit)


class _TooBig(Exception):
    def __init__(self, qualname: str, size: int, limit: int) -> None:
        super().__init__(f"pickle asks {qualname} for {size} where it carries at most {limit} bytes")


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
