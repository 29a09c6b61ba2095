"""The token table of docs/training.md is written by a command (sim_pipeline_tests/docs_figures.py): its markers
are there, the table has the shape the script writes, and the script measures a run's exported cuts exactly as
`sim-pipeline export --stats` prints them. (Re-measuring the docs' own figures takes a make run of each domain:
`make docs-figures`, or `python -m sim_pipeline_tests.docs_figures --check`.)"""

import re

import pytest

from sim_pipeline.cli import main as cli
from sim_pipeline_tests import docs_figures
from sim_pipeline_tests.docs_figures import COLUMNS, DOMAINS, TRAINING, markdown_table, measure, rewrite, shown


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
    assert docs_figures.main(["--warehouse", str(warehouse), "--domains", "retail"]) == 0
    assert copy.read_text(encoding="utf-8") == rewrite(original, markdown_table({"retail": measured}))
    assert docs_figures.main(["--warehouse", str(warehouse), "--domains", "retail", "--check"]) == 0
