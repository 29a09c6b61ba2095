"""Step 06: grade rollouts. Conduct rules first, then the judge; gold labels; the judge's stress tests.

Gold: the state oracle's program label on every row (`gold_source="program"`), replaced by a human label from the
domain pack's gold/*.jsonl where one matches the rollout's transcript (`gold_source="human"`, see gold.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pandas as pd

from sim_pipeline import defaults
from sim_pipeline.domain import Domain
from sim_pipeline.gold import apply_gold, load_gold, transcript_digest
from sim_pipeline.grade import conduct
from sim_pipeline.grade.judge import (
    Judgment,
    case_card,
    judge_one,
    judge_sampling,
    judge_seed,
    judge_version,
    rubric_for,
)
from sim_pipeline.grade.stress import STRESS_COLUMNS, stress_judge
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.models.provenance import JUDGE, backend_record, records as backend_records
from sim_pipeline.protocol.expected import Expected
from sim_pipeline.models.reply_reader import assistant_texts, read_replies
from sim_pipeline.protocol.replies import REFUSES, classify_reply, read_by
from sim_pipeline.protocol.statuses import is_error
from sim_pipeline.situation import AXES, Situation

GRADE_COLUMNS = (
    "rollout_id", "situation_id", "seed", "policy_version", "split", "phrasing_index", "sample_index", *AXES,
    "conduct_rule", "conduct_reward", "conduct_evidence", "judge_reward", "judge_status", "judge_reason",
    "judge_version", "backends", "reward", "graded", "gold_reward", "gold_source", "gold_reason", "reply_chars",
    "marker_argument_grounding", "marker_refusal", "marker_truncated", *STRESS_COLUMNS,
)
MARKERS = ("marker_argument_grounding", "marker_refusal", "marker_truncated")
NOT_JUDGED = "not_judged"  # judge_status of a rollout that errored: the judge was not asked


def _as_list(value: Any) -> list[Any]:
    return list(value) if value is not None else []


def combine(conduct_reward: float, judge_reward: float | None) -> float | None:
    """The reward: a failed conduct rule caps it (0 or half credit), the judge decides the rest.

    None when the judge gave no verdict (an error, a timeout, an unreadable reply): a failed judge call is not an
    outcome, so the row is ungraded even where a conduct rule failed.
    """
    if judge_reward is None:
        return None
    return float(min(conduct_reward, 1.0) * judge_reward)


async def grade_rollouts(rollouts: pd.DataFrame, situations: dict[str, Situation], *, domain: Domain,
                         judge_model: str, gateway: Gateway, stress: bool = True,
                         stress_seed: int = defaults.JUDGE_STRESS_SEED, reply_classifier: str = "") -> pd.DataFrame:
    """One grade row per rollout (GRADE_COLUMNS), ordered by rollout id.

    With `stress`, the judge is also asked about perturbed and probe variants of a seeded sample of the rows
    (stress.py) when it read at least one of them; their verdicts fill STRESS_COLUMNS, which stay NaN otherwise.
    With `reply_classifier`, that model reads the agent's replies for the conduct rules and the markers
    (models/reply_reader.py), as it did for the oracle.
    """
    rubric = rubric_for(domain)
    version = judge_version(judge_model, rubric, gateway.config(judge_model).identity())
    records = rollouts.to_dict("records")
    messages = [[dict(m) for m in _as_list(r["messages"])] for r in records]
    cards = [case_card(situations[r["situation_id"]], m) for r, m in zip(records, messages)]
    judgments = await asyncio.gather(*(_judge(gateway, judge_model, rubric, card, r) for r, card in zip(records, cards)))
    labels: dict[str, frozenset[str]] = {}
    if reply_classifier:
        texts = [t for m, r in zip(messages, records) if not is_error(r["status"]) for t in assistant_texts(m)]
        labels = (await read_replies(gateway, reply_classifier, texts)).labels
    # Each row's backends: its rollout's (agent, user, writer) and the judge's, with the settings its call sent.
    backends = [[*backend_records(r.get("backends")),
                 backend_record(gateway, JUDGE, judge_model, None if is_error(r["status"]) else
                                judge_sampling(judge_seed(r["rollout_id"])), logprobs=False)] for r in records]
    with read_by(labels):
        frame = pd.DataFrame([_grade_row(r, m, j, domain, version, situations[r["situation_id"]].want) | {"backends": b}
                              for r, m, j, b in zip(records, messages, judgments, backends)],
                             columns=list(GRADE_COLUMNS))
    for column in ("reward", "judge_reward", "conduct_reward", "gold_reward"):
        frame[column] = frame[column].astype(float)
    frame["graded"] = frame["graded"].astype(bool)
    frame = apply_gold(frame, pd.Series([transcript_digest(m) for m in messages]), load_gold(domain.path))
    errored = np.array([is_error(r["status"]) for r in records], dtype=bool)
    frame.loc[errored, ["gold_reward", "gold_source"]] = [np.nan, None]  # a cut-off transcript is no gold case
    # Stress tests probe the judge on real outcomes: rollouts that errored are no case to judge.
    outcomes = frame["gold_reward"].notna().to_numpy()
    # A judge that gave no readable verdict on any outcome cannot be trusted whatever the probes say (trust needs
    # judged gold rows; its failures refuse it): asking it hundreds of probes more would only spend calls.
    readable = bool((frame.loc[outcomes, "judge_status"] == "ok").any())
    if stress and outcomes.any() and readable:
        cases = frame.loc[outcomes, ["rollout_id", "situation_id", "judge_reward", "gold_reward"]].assign(
            card=[c for c, keep in zip(cards, outcomes) if keep],
            tool_events=[[dict(e) for e in _as_list(r["tool_events"])] for r, keep in zip(records, outcomes) if keep])
        verdicts = await stress_judge(gateway, judge_model, rubric, cases.reset_index(drop=True), seed=stress_seed)
        frame.loc[outcomes, list(STRESS_COLUMNS)] = verdicts[list(STRESS_COLUMNS)].to_numpy(dtype=float)
    return frame.sort_values("rollout_id", kind="stable").reset_index(drop=True) if len(frame) else frame


async def _judge(gateway: Gateway, judge_model: str, rubric: str, card: dict[str, Any], row: dict[str, Any]) -> Judgment:
    """The judge's verdict on one rollout; a rollout that errored is not judged (it is not an outcome)."""
    if is_error(row["status"]):
        return Judgment(None, NOT_JUDGED, f"rollout {row['status']}: not an outcome of the agent's conduct")
    return await judge_one(gateway, judge_model, rubric, card, seed=judge_seed(row["rollout_id"]))


