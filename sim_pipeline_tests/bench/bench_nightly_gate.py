"""How often the judge-trust gate refuses a stock nightly partition (issue 30, item 6).

The nightly requests the seed job for every stock seed with run key `seed|<seed>|<date>`; the date is in the run
key only, and the seed job's one carried-over input (the previous plan) gives back the same plan, so a night's
partitions are byte-identical to the night before's (test_nightly_gate.py runs two nights and compares). The
population the gate meets is therefore seed x version, not seed x date: this bench grades every embedded version on
the stock seeds and on further seeds, at stock settings (the `simulation` resource's defaults, as the schedule and
`sim-pipeline run` use them), through the functions the assets call, and counts the partitions whose judge-trust
verdict is not `trusted`. With no refusal in n partitions, the one-sided 95% Clopper-Pearson upper bound is
1 - 0.05^(1/n): 2.5% at 120, so "< 1%" needs about 300 refusal-free partitions; the bound is recorded with the rate.

The baseline is the point-estimate gate of the commit before the calibrated one (b22a7eb), applied to the same grades
in a subprocess that imports that commit's tree (from git; no baseline outside a git checkout).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd
from scipy import stats as sps
from upath import UPath

from sim_pipeline import cover, defaults
from sim_pipeline.axes import axis_values, stress_rows, validated_constraints
from sim_pipeline.defs.assets import policy_of, situations_of
from sim_pipeline.defs.checks import trust_report
from sim_pipeline.defs.resources import ModelGatewayResource, RegistryResource, SimulationResource
from sim_pipeline.domain import load_domain
from sim_pipeline.grade.grading import grade_rollouts
from sim_pipeline.grade.judge_trust import TRUSTED, JudgeTrustReport, flag_lines, with_recorded_trust
from sim_pipeline.rollout.row import rollout_table
from sim_pipeline.rollout.simulate import simulate
from sim_pipeline.search.situations import build_situations
from sim_pipeline.warehouse import read_table, write_table
from sim_pipeline.world.state import build_state, state_from_table, state_table

DOMAIN, VERSIONS = "retail", ("agent-v1", "agent-v2")
NIGHTLY_EXTRA_SEEDS = 22  # seeds past the 8 stock ones: 30 seeds x 2 versions = 60 partitions, ~8 CPU-minutes
NIGHTLY_WORKERS = 2  # processes grading seeds side by side (the bench machine has 2 cores)
OLD_GATE_COMMIT = "b22a7ebee7c42f4cccfc977a965763cd4014bcd7"  # main before the calibrated gate (75c2281)
UPPER_CONFIDENCE = 0.95  # one-sided Clopper-Pearson bound on the refusal rate
REPO = Path(__file__).resolve().parents[2]


def _roundtrip(table: pd.DataFrame, where: Path) -> pd.DataFrame:
    """The table as the next step reads it: written and read back through the warehouse's Parquet, as the IO manager does."""
    path = UPath(where)
    write_table(path, table)
    return read_table(path)


def partition_grades(seed: str, workdir: Path,
                     versions: tuple[str, ...] = VERSIONS) -> dict[str, tuple[pd.DataFrame, JudgeTrustReport]]:
    """Every version's grades on one seed (with the recorded verdict, as the grades step writes them) and its
    judge-trust report: the assets' steps at stock settings, each table passed on through Parquet."""
    domain, simulation = load_domain(DOMAIN), SimulationResource()
    registry, gateway = RegistryResource(), ModelGatewayResource(cache_dir=None)
    values, constraints = axis_values(domain), validated_constraints(domain)
    cells = _roundtrip(cover.covering_array(values, seed=int(seed), constraints=constraints,
                                            must_include=stress_rows(domain, constraints), previous=None),
                       workdir / f"covering_array-{seed}.parquet")
    world = _roundtrip(state_table(build_state(domain, int(seed))), workdir / f"world-{seed}.parquet")
    situations = _roundtrip(build_situations(domain, state_from_table(world), cells, seed=int(seed),
                                             n_phrasings=simulation.settings().n_phrasings),
                            workdir / f"situations-{seed}.parquet")
    out = {}
    for slug in versions:
        version = registry.version(slug)
        models = gateway.gateway(registry.models())
        search, rows, _ = asyncio.run(simulate(situations_of(situations), policy_of(version), domain=domain,
                                               state=state_from_table(world), gateway=models,
                                               settings=simulation.settings()))
        search = _roundtrip(search, workdir / f"search-{slug}-{seed}.parquet")
        rollouts = _roundtrip(rollout_table(rows), workdir / f"rollouts-{slug}-{seed}.parquet")
        by_id = {s.situation_id: s for s in situations_of(situations) + situations_of(search)}
        table = asyncio.run(grade_rollouts(rollouts, by_id, domain=domain, judge_model=version.judge_model,
                                           gateway=models, reply_classifier=version.reply_classifier))
        report = trust_report(table, version)
        out[slug] = (_roundtrip(with_recorded_trust(table, report), workdir / f"grades-{slug}-{seed}.parquet"),
                     report)
    return out


