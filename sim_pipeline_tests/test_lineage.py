"""A run cut short leaves some files rewritten beside files computed from their old content: `report` marks every
figure that no longer belongs with the others, names what was rewritten and the run that fixes it, and exits 1;
`export` writes nothing (exit 2). A complete run reports no warning, and files written before lineage was recorded
are called that.

Two real runs: the first (agent-v1 and agent-v2, 48 situations: the session's shared run), then a second of
agent-v2 on a copy of its warehouse at another size (24 situations), which rewrites every agent-v2 file and the
delta. A kill after the second run's step k leaves the first run's warehouse with the second's files of the steps up
to k: that state is built from the two, one step boundary at a time.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from upath import UPath

from sim_pipeline import warehouse
from sim_pipeline.cli import main

SIZES = ["--seed", "0", "--samples", "1", "--heldout-samples", "2", "--allow-failed-checks"]
SECOND = ["--versions", "agent-v2", "--situations", "24", *SIZES]
FIX = "fix: sim-pipeline run --domain retail --seed 0 --versions agent-v2"
# The second run's files in the order it writes them (the search before the rollouts: one step, two outputs; the
# cuts in one of the orders Dagster may run them). grpo_groups is empty at one sample per prompt (not applicable:
# its line has no row count to mark), but written, so it is copied with the others.
STEPS = ["search", "rollouts", "grades", "sft", "preference_pairs", "grpo_groups", "reward_model_set",
         "reward_model_pairs", "scores", "delta"]
CUT_STEPS = [step for step in STEPS[3:8] if step != "grpo_groups"]
EXPORTED = {"rollouts", "grades", "sft", "preference_pairs"}  # what `export --format openai` reads


def _path(base: Path, asset: str, version: str = "agent-v2") -> Path:
    seed = None if asset == "delta" else 0
    return Path(str(warehouse.partition_path(base, "retail", asset, policy_version=version, seed=seed)))


@pytest.fixture(scope="module")
def runs(shared_run, tmp_path_factory):
    """(the Dagster home, the first run's warehouse, the second run's). The first run is the session's shared one,
    copied with its instance and model cache: the second run records itself in that instance, as a user's would."""
    root = tmp_path_factory.mktemp("two_runs")
    first, second = root / "first", root / "second"
    shutil.copytree(shared_run.warehouse, first)
    shutil.copytree(shared_run.home, root / "dagster_home")
    shutil.copytree(shared_run.root / "data", root / "data")  # the model cache the first run filled
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", str(root / "dagster_home"))
        patch.chdir(root)  # the model cache goes to data/cache under the working directory
        shutil.copytree(first, second)
        assert main(["run", *SECOND, "--warehouse", str(second)]) == 0
    for step in ("search", "rollouts", "grades", "sft", "reward_model_set", "scores", "delta"):
        assert _path(first, step).read_bytes() != _path(second, step).read_bytes(), step  # other rows
    return root / "dagster_home", first, second


def _copy(source: Path, target: Path) -> None:
    """A file and its sidecar, as the IO manager leaves them."""
    shutil.copy2(source, target)
    shutil.copy2(warehouse.checksum_path(source), warehouse.checksum_path(target))


def _report(base: Path, capsys) -> tuple[int, str]:
    code = main(["report", "--warehouse", str(base)])
    return code, capsys.readouterr().out


def _export(base: Path, out: Path, capsys, *extra: str) -> tuple[int, str]:
    code = main(["export", "--format", "openai", "--warehouse", str(base), "--out", str(out), *extra])
    return code, capsys.readouterr().err


def _version_lines(out: str, slug: str) -> str:
    """A version's block of the summary (its four lines)."""
    return re.search(rf"^  {slug} .*?\n(?:  {' ' * 13}.*\n)*", out, re.M).group(0)


def _assert_ship_line_leads(out: str) -> str:
    """The summary's first line after its title is the ship decision, quoting the delta's pass@1 row; its decision."""
    title, ship = out.splitlines()[:2]
    assert title.startswith("sim_pipeline: domain 'retail', seed 0")
    found = re.match(r"  ship {10}(SHIP|DO NOT SHIP|INCONCLUSIVE) agent-v2 over agent-v1: (.*)$", ship)
    assert found, ship
    unpaired = re.search(r"^    (NOT COMPARABLE|INSUFFICIENT DATA) for every metric: \S", out, re.M)
    if unpaired:  # nothing estimated, so the table says why once and the ship line quotes it
        assert found.group(1) == "INCONCLUSIVE" and (
            found.group(2).startswith(f"pass@1 {unpaired.group(1)}: ") or "delta is stale" in ship), ship
        return found.group(1)
    row = re.search(r"^    pass@1 +\S+ -> \S+  delta (\S+) (\[[^]]+\]) +p=\S+ \(Holm (\S+)\)  ([A-Z ]+?)  \(", out,
                    re.M)
    delta, interval, _, verdict = row.groups()
    verdicts = re.findall(r"^    \S+ +\S+ -> .*\)  ([A-Z ]+?)  \(n=", out, re.M)
    if verdict in ("NOT COMPARABLE", "INSUFFICIENT DATA"):  # no figures to quote: the reason the sides differ
        assert found.group(2).startswith(f"pass@1 {verdict}: ") or "delta is stale" in ship, ship
    elif "delta is stale" not in ship:
        assert f"pass@1 {delta} {interval}, Holm p " in ship, ship
    # The rule, read off the printed table: SHIP exactly when pass@1 is a PASS and no row is a FAIL (nothing guarded
    # regressed: the default registry guards argument grounding), DO NOT SHIP when pass@1 or that guard is a FAIL.
    expected = "SHIP" if verdict == "PASS" and "FAIL" not in verdicts else "DO NOT SHIP" if verdict == "FAIL" or \
        re.search(r"^    marker_argument_grounding .*  FAIL  \(", out, re.M) else "INCONCLUSIVE"
    if "delta is stale" not in ship:
        assert found.group(1) == expected, (ship, verdicts)
    return found.group(1)


