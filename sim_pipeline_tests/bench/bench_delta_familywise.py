"""How often a delta table of two identical versions shows a PASS or FAIL somewhere (issue 30, item 3).

Each table compares two versions that are the same agent: every held-out task has one pass rate (Beta(1, 1) over
tasks) and one refusal rate, and both versions draw their k = 4 samples from them independently, as two runs of
one policy would. The table's six rows (pass@1, pass^4, pass@4 and the markers) are tested as `delta_report` tests
them; the figure is the share of tables with any PASS or FAIL. The baseline, measured on the same tables, is the
per-row rule alone (each row at DELTA_ALPHA, no family-wise adjustment): the verdicts Holm's adjustment withdrew are
the ones whose reason says so.
"""

import numpy as np
import pandas as pd

from sim_pipeline.measure.delta import FAIL, PASS, delta_report

TABLES = 200  # identical-version tables per size
SIZES = (35, 100)  # held-out tasks: make run's size, and a larger evaluation
SAMPLES = 4
RESAMPLES = 2000  # per row; the verdict's p and interval are stable at this count for these sizes


def _grades(version: str, rates: np.ndarray, refusals: np.ndarray, gen: np.random.Generator) -> pd.DataFrame:
    n = rates.size
    task = np.repeat(np.arange(n), SAMPLES)
    return pd.DataFrame({
        "rollout_id": [f"{version}-{t}-{s}" for t in range(n) for s in range(SAMPLES)],
        "situation_id": [f"s{t}" for t in task], "seed": 0, "policy_version": version, "split": "heldout",
        "judge_version": "sim/judge@abc", "sample_index": np.tile(np.arange(SAMPLES), n),
        "reward": (gen.random(task.size) < rates[task]).astype(float),
        "marker_refusal": (gen.random(task.size) < refusals[task]).astype(float),
        "marker_argument_grounding": (gen.random(task.size) < 0.9).astype(float),
    })


def _null_tables(n_tasks: int, seed: int) -> tuple[float, float]:
    """(share of tables with a PASS/FAIL, the same without the family-wise adjustment)."""
    gen = np.random.default_rng(seed)
    adjusted = raw = 0
    for i in range(TABLES):
        rates, refusals = gen.beta(1, 1, n_tasks), gen.beta(1, 4, n_tasks)
        table = delta_report(_grades("v1", rates, refusals, gen), _grades("v2", rates, refusals, gen),
                             baseline_version="v1", candidate_version="v2", n_resamples=RESAMPLES, seed=i)
        adjusted += table["verdict"].isin([PASS, FAIL]).any()
        raw += (table["verdict"].isin([PASS, FAIL]) | table["reason"].str.contains("Not confirmed across")).any()
    return adjusted / TABLES, raw / TABLES


def figures() -> list[dict]:
    """The family-wise false-verdict rate of identical versions, per size, against the per-row rule."""
    rows = []
    for n_tasks in SIZES:
        adjusted, raw = _null_tables(n_tasks, seed=n_tasks)
        rows.append({"name": f"delta_familywise_null_false_verdicts_{n_tasks}_tasks", "value": adjusted,
                     "unit": "share of tables", "goal": "<= 0.05", "baseline_name": "per_row_rule_false_verdicts",
                     "baseline_value": raw, "ratio": adjusted / raw if raw else float("nan")})
    return rows
