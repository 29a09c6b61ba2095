"""What a `compute` tool answers: its arithmetic, evaluated safely (a parsed expression tree, never `eval`).

A calculator tool (`calculate(expression)`) takes an expression like `"(120.5 - 20) * 0.9"`. Only numbers, + - * /
// % **, unary signs and parentheses are accepted; anything else (names, calls, attributes) is refused as an invalid
argument (`invalid_expression`), as a real calculator service would. Exponents and results are bounded so no call can hang the world.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

from sim_pipeline import defaults

_BINARY: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[float], float]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


class ExpressionError(ValueError):
    """An expression the calculator refuses."""


def _value(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > defaults.COMPUTE_MAX_EXPONENT:
            raise ExpressionError(f"exponent {right} is too large")
        try:
            result = _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ExpressionError("division by zero") from None
        if isinstance(result, complex) or not math.isfinite(result) or abs(result) > defaults.COMPUTE_MAX_MAGNITUDE:
            raise ExpressionError("the result is not a finite number in range")
        return result
    raise ExpressionError(f"'{ast.unparse(node)}' is not arithmetic (numbers, + - * / // % ** and parentheses only)")


def evaluate(expression: str) -> float:
    """The value of an arithmetic expression; ExpressionError for anything else."""
    if len(expression) > defaults.COMPUTE_MAX_LENGTH:
        raise ExpressionError(f"longer than {defaults.COMPUTE_MAX_LENGTH} characters")
    try:
        tree = ast.parse(expression.replace("^", "**").replace(",", ""), mode="eval")
    except SyntaxError:
        raise ExpressionError(f"'{expression}' does not parse as arithmetic") from None
    value = _value(tree.body)
    return int(value) if float(value).is_integer() and abs(value) < 2**53 else round(float(value), 10)


def compute_result(args: Mapping[str, Any], properties: Mapping[str, Any]) -> dict[str, Any]:
    """A compute tool's result: the value of its first string argument, or a rejection naming what is wrong.

    The argument met its schema (the sandbox checks that first), so an expression that is not arithmetic is the
    service's refusal, `invalid_expression`, not a schema violation; a tool with no string argument echoes its call.
    """
    name = next((k for k in properties if isinstance(args.get(k), str)), None)
    if name is None:
        return {"status": "ok", "result": dict(sorted(args.items()))}
    try:
        return {"status": "ok", "result": evaluate(args[name])}
    except ExpressionError as exc:
        return {"status": "rejected", "error": "invalid_expression", "field": name, "fields": [name],
                "message": f"{name}: {exc}"}
