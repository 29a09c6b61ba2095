"""The figures docs/ shows, computed, never typed: the token lengths of each domain's exported cuts
(docs/training.md) and the scaling model (docs/scaling.md).

    python -m sim_pipeline_tests.docs_figures                       # fresh runs of the three domains (make run's sizes)
    python -m sim_pipeline_tests.docs_figures --warehouse data/warehouse   # the runs already in a warehouse
    python -m sim_pipeline_tests.docs_figures --check               # exit 1 when the docs differ, writing nothing
    python -m sim_pipeline_tests.docs_figures --tables scaling      # only the scaling model (a fresh retail run)

tokens: it exports each domain's v2 agent's cuts of one seed as TRL and verl files (the publish gate applies, as for
any export), measures them as `sim-pipeline export --stats` does (cl100k tokens; verl's tool_chars in characters),
and rewrites the table between the `tokens:start` / `tokens:end` markers of docs/training.md.

scaling: it measures the shape of retail's seed-0 partitions (rollouts, calls and prompt tokens per rollout) on the
same runs, counts the steps of a partition in the Definitions, reads the provider limits from deploy/dagster.yaml
and four figures `make bench` wrote to .bench/results.jsonl (the Celery overhead per step, the marginal CPU per
rollout, the CPU per rollout at 16x against 1x, the gateway's CPU per HTTP call), computes the estimate of
sim_pipeline_tests/scaling_model.py from them, and rewrites the tables between the `scaling:start` / `scaling:end`
markers of docs/scaling.md.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRAINING = ROOT / "docs" / "training.md"
START, END = "<!-- tokens:start -->", "<!-- tokens:end -->"
SCALING = ROOT / "docs" / "scaling.md"
SCALING_START, SCALING_END = "<!-- scaling:start -->", "<!-- scaling:end -->"
BENCH_RESULTS = ROOT / ".bench" / "results.jsonl"
DEPLOY_INSTANCE = ROOT / "deploy" / "dagster.yaml"
SCALING_DOMAIN = "retail"  # the shape the estimate scales: make run's domain and sizes, every version of seed 0
SCALING_PROVIDER = "openai"  # the provider whose run limit in deploy/dagster.yaml the estimate reads
TABLES = ("tokens", "scaling")
DOMAINS = ("retail", "it_helpdesk", "food_delivery")
SEED = "0"
AGENT = "sim/agent-v2"  # the docs size the limits on the v2 agents' cuts (their versions come from the registry)
# The table's columns: (header, export format, length table's dataset, part).
COLUMNS: tuple[tuple[str, str, str, str], ...] = (
    ("SFT `messages`", "trl", "sft", "messages"), ("DPO `prompt`", "trl", "dpo", "prompt"),
    ("DPO `chosen`", "trl", "dpo", "chosen"), ("reward `chosen`", "trl", "reward", "chosen"),
    ("GRPO `prompt`", "trl", "grpo", "prompt"), ("verl `prompt`", "verl", "verl_grpo", "prompt"),
    ("verl `episode`", "verl", "verl_grpo", "episode"), ("verl `tool_chars`", "verl", "verl_grpo", "tool_chars"),
)


def version_of(domain: str, registry: str | os.PathLike[str] | None = None) -> str:
    """The domain's registry version played by the v2 agent (the one the table is measured on)."""
    from sim_pipeline.registry import REGISTRY_PATH, load_registry, versions_for

    found = [v.slug for v in versions_for(load_registry(registry or REGISTRY_PATH), domain) if v.model == AGENT]
    if not found:
        raise SystemExit(f"no version of domain '{domain}' plays {AGENT} in the registry: the table cannot be measured")
    return found[0]


