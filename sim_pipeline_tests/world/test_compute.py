"""A compute tool computes: arithmetic evaluated from a parsed tree, never eval; anything else is refused."""

import operator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim_pipeline.world.compute import ExpressionError, evaluate
from sim_pipeline.world.sandbox import Sandbox

CALCULATOR = {"type": "function", "function": {
    "name": "calculate", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}
HANDOFF = {"type": "function", "function": {
    "name": "transfer_to_human_agents", "description": "Hand the user to a human agent.",
    "parameters": {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]}}}
OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


@given(st.integers(-10**6, 10**6), st.integers(-10**6, 10**6), st.sampled_from(sorted(OPS)))
def test_integer_arithmetic_is_exact(a, b, op):
    assert evaluate(f"{a} {op} ({b})") == OPS[op](a, b)


def test_precedence_powers_and_separators():
    assert evaluate("(120.5 - 20) * 0.9") == pytest.approx(90.45)
    assert evaluate("2 + 3 * 4 ^ 2") == 50
    assert evaluate("1,200 / 4") == 300


@pytest.mark.parametrize("text", ["__import__('os').system('true')", "open('x')", "a + 1", "[1, 2]", "1 / 0",
                                  "10 ** 10 ** 10", "9" * 300, "2 +"])
def test_anything_but_bounded_arithmetic_is_refused(text):
    with pytest.raises(ExpressionError):
        evaluate(text)


def test_the_world_answers_a_calculator_and_a_hand_off():
    world = Sandbox([CALCULATOR, HANDOFF], seed=0)
    assert world.call("calculate", {"expression": "3 * (2 + 5)"}) == {"status": "ok", "result": 21}
    refused = world.call("calculate", {"expression": "os.getcwd()"})
    assert (refused["status"], refused["error"], refused["field"]) == ("rejected", "invalid_expression", "expression")
    handed = world.call("transfer_to_human_agents", {"summary": "wants a refund over the limit"})
    assert handed["status"] == "ok" and handed["transferred"] is True
    assert not any(e.applied for e in world.events)
