"""Publish gate: the last check before a cut leaves the warehouse as training data.

It refuses a cut that is ungraded (or no longer matches its grades), graded by an untrusted judge
without a recorded opt-out, a GRPO cut with no mixed group or a split group, any held-out leak, and
any training row carrying judge-only text. Each reason is one sentence naming the fix.
"""

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from sim_pipeline import defaults
from sim_pipeline.cut.decontaminate import find_leaks
from sim_pipeline.cut.pool import GRADE_COLUMNS, HELDOUT_SPLIT, graded_mask, require_columns
from sim_pipeline.errors import CutError

CutKind = Literal["sft", "preference", "grpo", "reward_model"]
CUT_KINDS: tuple[str, ...] = ("sft", "preference", "grpo", "reward_model")
MESSAGE_COLUMNS = ("messages", "prompt", "chosen", "rejected", "completion")
# Each rollout id column of a cut and the reward column it carries for that rollout.
ROLLOUT_REWARD_COLUMNS = {
    "rollout_id": "reward", "chosen_rollout_id": "chosen_reward", "rejected_rollout_id": "rejected_reward",
}
_JUDGE_ONLY = re.compile(defaults.JUDGE_ONLY_PATTERN, re.IGNORECASE)


@dataclass(frozen=True)
class GateResult:
    """Whether a cut may be published, and one sentence per refusal naming its fix."""

    passed: bool
    reasons: tuple[str, ...]


def publish_gate(
    cut: pd.DataFrame,
    *,
    kind: CutKind,
    grades: pd.DataFrame,
    judge_trusted: bool,
    opt_out: bool,
    heldout_situation_ids: set[str],
    heldout_openings: list[str],
    group_stats: dict | None = None,
) -> GateResult:
    """Decide whether a cut may be published as training data, with every refusal's reason."""
    if kind not in CUT_KINDS:
        raise CutError(f"unknown cut kind {kind!r}: use one of {CUT_KINDS}")
    id_columns = [column for column in ROLLOUT_REWARD_COLUMNS if column in cut.columns]
    needed = ["situation_id", "judge_version", *(ROLLOUT_REWARD_COLUMNS[c] for c in id_columns)]
    if not id_columns or any(column not in cut.columns for column in needed):
        raise CutError(
            f"the {kind} cut must carry situation_id, judge_version, a rollout id column "
            f"({list(ROLLOUT_REWARD_COLUMNS)}) and its reward; build it with sim_pipeline.cut"
        )
    reasons = [
        *_grading_reasons(cut, id_columns, grades),
        *_trust_reasons(judge_trusted=judge_trusted, opt_out=opt_out),
        *(_group_reasons(cut, group_stats) if kind == "grpo" else []),
        *_leak_reasons(cut, id_columns, grades, heldout_situation_ids, heldout_openings),
        *_judge_only_reasons(cut),
    ]
    return GateResult(passed=not reasons, reasons=tuple(reasons))


def _grading_reasons(cut: pd.DataFrame, id_columns: list[str], grades: pd.DataFrame) -> list[str]:
    if grades.empty:
        return ["the grades table is empty: run the grade step on these rollouts before publishing a cut."]
    require_columns(grades, GRADE_COLUMNS, name="grades")
    by_id = grades.drop_duplicates("rollout_id").set_index("rollout_id")
    graded = pd.Series(graded_mask(grades), index=grades["rollout_id"]).groupby(level=0).all()
    missing = not_graded = other_judge = other_reward = 0
    for column in id_columns:
        ids = cut[column]
        known = ids.isin(by_id.index).to_numpy(dtype=bool)
        missing += int((~known).sum())
        is_graded = graded.loc[ids[known]].to_numpy(dtype=bool)
        not_graded += int((~is_graded).sum())
        # Compare judge and reward only where a grade stands, so one fault is reported once.
        rows = cut.loc[known].loc[is_graded]
        grade = by_id.loc[rows[column]]
        other_judge += int((grade["judge_version"].to_numpy() != rows["judge_version"].to_numpy()).sum())
        cut_reward = rows[ROLLOUT_REWARD_COLUMNS[column]].to_numpy(dtype=float)
        other_reward += int((grade["reward"].to_numpy(dtype=float) != cut_reward).sum())
    reasons = []
    if missing:
        reasons.append(f"{missing} cut rollouts have no grade: grade every rollout, then rebuild the cut.")
    if not_graded:
        reasons.append(
            f"{not_graded} cut rollouts have no reward or a judge_status outside "
            f"{defaults.GRADED_JUDGE_STATUSES}: re-run the judge on them, or rebuild the cut to drop them."
        )
    if other_judge:
        reasons.append(
            f"{other_judge} cut rollouts name a judge_version their grade does not: "
            f"rebuild the cut from these grades."
        )
    if other_reward:
        reasons.append(
            f"{other_reward} cut rollouts carry a reward that differs from their grade: "
            f"rebuild the cut from these grades."
        )
    return reasons


