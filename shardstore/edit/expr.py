"""The small expression language of ``edit filter --where`` and ``set-task --where``.

An expression is parsed by Python's ``ast`` and then walked by an evaluator of our own that knows
a short whitelist of node types; anything else (calls, attributes other than ``meta.NAME``,
lambdas, comprehensions, f-strings...) is refused at parse time with the offset of the offending
part. Nothing is ever handed to ``eval``, so an expression can read an episode's values and
compute with them, and do nothing else.

Names: ``episode`` (the episode's number), ``length`` (steps), ``task`` (its first task, ``""``
when none), ``tasks`` (all of them, a list), ``split`` (``""`` when none), ``meta`` (its metadata:
``meta.NAME`` or ``meta["name"]``). Literals: numbers, strings, ``True``/``False``/``None``, lists
and tuples of literals. Operators: ``and or not``, ``== != < <= > >=``, ``in`` / ``not in`` (also
substring tests: ``"cube" in task``), ``+ - * / // %`` and unary minus (on numbers only).

    length >= 100 and split == "train"
    "cube" in task or episode in [3, 7]
    meta.success == True and episode % 2 == 0
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

__all__ = ["Expression", "parse_expression", "NAMES"]

#: The names an expression may use.
NAMES = ("episode", "length", "task", "tasks", "split", "meta")
#: Longest expression accepted (a filter, not a program) and deepest nesting.
MAX_LENGTH = 2000
MAX_DEPTH = 40

_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


@dataclass(frozen=True, slots=True)
class Expression:
    """A parsed expression; ``evaluate(values)`` with the names of ``NAMES``."""

    text: str
    tree: ast.expr

    def evaluate(self, values: Mapping[str, Any]) -> Any:
        """The expression's value for one episode; ``ConfigError`` naming the expression on a
        type error (``length > "a"``), a missing metadata key, a division by zero."""
        try:
            return _eval(self.tree, values)
        except (TypeError, ZeroDivisionError, KeyError, IndexError) as e:
            what = f"no metadata key {e}" if isinstance(e, KeyError) else str(e)
            raise ConfigError(f"expression {self.text!r}: {what}", member="--where") from None

    def matches(self, values: Mapping[str, Any]) -> bool:
        return bool(self.evaluate(values))


def parse_expression(text: str) -> Expression:
    """Parse and check ``text``; ``ConfigError`` naming the column of the first part that is not
    allowed (or of the syntax error)."""
    if len(text) > MAX_LENGTH:
        raise ConfigError(f"expression of {len(text)} characters (at most {MAX_LENGTH})", member="--where")
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as e:
        raise ConfigError(f"expression {text!r}: {e.msg} at column {e.offset}", member="--where") from None
    _check(tree, text, 0)
    return Expression(text, tree)


def _check(node: ast.AST, text: str, depth: int) -> None:
    def refuse(why: str) -> ConfigError:
        col = getattr(node, "col_offset", 0) + 1
        return ConfigError(f"expression {text!r}: {why} at column {col}", member="--where")

    if depth > MAX_DEPTH:
        raise refuse("nested too deeply")
    if isinstance(node, ast.Constant):
        if not isinstance(node.value, bool | int | float | str | type(None)):
            raise refuse(f"a {type(node.value).__name__} literal is not allowed")
        return
    if isinstance(node, ast.Name):
        if node.id not in NAMES:
            raise refuse(f"unknown name {node.id!r} (names: {', '.join(NAMES)})")
        return
    if isinstance(node, ast.Attribute):
        if not (isinstance(node.value, ast.Name) and node.value.id == "meta"):
            raise refuse("only meta.NAME may use a dot")
        return
    if isinstance(node, ast.Subscript):
        if not (isinstance(node.value, ast.Name) and node.value.id == "meta"):
            raise refuse("only meta[...] may be subscripted")
        if not (isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)):
            raise refuse("meta[...] takes a string")
        return
    children: list[ast.AST]
    if isinstance(node, ast.BoolOp):
        children = list(node.values)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not | ast.USub):
        children = [node.operand]
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        children = [node.left, node.right]
    elif isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        children = [node.left, *node.comparators]
    elif isinstance(node, ast.List | ast.Tuple):
        children = list(node.elts)
    else:
        raise refuse(f"{type(node).__name__} is not allowed")
    for child in children:
        _check(child, text, depth + 1)


def _eval(node: ast.expr, values: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return values[node.id]
    if isinstance(node, ast.Attribute):
        return values["meta"][node.attr]
    if isinstance(node, ast.Subscript):
        assert isinstance(node.slice, ast.Constant)
        return values["meta"][node.slice.value]
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            result: Any = True
            for v in node.values:
                result = _eval(v, values)
                if not result:
                    return result
            return result
        result = False
        for v in node.values:
            result = _eval(v, values)
            if result:
                return result
        return result
    if isinstance(node, ast.UnaryOp):
        operand = _eval(node.operand, values)
        if isinstance(node.op, ast.Not):
            return not operand
        if not _number(operand):
            raise TypeError(f"minus of a {type(operand).__name__}")
        return -operand
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, values), _eval(node.right, values)
        if not (_number(left) and _number(right)):  # "a" * 10**9 would allocate a gigabyte
            raise TypeError(f"arithmetic on {type(left).__name__} and {type(right).__name__} (numbers only)")
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, values)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _eval(right_node, values)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.List | ast.Tuple):
        return [_eval(e, values) for e in node.elts]
    raise AssertionError(f"unchecked node {type(node).__name__}")  # _check refuses every other node


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
