"""One entry point per cut: build it, record the judge-trust opt-out on every row, and run the publish gate."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from sim_pipeline.cut.decontaminate import opening_texts
from sim_pipeline.cut.groups import select_for_rl
from sim_pipeline.cut.preference import build_preference_pairs
from sim_pipeline.cut.publish_gate import GateResult, publish_gate
from sim_pipeline.cut.reward_model import reward_model_set
from sim_pipeline.cut.sft import select_for_sft

CUTS = ("sft", "preference_pairs", "grpo_groups", "reward_model_set", "reward_model_pairs")
GATE_KIND = {"sft": "sft", "preference_pairs": "preference", "grpo_groups": "grpo",
             "reward_model_set": "reward_model", "reward_model_pairs": "reward_model"}


@dataclass(frozen=True)
class Cut:
    """A built cut, what building it reported, and the publish gate's verdict."""

    name: str
    table: pd.DataFrame
    metadata: dict[str, Any]
    gate: GateResult


def build_cut(name: str, rollouts: pd.DataFrame, grades: pd.DataFrame, *, tools: list[dict[str, Any]],
              judge_trusted: bool, opt_out: bool, pool_key: Hashable | None = None) -> Cut:
    """Build one cut from a partition's rollouts and grades and gate it.

    `pool_key` names the content of the rollouts and grades as read (train_pool's `key`): the cuts of one partition
    then share one conversion of its rollouts."""
    heldout = rollouts[rollouts["split"] == "heldout"] if len(rollouts) else rollouts
    ids = set(heldout["situation_id"]) if len(heldout) else set()
    openings = opening_texts(heldout) if len(heldout) else []
    kwargs = {"heldout_situation_ids": ids, "heldout_openings": openings, "pool_key": pool_key}
    metadata: dict[str, Any] = {}
    if name == "sft":
        table = select_for_sft(rollouts, grades, tools=tools, **kwargs)
    elif name == "preference_pairs":
        table, metadata = build_preference_pairs(rollouts, grades, **kwargs)
    elif name == "grpo_groups":
        table, metadata = select_for_rl(rollouts, grades, **kwargs)
    else:
        pointwise, pairwise = reward_model_set(rollouts, grades, **kwargs)
        table = pointwise if name == "reward_model_set" else pairwise
    table = table.copy()
    table["judge_trust_opt_out"] = opt_out  # provenance: a row published past an untrusted judge says so
    gate = publish_gate(table, kind=GATE_KIND[name], grades=grades, judge_trusted=judge_trusted, opt_out=opt_out,
                        heldout_situation_ids=ids, heldout_openings=openings,
                        group_stats=metadata if name == "grpo_groups" else None)
    return Cut(name, table.reset_index(drop=True), metadata, gate)