def _seed_verdicts(seed: str) -> list[dict]:
    """One row per version of a seed: its verdict, flags and undecided checks (what a refusal's reader needs)."""
    with tempfile.TemporaryDirectory() as tmp:
        tables = partition_grades(seed, Path(tmp))
        rows = []
        for slug, (table, report) in tables.items():
            grades_file = Path(tempfile.gettempdir()) / f"nightly-gate-{os.getpid()}-{slug}-{seed}.parquet"
            table.to_parquet(grades_file)  # for the old gate's subprocess; removed after it ran
            rows.append({"seed": seed, "version": slug, "verdict": report.verdict,
                         "flags": flag_lines(report),
                         "n_gold": int(report.metrics.get("n_gold", 0)), "grades_file": str(grades_file)})
    return rows


def upper_bound(refused: int, n: int, confidence: float = UPPER_CONFIDENCE) -> float:
    """The one-sided Clopper-Pearson upper bound on a rate seen `refused` times in `n` (1 - (1-c)^(1/n) at 0)."""
    return 1.0 if refused >= n else float(sps.beta.ppf(confidence, refused + 1, n - refused))


_OLD_GATE = """
import json, sys
import pandas as pd
from sim_pipeline.grade.judge_trust import judge_trust_report
out = []
for line in sys.stdin:
    job = json.loads(line)
    report = judge_trust_report(pd.read_parquet(job["grades_file"]), policy_model=job["policy_model"],
                                judge_model=job["judge_model"])
    out.append({"verdict": report.verdict, "flags": [f.name for f in report.flags]})
print(json.dumps(out))
"""


def old_gate_verdicts(rows: list[dict]) -> list[dict] | None:
    """The point-estimate gate's verdicts on the same grades files (None when the old tree cannot be checked out)."""
    registry = RegistryResource()
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", OLD_GATE_COMMIT, "sim_pipeline"],
                                 capture_output=True)
        if archive.returncode:
            return None
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        jobs = "".join(json.dumps({"grades_file": r["grades_file"],
                                   "policy_model": registry.version(r["version"]).agent_backend,
                                   "judge_model": registry.version(r["version"]).judge_backend}) + "\n" for r in rows)
        env = {**os.environ, "PYTHONPATH": tmp}
        done = subprocess.run([sys.executable, "-c", _OLD_GATE], input=jobs, capture_output=True, text=True, env=env,
                              cwd=tmp)
        if done.returncode:  # the old tree no longer runs here (a dependency moved on): no baseline, said why
            print(f"  no baseline: the gate of {OLD_GATE_COMMIT[:7]} failed: {done.stderr[-500:]}", file=sys.stderr)
            return None
        return json.loads(done.stdout.strip().splitlines()[-1])


def nightly_seeds() -> list[str]:
    """The stock seeds, then NIGHTLY_EXTRA_SEEDS more."""
    stock = list(defaults.SEEDS)
    return stock + [str(int(stock[-1]) + 1 + i) for i in range(NIGHTLY_EXTRA_SEEDS)]


def figures() -> list[dict]:
    """The share of seed-version partitions the gate refuses at stock settings, with its bound and the old gate's."""
    seeds = nightly_seeds()
    with ProcessPoolExecutor(NIGHTLY_WORKERS) as pool:
        rows = [row for seed_rows in pool.map(_seed_verdicts, seeds) for row in seed_rows]
    try:
        old = old_gate_verdicts(rows)
    finally:
        for row in rows:
            Path(row["grades_file"]).unlink(missing_ok=True)
    refused = [r for r in rows if r["verdict"] != TRUSTED]
    for r in refused:  # why, for whoever reads the bench log
        print(f"  refused {r['version']} seed {r['seed']} ({r['verdict']}, {r['n_gold']} gold rows): "
              + "; ".join(r["flags"]), file=sys.stderr)
    n = len(rows)
    stock = [r for r in rows if r["seed"] in defaults.SEEDS]
    figure = {"name": "nightly_gate_refusal_rate", "value": len(refused) / n,
              "unit": "share of seed-version partitions", "goal": "< 0.01", "n": n, "refused": len(refused),
              "seeds": len(seeds), "versions": list(VERSIONS),
              "refused_stock_seeds": sum(r["verdict"] != TRUSTED for r in stock), "stock_partitions": len(stock)}
    if old is not None:
        old_refused = sum(o["verdict"] != TRUSTED for o in old)
        figure |= {"baseline_name": "nightly_gate_refusal_rate_point_estimate_gate", "baseline_value": old_refused / n,
                   "baseline_refused": old_refused}
        if old_refused:
            figure["ratio"] = figure["value"] / figure["baseline_value"]
        flagged: dict[str, int] = {}
        for o in old:
            for name in o["flags"]:
                flagged[name] = flagged.get(name, 0) + 1
        figure["baseline_flags"] = flagged
    return [figure,
            {"name": "nightly_gate_refusal_upper95", "value": upper_bound(len(refused), n),
             "unit": "one-sided 95% Clopper-Pearson upper bound on the refusal rate", "n": n},
            {"name": "nightly_gate_partitions", "value": float(n), "unit": "seed-version partitions graded"}]
