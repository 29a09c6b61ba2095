"""The token table of docs/training.md and the scaling tables of docs/scaling.md are written by a command
(sim_pipeline_tests/docs_figures.py): their markers are there, the tables have the shape the script writes, the
script measures a run's exported cuts exactly as `sim-pipeline export --stats` prints them, reads the bench's figures
by name (a missing one is an error naming its bench), and computes the estimate by the documented formula.
(Re-measuring the docs' own figures takes a make run of each domain and `make bench`: `make docs-figures`, or
`python -m sim_pipeline_tests.docs_figures --check`.)"""

import dataclasses
import functools
import json
import math
import re

import pyarrow.parquet as pq
import pytest

from sim_pipeline.cli import main as cli
from sim_pipeline_tests import docs_figures, scaling_model
from sim_pipeline_tests.docs_figures import (
    BENCH_NEEDED,
    COLUMNS,
    DOMAINS,
    SCALING,
    SCALING_END,
    SCALING_START,
    TRAINING,
    RunShape,
    bench_figures,
    markdown_table,
    measure,
    rewrite,
    run_shape,
    scaling_tables,
    shown,
)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """retail's v2 agent on a cut plan, two samples (GRPO groups need two): (warehouse, Dagster home)."""
    root = tmp_path_factory.mktemp("docs_figures_run")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", str(root / "dagster_home"))
        patch.chdir(root)  # the model cache goes to data/cache under the working directory
        assert cli(["run", "--domain", "retail", "--versions", "agent-v2", "--seed", "0", "--situations", "16",
                    "--samples", "2", "--heldout-samples", "1", "--search-budget", "48", "--warehouse",
                    str(root / "warehouse"), "--allow-failed-checks"]) == 0
    return root / "warehouse", root / "dagster_home"


def test_the_docs_hold_the_scripts_table_between_its_markers():
    table = shown(TRAINING.read_text(encoding="utf-8"))
    header, rule, *rows = table.splitlines()
    assert [header, rule] == markdown_table({}).splitlines()
    assert [row.split("|")[1].strip() for row in rows] == list(DOMAINS)
    for row in rows:
        cells = [c.strip() for c in row.split("|")[2:-1]]
        assert len(cells) == len(COLUMNS)
        for cell in cells:
            p95, top = map(int, re.fullmatch(r"(\d+) / (\d+)", cell).groups())
            assert 0 < p95 <= top


def test_rewrite_replaces_the_table_and_nothing_else():
    text = f"before\n{docs_figures.START}\nold table\n{docs_figures.END}\nafter\n"
    assert rewrite(text, "new") == f"before\n{docs_figures.START}\nnew\n{docs_figures.END}\nafter\n"
    assert rewrite(rewrite(text, "new"), "new") == rewrite(text, "new")
    with pytest.raises(SystemExit, match="needs one"):
        rewrite("no markers here", "new")


def _stats(capsys, fmt, warehouse, out):
    """`sim-pipeline export --stats`'s printed (dataset, part) -> (p95, max)."""
    assert cli(["export", "--domain", "retail", "--format", fmt, "--versions", "agent-v2", "--seeds", "0", "--out",
                str(out), "--warehouse", str(warehouse), "--stats"]) == 0
    printed = re.findall(r"^\s+\S+\s+(\S+)\s+(\S+)\s+\d+\s+(\d+)\s+(\d+)\s+\(\d+ rows\)$", capsys.readouterr().out,
                         re.M)
    return {(dataset, part): (int(p95), int(top)) for dataset, part, p95, top in printed}


