"""Step 09 (trained_policy) and the loop: new versions trained from one partition's cuts, served, measured.

The held-out wall: the situations and openings a method trained on never include a held-out situation or a
held-out opening, so the delta measures the trained versions on tasks training never saw.
"""

import json
import sys
import textwrap

import dagster as dg
import pandas as pd
import pytest
import yaml

from sim_pipeline import warehouse
from sim_pipeline.defs.partitions import partition_key
from sim_pipeline.domain import load_domain
from sim_pipeline.models import sim_models
from sim_pipeline.models.trained_profiles import load_profile
from sim_pipeline.registry import PolicyVersion, TrainerSpec
from sim_pipeline.train.trained_policy import TRAINED, train_policy
from sim_pipeline_tests.defs.test_assets import POLICY_STEPS, SEED_STEPS, run


def _read(base, asset, **parts):
    return warehouse.read_table(warehouse.partition_path(base, "retail", asset, **parts))


def test_trained_policy_fits_each_method_from_the_cuts_and_never_from_a_heldout_task(
        small_defs, instance, tmp_path, monkeypatch):
    monkeypatch.setenv("SIM_PIPELINE_TRAINED_DIR", str(tmp_path / "trained"))
    assets, resources, base = small_defs
    assert run(assets, resources, instance, ["axes"], None).success
    assert run(assets, resources, instance, SEED_STEPS[1:], "0").success
    partition = partition_key("agent-v1", "0")
    assert run(assets, resources, instance, POLICY_STEPS, partition).success
    result = run(assets, resources, instance, ["trained_policy"], partition)
    assert result.success
    table = _read(base, "trained_policy", policy_version="agent-v1", seed="0")
    assert list(table["method"]) == ["sft", "dpo", "grpo"]
    trained = table[table["status"] == TRAINED]
    assert len(trained) >= 2, table[["method", "status", "reason"]]
    for row in trained.itertuples(index=False):
        # Served by the embedded backend under its name, from the file the step saved.
        assert sim_models.serves(row.model) and load_profile(row.model) == json.loads(row.profile)
        assert row.cut_sha256 == warehouse.recorded_sha256(
            warehouse.partition_path(base, "retail", row.cut, policy_version="agent-v1", seed="0"))
        assert row.source_model == "sim/agent-v1" and row.examples > 0 and row.steps > 0
        losses = json.loads(row.losses)
        assert len(losses) == row.steps + 1 and losses[0] == row.loss_first
    [event] = result.get_asset_materialization_events()
    metadata = event.materialization.metadata
    assert set(metadata["trained"].value) == set(trained["method"]) and "loss_plot" in metadata

    # The wall: no trained-on situation is held out, and no training row opens with a held-out opening.
    situations = _read(base, "situations", seed="0")
    heldout = set(situations.loc[situations["split"] == "heldout", "situation_id"])
    rollouts = _read(base, "rollouts", policy_version="agent-v1", seed="0")
    heldout_openings = set(rollouts.loc[rollouts["split"] == "heldout", "opening_message"])
    for row in trained.itertuples(index=False):
        assert json.loads(row.trained_on) and not set(json.loads(row.trained_on)) & heldout
        cut = _read(base, row.cut, policy_version="agent-v1", seed="0")
        assert not set(cut["situation_id"]) & heldout
        ids = set(cut["rollout_id"] if "rollout_id" in cut else cut["chosen_rollout_id"])
        assert not set(rollouts.loc[rollouts["rollout_id"].isin(ids), "opening_message"]) & heldout_openings


STUB_TRAINER = textwrap.dedent('''
    import os, pathlib, sys
    export_dir, method = pathlib.Path(sys.argv[1]), sys.argv[2]
    assert sorted(export_dir.rglob("*.parquet")), "no export"
    out = pathlib.Path(os.environ["STUB_AGENTS_DIR"]) / f"loop_stub_{method}.py"
    out.write_text("def respond(messages, tools, sampling):\\n    return {'role': 'assistant', 'content': 'ok'}\\n")
    print(f"python:loop_stub_{method}:respond")
''')