def measure(warehouse: str, domain: str, version: str, seed: str = SEED) -> dict[str, tuple[int, int]]:
    """Per column, (p95, max) of the domain's exported cuts of one version and seed."""
    from sim_pipeline.cut.export_partitions import ExportRequest, export_warehouse
    from sim_pipeline.cut.lengths import exported_lengths

    found: dict[tuple[str, str, str], tuple[int, int]] = {}
    with tempfile.TemporaryDirectory() as out:
        for fmt in sorted({c[1] for c in COLUMNS}):
            report = export_warehouse(ExportRequest(domain=domain, format=fmt, out=out, warehouse=warehouse,
                                                    versions=(version,), seeds=(seed,)))
            if report.refused:
                raise SystemExit(f"{domain} {version} seed {seed}: the publish gate refused "
                                 f"{[r.cut for r in report.refused]}: {report.refused[0].reasons}")
            for f in report.files:
                if f.path:
                    table = exported_lengths(f.format, f.path, f.dataset, f.provenance_path)
                    found |= {(fmt, r.dataset, r.part): (int(r.p95), int(r.max)) for r in table.itertuples()}
    missing = [header for header, *key in COLUMNS if tuple(key) not in found]
    if missing:
        raise SystemExit(f"{domain} {version} seed {seed}: no exported rows for {missing} (an empty cut: run with "
                         "more samples, e.g. make run's sizes)")
    return {header: found[(fmt, dataset, part)] for header, fmt, dataset, part in COLUMNS}