def test_the_script_measures_a_runs_cuts_as_export_stats_prints_them(tiny_run, tmp_path, capsys, monkeypatch):
    warehouse, home = tiny_run
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    measured = measure(str(warehouse), "retail", docs_figures.version_of("retail"))
    printed = {**_stats(capsys, "trl", warehouse, tmp_path / "trl"), **_stats(capsys, "verl", warehouse, tmp_path)}
    assert {header: printed[(dataset, part)] for header, _, dataset, part in COLUMNS} == measured
    # The command itself: rewrites the table of (a copy of) the docs, the rest unchanged, and --check then agrees.
    copy = tmp_path / "training.md"
    original = TRAINING.read_text(encoding="utf-8")
    copy.write_text(original, encoding="utf-8")
    monkeypatch.setattr(docs_figures, "TRAINING", copy)
    assert docs_figures.main(["--warehouse", str(warehouse), "--domains", "retail", "--tables", "tokens"]) == 0
    assert copy.read_text(encoding="utf-8") == rewrite(original, markdown_table({"retail": measured}))
    assert docs_figures.main(["--warehouse", str(warehouse), "--domains", "retail", "--tables", "tokens",
                              "--check"]) == 0


# --- docs/scaling.md --------------------------------------------------------------------------------------------

SHAPE = RunShape(partitions=2, rollouts_per_partition=278.0, agent_calls_per_rollout=3.3, user_calls_per_rollout=1.4,
                 judge_calls_per_rollout=1.2, prompt_tokens_per_rollout=2979.0)


def _bench_rows(skip: str = "") -> list[dict]:
    """results.jsonl rows holding every figure the scaling model reads (named as the benches name them)."""
    values = {"scale_celery_overhead_per_step_seconds": 1.95, "rollout_cost_marginal_cpu_ms_per_rollout": 15.0,
              "http_gateway_cpu_per_call": 2.5, "rollout_cost_cpu_per_rollout_16x": 0.03}
    rows = [{"name": f"{short} (a note)", "value": values[short], "unit": "u", "module": f"bench_{bench}",
             "measured_at": "2026-12-04T04:00:00+00:00", "ratio": 0.14, "baseline_name": "b", "baseline_value": 1.0}
            for short, bench in BENCH_NEEDED if short != skip]
    # A longer name that only starts like a needed one is another figure, never read in its place.
    return [{"name": "rollout_cost_marginal_cpu_ms_per_rollout_4x_to_16x (flat)", "value": 99.0, "unit": "ms"}, *rows]


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_bench_figures_are_read_by_name_with_when_they_were_measured(tmp_path):
    found = bench_figures(_write(tmp_path / "results.jsonl", _bench_rows()))
    assert found["rollout_cost_marginal_cpu_ms_per_rollout"].value == 15.0
    assert found["rollout_cost_cpu_per_rollout_16x"].value == 0.14  # the 16x row is read as its ratio to 1x
    assert {f.measured_at for f in found.values()} == {"2026-12-04T04:00:00+00:00"}
    with pytest.raises(SystemExit, match=r"no figure 'scale_celery_overhead_per_step_seconds'.*bench scale"):
        bench_figures(_write(tmp_path / "partial.jsonl", _bench_rows(skip="scale_celery_overhead_per_step_seconds")))
    with pytest.raises(SystemExit, match="make bench"):
        bench_figures(tmp_path / "absent.jsonl")


def _inputs(**changed) -> scaling_model.Inputs:
    base = scaling_model.Inputs(rollouts_per_partition=500, agent_calls_per_rollout=3.0, model_calls_per_rollout=6.0,
                                prompt_tokens_per_rollout=3000, steps_per_partition=12, celery_overhead_s=2.0,
                                cpu_s_per_rollout=0.015, gateway_s_per_call=0.002, calls_in_flight_per_step=16,
                                provider_run_limit=4, rollouts=1_000_000, hours=8, call_seconds=2.0)
    return dataclasses.replace(base, **changed)


