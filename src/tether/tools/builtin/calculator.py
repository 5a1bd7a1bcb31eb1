"""``calculate``: arithmetic on numbers, safely (parsed with ``ast``, never ``eval``)."""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable
from typing import Any, cast

from tether.errors import ModelRetry
from tether.tools.base import Tool
from tether.tools.builtin._mark import builtin
from tether.tools.function import tool

__all__ = ["calculate", "evaluate"]

_MAX_LENGTH = 500
_MAX_EXPONENT = 10_000
_MAX_MAGNITUDE = 10**300
_MAX_DIGITS = 300

Number = int | float


def _pow(a: Number, b: Number) -> Number:
    return a**b


_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
    ast.Pow: _pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Number], Number]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "sqrt": math.sqrt,
    "log": math.log,
    "log10": math.log10,
    "exp": math.exp,
    "floor": math.floor,
    "ceil": math.ceil,
}
_CONSTANTS = {"pi": math.pi, "e": math.e}


def evaluate(expression: str) -> int | float:
    """Evaluate an arithmetic expression (``17% * 2340`` is a percent, ``2^10`` a power).

    Raises:
        ValueError: the expression is not plain arithmetic, or is too large to compute.
    """
    text = expression.strip().replace("\u00d7", "*").replace("\u00f7", "/")
    text = text.replace("^", "**")  # a calculator's power (models write it), never XOR
    if not text or len(text) > _MAX_LENGTH:
        raise ValueError(f"expression must be 1-{_MAX_LENGTH} characters")
    if not _CALL.search(text):  # inside a call, commas separate arguments
        text = _THOUSANDS.sub(_strip_commas, text)
    text = _PERCENT_OF.sub("/100 * ", text)  # "17% of 2340"
    text = _percent_to_fraction(text)
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not an arithmetic expression: {exc.msg}") from None
    return _eval(tree.body)


# "2,340" is two thousand three hundred and forty; "max(3,700)" keeps its comma.
_PERCENT_OF = re.compile(r"%\s*of\s+", re.IGNORECASE)
_CALL = re.compile(r"[A-Za-z_]\w*\s*\(")
_THOUSANDS = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+)(?![\d.,])")


def _strip_commas(match: re.Match[str]) -> str:
    return match.group(1).replace(",", "")


def _percent_to_fraction(text: str) -> str:
    out: list[str] = []
    for i, ch in enumerate(text):
        if ch == "%":
            rest = text[i + 1 :].lstrip()
            if not rest or not (rest[0].isalnum() or rest[0] in "(._"):
                out.append("/100")  # "17%" or "17% * x": percent; "a % b" stays modulo
                continue
        out.append(ch)
    return "".join(out)


def _eval(node: ast.expr) -> Number:  # noqa: C901 - one case per node type
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return cast(Number, node.value)
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            if abs(right) > _MAX_EXPONENT:
                raise ValueError(f"exponent {right} is too large (limit {_MAX_EXPONENT})")
            if abs(left) > 1 and right > 0 and right * math.log10(abs(left)) > _MAX_DIGITS:
                raise ValueError("the result is not a real number of reasonable size")
        try:
            result = _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ValueError("division by zero") from None
        except OverflowError:
            raise ValueError("the result is not a real number of reasonable size") from None
        if isinstance(result, complex) or abs(result) > _MAX_MAGNITUDE:
            raise ValueError("the result is not a real number of reasonable size")
        return result
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        args = [_eval(a) for a in node.args]
        if node.func.id == "round" and len(args) > 1 and abs(args[1]) > 400:
            # round(10**300, -10**9) works on a number of a billion digits, for minutes
            raise ValueError(f"round: {args[1]} digits is too many (limit 400)")
        try:
            return cast(Number, _FUNCTIONS[node.func.id](*args))
        except (TypeError, ValueError, OverflowError, ZeroDivisionError) as exc:
            raise ValueError(f"{node.func.id}: {exc}") from None
    raise ValueError(
        f"unsupported element {ast.unparse(node)!r}: use numbers, + - * / // % ** and "
        f"{', '.join(sorted(_FUNCTIONS))}"
    )


def _calculate(expression: str) -> int | float:
    """Evaluate an arithmetic expression and return the number.

    Supports + - * / // % ** (or ^) and parentheses, percentages such as ``17% * 2340``, the
    constants pi and e, and abs, round, min, max, sqrt, log, log10, exp, floor, ceil.

    Args:
        expression: The expression, e.g. ``0.17 * 2340`` or ``(3 + 4) ** 2``.
    """
    try:
        value = evaluate(expression)
    except ValueError as exc:
        raise ModelRetry(f"cannot calculate {expression!r}: {exc}") from None
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return round(value, 12) if isinstance(value, float) else value


calculate: Tool = builtin(
    tool(name="calculate", read_only=True, idempotent=True, open_world=False, blocking=False)(
        _calculate
    )
)
"""The ``calculate`` tool."""
