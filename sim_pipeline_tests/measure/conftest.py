"""A builder of small held-out grades tables with chosen per-task rewards, seeds and axis values."""

from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest

from sim_pipeline.axes import AXIS_NAMES

# Axis values cycle with the task index, with coprime cycle lengths so every pair of values co-occurs.
AXIS_CYCLES: dict[str, tuple[str, ...]] = {
    "tool": ("get_order", "cancel_order", "refund_order"),
    "rule": ("verify_identity", "unspecified"),
    "stance": ("ordinary", "adversarial", "hurried", "unsure", "retry"),
    "world_state": ("entity_exists", "entity_missing", "already_acted_on", "unknown", "duplicate_entity",
                    "partially_completed", "entity_exists"),
    "tool_condition": ("success", "timeout"),
    "history": ("fresh", "prior_failure", "repeat_visit"),
}

GradesBuilder = Callable[..., pd.DataFrame]


def build_grades(
    version: str,
    rewards: np.ndarray,
    *,
    seeds: np.ndarray | None = None,
    judge: str = "sim/judge@abc123",
    refusal: np.ndarray | None = None,
) -> pd.DataFrame:
    """Held-out grades: rewards[t, s] is task t's sample s; seeds[t] its seed (0 by default)."""
    rewards = np.asarray(rewards, dtype=float)
    n_tasks, samples = rewards.shape
    seeds = np.zeros(n_tasks, dtype=int) if seeds is None else np.asarray(seeds)
    refusal = np.zeros_like(rewards) if refusal is None else np.asarray(refusal, dtype=float)
    rows = [
        {"rollout_id": f"{version}-{t}-{s}", "situation_id": f"s{t}", "seed": int(seeds[t]), "policy_version": version,
         "split": "heldout", "judge_version": judge, "reward": rewards[t, s], "sample_index": s,
         **{axis: AXIS_CYCLES[axis][t % len(AXIS_CYCLES[axis])] for axis in AXIS_NAMES},
         "marker_refusal": refusal[t, s]}
        for t in range(n_tasks) for s in range(samples)
    ]
    return pd.DataFrame(rows)


@pytest.fixture
def grades_builder() -> GradesBuilder:
    """The `build_grades` function."""
    return build_grades
