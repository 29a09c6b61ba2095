"""Pair baseline and candidate held-out grades by task: per-task metrics on both sides, and whether they compare."""

from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim_pipeline.axes import AXIS_NAMES
from sim_pipeline.defaults import DELTA_MARKER_DIRECTIONS, DELTA_MIN_SHARED_SHARE, DELTA_MIN_SHARED_TASKS
from sim_pipeline.errors import StatisticsError
from sim_pipeline.measure.passat import metric_names, task_counts, task_scores
from sim_pipeline.measure.verdict import INSUFFICIENT_DATA, NOT_COMPARABLE
from sim_pipeline.models.provenance import AGENT, spans
from sim_pipeline.protocol.statuses import ERROR_STATUSES, remedy

DIRECTIONS: dict[str, float] = {"higher_is_better": 1.0, "lower_is_better": -1.0}
MARKER_PREFIX = "marker_"
DIFFERENCE_COLUMNS: tuple[str, ...] = (
    "situation_id", "seed", *AXIS_NAMES, "metric", "before", "after", "difference",
)


@dataclass(frozen=True)
class PairedTasks:
    """Per-task metrics of both sides on their shared held-out tasks (rows in the same situation_id order)."""

    before: pd.DataFrame  # index situation_id; one column per metric
    after: pd.DataFrame
    context: pd.DataFrame  # index situation_id; seed (as text) and the axis values of each task
    directions: dict[str, float]  # metric -> +1 higher is better, -1 lower is better, in report order
    k: int
    blocked: tuple[str, str] | None  # (verdict, reason) when the sides cannot be compared at all
    ungraded_tasks: int = 0  # tasks both sides ran but one side has no graded sample of (all errored): left out


def pair_tasks(
    baseline: pd.DataFrame,
    candidate: pd.DataFrame,
    *,
    baseline_version: str,
    candidate_version: str,
    k: int | None = None,
    markers: dict[str, str] | None = None,
) -> PairedTasks:
    """Pair the held-out tasks both versions ran: pass@1, pass^k, pass@k (Chen et al. 2021) and marker means.

    Only graded rows count: a rollout that errored is neither a pass nor a fail, and a task whose samples all
    errored on one side leaves the pairing (`ungraded_tasks` counts them). `k` defaults to the number of graded
    samples most shared tasks have (a task with fewer leaves pass^k and pass@k only); `markers` maps marker
    name -> 'higher_is_better' | 'lower_is_better' (default: `DELTA_MARKER_DIRECTIONS` for the marker columns present).
    """
    markers = _resolve_markers(markers, baseline, candidate)
    before_all = _heldout(baseline, baseline_version, "baseline")
    after_all = _heldout(candidate, candidate_version, "candidate")
    before_rows, after_rows = _graded(before_all), _graded(after_all)
    before_counts, after_counts = task_counts(before_rows), task_counts(after_rows)
    shared = np.intersect1d(before_counts["situation_id"].to_numpy(), after_counts["situation_id"].to_numpy())
    ran = np.intersect1d(before_all["situation_id"].unique(), after_all["situation_id"].unique())
    if k is None:
        both = pd.concat([before_counts, after_counts])
        sizes = both.loc[both["situation_id"].isin(shared), "n"]
        k = int(sizes.mode().max()) if len(sizes) else 1
    directions = {name: 1.0 for name in metric_names(k)} | {
        MARKER_PREFIX + name: DIRECTIONS[direction] for name, direction in markers.items()
    }
    return PairedTasks(
        before=_per_task(before_rows, before_counts, k, markers).reindex(shared),
        after=_per_task(after_rows, after_counts, k, markers).reindex(shared),
        context=_context(pd.concat([after_rows, before_rows]), shared),
        directions=directions,
        k=k,
        blocked=_one_config((baseline_version, before_all), (candidate_version, after_all))
        or _comparability(before_rows, after_rows, len(before_counts), len(after_counts), shared.size,
                          ungraded=(before_all["situation_id"].nunique() - len(before_counts),
                                    after_all["situation_id"].nunique() - len(after_counts)),
                          held_out=(before_all, after_all)),
        ungraded_tasks=int(ran.size - shared.size),
    )


def paired_differences(
    baseline: pd.DataFrame,
    candidate: pd.DataFrame,
    *,
    baseline_version: str,
    candidate_version: str,
    k: int | None = None,
    markers: dict[str, str] | None = None,
) -> pd.DataFrame:
    """One row per shared held-out task and metric: seed, axis values, before, after, difference (after - before).

    Tasks where a metric is undefined on either side (fewer than k samples, marker missing) are left out.
    """
    paired = pair_tasks(baseline, candidate, baseline_version=baseline_version,
                        candidate_version=candidate_version, k=k, markers=markers)
    return long_differences(paired)


def long_differences(paired: PairedTasks) -> pd.DataFrame:
    """The `paired_differences` table of an already paired comparison."""
    frames = []
    for metric in paired.directions:
        frame = paired.context.assign(metric=metric, before=paired.before[metric], after=paired.after[metric])
        frames.append(frame.dropna(subset=["before", "after"]))
    out = pd.concat(frames).rename_axis("situation_id").reset_index() if frames else pd.DataFrame()
    if not len(out):
        return pd.DataFrame(columns=list(DIFFERENCE_COLUMNS))
    out["difference"] = out["after"] - out["before"]
    return out.loc[:, list(DIFFERENCE_COLUMNS)].reset_index(drop=True)


