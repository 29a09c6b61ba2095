"""The rows of each export format, built from cut rows; `export.py` writes them.

Each builder takes one cut table and returns the rows it could export, the rows it left out by reason and
the assistant turns it masked. They refuse to teach what a cut only tolerates: an assistant turn calling a
tool with arguments its schema rejects (the world refused the call; the rollout passed by recovering) gets
OpenAI's weight 0, or its row is left out where the format trains every assistant turn; a DPO pair is left
out when its chosen side makes such a call after the two sides part (before, the turns are shared and cancel
in the loss); a pair whose sides say the same thing under different rewards (judge noise) has no preference.
"""

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from sim_pipeline import defaults
from sim_pipeline.cut.chat_format import (
    first_difference,
    has_invalid_call,
    has_undecodable_call,
    hf_message,
    invalid_calls,
    openai_message,
    tool_validators,
    trim_to_last_assistant,
)
from sim_pipeline.protocol.environment_tools import MESSAGE_USER

VERL_REWARD_STYLE = (
    "rule"  # verl's rule-based reward: a function of data_source, the response and ground_truth
)
PROVENANCE = (
    "situation_id",
    "seed",
    "policy_version",
    "phrasing_index",
    "rollout_id",
    "chosen_rollout_id",
    "rejected_rollout_id",
    "behavior_signature",
    "reward",
    "chosen_reward",
    "rejected_reward",
    "margin",
    "length_delta",
    "conduct_rule",
    "judge_version",
    "judge_trust_opt_out",
)
_GROUP_FIELDS = (
    "situation_id",
    "seed",
    "policy_version",
    "phrasing_index",
    "group_pass_rate",
    "group_size",
    "tool_condition",
    "judge_version",
    "judge_trust_opt_out",
)


@dataclass(frozen=True)
class Context:
    """What every builder may need: the declared tools (and their validators), the domain, and the situations
    (id -> the situations-table row as canonical JSON) an RL row binds to."""

    tools: list[dict[str, Any]]
    domain: str
    situations: Mapping[str, str] = field(default_factory=dict)
    tools_json: str = field(init=False)
    validators: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tools_json", json.dumps(self.tools, ensure_ascii=False))
        object.__setattr__(self, "validators", tool_validators(self.tools))


@dataclass(frozen=True)
class Built:
    """A dataset's rows (OpenAI: (line, provenance) pairs), rows left out by reason, turns masked."""

    rows: list[Any]
    left_out: dict[str, int]
    masked_turns: int = 0


def trl_sft(frame: pd.DataFrame, ctx: Context) -> Built:
    """TRL conversational language modeling rows: `messages` + `tools` (string) + provenance."""
    left: Counter[str] = Counter()
    rows = []
    for row in records(frame):
        messages = row["messages"]
        if _undecodable(messages, left):
            continue
        if has_invalid_call(messages, _validators(row["tools"])):  # every assistant turn is a target here
            left["invalid_tool_call"] += 1
            continue
        rows.append({"messages": [hf_message(m) for m in messages], "tools": row["tools"], **provenance(row)})
    return Built(rows, dict(left))


def trl_dpo(frame: pd.DataFrame, ctx: Context) -> Built:
    """TRL preference rows with explicit prompt, cut where the answers part: `prompt` is everything both sides share,
    `chosen` / `rejected` the agent's turns from there to the next user or tool message (DPO then scores the agent's
    choice, not the simulated user's words or the world's replies that followed it) + `tools`."""
    left: Counter[str] = Counter()
    rows = []
    for row in records(frame):
        pair = _pair(row, left)
        if pair is None:
            continue
        chosen, rejected, split = pair
        answers = [_answer(side, split) for side in (chosen, rejected)]
        if not all(answers):
            left["sides_part_outside_an_assistant_turn"] += 1  # e.g. the simulated user said different things
            continue
        if has_invalid_call(answers[0], ctx.validators):
            left["chosen_invalid_tool_call"] += 1
            continue
        rows.append(
            {
                "prompt": _hf([*row["prompt"], *chosen[:split]]),
                "chosen": _hf(answers[0]),
                "rejected": _hf(answers[1]),
                "tools": ctx.tools_json,
                **provenance(row),
                "turn_index": split,
            }
        )
    return Built(rows, dict(left))


def _answer(side: list[dict], split: int) -> list[dict]:
    """The agent's consecutive turns from `split` (empty when the side has no assistant turn there)."""
    out = []
    for message in side[split:]:
        if message["role"] != "assistant":
            break
        out.append(message)
    return out


