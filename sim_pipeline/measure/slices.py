"""The paired delta sliced by axis value (tool, stance, tool_condition...): where a change helped or hurt."""

import numpy as np
import pandas as pd

from sim_pipeline.axes import AXIS_NAMES
from sim_pipeline.defaults import BOOTSTRAP_RESAMPLES, DELTA_SLICE_MIN_TASKS
from sim_pipeline.errors import StatisticsError
from sim_pipeline.measure.binomial import benjamini_hochberg
from sim_pipeline.measure.pairing import pair_tasks
from sim_pipeline.measure.verdict import COMPARISON_COLUMNS, INSUFFICIENT_DATA, compare_paired

SLICE_COLUMNS: tuple[str, ...] = ("axis", "value", "metric", *COMPARISON_COLUMNS[:-2], "q_value",
                                  *COMPARISON_COLUMNS[-2:])


def delta_slices(
    baseline: pd.DataFrame,
    candidate: pd.DataFrame,
    *,
    baseline_version: str,
    candidate_version: str,
    axes: tuple[str, ...] = AXIS_NAMES,
    metric: str = "pass@1",
    k: int | None = None,
    min_tasks: int = DELTA_SLICE_MIN_TASKS,
    seed: int = 0,
    n_resamples: int = BOOTSTRAP_RESAMPLES,
) -> pd.DataFrame:
    """One paired comparison of `metric` per (axis, value) slice of the shared held-out tasks.

    Each slice gets the delta report's paired bootstrap interval (Hall 1988), sign-flip p (Fisher 1935) and
    verdict; slices with fewer than `min_tasks` paired tasks are INSUFFICIENT DATA, and those with fewer than
    `MIN_TASKS_FOR_VERDICT` show their numbers with an INCONCLUSIVE verdict (see `verdict_of`). Many
    slices mean many tests, so `q_value` adjusts the p-values of the tested slices for the false discovery
    rate (Benjamini & Hochberg 1995): read a slice PASS/FAIL whose q is large as a lead, not a finding.
    """
    unknown = [axis for axis in axes if axis not in AXIS_NAMES]
    if unknown:
        raise StatisticsError(f"axes {unknown} are not situation axes; use some of {list(AXIS_NAMES)}.")
    if min_tasks < 1:
        raise StatisticsError(f"min_tasks={min_tasks!r} must be at least 1; {DELTA_SLICE_MIN_TASKS} is the "
                              "default.")
    markers = {} if metric.startswith("pass") else None  # pass metrics need no marker columns
    paired = pair_tasks(baseline, candidate, baseline_version=baseline_version,
                        candidate_version=candidate_version, k=k, markers=markers)
    if metric not in paired.directions:
        raise StatisticsError(f"metric={metric!r} is not a paired metric here; use one of "
                              f"{list(paired.directions)}.")
    before = paired.before[metric].to_numpy(float)
    after = paired.after[metric].to_numpy(float)
    rows = []
    for axis in axes:
        values = paired.context[axis].to_numpy(dtype=object)
        for value in sorted({v for v in values if isinstance(v, str)}):
            mask = values == value
            row = {"axis": axis, "value": value, "metric": metric}
            row |= compare_paired(before[mask], after[mask], sign=paired.directions[metric],
                                  blocked=paired.blocked, min_tasks=min_tasks, seed=seed, n_resamples=n_resamples)
            if row["verdict"] == INSUFFICIENT_DATA and paired.blocked is None:
                row["reason"] = f"only {row['n_tasks']} paired tasks in this slice; need {min_tasks}."
            rows.append(row)
    table = pd.DataFrame(rows, columns=[c for c in SLICE_COLUMNS if c != "q_value"])
    table.insert(SLICE_COLUMNS.index("q_value"), "q_value", _false_discovery_q(table["p_value"].to_numpy(float)))
    return table


def _false_discovery_q(p_values: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values of the finite entries; NaN stays NaN."""
    out = np.full(p_values.shape, np.nan)
    tested = np.isfinite(p_values)
    if tested.any():
        out[tested] = benjamini_hochberg(p_values[tested])
    return out
