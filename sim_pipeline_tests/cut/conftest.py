"""Synthetic rollouts and grades in the rollout/grade steps' contracts, for the cut tests."""

import json
from collections.abc import Callable

import pandas as pd
import pytest

JUDGE = "sim/judge@abc123def456"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "cancel_order",
            "description": "Cancel an order.",
            "parameters": {
                "type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"],
            },
        },
    }
]


def message(role: str, content: str | None = None, **keys: object) -> dict:
    """One OpenAI chat message with every key present."""
    return {"role": role, "content": content, "tool_calls": None, "tool_call_id": None, "name": None, **keys}


def rollout(
    situation_id: str,
    *,
    phrasing_index: int = 0,
    sample_index: int = 0,
    reward: float = 1.0,
    split: str = "train",
    final_text: str = "Your order is cancelled.",
    tool_condition: str = "success",
    signature: str = "sig-a",
    extra_turns: int = 0,
    n_tokens: int = 100,
    opening: str | None = None,
    status: str = "ok",
    judge_status: str = "ok",
    seed: int = 0,
    policy_version: str = "v1",
) -> tuple[dict, dict]:
    """One rollout row and its grade row: system, opening, a tool call, its result, a final reply."""
    rollout_id = f"{situation_id}-p{phrasing_index}-s{sample_index}"
    if opening is None:
        opening = f"Hello, order {situation_id} phrasing {phrasing_index} please"
    call = {"id": f"call_{rollout_id}", "type": "function",
            "function": {"name": "cancel_order", "arguments": json.dumps({"order_id": "A1001"})}}
    messages = [message("system", "You are a retail support agent."), message("user", opening)]
    for turn in range(extra_turns):
        messages += [message("assistant", f"Which order do you mean? ({turn})"), message("user", "A1001")]
    messages += [
        message("assistant", None, tool_calls=[call]),
        message("tool", '{"status": "cancelled"}', tool_call_id=call["id"], name="cancel_order"),
        message("assistant", final_text),
    ]
    row = {
        "rollout_id": rollout_id, "situation_id": situation_id, "seed": seed,
        "policy_version": policy_version, "split": split, "arm": "structured", "batch": 0,
        "phrasing_index": phrasing_index, "sample_index": sample_index, "tool": "cancel_order",
        "rule": "confirm", "stance": "ordinary", "world_state": "entity_exists",
        "tool_condition": tool_condition, "history": "fresh", "messages": messages,
        "opening_message": opening, "final_text": final_text, "finish_reason": "stop", "status": status,
        "logprob": -3.5, "n_tokens": n_tokens, "model": "sim/agent-v1", "behavior_signature": signature,
        "sampling": {"temperature": 1.0, "top_p": 1.0, "max_tokens": 512, "seed": sample_index},
    }
    grade = {
        "rollout_id": rollout_id, "situation_id": situation_id, "seed": seed,
        "policy_version": policy_version, "split": split, "conduct_rule": None, "conduct_reward": 1.0,
        "judge_reward": reward, "judge_status": judge_status, "judge_version": JUDGE, "reward": reward,
        "gold_reward": None, "gold_source": None,
    }
    return row, grade


def frames(pairs: list[tuple[dict, dict]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rollouts and grades frames from (rollout, grade) pairs."""
    rollouts = pd.DataFrame([r for r, _ in pairs]) if pairs else pd.DataFrame(columns=list(rollout("x")[0]))
    grades = pd.DataFrame([g for _, g in pairs]) if pairs else pd.DataFrame(columns=list(rollout("x")[1]))
    return rollouts, grades


@pytest.fixture(scope="session")
def make() -> Callable[..., tuple[dict, dict]]:
    """The rollout+grade row builder."""
    return rollout


@pytest.fixture(scope="session")
def to_frames() -> Callable[[list[tuple[dict, dict]]], tuple[pd.DataFrame, pd.DataFrame]]:
    """Build rollouts and grades frames from builder rows."""
    return frames


@pytest.fixture(scope="session")
def tools() -> list[dict]:
    """The tool schemas the synthetic agent had."""
    return TOOLS


@pytest.fixture(scope="session")
def judge_version() -> str:
    """The judge version every synthetic grade carries."""
    return JUDGE