def trl_reward(frame: pd.DataFrame, ctx: Context) -> Built:
    """TRL implicit-prompt preference rows for RewardTrainer: `chosen`, `rejected`, `margin` + `tools`."""
    left: Counter[str] = Counter()
    rows = []
    for row in records(frame):
        pair = _pair(row, left)
        if pair is not None:
            chosen, rejected, _ = pair
            rows.append(
                {
                    "chosen": _hf([*row["prompt"], *chosen]),
                    "rejected": _hf([*row["prompt"], *rejected]),
                    "margin": float(row["margin"]),
                    "tools": ctx.tools_json,
                    **provenance(row),
                }
            )
    return Built(rows, dict(left))


def trl_pointwise(frame: pd.DataFrame, ctx: Context) -> Built:
    """TRL unpaired preference rows (KTO, BCO): `prompt`, `completion`, `label` (passed) + `tools`."""
    left: Counter[str] = Counter()
    rows = []
    for row in records(frame):
        completion = trim_to_last_assistant(row["completion"])
        if not _undecodable([*row["prompt"], *completion], left):
            rows.append(
                {
                    "prompt": _hf(row["prompt"]),
                    "completion": _hf(completion),
                    "label": bool(row["reward"] >= defaults.PASS_REWARD),
                    "tools": ctx.tools_json,
                    **provenance(row),
                }
            )
    return Built(rows, dict(left))


def trl_grpo(frame: pd.DataFrame, ctx: Context) -> Built:
    """TRL prompt-only rows, one per group: `prompt`, the `situation` the RL environment replays (reset kwargs),
    then the group's old rewards and ids (provenance: they score the cut's rollouts, not new completions)."""
    bound, left = _with_situations(groups(frame), ctx)
    return Built([{"prompt": _hf(g["prompt"]), "situation": g["situation"], **_group_columns(g)} for g in bound], left)


def openai_sft(frame: pd.DataFrame, ctx: Context) -> Built:
    """OpenAI chat fine-tuning lines `{"messages", "tools"}`, assistant turns weighted 0/1."""
    left: Counter[str] = Counter()
    rows, masked = [], 0
    for row in records(frame):
        validators, messages, row_masked = _validators(row["tools"]), [], 0
        for message in row["messages"]:
            weight = None
            if message["role"] == "assistant":
                weight = int(message.get("weight", 1))
                if weight and invalid_calls(message, validators):
                    weight, row_masked = 0, row_masked + 1  # kept as context, not imitated
            messages.append(openai_message(message, weight=weight))
        if not any(m.get("weight") for m in messages):
            left["no_trainable_turn"] += 1
            continue
        masked += row_masked
        rows.append(
            (
                {"messages": messages, "tools": json.loads(row["tools"])},
                {**provenance(row), "masked_turns": row_masked},
            )
        )
    return Built(rows, dict(left), masked)


def openai_dpo(frame: pd.DataFrame, ctx: Context) -> Built:
    """OpenAI DPO lines: shared turns as `input`, the assistant turn where the sides part as outputs; text only, as
    OpenAI documents DPO (a pair with a tool turn or call is left out as `not_text_only`)."""
    left: Counter[str] = Counter()
    rows = []
    for row in records(frame):
        pair = _pair(row, left)
        if pair is None:
            continue
        chosen, rejected, split = pair
        # OpenAI trains DPO on one assistant turn: the sides must part at an assistant turn of each.
        if split >= min(len(chosen), len(rejected)) or {chosen[split]["role"], rejected[split]["role"]} != {
            "assistant"
        }:
            left["sides_part_outside_an_assistant_turn"] += 1
            continue
        if invalid_calls(chosen[split], ctx.validators):
            left["chosen_invalid_tool_call"] += 1
            continue
        # OpenAI documents DPO for text inputs and outputs only: no tool turn before, no tool call in either answer.
        shown = [*row["prompt"], *chosen[:split], chosen[split], rejected[split]]
        if any(m["role"] == "tool" or m.get("tool_calls") for m in shown):
            left["not_text_only"] += 1
            continue
        line = {
            "input": {
                "messages": [openai_message(m) for m in [*row["prompt"], *chosen[:split]]],
                "tools": ctx.tools,
            },
            "preferred_output": [openai_message(chosen[split])],
            "non_preferred_output": [openai_message(rejected[split])],
        }
        later = max(len(chosen), len(rejected)) > split + 1
        rows.append((line, {**provenance(row), "turn_index": split, "later_turns_dropped": later}))
    return Built(rows, dict(left))