def markdown_table(rows: dict[str, dict[str, tuple[int, int]]]) -> str:
    """The docs' table: one row per domain, p95 / max per column."""
    lines = ["| domain | " + " | ".join(h for h, *_ in COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    lines += [f"| {domain} | " + " | ".join(f"{cells[h][0]} / {cells[h][1]}" for h, *_ in COLUMNS) + " |"
              for domain, cells in rows.items()]
    return "\n".join(lines)


def shown(text: str, start: str = START, end: str = END, path: Path | None = None) -> str:
    """The block between the markers of a docs text (the error names the file and the fix when they are missing)."""
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise SystemExit(f"{path or TRAINING}: needs one '{start}' line before one '{end}' line around the generated "
                         "table. Fix: put them back around it")
    return text[text.index(start) + len(start):text.index(end)].strip("\n")


def rewrite(text: str, table: str, start: str = START, end: str = END, path: Path | None = None) -> str:
    """The docs text with the block between the markers replaced by `table`; the rest unchanged."""
    shown(text, start, end, path)
    return text[:text.index(start) + len(start)] + "\n" + table + "\n" + text[text.index(end):]


@dataclass(frozen=True)
class BenchFigure:
    """One figure `make bench` recorded: the name it was written under, its value, and when its module ran."""

    name: str
    value: float
    measured_at: str
    module: str


# The bench figures the scaling model reads: (name up to its parenthesised note, the bench that writes it).
CELERY_OVERHEAD = ("scale_celery_overhead_per_step_seconds", "scale")
CPU_PER_ROLLOUT = ("rollout_cost_marginal_cpu_ms_per_rollout", "sizes")
GATEWAY_PER_CALL = ("http_gateway_cpu_per_call", "backends")
COST_RATIO_16X = ("rollout_cost_cpu_per_rollout_16x", "sizes")
BENCH_NEEDED = (CELERY_OVERHEAD, CPU_PER_ROLLOUT, GATEWAY_PER_CALL, COST_RATIO_16X)


def bench_figures(path: Path = BENCH_RESULTS) -> dict[str, BenchFigure]:
    """The figures the scaling model needs, by short name, from a results.jsonl `make bench` wrote; a missing file or
    figure is an error naming the bench that writes it."""
    rerun = "python -m sim_pipeline_tests.bench " + " ".join(sorted({b for _, b in BENCH_NEEDED}))
    if not path.exists():
        raise SystemExit(f"{path}: no benchmark results. Fix: run `make bench`, or `{rerun}` (they write it)")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    found: dict[str, BenchFigure] = {}
    for short, bench in BENCH_NEEDED:
        row = next((r for r in rows if r["name"] == short or r["name"].startswith(short + " ")), None)
        if row is None:
            raise SystemExit(f"{path}: no figure '{short}'. Fix: run `python -m sim_pipeline_tests.bench {bench}` "
                             "(it writes it; without its services or venv it says why it recorded none)")
        value = row["ratio"] if short == COST_RATIO_16X[0] else row["value"]
        found[short] = BenchFigure(row["name"], float(value), row.get("measured_at", "date not recorded"),
                                   row.get("module", f"bench_{bench}"))
    return found


@dataclass(frozen=True)
class RunShape:
    """What a partition of a run holds, averaged over the seed's versions."""

    partitions: int
    rollouts_per_partition: float
    agent_calls_per_rollout: float
    user_calls_per_rollout: float
    judge_calls_per_rollout: float
    prompt_tokens_per_rollout: float


def run_shape(warehouse: str, domain: str = SCALING_DOMAIN, seed: str = SEED,
              versions: Sequence[str] | None = None) -> RunShape:
    """The rollouts and grades of every registry version (or `versions`) of `domain` at `seed` in the warehouse: rollouts per
    partition; agent calls (the agent's turns), simulated-user calls, judge calls (every verdict the grades hold: the
    judge's and its stress tests') and prompt tokens (agent and user calls) per rollout."""
    import pyarrow.parquet as pq

    from sim_pipeline.grade.stress import STRESS_COLUMNS
    from sim_pipeline.registry import load_registry, versions_for

    rollouts = calls = turns = verdicts = tokens = 0
    versions = list(versions or [v.slug for v in versions_for(load_registry(), domain)])
    for version in versions:
        part = Path(warehouse) / domain / "{}" / f"policy_version={version}" / f"seed={seed}.parquet"
        if not Path(str(part).format("rollouts")).exists():
            raise SystemExit(f"{str(part).format('rollouts')}: missing. Fix: run `sim-pipeline run --domain {domain} "
                             f"--seed {seed}` into that warehouse (or leave out --warehouse for fresh runs)")
        rows = pq.read_table(str(part).format("rollouts"), columns=["model_calls", "n_turns", "prompt_tokens"])
        grades = pq.read_table(str(part).format("grades"), columns=["judge_reward", *STRESS_COLUMNS])
        rollouts += rows.num_rows
        calls += sum(rows.column("model_calls").to_pylist())
        turns += sum(rows.column("n_turns").to_pylist())
        tokens += sum(rows.column("prompt_tokens").to_pylist())
        verdicts += sum(grades.num_rows - grades.column(c).null_count for c in grades.column_names)
    return RunShape(len(versions), rollouts / len(versions), turns / rollouts, (calls - turns) / rollouts,
                    verdicts / rollouts, tokens / rollouts)


def steps_per_partition(domain: str = SCALING_DOMAIN) -> int:
    """Steps of the seed, policy and delta jobs of a domain (the seed's are shared by its versions: counting them for
    every partition is an upper bound)."""
    from sim_pipeline.definitions import defs

    return sum(len(defs.resolve_job_def(f"{domain}_{job}_job").graph.node_defs) for job in ("seed", "policy", "delta"))


def deploy_limits(path: Path = DEPLOY_INSTANCE, provider: str = SCALING_PROVIDER) -> tuple[int, int]:
    """(runs in progress allowed for the provider, runs in progress allowed at all) from the production dagster.yaml."""
    import yaml

    runs = yaml.safe_load(path.read_text(encoding="utf-8"))["concurrency"]["runs"]
    key = f"sim_pipeline/provider.{provider}"
    limit = next((t["limit"] for t in runs.get("tag_concurrency_limits", []) if t.get("key") == key), None)
    if limit is None:
        raise SystemExit(f"{path}: no tag_concurrency_limits entry with key '{key}'. Fix: put the provider's run limit "
                         "back (concurrency: runs: tag_concurrency_limits:)")
    return int(limit), int(runs["max_concurrent_runs"])


def _num(value: float) -> str:
    """A figure as the docs print it: whole numbers with thousands separators from 100 on, else 3 significant digits."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def scaling_tables(shape: RunShape, steps: int, limits: tuple[int, int], bench: dict[str, BenchFigure]) -> str:
    """The inputs table and the estimate table of docs/scaling.md."""
    from sim_pipeline import defaults
    from sim_pipeline_tests import scaling_model as m

    provider_limit, max_runs = limits
    inputs = m.Inputs(
        rollouts_per_partition=shape.rollouts_per_partition, agent_calls_per_rollout=shape.agent_calls_per_rollout,
        model_calls_per_rollout=shape.agent_calls_per_rollout + shape.user_calls_per_rollout
        + shape.judge_calls_per_rollout,
        prompt_tokens_per_rollout=shape.prompt_tokens_per_rollout, steps_per_partition=steps,
        celery_overhead_s=bench[CELERY_OVERHEAD[0]].value, cpu_s_per_rollout=bench[CPU_PER_ROLLOUT[0]].value / 1000,
        gateway_s_per_call=bench[GATEWAY_PER_CALL[0]].value / 1000,
        calls_in_flight_per_step=defaults.GATEWAY_CONCURRENCY, provider_run_limit=min(provider_limit, max_runs))
    e = m.estimate(inputs)

    def measured(short: tuple[str, str]) -> str:
        figure = bench[short[0]]
        return f"`make bench` ({figure.module}), figure `{figure.name}`, measured {figure.measured_at}"

    run = (f"{SCALING_DOMAIN} seed {SEED}, make run's sizes, {shape.partitions} versions "
           "(`sim_pipeline_tests/docs_figures.py`, `run_shape`)")
    lines = [
        "| Input | Symbol | Value | From |", "|---|---|---|---|",
        f"| rollouts per partition (version x seed) | n | {_num(inputs.rollouts_per_partition)} | {run} |",
        f"| agent calls per rollout | a | {_num(inputs.agent_calls_per_rollout)} | the same run's `n_turns` |",
        "| model calls per rollout: agent + simulated user + judge and its stress tests | k | "
        f"{_num(inputs.model_calls_per_rollout)} = {_num(shape.agent_calls_per_rollout)} + "
        f"{_num(shape.user_calls_per_rollout)} + {_num(shape.judge_calls_per_rollout)} "
        "| the same run's `model_calls` and grades |",
        f"| prompt tokens per rollout (agent and user calls) | p | {_num(inputs.prompt_tokens_per_rollout)} "
        "| the same run's `prompt_tokens` |",
        f"| steps per partition (seed, policy and delta jobs) | s | {steps} | the Definitions' jobs |",
        f"| Celery overhead per step | o | {_num(inputs.celery_overhead_s)} s | {measured(CELERY_OVERHEAD)} |",
        f"| CPU per rollout, marginal, every step (embedded models answering) | c | "
        f"{_num(1000 * inputs.cpu_s_per_rollout)} ms | {measured(CPU_PER_ROLLOUT)} |",
        f"| CPU per rollout at 16x against 1x (flat or falling: <= 1) | | {_num(bench[COST_RATIO_16X[0]].value)} "
        f"| {measured(COST_RATIO_16X)} |",
        f"| gateway CPU per HTTP call (litellm and the client) | h | {_num(1000 * inputs.gateway_s_per_call)} ms "
        f"| {measured(GATEWAY_PER_CALL)} |",
        f"| calls in flight per model per step | G | {inputs.calls_in_flight_per_step} "
        "| `GATEWAY_CONCURRENCY`, sim_pipeline/defaults.py |",
        f"| runs in progress for one provider | P | {inputs.provider_run_limit} | `sim_pipeline/provider."
        f"{SCALING_PROVIDER}` limit {provider_limit}, `max_concurrent_runs` {max_runs}: deploy/dagster.yaml |",
        f"| rollouts in a night | R | {_num(inputs.rollouts)} | assumed: `ROLLOUTS_A_NIGHT` |",
        f"| night | H | {_num(inputs.hours)} h | assumed: `NIGHT_HOURS` |",
        f"| a hosted agent's call | L | {_num(inputs.call_seconds)} s | assumed: `HOSTED_CALL_SECONDS` |",
        "",
        "| Quantity | Formula | Value |", "|---|---|---|",
        f"| throughput | R / 3600 H | {_num(e.rollouts_per_s)} rollouts/s |",
        f"| agent requests | R a / 3600 H | {_num(e.agent_requests_per_s)}/s ({_num(60 * e.agent_requests_per_s)} "
        "RPM) |",
        f"| prompt tokens | R p / 3600 H | {_num(e.prompt_tokens_per_s)}/s ({_num(60 * e.prompt_tokens_per_s)} TPM) |",
        f"| agent calls in flight | R a L / 3600 H (Little's law) | {_num(e.agent_calls_in_flight)} |",
        f"| model-calling steps at once | calls in flight / G | {e.model_calling_steps} |",
        f"| the provider limit's ceiling | P G / (a L) x 3600 H | {_num(e.provider_ceiling_rollouts)} rollouts a "
        "night |",
        f"| partitions | R / n | {_num(e.partitions)} |",
        f"| a model-calling step's wait | n a L / G | {_num(e.step_wait_s)} s |",
        f"| CPU | R (c + k h) + partitions s o | {_num(e.cpu_hours)} CPU-hours |",
        f"| cores busy over the night | CPU / H | {_num(e.cores)} |",
        f"| Celery workers (one step each) | (partitions x wait + CPU) / H | {e.workers} |",
    ]
    return "\n".join(lines)


@contextlib.contextmanager
def fresh_runs(domains: Sequence[str]) -> Iterator[str]:
    """`sim-pipeline run --domain D --seed 0` (make run's sizes) for each domain, in a temporary warehouse and
    Dagster instance; yields the warehouse. The model cache (data/cache) is shared, so a re-run costs no calls."""
    from sim_pipeline.cli import main as cli

    with tempfile.TemporaryDirectory() as root:
        home, warehouse = Path(root) / "dagster_home", str(Path(root) / "warehouse")
        home.mkdir()
        before = os.environ.get("DAGSTER_HOME")
        os.environ["DAGSTER_HOME"] = str(home)
        try:
            for domain in domains:
                print(f"running {domain} seed {SEED} ...", file=sys.stderr)
                with contextlib.redirect_stdout(io.StringIO()):
                    code = cli(["run", "--domain", domain, "--seed", SEED, "--warehouse", warehouse])
                if code != 0:
                    raise SystemExit(f"sim-pipeline run --domain {domain} exited {code}: no table from a failed run")
            yield warehouse
        finally:
            if before is None:
                os.environ.pop("DAGSTER_HOME", None)
            else:
                os.environ["DAGSTER_HOME"] = before


def _update(path: Path, block: str, start: str, end: str, check: bool) -> bool:
    """Rewrite the block between the markers of `path` (or, with check, compare it); whether it was current."""
    text = path.read_text(encoding="utf-8")  # again: the file may have been edited while the runs ran
    same = shown(text, start, end, path) == block
    if check:
        print(f"{path.name}: the table is current" if same else
              f"{path.name} differs; computed:\n{block}\nshown:\n{shown(text, start, end, path)}")
        return same
    updated = rewrite(text, block, start, end, path)
    if updated != text:
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.write_text(updated, encoding="utf-8")
        os.replace(tmp, path)  # atomic: a reader sees the old docs or the new
    print(block)
    return same


def main(argv: Sequence[str] | None = None) -> int:
    """Compute the token table and the scaling model and rewrite docs/training.md and docs/scaling.md (or, with
    --check, say whether they differ)."""
    parser = argparse.ArgumentParser(prog="python -m sim_pipeline_tests.docs_figures", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warehouse", help="measure the runs already in this warehouse (with $DAGSTER_HOME's "
                                            "instance) instead of fresh ones")
    parser.add_argument("--domains", default=",".join(DOMAINS), help=f"comma-separated (default {','.join(DOMAINS)})")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a docs table differs")
    parser.add_argument("--tables", default=",".join(TABLES), help=f"comma-separated, of {', '.join(TABLES)} "
                                                                     "(default both)")
    parser.add_argument("--bench", default=str(BENCH_RESULTS), help="the results.jsonl `make bench` wrote (scaling)")
    args = parser.parse_args(argv)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    tables = [t for t in args.tables.split(",") if t]
    if set(tables) - set(TABLES):
        raise SystemExit(f"--tables: unknown {sorted(set(tables) - set(TABLES))}. Fix: name some of {list(TABLES)}")
    domains = [d for d in args.domains.split(",") if d] if "tokens" in tables else []
    # Markers and bench figures first: a broken docs file or a missing figure fails before minutes of runs.
    if "tokens" in tables:
        shown(TRAINING.read_text(encoding="utf-8"))
    if "scaling" in tables:
        shown(SCALING.read_text(encoding="utf-8"), SCALING_START, SCALING_END, SCALING)
        bench = bench_figures(Path(args.bench))
        domains = list(dict.fromkeys([*domains, SCALING_DOMAIN]))
    runs = contextlib.nullcontext(args.warehouse) if args.warehouse else fresh_runs(domains)
    current = True
    with runs as warehouse:
        if "tokens" in tables:
            table = markdown_table({d: measure(warehouse, d, version_of(d)) for d in domains
                                    if d in args.domains.split(",")})
            current &= _update(TRAINING, table, START, END, args.check)
        if "scaling" in tables:
            block = scaling_tables(run_shape(warehouse), steps_per_partition(), deploy_limits(), bench)
            current &= _update(SCALING, block, SCALING_START, SCALING_END, args.check)
    return 0 if current or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
