"""The README and docs/ tell the truth by construction: links resolve, the column tables of `rollouts` and `grades`
are the columns a real run writes, the transcript snippet runs on a real run's files, and the legend explains every
line the summary prints."""

import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest


ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))


def _section(text: str, title: str) -> str:
    """The text under a markdown heading or bold paragraph title, up to the next heading of any level."""
    start = text.index(title)
    lines, fenced = text[start:].split("\n"), False
    for i, line in enumerate(lines[1:], 1):
        fenced ^= line.startswith("```")  # a `#` comment inside a code block is no heading
        if not fenced and (re.match(r"#{1,6} ", line) or line.startswith("**`")):
            return "\n".join(lines[:i])
    return text[start:]


def _first_cells(table: str) -> list[str]:
    """The first cell of every row of the markdown tables in `table` (header and rule rows left out)."""
    rows = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("|")]
    return [cell for cell in rows[2:] if cell and not set(cell) <= set("-: ")] if rows else []


@pytest.fixture(scope="module")
def run(shared_run):
    """The session's small real run of both retail versions (so the summary has a delta): warehouse and printed
    summary."""
    return shared_run.warehouse, shared_run.summary


@pytest.mark.parametrize("doc", [README, *DOCS], ids=lambda p: p.name)
def test_every_relative_link_resolves(doc):
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
        if "://" not in target:
            assert (doc.parent / target).exists(), f"{doc.name} links to {target}, which does not exist"


@pytest.mark.parametrize("asset", ["rollouts", "grades"])
def test_the_column_tables_are_the_columns_a_run_writes(run, asset):
    written = set(pq.read_schema(run[0] / "retail" / asset / "policy_version=agent-v1" / "seed=0.parquet").names)
    table = _section(README.read_text(), f"**`{asset}`**")
    listed = {name for cell in _first_cells(table) for name in re.findall(r"`([a-z0-9_<>]+)`", cell)}
    patterns = [re.compile("^" + re.sub(r"<[a-z]+>", "[a-z0-9_]+", name) + "$") for name in listed if "<" in name]
    exact = {name for name in listed if "<" not in name}
    assert exact <= written, f"README lists {sorted(exact - written)} under {asset}, which no run writes"
    undocumented = sorted(c for c in written - exact if not any(p.match(c) for p in patterns))
    assert not undocumented, f"{asset} has columns the README's table does not explain: {undocumented}"


def test_the_transcript_snippet_runs_on_a_real_run(run, capsys):
    section = _section(README.read_text(), "## Reading transcripts")
    snippet = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    assert 'base = "data/warehouse/' in snippet
    snippet = snippet.replace('"data/warehouse/', f'"{run[0]}/')
    exec(compile(snippet, "README.md", "exec"), {})  # noqa: S102 - the README's own code, on this run's files
    out = capsys.readouterr().out
    assert re.search(r"^user ", out, flags=re.M) and re.search(r"^assistant ", out, flags=re.M)
    assert out.strip().splitlines()[-1], "the snippet's last line prints the oracle's reason"


def _labels(summary: str, versions: set[str]) -> set[str]:
    """What the legend must explain: each line's label at the summary's two levels of indentation."""
    labels = set()
    for line in summary[summary.index("sim_pipeline: "):].splitlines():  # the progress lines before it aside
        if line.startswith("sim_pipeline: "):
            labels.add("sim_pipeline:")
        elif re.match(r"^  \S", line) and not line.startswith("  ("):
            label = re.split(r"\s{2,}", line.strip())[0]
            labels.add("version line" if label in versions else "delta" if label.startswith("delta ") else label)
        elif label := re.match(r"^ {16}([a-z][a-z ]*):", line):  # a version's own lines; others continue one
            labels.add(label.group(1))
    return labels


def test_the_legend_explains_every_line_the_summary_prints(run):
    legend = _section(README.read_text(), "### Reading the summary")
    explained = " ".join(_first_cells(legend))
    missing = sorted(label for label in _labels(run[1], {"agent-v1", "agent-v2"}) if label not in explained)
    assert not missing, f"the README's legend does not explain {missing}; summary was:\n{run[1]}"


def test_the_quick_start_runs_as_written_against_local_endpoints(tmp_path):
    """The quick start's registry and command, verbatim but for where its two endpoints listen: a scripted agent at
    the api_base it names and a scripted judge standing in for OpenAI (OPENAI_API_BASE), through real HTTP."""
    import os
    import subprocess
    import sys

    from sim_pipeline_tests.scripted_server import ScriptedServer

    section = _section(README.read_text(), "## Quick start")
    registry = re.search(r"```yaml\n(.*?)```", section, flags=re.S).group(1)
    command = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)
    run_line = next(line for line in command.splitlines() if "sim-pipeline run" in line)
    assert "http://127.0.0.1:8000/v1" in registry and run_line.startswith(".venv/bin/sim-pipeline run ")
    refusal = {"content": "I'm sorry, I can't help with that here."}
    verdict = {"content": '{"reason": "The agent declined without looking anything up.", "score": 0}'}
    with ScriptedServer(lambda request: refusal) as agent, ScriptedServer(lambda request: verdict) as judge:
        (tmp_path / "my.yaml").write_text(registry.replace("http://127.0.0.1:8000/v1", agent.base_url))
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
        env |= {"OPENAI_API_KEY": "sk-test-quick-start-0000", "OPENAI_API_BASE": judge.base_url,
                "DAGSTER_HOME": str(tmp_path / "dagster_home"), "PYTHONPATH": os.pathsep.join(sys.path)}
        args = run_line.split("#")[0].split()[1:]  # after `.venv/bin/sim-pipeline`
        ran = subprocess.run([sys.executable, "-m", "sim_pipeline.cli", *args, "--warehouse", str(tmp_path / "wh")],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    summary = ran.stdout[ran.stdout.find("sim_pipeline: domain 'retail'"):]
    assert ran.returncode in (0, 1) and summary, ran.stderr[-3000:]  # 1: a blocking check, said in the summary
    assert re.search(r"^  my-agent-v1 +\d+ rollouts, 0 errored", summary, flags=re.M), summary
    assert agent.requests and all(r["model"] == "my-model" for r in agent.requests)
    assert judge.requests and all(r["model"] == "gpt-4o-mini" for r in judge.requests)
