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

__all__ = ["ALLOWED_GLOBALS", "PickleGlobal", "foreign_globals", "loads", "pickle_globals"]

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


class _Restricted(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if _canonical(module, name) in ALLOWED_GLOBALS:
            return super().find_class(module, name)
        raise _Refused(module, name)


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
        return _Restricted(io.BytesIO(data)).load()
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