def _trust_reasons(*, judge_trusted: bool, opt_out: bool) -> list[str]:
    if judge_trusted or opt_out:
        return []
    reason = (
        "the judge failed judge_trust and no opt-out is recorded: fix the judge until judge_trust passes, "
        "or record an explicit opt-out."
    )
    return [reason]


def grpo_applicable(group_stats: dict | None) -> bool:
    """Whether a GRPO cut can exist: some complete prompt group has GRPO_MIN_GROUP samples (not so with --samples 1)."""
    if not group_stats or not group_stats.get("groups"):
        return True  # no train rollouts, or no counts: the gate's other reasons speak
    return group_stats.get("too_small", 0) < group_stats["groups"] - group_stats.get("incomplete", 0)


def _group_reasons(cut: pd.DataFrame, group_stats: dict | None) -> list[str]:
    if "group_id" not in cut.columns or "group_size" not in cut.columns or "reward" not in cut.columns:
        raise CutError("a grpo cut must carry group_id, group_size and reward; build it with select_for_rl")
    by_group = cut.assign(passed=cut["reward"] == defaults.PASS_REWARD).groupby("group_id", sort=True)
    rows, size, passes = by_group.size(), by_group["group_size"].first(), by_group["passed"].sum()
    reasons = []
    mixed = int(((passes > 0) & (passes < rows)).sum())
    if not grpo_applicable(group_stats):
        return reasons  # one sample per prompt: no group can exist, the cut is empty by construction, not refused
    if mixed == 0 or (group_stats is not None and group_stats.get("mixed", 0) == 0):
        reasons.append(
            "the grpo cut has no mixed group (every group all passes or all fails): "
            "roll out more samples per prompt or harder situations."
        )
    split = int((rows != size).sum())
    if split:
        reasons.append(
            f"{split} grpo groups are split (rows differ from group_size): publish whole groups only."
        )
    return reasons


def _leak_reasons(
    cut: pd.DataFrame,
    id_columns: list[str],
    grades: pd.DataFrame,
    ids: Iterable[str],
    openings: Iterable[str],
) -> list[str]:
    leaks = find_leaks(cut, heldout_situation_ids=ids, heldout_openings=openings)
    heldout_graded = 0
    if "split" in grades.columns:
        heldout_rollouts = set(grades.loc[grades["split"] == HELDOUT_SPLIT, "rollout_id"])
        heldout_graded = int(np.sum([cut[column].isin(heldout_rollouts).sum() for column in id_columns]))
    reasons = []
    if leaks.by_id.any():
        reasons.append(
            f"{int(leaks.by_id.sum())} rows come from held-out situations: "
            f"rebuild the cut passing every held-out situation id."
        )
    if leaks.by_ngram.any():
        reasons.append(
            f"{int(leaks.by_ngram.sum())} rows share a {defaults.DECONTAMINATION_NGRAM}-word run with a "
            f"held-out opening: rebuild the cut, passing every held-out opening."
        )
    if heldout_graded:
        reasons.append(
            f"{heldout_graded} cut rollouts are graded as held-out: rebuild the cut from train rollouts only."
        )
    return reasons


def _judge_only_reasons(cut: pd.DataFrame) -> list[str]:
    columns = [column for column in (*MESSAGE_COLUMNS, "tools") if column in cut.columns]
    # Column by column, zipped: iterrows built a Series per row, most of this check's time on a cut of ~400 rows.
    flagged = sum(
        any(_JUDGE_ONLY.search(text) for value in values for text in _texts(value))
        for values in zip(*(cut[column] for column in columns))
    )
    if not flagged:
        return []
    reason = (
        f"{flagged} rows contain judge-only text ({defaults.JUDGE_ONLY_MARKER!r} or a variant): "
        f"keep judge prompts and rubrics out of agent messages and tool results, then rebuild the cut."
    )
    return [reason]


def _texts(value: Any) -> Iterable[str]:
    """Every string inside a value: message contents, tool-call arguments and names, JSON strings."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _texts(item)
    elif isinstance(value, Sequence | np.ndarray):
        for item in value:
            yield from _texts(item)
