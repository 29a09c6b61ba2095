"""How often the judge-trust gate refuses flawed judges, and how often it refuses a good one (issue 30, item 1).

Retail is run at `make run`'s size on seeds 0-3 (both versions: 8 partitions, ~4,300 rollouts). Every rollout is
graded again by each flawed judge of flawed_judges.py (through the `python:` backend, stress tests included), and
the gate is applied to JUDGE_GATE_DRAWS gold sets per judge, each the rows of as many tasks as a partition has,
drawn without replacement from the pooled partitions (the same draws for every judge). A refusal is any verdict but
`trusted`; beside it, the share of gold sets on which a counterfactual probe flags the judge. The good judge is the
embedded `sim/judge` as the run graded (2% slips, clustered by task); the eight real
partitions' verdicts are reported too, as the nightly would see them.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from upath import UPath

from sim_pipeline.domain import load_domain
from sim_pipeline.grade.grading import grade_rollouts
from sim_pipeline.grade.judge_trust import TRUSTED, judge_trust_report
from sim_pipeline.grade.probes import COUNTERFACTUAL
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.situation import Situation
from sim_pipeline.warehouse import read_table
from sim_pipeline_tests.bench.flawed_judges import FLAWED

DOMAIN, SEEDS, VERSIONS = "retail", ("0", "1", "2", "3"), ("agent-v1", "agent-v2")
JUDGE_GATE_DRAWS = 200  # gold sets per judge (the issue asks >= 200)
DRAW_SEED = 30


def _run(workdir: Path) -> Path:
    env = {**os.environ, "DAGSTER_HOME": str(workdir / "dagster_home"), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    warehouse = workdir / "warehouse"
    subprocess.run([sys.executable, "-m", "sim_pipeline.cli", "run", "--domain", DOMAIN, "--seeds", ",".join(SEEDS),
                    "--warehouse", str(warehouse), "--allow-failed-checks"], cwd=workdir, env=env, check=True,
                   capture_output=True)
    return warehouse / DOMAIN


def _partitions(base: Path) -> list[tuple[str, pd.DataFrame, dict[str, Situation], pd.DataFrame]]:
    """(partition, rollouts, situations by id, the run's own grades) of every version and seed."""
    out = []
    for seed in SEEDS:
        grid = read_table(UPath(base / "situations" / f"seed={seed}.parquet"))
        for version in VERSIONS:
            part = f"policy_version={version}/seed={seed}.parquet"
            search = read_table(UPath(base / "search" / part))
            by_id = {s.situation_id: s for s in map(Situation.from_row, pd.concat([grid, search]).to_dict("records"))}
            out.append((f"{version}|{seed}", read_table(UPath(base / "rollouts" / part)), by_id,
                        read_table(UPath(base / "grades" / part))))
    return out


def _pooled(tables: list[tuple[str, pd.DataFrame]]) -> pd.DataFrame:
    """One table of every partition's grades, task ids made unique per partition."""
    return pd.concat([t.assign(situation_id=name + "|" + t["situation_id"]) for name, t in tables], ignore_index=True)


COUNTERFACTUAL_FLAGS = {f"probe_{p}" for p in COUNTERFACTUAL}


def _refusals(pool: pd.DataFrame, draws: list[np.ndarray]) -> tuple[float, float]:
    """The shares of gold sets (each a set of task ids) on which the gate does not trust the judge, and on which a
    counterfactual probe (closing swap, tool renamed) flags it."""
    groups = pool.groupby("situation_id", sort=True).indices
    tasks = np.array(sorted(groups))
    refused = counterfactual = 0
    for draw in draws:
        rows = np.concatenate([groups[t] for t in tasks[draw]])
        report = judge_trust_report(pool.iloc[np.sort(rows)], policy_model="sim/agent", judge_model=None)
        refused += report.verdict != TRUSTED
        counterfactual += bool(COUNTERFACTUAL_FLAGS & {f.name for f in report.flags})
    return refused / len(draws), counterfactual / len(draws)


def figures() -> list[dict]:
    """Refusal rates of the gate per judge, and the good judge's on the real partitions."""
    with tempfile.TemporaryDirectory() as tmp:
        parts = _partitions(_run(Path(tmp)))
    domain = load_domain(DOMAIN)
    good = _pooled([(name, grades) for name, _, _, grades in parts])
    tasks = good["situation_id"].nunique()
    size = int(np.median([grades["situation_id"].nunique() for _, _, _, grades in parts]))
    gen = np.random.default_rng(DRAW_SEED)
    draws = [gen.choice(tasks, size=size, replace=False) for _ in range(JUDGE_GATE_DRAWS)]
    real = sum(judge_trust_report(g, policy_model="sim/agent", judge_model=None).verdict != TRUSTED
               for _, _, _, g in parts)
    good_refused, good_counterfactual = _refusals(good, draws)
    rows = [
        {"name": "judge_gate_false_refusal_good", "value": good_refused, "unit": "share of gold sets",
         "goal": "<= 0.02"},
        {"name": "judge_gate_counterfactual_flags_good", "value": good_counterfactual, "unit": "share of gold sets"},
        {"name": "judge_gate_refused_real_partitions_good", "value": float(real), "unit": f"of {len(parts)} partitions"},
        {"name": "judge_gate_gold_set_tasks", "value": float(size), "unit": "tasks per drawn gold set"},
    ]
    for flaw in FLAWED:
        gateway = Gateway(fast_path=True)
        model = f"python:sim_pipeline_tests.bench.flawed_judges:{flaw}"
        tables = [(name, asyncio.run(grade_rollouts(rollouts, by_id, domain=domain, judge_model=model,
                                                    gateway=gateway)))
                  for name, rollouts, by_id, _ in parts]
        refused, counterfactual = _refusals(_pooled(tables), draws)
        rows.append({"name": f"judge_gate_refuses_{flaw}", "value": refused, "unit": "share of gold sets",
                     "goal": ">= 0.95"})
        rows.append({"name": f"judge_gate_counterfactual_flags_{flaw}", "value": counterfactual,
                     "unit": "share of gold sets"})
    return rows