def test_the_estimate_follows_its_formula():
    e = scaling_model.estimate(_inputs())
    night = 8 * 3600
    assert e.rollouts_per_s == pytest.approx(1_000_000 / night)
    assert e.agent_calls_in_flight == pytest.approx(e.agent_requests_per_s * 2.0)  # Little's law
    assert e.model_calling_steps == math.ceil(e.agent_calls_in_flight / 16)
    assert e.partitions == 2000
    assert e.step_wait_s == pytest.approx(500 * 3.0 * 2.0 / 16)
    cpu = 1_000_000 * (0.015 + 6 * 0.002) + 2000 * 12 * 2.0
    assert e.cpu_hours == pytest.approx(cpu / 3600) and e.cores == pytest.approx(cpu / night)
    assert e.workers == math.ceil((2000 * e.step_wait_s + cpu) / night)
    # The provider limit's ceiling: P x G calls in flight, each rollout holding a x L seconds of them.
    assert e.provider_ceiling_rollouts == pytest.approx(4 * 16 / (3.0 * 2.0) * night)
    slower = scaling_model.estimate(_inputs(call_seconds=4.0))
    assert slower.provider_ceiling_rollouts == pytest.approx(e.provider_ceiling_rollouts / 2)
    assert slower.agent_calls_in_flight == pytest.approx(2 * e.agent_calls_in_flight)
    twice = scaling_model.estimate(_inputs(rollouts=2_000_000))
    assert (twice.partitions, twice.agent_requests_per_s) == (2 * e.partitions, pytest.approx(2 * e.agent_requests_per_s))


def test_the_docs_hold_the_scaling_tables_between_their_markers(tmp_path):
    shown_block = shown(SCALING.read_text(encoding="utf-8"), SCALING_START, SCALING_END, SCALING)
    bench = bench_figures(_write(tmp_path / "results.jsonl", _bench_rows()))
    written = scaling_tables(SHAPE, 12, (4, 16), bench)

    def first_cells(block):
        return [line.split("|")[1].strip() for line in block.splitlines() if line.startswith("|")]

    assert first_cells(shown_block) == first_cells(written), "docs/scaling.md: rerun make docs-figures"
    rows = [line for line in shown_block.splitlines() if line.startswith("| ") and "---" not in line]
    for line in rows:
        if not line.startswith(("| Input", "| Quantity")):  # Value is the third column of both tables
            assert re.search(r"\d", line.split("|")[3]), f"docs/scaling.md: no figure in {line!r}"


def test_the_script_writes_the_scaling_tables_from_a_run_and_the_bench(tiny_run, tmp_path, monkeypatch):
    warehouse, home = tiny_run
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    shape = run_shape(str(warehouse), versions=("agent-v2",))
    rollouts = pq.read_table(warehouse / "retail" / "rollouts" / "policy_version=agent-v2" / "seed=0.parquet")
    grades = pq.read_table(warehouse / "retail" / "grades" / "policy_version=agent-v2" / "seed=0.parquet")
    assert shape.rollouts_per_partition == rollouts.num_rows
    calls = sum(rollouts.column("model_calls").to_pylist()) / rollouts.num_rows
    assert shape.agent_calls_per_rollout + shape.user_calls_per_rollout == pytest.approx(calls)
    judged = (grades.num_rows - grades.column("judge_reward").null_count) / rollouts.num_rows
    assert shape.judge_calls_per_rollout > judged > 0  # every judged rollout, plus the judge's stress tests
    # The command: rewrites the tables of (a copy of) docs/scaling.md, the rest unchanged, and --check then agrees.
    copy, results = tmp_path / "scaling.md", _write(tmp_path / "results.jsonl", _bench_rows())
    original = SCALING.read_text(encoding="utf-8")
    copy.write_text(original, encoding="utf-8")
    monkeypatch.setattr(docs_figures, "SCALING", copy)
    monkeypatch.setattr(docs_figures, "run_shape", functools.partial(run_shape, versions=("agent-v2",)))
    argv = ["--warehouse", str(warehouse), "--tables", "scaling", "--bench", str(results)]
    assert docs_figures.main(argv) == 0
    block = scaling_tables(shape, docs_figures.steps_per_partition(), docs_figures.deploy_limits(),
                           bench_figures(results))
    assert copy.read_text(encoding="utf-8") == rewrite(original, block, SCALING_START, SCALING_END, copy)
    assert docs_figures.main([*argv, "--check"]) == 0
    copy.write_text(copy.read_text(encoding="utf-8").replace("| k |", "| k | 9"), encoding="utf-8")
    assert docs_figures.main([*argv, "--check"]) == 1