def _context(rows: pd.DataFrame, shared: np.ndarray) -> pd.DataFrame:
    """Seed (as text; absent -> NaN) and axis values of each shared task, indexed by situation_id."""
    columns = [col for col in ("seed", *AXIS_NAMES) if col in rows.columns]
    firsts = rows.groupby("situation_id")[columns].first() if columns else pd.DataFrame(index=shared)
    out = firsts.reindex(index=shared, columns=["seed", *AXIS_NAMES])
    # Seeds are partition keys ("0".."7"); text keeps int and str tables from pairing differently.
    out["seed"] = out["seed"].map(lambda s: s if pd.isna(s) else str(s)).astype(object)
    return out.rename_axis("situation_id")


def _comparability(
    before_rows: pd.DataFrame, after_rows: pd.DataFrame, n_before: int, n_after: int, n_shared: int,
    *, ungraded: tuple[int, int], held_out: tuple[pd.DataFrame, pd.DataFrame],
) -> tuple[str, str] | None:
    """(verdict, reason) when the two sides cannot be compared at all, else None."""
    if n_before == 0 or n_after == 0:
        index = 0 if n_before == 0 else 1
        side, lost = ("baseline", "candidate")[index], ungraded[index]
        if lost:
            # What to fix follows from how the samples errored (a user model off its protocol is no endpoint fault).
            rows = held_out[index]
            errored = rows["status"][rows["status"].isin(ERROR_STATUSES)] if "status" in rows.columns else []
            fix = remedy(pd.Series(errored).value_counts().to_dict()) or "fix the model endpoint"
            return INSUFFICIENT_DATA, (f"the {side} has no graded held-out rows: every sample of its {lost} held-out "
                                       f"tasks errored (see rollout_health); {fix}, and re-run.")
        return INSUFFICIENT_DATA, f"the {side} has no held-out rows; roll it out on the held-out split."
    judges_before = set(before_rows["judge_version"].dropna())
    judges_after = set(after_rows["judge_version"].dropna())
    if judges_before != judges_after:
        return NOT_COMPARABLE, (f"judge versions differ ({sorted(judges_before)} vs {sorted(judges_after)}); "
                                "re-grade both sides with the same judge.")
    share = n_shared / max(n_before, n_after)
    if n_shared < DELTA_MIN_SHARED_TASKS or share < DELTA_MIN_SHARED_SHARE:
        return NOT_COMPARABLE, (f"{n_shared} shared held-out tasks of {n_before} (baseline) and {n_after} "
                                f"(candidate); need >= {DELTA_MIN_SHARED_TASKS} and >= "
                                f"{DELTA_MIN_SHARED_SHARE:.0%} of each: run both on the same seeds.")
    return None


def _one_config(*sides: tuple[str, pd.DataFrame]) -> tuple[str, str] | None:
    """NOT COMPARABLE when one version's rows were made by two agent configs (a registry entry changed under the
    same name between runs): its tasks would pool two models' behaviour as one."""
    for version, rows in sides:
        mixed = spans(rows, AGENT)
        if mixed:
            return NOT_COMPARABLE, (f"{version}'s rows span two agent configs: {mixed}; its models: entry changed "
                                    f"between runs. Re-run every seed of {version} with one config.")
    return None


def _per_task(rows: pd.DataFrame, counts: pd.DataFrame, k: int, markers: dict[str, str]) -> pd.DataFrame:
    """Per-task estimators and marker means, indexed by situation_id."""
    scores = task_scores(counts, k=k).set_index("situation_id")
    columns = [MARKER_PREFIX + name for name in markers]
    present = [col for col in columns if col in rows.columns]
    means = rows.groupby("situation_id")[present].mean() if present else pd.DataFrame(index=scores.index)
    return scores.join(means).reindex(columns=[*scores.columns, *columns])


def _heldout(grades: pd.DataFrame, version: str, side: str) -> pd.DataFrame:
    """The held-out rows of one policy version, after checking the table has what the delta needs."""
    missing = [col for col in ("situation_id", "reward", "split", "judge_version") if col not in grades.columns]
    if missing:
        raise StatisticsError(f"{side} grades lack column(s) {missing}; pass the grades asset's table.")
    rows = grades.loc[grades["split"] == "heldout"]
    if "policy_version" in rows.columns and len(rows):
        mine = rows["policy_version"] == version
        if not mine.any():
            found = sorted(rows["policy_version"].dropna().unique())
            raise StatisticsError(f"{side} grades hold policy_version {found}, not {version!r}; pass that "
                                  f"version's grades or fix {side}_version.")
        rows = rows.loc[mine]
    return rows


def _graded(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows with a reward: an errored rollout or a failed judge call is neither a pass nor a fail."""
    return rows.loc[rows["reward"].notna()]


def _resolve_markers(
    markers: dict[str, str] | None, baseline: pd.DataFrame, candidate: pd.DataFrame
) -> dict[str, str]:
    """Marker name -> direction, validated; the default markers whose column either table has when None."""
    if markers is None:
        present = set(baseline.columns) | set(candidate.columns)
        return {name: d for name, d in DELTA_MARKER_DIRECTIONS.items() if MARKER_PREFIX + name in present}
    resolved = {}
    for name, direction in markers.items():
        if direction not in DIRECTIONS:
            raise StatisticsError(f"marker {name!r} has direction {direction!r}; use one of {sorted(DIRECTIONS)}.")
        resolved[name.removeprefix(MARKER_PREFIX)] = direction
    return resolved
