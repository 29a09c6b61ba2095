"""Rollout health: how many rollouts errored outside the agent's conduct (never graded), by status and by tool.

Above `MAX_ERROR_SHARE` the partition's numbers would describe whatever the failing endpoint let through, not the
planned situations, so the blocking `rollout_health` check stops grades, cuts, scores and the delta.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from sim_pipeline import defaults
from sim_pipeline.protocol.statuses import ERROR_STATUSES, remedy


@dataclass(frozen=True)
class Health:
    """Ungraded (errored) rollouts of one partition: counts by status, the share, and the verdict."""

    rollouts: int
    errors: int
    by_status: dict[str, int]
    max_share: float
    examples: tuple[str, ...]  # a few error texts, to say what failed

    @property
    def share(self) -> float:
        """Errored rollouts as a share of all (0 when there are none at all)."""
        return self.errors / self.rollouts if self.rollouts else 0.0

    @property
    def passed(self) -> bool:
        """Whether the error share is within the allowed maximum (a partition with no rollouts fails)."""
        return self.rollouts > 0 and self.share <= self.max_share

    def sentence(self) -> str:
        """The health in one line, e.g. '40 of 40 rollouts errored (100.0%: provider_error 40); allowed 5%'."""
        if not self.rollouts:
            return "no rollouts"
        detail = ", ".join(f"{k} {v}" for k, v in self.by_status.items())
        return (f"{self.errors} of {self.rollouts} rollouts errored ({self.share:.1%}" + (f": {detail}" if detail else "")
                + f"); allowed {self.max_share:.0%}")

    def remedy(self) -> str:
        """What to fix, from the errored rollouts' statuses, most frequent first (one clause per status seen)."""
        return remedy(self.by_status) or "roll the partition out"


def rollout_health(rows: pd.DataFrame, *, max_share: float = defaults.MAX_ERROR_SHARE) -> Health:
    """The error share of a rollouts table, by status (`tool_error_shares` gives it by tool)."""
    if not len(rows):
        return Health(0, 0, {}, max_share, ())
    errored = rows[rows["status"].isin(ERROR_STATUSES)]
    by_status = {str(k): int(v) for k, v in errored["status"].value_counts().sort_index().items()}
    examples = tuple(dict.fromkeys(str(e)[:200] for e in errored["error"].dropna()))[:3] if "error" in rows else ()
    return Health(len(rows), len(errored), by_status, max_share, examples)


def tool_error_shares(rows: pd.DataFrame) -> pd.DataFrame:
    """Per tool axis value: rollouts, errored rollouts and their share (a failing tool or endpoint stands out)."""
    if not len(rows):
        return pd.DataFrame(columns=["tool", "rollouts", "errors", "share"])
    table = rows.assign(error=rows["status"].isin(ERROR_STATUSES)).groupby("tool", sort=True)["error"].agg(
        rollouts="size", errors="sum").reset_index()
    table["errors"] = table["errors"].astype(int)
    table["share"] = (table["errors"] / table["rollouts"]).round(4)
    return table