def verl_grpo(frame: pd.DataFrame, ctx: Context) -> Built:
    """verl RL rows, one per group: data_source, agent_name, prompt, ability, reward_model, extra_info."""
    rows = []
    bound, left = _with_situations(groups(frame), ctx)
    for index, group in enumerate(bound):
        # ground_truth names the situation: a rule reward rebuilds its world and grades the new rollout.
        truth = {"domain": ctx.domain, "seed": group["seed"], "situation_id": group["situation_id"]}
        rows.append(
            {
                "data_source": f"sim_pipeline/{ctx.domain}",
                "agent_name": defaults.VERL_AGENT_NAME,
                "prompt": _hf(group["prompt"]),
                "ability": defaults.VERL_ABILITY,
                "reward_model": {
                    "style": VERL_REWARD_STYLE,
                    "ground_truth": json.dumps(truth, sort_keys=True),
                },
                "extra_info": {"split": "train", "index": index, "situation": group["situation"],
                               **_group_columns(group), "need_tools_kwargs": True,
                               "tools_kwargs": _tools_kwargs(group, ctx), **_episode_sizes(group)},
            }
        )
    return Built(rows, left)


def _episode_sizes(group: dict) -> dict[str, Any]:
    """What sizes verl's limits for this row: the group's longest old episode (everything after the prompt, as JSON
    messages: `export --stats` counts its tokens) and its longest tool result in characters."""
    episodes = group["completions"]
    results = [len(m.get("content") or "") for episode in episodes for m in episode if m.get("role") == "tool"]
    longest = max(episodes, key=lambda e: len(json.dumps(e, default=str)), default=[])
    return {"longest_episode": json.dumps(_hf(longest), ensure_ascii=False),
            "tool_result_chars": max(results, default=0)}


def _tools_kwargs(group: dict, ctx: Context) -> dict[str, dict]:
    """verl's per-row tool arguments: every tool (message_user too) bound to the row's situation and phrasing."""
    binding = {"situation": group["situation"], "phrasing_index": group["phrasing_index"]}
    return {name: {"create_kwargs": binding} for name in verl_tool_names(ctx.tools)}


def verl_tool_names(tools: list[dict[str, Any]]) -> list[str]:
    """The tools a verl episode has: the domain's, then the environment's own message_user."""
    return [t["function"]["name"] for t in tools] + [MESSAGE_USER]


def _with_situations(found: list[dict], ctx: Context) -> tuple[list[dict], dict[str, int]]:
    """The groups whose situation is known, each with it as JSON; the rest left out as `no_situation`."""
    bound = [{**g, "situation": ctx.situations[g["situation_id"]]} for g in found if g["situation_id"] in ctx.situations]
    missing = len(found) - len(bound)
    return bound, {"no_situation": missing} if missing else {}


def groups(frame: pd.DataFrame) -> list[dict]:
    """One record per GRPO group in the cut's order (round-robin over fault kinds), ids and rewards listed."""
    by_id: dict[str, dict] = {}
    for row in records(frame):
        group = by_id.setdefault(row["group_id"], {**row, "rollout_ids": [], "rewards": [], "completions": []})
        completion = row.get("completion")
        group["completions"].append([] if completion is None else list(completion))
        group["rollout_ids"].append(row["rollout_id"])
        group["rewards"].append(float(row["reward"]))
    return list(by_id.values())


def records(frame: pd.DataFrame) -> list[dict]:
    """Rows as plain Python records: numpy scalars unboxed, missing values None."""
    return [{key: _scalar(value) for key, value in record.items()} for record in frame.to_dict("records")]


def provenance(row: dict) -> dict:
    """The provenance fields a cut row carries: ids, seed, version, rewards, judge version."""
    return {key: row[key] for key in PROVENANCE if key in row}


def _pair(row: dict, left: Counter[str]) -> tuple[list, list, int] | None:
    """Both completions to their last assistant turn and where they part; None (counted) if not exportable."""
    chosen, rejected = trim_to_last_assistant(row["chosen"]), trim_to_last_assistant(row["rejected"])
    if _undecodable([*row["prompt"], *chosen, *rejected], left):
        return None
    split = first_difference(chosen, rejected)
    if split is None:
        left["identical_sides"] += 1
        return None
    return chosen, rejected, split


def _undecodable(messages: list, left: Counter[str]) -> bool:
    if has_undecodable_call(messages):
        left["undecodable_arguments"] += 1  # no chat-template form: arguments must decode to an object
        return True
    return False


def _hf(messages: list) -> list[dict]:
    return [hf_message(m) for m in messages]


def _group_columns(group: dict) -> dict:
    return {
        "group_id": group["group_id"],
        "rollout_ids": group["rollout_ids"],
        "rewards": group["rewards"],
        **{key: group[key] for key in _GROUP_FIELDS if key in group},
    }


@lru_cache(maxsize=8)
def _validators(tools_json: str) -> dict[str, Any]:
    """Validators for the tools an SFT row declares (the rows of a cut share one tools string)."""
    return tool_validators(json.loads(tools_json))


def _scalar(value: Any) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    return None if isinstance(value, float) and np.isnan(value) else value