def test_a_complete_run_reports_no_warning_and_exports(runs, tmp_path, monkeypatch, capsys):
    home, first, second = runs
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    for base in (first, second):  # a first run; a second complete run over it
        code, out = _report(base, capsys)
        assert code == 0 and "STALE" not in out and "\n  lineage " not in out
        assert "held-out pass@1 0." in out and "delta agent-v2 vs agent-v1 on held-out tasks" in out
        _assert_ship_line_leads(out)
        assert _export(base, tmp_path / base.name, capsys)[0] == 0
    # The delta loads every version's grades and compares two: its lineage names those two, over all seeds.
    recorded = warehouse.recorded_lineage(_path(second, "delta").read_bytes())
    assert {re.sub(r"seed=\d", "seed=*", name) for name in recorded} == {
        f"retail/grades/policy_version={v}/seed=*.parquet" for v in ("agent-v1", "agent-v2")}


@pytest.mark.parametrize("killed_after", STEPS[:-1])
def test_a_run_killed_after_each_step_leaves_named_stale_lines_and_an_export_that_refuses(
        runs, killed_after, tmp_path, monkeypatch, capsys):
    home, first, second = runs
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    base = tmp_path / "warehouse"
    shutil.copytree(first, base)
    done = STEPS[:STEPS.index(killed_after) + 1]
    for step in done:
        _copy(_path(second, step), _path(base, step))
    stale = set(STEPS) - set(done)

    code, out = _report(base, capsys)
    assert code == 1
    mine, theirs = _version_lines(out, "agent-v2"), _version_lines(out, "agent-v1")
    assert "[STALE]" not in theirs  # agent-v1's files were computed from what the warehouse still holds
    assert bool(re.search(r"held-out pass@1 [^\n]*\[STALE\]", mine)) == ("scores" in stale)
    assert ("judge trust: trusted [STALE]" in mine) == ("grades" in stale)
    for cut in CUT_STEPS:
        assert bool(re.search(rf"{cut} \d+ \[STALE\]", mine)) == (cut in stale), cut
    assert bool(re.search(r"\d+ rollouts \[STALE\]", mine)) == ("rollouts" in stale)
    assert ("[STALE]" in out.split("\n  coverage")[1].split("\n")[0]) == ("rollouts" in stale)
    assert re.search(r"delta agent-v2 vs agent-v1 on held-out tasks[^\n]*\[STALE\]", out)
    assert _assert_ship_line_leads(out) == "INCONCLUSIVE"  # a stale delta decides nothing, and says why
    assert "the delta is stale (computed from files rewritten since), so no decision is drawn" in out.splitlines()[1]
    # Said once at the top: what is stale, from what, and the run that rebuilds it.
    warning = out.split("\n  coverage")[0]
    assert "the figures marked [STALE] were computed from files rewritten since" in warning
    assert ("pass@1, interval and no-op floor" in warning) == ("scores" in stale)
    assert ("for agent-v2 seed 0: computed from " in warning) == (stale != {"delta"})
    assert "delta for agent-v2: computed from " in warning  # the delta is written after the policy run
    assert "of agent-v2 seed 0 that have since been rewritten" in warning and FIX in warning
    assert "agent-v1 seed 0:" not in warning

    out_dir = tmp_path / "out"
    code, err = _export(base, out_dir, capsys)
    if stale & EXPORTED:  # rows of two runs would be paired: nothing is written
        assert code == 2 and err.startswith("error: the partitions to export mix runs")
        assert FIX.split(": ")[1] in err and not out_dir.exists()
    else:  # what the export reads is all the second run's: only the delta is stale
        assert code == 0 and (out_dir / "retail" / "openai" / "policy_version=agent-v2").exists()