def test_a_version_with_a_trainer_gets_its_model_from_the_command(small_defs, instance, tmp_path, monkeypatch):
    assets, resources, base = small_defs
    run(assets, resources, instance, ["axes"], None)
    run(assets, resources, instance, SEED_STEPS[1:], "0")
    assert run(assets, resources, instance, POLICY_STEPS, partition_key("agent-v1", "0")).success
    cuts = {c: _read(base, c, policy_version="agent-v1", seed="0") for c in ("sft", "preference_pairs", "grpo_groups")}
    (tmp_path / "stub.py").write_text(STUB_TRAINER)
    monkeypatch.setenv("STUB_AGENTS_DIR", str(tmp_path))
    version = PolicyVersion(slug="remote-v1", domain="retail", model="openai/remote-agent",
                            trainer=TrainerSpec(command=(sys.executable, str(tmp_path / "stub.py")),
                                                methods=("sft", "dpo")))
    table = train_policy(version, "0", cuts, tools=load_domain("retail").tool_schemas)
    assert list(table["status"]) == [TRAINED, TRAINED, "skipped"]
    assert list(table["model"][:2]) == ["python:loop_stub_sft:respond", "python:loop_stub_dpo:respond"]
    assert table["reason"][2] == "the version's trainer trains ['sft', 'dpo'] only"
    assert (table["trainer"][:2] == f"{sys.executable} {tmp_path / 'stub.py'}").all()

    plain = PolicyVersion(slug="remote-v2", domain="retail", model="openai/remote-agent")
    skipped = train_policy(plain, "0", cuts, tools=load_domain("retail").tool_schemas)
    assert set(skipped["status"]) == {"skipped"} and skipped["reason"].str.contains("names no trainer. Fix:").all()
    empty = train_policy(PolicyVersion(slug="v", domain="retail", model="sim/agent-v1"), "0",
                         {"sft": None, "preference_pairs": pd.DataFrame(), "grpo_groups": None},
                         tools=load_domain("retail").tool_schemas)
    assert set(empty["status"]) == {"skipped"} and empty["reason"].str.contains("cut has no rows").all()


def test_the_loop_trains_registers_and_measures_each_method_without_touching_the_registry(
        tmp_path, monkeypatch, registry_path):
    from sim_pipeline.defs import loop

    monkeypatch.setenv("SIM_PIPELINE_TRAINED_DIR", str(tmp_path / "trained"))
    before = registry_path.read_text()
    instance = dg.DagsterInstance.ephemeral()
    sizes = {"heldout_samples": 2, "train_samples": 4, "search_batch_situations": 8, "search_budget_rows": 64,
             "probe_samples": 0}
    result = loop.run_loop(instance, "agent-v1", ["sft", "dpo"], "0", warehouse=str(tmp_path / "warehouse"),
                           log=lambda line: None, sizes=sizes, registry_path=registry_path)
    assert result.success, [(o.label, o.success) for o in result.outcomes]
    assert sorted(result.trained) == ["dpo", "sft"]
    assert registry_path.read_text() == before  # the project's registry is never edited
    written = yaml.safe_load(result.registry.read_text())["policies"]
    for method, version in result.trained.items():
        assert version.slug == f"agent-v1-{method}" and version.baseline == "agent-v1"
        assert written[version.slug]["model"] == version.model and version.model.startswith("sim/trained-")
        delta = _read(tmp_path / "warehouse", "delta", policy_version=version.slug)
        assert "pass@1" in set(delta["metric"]) and set(delta["baseline"]) == {"agent-v1"}
    assert set(instance.get_dynamic_partitions("retail_policy_version")) >= {"agent-v1-sft", "agent-v1-dpo"}


def test_the_loop_refuses_a_trained_slug_that_folds_onto_a_registered_one_before_it_runs(tmp_path):
    from sim_pipeline.defs import loop
    from sim_pipeline.errors import SimPipelineError

    project = tmp_path / "policies.yaml"
    project.write_text(yaml.safe_dump({"policies": {"agent-v1": {"domain": "retail", "model": "sim/agent-v1"},
                                                    "Agent_V1_SFT": {"domain": "retail", "model": "sim/agent-v2"}}}))
    instance = dg.DagsterInstance.ephemeral()
    with pytest.raises(SimPipelineError, match=r"the trained version 'agent-v1-sft' and version 'Agent_V1_SFT' of "
                                               r".* are one slug once case and '-'/'_' are set aside\. Fix: rename"):
        loop.run_loop(instance, "agent-v1", ["sft"], "0", warehouse=str(tmp_path / "warehouse"),
                      log=lambda line: None, registry_path=project)
    assert not (tmp_path / "warehouse").exists() and not instance.get_dynamic_partitions("retail_policy_version")