def _grade_row(row: dict[str, Any], messages: list[dict[str, Any]], judgment: Judgment, domain: Domain,
               version: str, expected: Expected | None = None) -> dict[str, Any]:
    """The grade row of one rollout: conduct verdict, judge verdict, reward, program gold label, markers."""
    keys = {k: row[k] for k in ("rollout_id", "situation_id", "seed", "policy_version", "split", "phrasing_index",
                                "sample_index", *AXES)}
    if is_error(row["status"]):
        # Kept, so the error share shows, but never graded: no reward, no gold label, no markers.
        return {**dict.fromkeys(GRADE_COLUMNS), **keys, "judge_status": judgment.status,
                "judge_reason": judgment.reason, "judge_version": version, "graded": False,
                "gold_reason": row["oracle_reason"],
                **{column: float("nan") for column in (*MARKERS, *STRESS_COLUMNS)}}
    events = [dict(e) for e in _as_list(row["tool_events"])]
    violation = conduct.check(messages, events, row["final_text"], domain,
                              [dict(e) for e in _as_list(row.get("user_events"))], expected)
    conduct_reward = violation.reward if violation else 1.0
    reward = combine(conduct_reward, judgment.reward)
    return {
        **keys,
        "conduct_rule": violation.rule if violation else None, "conduct_reward": conduct_reward,
        "conduct_evidence": violation.evidence if violation else None,
        "judge_reward": judgment.reward, "judge_status": judgment.status, "judge_reason": judgment.reason,
        "judge_version": version, "reward": reward, "graded": reward is not None,
        "gold_reward": float(row["oracle_reward"]), "gold_source": "program", "gold_reason": row["oracle_reason"],
        "reply_chars": len(row["final_text"] or ""),
        "marker_argument_grounding": float(conduct.grounded(messages, events, row["final_text"], domain)),
        "marker_refusal": float(REFUSES in classify_reply(row["final_text"] or "")),
        "marker_truncated": float(row["status"] == "turn_cap"),
        **{column: float("nan") for column in STRESS_COLUMNS},
    }


def pass_rate(grades: pd.DataFrame) -> float:
    """Share of graded rows with full reward."""
    reward = grades["reward"].dropna().to_numpy(dtype=float)
    return float(np.mean(reward >= 1.0)) if reward.size else float("nan")
