"""Provenance across runs, through real HTTP (issue 36 items 1 and 3).

A `models:` entry that changes under its name between two runs of one version leaves rows that say so, and the delta
refuses to pool them; a candidate whose run is interrupted while its judge grades launches no delta, and the summary
names the partition that is missing.
"""

import os
import signal

import yaml

from sim_pipeline import warehouse
from sim_pipeline.cli import _instance
from sim_pipeline.defs.launch import materialize_domain, sync_partitions
from sim_pipeline.measure.verdict import NOT_COMPARABLE
from sim_pipeline.models.provenance import role_of
from sim_pipeline.registry import load_registry, versions_for
from sim_pipeline.report import render
from sim_pipeline_tests.scripted_server import ScriptedServer

SIZES = {"max_situations": 6, "train_samples": 1, "heldout_samples": 1, "probe_samples": 0, "search_budget_rows": 0}
REFUSAL = {"content": "Apologies, that is outside what this desk can do for you."}


def _isolated(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    for name in ("OPENAI_API_BASE", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # the model cache goes to data/cache under the working directory


def _registry(path, models, **candidate):
    """agent-v1 (embedded) and agent-v2 (its candidate), judge gate opted out: the small runs cannot decide it."""
    path.write_text(yaml.safe_dump({
        "models": models, "defaults": {"user_model": "sim/user"},
        "policies": {"agent-v1": {"domain": "retail", "model": "sim/agent-v1", "judge_trust_opt_out": True},
                     "agent-v2": {"domain": "retail", "baseline": "agent-v1", "judge_trust_opt_out": True,
                                  "model": "sim/agent-v2", **candidate}}}))
    return path


def _run(instance, path, seed, base, logged):
    sync_partitions(instance, ["retail"], str(path))
    return materialize_domain(instance, "retail", seed, versions_for(load_registry(path), "retail"),
                              warehouse=str(base), sizes=SIZES, concurrency=2, registry=str(path), log=logged.append)


def test_an_entry_changed_under_its_name_is_told_apart_and_not_compared(tmp_path, monkeypatch):
    _isolated(monkeypatch, tmp_path)
    base, logged = tmp_path / "warehouse", []
    with ScriptedServer(lambda request: REFUSAL) as server:
        before = {"edge": {"model": "openai/scripted-agent", "api_base": server.base_url, "timeout_s": 10}}
        after = {"edge": {**before["edge"], "model": "openai/scripted-agent-b", "params": {"parallel_tool_calls": False}}}
        instance = _instance()
        _run(instance, _registry(tmp_path / "before.yaml", before, model="edge"), "0", base, logged)
        changed = _registry(tmp_path / "after.yaml", after, model="edge")
        outcomes = _run(instance, changed, "1", base, logged)
        versions = versions_for(load_registry(changed), "retail")
        summary = render(str(base), "retail", "1", versions)
        instance.dispose()
        sent = {r["model"] for r in server.requests}
    assert sent == {"scripted-agent", "scripted-agent-b"}  # both configs really answered
    assert any(o.label.startswith("agent-v2: delta") for o in outcomes)

    def agent(seed):
        rows = warehouse.read_table(warehouse.partition_path(base, "retail", "rollouts", policy_version="agent-v2",
                                                             seed=seed))
        return {(r["entry"], r["model"], r["config_sha256"]) for r in (role_of(c, "agent") for c in rows["backends"])}

    (first,), (second,) = agent("0"), agent("1")
    assert first[:2] == ("edge", "openai/scripted-agent") and second[:2] == ("edge", "openai/scripted-agent-b")
    assert first[2] != second[2]  # one name, two configs: the rows tell them apart
    delta = warehouse.read_table(warehouse.partition_path(base, "retail", "delta", policy_version="agent-v2"))
    assert set(delta["verdict"]) == {NOT_COMPARABLE}
    reason = delta["reason"].iloc[0]
    assert "agent-v2's rows span two agent configs" in reason
    assert "edge (openai/scripted-agent at" in reason and "edge (openai/scripted-agent-b at" in reason
    assert "configs: its rows span two agent configs, edge (openai/scripted-agent at" in summary


def test_an_interrupted_candidate_launches_no_delta_and_the_summary_names_what_is_missing(tmp_path, monkeypatch):
    """The candidate's judge endpoint is where the interrupt lands: Ctrl-C while its grades are being made."""
    _isolated(monkeypatch, tmp_path)
    base, logged = tmp_path / "warehouse", []

    pressed = []

    def interrupting(request):
        if not pressed:  # once, as a person presses Ctrl-C once: the main thread gets KeyboardInterrupt
            pressed.append(True)
            os.kill(os.getpid(), signal.SIGINT)
        return {"content": '{"reason": "fine", "score": 1}'}

    with ScriptedServer(interrupting) as judge:
        path = _registry(tmp_path / "reg.yaml", {"stopper": {"model": "openai/scripted-judge",
                                                             "api_base": judge.base_url, "timeout_s": 10}},
                         judge_model="stopper")
        instance = _instance()
        outcomes = _run(instance, path, "0", base, logged)
        summary = render(str(base), "retail", "0", versions_for(load_registry(path), "retail"))
        instance.dispose()
        asked = len(judge.requests)
    assert asked >= 1
    candidate = [o for o in outcomes if o.partition == "agent-v2|0"]
    assert len(candidate) == 1 and candidate[0].interrupted and "grades" in candidate[0].not_run
    assert not any("delta" in o.label for o in outcomes), [o.label for o in outcomes]  # no follow-up step ran
    assert not any("running agent-v2: delta" in line for line in logged)
    assert not (base / "retail" / "delta").exists()
    line = next(line for line in summary.splitlines() if line.startswith("  delta agent-v2 vs agent-v1"))
    assert line == ("  delta agent-v2 vs agent-v1: not computed: agent-v2 has no grades for seed 0 (its policy run "
                    "stopped at rollouts)"), summary
    assert "baseline grades missing" not in summary