@pytest.mark.parametrize("rewritten", ["covering_array", "world"])
def test_a_rewritten_seed_step_makes_every_version_stale_through_the_files_between(
        runs, rewritten, tmp_path, monkeypatch, capsys):
    home, first, _ = runs
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    base = tmp_path / "warehouse"
    shutil.copytree(first, base)
    path = warehouse.partition_path(base, "retail", rewritten, seed=0)
    table = pq.read_table(path)  # a run that changed it (a new pack rule) and was killed right after
    warehouse.write_table(path, table.slice(0, table.num_rows - 1),
                          lineage=warehouse.recorded_lineage(path.read_bytes()))
    code, out = _report(base, capsys)
    assert code == 1
    assert re.search(r"situations    \d+ planned, \d+ solvable[^\n]*\[STALE\]", out)
    for slug in ("agent-v1", "agent-v2"):  # their files read the situations, never the rewritten file itself
        assert re.search(r"held-out pass@1 [^\n]*\[STALE\]", _version_lines(out, slug))
        assert f"for {slug} seed 0: computed from {rewritten} of seed 0 that have since been rewritten" in out
        assert f"fix: sim-pipeline run --domain retail --seed 0 --versions {slug}" in out
    assert _export(base, tmp_path / "out", capsys)[0] == 2 and not (tmp_path / "out").exists()


def test_a_delta_computed_before_a_seed_was_graded_is_stale(runs, tmp_path, monkeypatch, capsys):
    home, first, _ = runs
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    base = tmp_path / "warehouse"
    shutil.copytree(first, base)
    seed_1 = Path(str(warehouse.partition_path(base, "retail", "grades", policy_version="agent-v1", seed=1)))
    seed_1.parent.mkdir(parents=True, exist_ok=True)
    _copy(_path(base, "grades", "agent-v1"), seed_1)  # a run of seed 1 killed before its delta
    code, out = _report(base, capsys)
    assert code == 1 and "[STALE]" not in _version_lines(out, "agent-v2")
    assert "delta for agent-v2: computed before grades of agent-v1 seed 1 were written" in out
    assert "fix: sim-pipeline run --domain retail --seed 1 --versions agent-v2" in out


def test_files_written_before_lineage_are_called_unchecked_not_consistent(runs, tmp_path, monkeypatch, capsys):
    home, first, _ = runs
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    base = tmp_path / "warehouse"
    shutil.copytree(first, base)
    for path in base.rglob("*.parquet"):  # as an older release wrote them: the same rows, no lineage
        warehouse.write_table(UPath(path), pq.read_table(path))
    code, out = _report(base, capsys)
    assert code == 0 and "[STALE]" not in out
    assert re.search(r"lineage       not recorded in \d+ file\(s\) these lines come from .*: whether every line "
                     r"comes from one run cannot be checked\. Fix: sim-pipeline run --domain retail --seed 0 "
                     "records it", out)
    code, err = _export(base, tmp_path / "out", capsys)
    assert code == 2 and err.startswith("error: lineage not recorded in 8 file(s) to export")
    assert "--allow-unverified" in err and not (tmp_path / "out").exists()
    code, err = _export(base, tmp_path / "out", capsys, "--allow-unverified")
    assert code == 0 and err.count("WARNING: LINEAGE NOT RECORDED in retail/") == 8


def test_a_real_kill_right_after_the_rollouts_were_rewritten(runs, tmp_path, capsys, monkeypatch):
    """The issue's reproduction: `kill -9` of a second `sim-pipeline run` as soon as its rollouts are written."""
    _, first, _ = runs
    base = tmp_path / "warehouse"
    shutil.copytree(first, base)
    sidecar = warehouse.checksum_path(_path(base, "rollouts"))  # written after the file: both are new once it is
    before = sidecar.read_bytes()
    root = Path(__file__).resolve().parents[1]  # this checkout's package, not another one installed
    paths = [str(root), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home"), "PYTHONPATH": os.pathsep.join(paths)}
    run = subprocess.Popen([sys.executable, "-m", "sim_pipeline.cli", "run", *SECOND, "--warehouse", str(base)],
                           cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while run.poll() is None and sidecar.read_bytes() == before and time.monotonic() < deadline:
        time.sleep(0.01)
    if run.poll() is None:
        os.kill(run.pid, signal.SIGKILL)
    assert run.wait() == -signal.SIGKILL and sidecar.read_bytes() != before
    assert _path(base, "scores").read_bytes() == _path(first, "scores").read_bytes()  # killed before its scores

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    code, out = _report(base, capsys)
    mine = _version_lines(out, "agent-v2")
    assert code == 1 and re.search(r"held-out pass@1 [^\n]*\[STALE\]", mine) and "trusted [STALE]" in mine
    assert "for agent-v2 seed 0: computed from rollouts and search of agent-v2 seed 0 that have since been " \
        "rewritten" in out and FIX in out
    assert not re.search(r"\d+ rollouts \[STALE\]", mine)  # the new rollouts are what the warehouse holds
    code, err = _export(base, tmp_path / "out", capsys)
    assert code == 2 and "mix runs" in err and not (tmp_path / "out").exists()
