"""Step 06: grade rollouts. Conduct rules first, then the judge; program gold labels from the state oracle."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pandas as pd

from sim_pipeline.domain import Domain
from sim_pipeline.grade import conduct
from sim_pipeline.grade.judge import case_card, judge_one, judge_version, rubric_for
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.rollout.signature import ending
from sim_pipeline.seeding import stable_int
from sim_pipeline.situation import AXES, Situation

GRADE_COLUMNS = (
    "rollout_id", "situation_id", "seed", "policy_version", "split", "phrasing_index", "sample_index", *AXES,
    "conduct_rule", "conduct_reward", "conduct_evidence", "judge_reward", "judge_status", "judge_reason",
    "judge_version", "reward", "gold_reward", "gold_source", "gold_reason", "reply_chars",
    "marker_argument_grounding", "marker_refusal", "marker_truncated",
)


def _as_list(value: Any) -> list[Any]:
    return list(value) if value is not None else []


def combine(conduct_reward: float, judge_reward: float | None) -> float | None:
    """The reward: a failed conduct rule caps it (0 or half credit), the judge decides the rest; None if unjudged."""
    if judge_reward is None:
        return None if conduct_reward > 0 else 0.0
    return float(min(conduct_reward, 1.0) * judge_reward)


async def grade_rollouts(rollouts: pd.DataFrame, situations: dict[str, Situation], *, domain: Domain,
                         judge_model: str, gateway: Gateway) -> pd.DataFrame:
    """One grade row per rollout (GRADE_COLUMNS), ordered by rollout id."""
    rubric = rubric_for(domain)
    version = judge_version(judge_model, rubric)

    async def grade(row: dict[str, Any]) -> dict[str, Any]:
        messages = [dict(m) for m in _as_list(row["messages"])]
        events = [dict(e) for e in _as_list(row["tool_events"])]
        violation = conduct.check(messages, events, row["final_text"], domain)
        card = case_card(domain, situations[row["situation_id"]], messages)
        judgment = await judge_one(gateway, judge_model, rubric, card, seed=stable_int("judge", row["rollout_id"]) % 2**31)
        conduct_reward = violation.reward if violation else 1.0
        last_status = events[-1]["status"] if events else None
        grounded = conduct.invented_reference(conduct.Transcript(messages, events, row["final_text"] or "",
                                                                 {t.name for t in domain.tools},
                                                                 {t.name for t in domain.tools}), domain) is None
        return {
            **{k: row[k] for k in ("rollout_id", "situation_id", "seed", "policy_version", "split", "phrasing_index",
                                   "sample_index", *AXES)},
            "conduct_rule": violation.rule if violation else None, "conduct_reward": conduct_reward,
            "conduct_evidence": violation.evidence if violation else None,
            "judge_reward": judgment.reward, "judge_status": judgment.status, "judge_reason": judgment.reason,
            "judge_version": version, "reward": combine(conduct_reward, judgment.reward),
            "gold_reward": float(row["oracle_reward"]), "gold_source": "program", "gold_reason": row["oracle_reason"],
            "reply_chars": len(row["final_text"] or ""),
            "marker_argument_grounding": float(grounded),
            "marker_refusal": float(ending(row["final_text"], last_status) == "refusal"),
            "marker_truncated": float(row["status"] == "turn_cap"),
        }

    rows = await asyncio.gather(*(grade(r) for r in rollouts.to_dict("records")))
    frame = pd.DataFrame(rows, columns=list(GRADE_COLUMNS))
    frame["reward"] = frame["reward"].astype(float)
    frame["judge_reward"] = frame["judge_reward"].astype(float)
    return frame.sort_values("rollout_id", kind="stable").reset_index(drop=True) if len(frame) else frame


def pass_rate(grades: pd.DataFrame) -> float:
    """Share of graded rows with full reward."""
    reward = grades["reward"].dropna().to_numpy(dtype=float)
    return float(np.mean(reward >= 1.0)) if reward.size else float("nan")
