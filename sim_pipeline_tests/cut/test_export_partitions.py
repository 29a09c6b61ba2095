"""Exporting from the warehouse: hive-style output, the publish gate run again, clear errors, the CLI verb.

The warehouse holds one real partition (`data/`: `sim-pipeline run --domain retail`, agent-v1, seed 0) and the
cuts `build_cut` makes of it, written where the cut assets write them.
"""

from pathlib import Path

import pytest
import yaml

from sim_pipeline.cli import main
from sim_pipeline.cut.cuts import CUTS, build_cut
from sim_pipeline.cut.export_partitions import ExportRequest, export_warehouse
from sim_pipeline.domain import load_domain
from sim_pipeline.errors import ExportError
from sim_pipeline.warehouse import checksum_path, partition_path, recorded_sha256, relative_path, write_table
from sim_pipeline_tests.cut.partition import table as stored_table

VERSION = "agent-v1"
REGISTRY = {
    "defaults": {"judge_model": "sim/judge", "user_model": "sim/user"},
    "policies": {
        VERSION: {"domain": "retail", "model": "sim/agent-v1"},
        "untrusting-v1": {"domain": "retail", "model": "sim/judge"},
    },
}


@pytest.fixture(scope="module")
def inputs():
    rollouts = stored_table("rollouts")
    grades = stored_table("grades")
    tools = load_domain("retail").tool_schemas
    cuts = {
        name: build_cut(name, rollouts, grades, tools=tools, judge_trusted=True, opt_out=False).table
        for name in CUTS
    }
    return rollouts, grades, cuts


# What each asset the export reads was computed from, as the IO manager records it in the file's lineage.
INPUTS = {"situations": (), "search": ("situations",), "rollouts": ("situations", "search"),
          "grades": ("rollouts", "search", "situations"), **{cut: ("rollouts", "grades") for cut in CUTS}}


def write_step(warehouse: Path, version: str, asset: str, table) -> None:
    """One (version, seed 0) file written as its asset writes it: with the sha256 of its inputs in its footer."""
    def path(name):
        return partition_path(warehouse, "retail", name, policy_version=None if name == "situations" else version,
                              seed=0)

    write_table(path(asset), table, lineage={relative_path(path(i)): recorded_sha256(path(i)) for i in INPUTS[asset]})


def write_partition(warehouse: Path, version: str, rollouts, grades, cuts) -> None:
    """One (version, seed 0) partition of every input the export reads, where the assets write them (the
    situations file holds the grid's and the search's situations: here all in the seed's table, none in search)."""
    situations = stored_table("situations")
    write_step(warehouse, version, "situations", situations)
    for asset, table in {"search": situations.iloc[:0], "rollouts": rollouts, "grades": grades, **cuts}.items():
        write_step(warehouse, version, asset, table)


@pytest.fixture
def warehouse(tmp_path, inputs) -> Path:
    write_partition(tmp_path / "warehouse", VERSION, *inputs)
    return tmp_path / "warehouse"


def request(tmp_path: Path, warehouse: Path, fmt: str, **options) -> ExportRequest:
    registry = tmp_path / "policies.yaml"
    registry.write_text(yaml.safe_dump(REGISTRY))
    return ExportRequest(
        domain="retail",
        format=fmt,
        out=str(tmp_path / "exports"),
        warehouse=str(warehouse),
        registry_path=registry,
        **{"versions": (VERSION,), **options},
    )


def test_export_writes_hive_style_directories_per_version_and_seed(tmp_path, warehouse, inputs):
    report = export_warehouse(request(tmp_path, warehouse, "trl"))
    assert report.refused == ()
    base = tmp_path / "exports" / "retail" / "trl" / f"policy_version={VERSION}" / "seed=0"
    assert sorted(p.name for p in base.iterdir()) == [
        "dpo.parquet",
        "grpo.parquet",
        "reward.parquet",
        "reward_pointwise.parquet",
        "sft.parquet",
    ]
    assert {f.dataset: f.path for f in report.files} == {p.stem: str(p) for p in base.iterdir()}
    assert next(f.rows for f in report.files if f.dataset == "reward_pointwise") == len(
        inputs[2]["reward_model_set"]
    )


def test_missing_partitions_stop_the_export_and_name_the_run(tmp_path, warehouse):
    (warehouse / "retail" / "grpo_groups" / f"policy_version={VERSION}" / "seed=0.parquet").unlink()
    with pytest.raises(ExportError, match=f"sim-pipeline run --domain retail --seed 0 --versions {VERSION}"):
        export_warehouse(request(tmp_path, warehouse, "verl"))
    with pytest.raises(ExportError, match="seed 3: missing"):
        export_warehouse(request(tmp_path, warehouse, "openai", seeds=("3",)))
    assert not (tmp_path / "exports").exists()


def test_by_default_every_materialized_version_is_exported_and_others_skipped(tmp_path, warehouse):
    report = export_warehouse(request(tmp_path, warehouse, "verl", versions=()))  # untrusting-v1 has no run
    assert [(Path(f.path).parent.parent.name, f.rows > 0) for f in report.files] == [
        (f"policy_version={VERSION}", True)
    ]
    with pytest.raises(ExportError, match="run `sim-pipeline run --domain retail` first"):
        export_warehouse(request(tmp_path, tmp_path / "empty", "verl", versions=()))


def test_a_cut_the_gate_refuses_is_not_exported_and_its_old_file_goes(tmp_path, warehouse, inputs):
    assert export_warehouse(request(tmp_path, warehouse, "trl")).refused == ()
    base = tmp_path / "exports" / "retail" / "trl" / f"policy_version={VERSION}" / "seed=0"
    assert (base / "sft.parquet").exists()
    sft = inputs[2]["sft"].assign(reward=0.5)  # no longer what the grades say
    write_step(warehouse, VERSION, "sft", sft)
    report = export_warehouse(request(tmp_path, warehouse, "trl"))
    (refusal,) = report.refused
    assert (refusal.cut, refusal.policy_version, refusal.seed) == ("sft", VERSION, "0")
    assert "differs from their grade" in " ".join(refusal.reasons)
    assert sorted(p.name for p in base.iterdir()) == [
        "dpo.parquet", "grpo.parquet", "reward.parquet", "reward_pointwise.parquet"]


def test_an_untrusted_judge_without_opt_out_refuses_every_cut(tmp_path, inputs):
    # The judge shares the policy's model family here, which judge trust flags (REFERENCE section 6).
    write_partition(tmp_path / "warehouse", "untrusting-v1", *inputs)
    report = export_warehouse(
        request(tmp_path, tmp_path / "warehouse", "openai", versions=("untrusting-v1",))
    )
    assert [r.cut for r in report.refused] == ["sft", "preference_pairs"] and report.files == ()
    assert all("judge_trust" in " ".join(r.reasons) for r in report.refused)


def test_unknown_versions_and_formats_are_user_errors(tmp_path, warehouse):
    with pytest.raises(ExportError, match=r"versions \['agent-v9'\] do not serve domain 'retail'"):
        export_warehouse(request(tmp_path, warehouse, "trl", versions=("agent-v9",)))
    with pytest.raises(ExportError, match="unknown export format 'csv'"):
        export_warehouse(request(tmp_path, warehouse, "csv"))


def test_the_cli_verb_prints_each_file_and_exits_cleanly(tmp_path, warehouse, capsys, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))  # export checks files against its instance
    code = main(
        [
            "export",
            "--format",
            "verl",
            "--versions",
            VERSION,
            "--seeds",
            "0",
            "--warehouse",
            str(warehouse),
            "--out",
            str(tmp_path / "out"),
        ]
    )
    printed = capsys.readouterr().out
    path = tmp_path / "out" / "retail" / "verl" / f"policy_version={VERSION}" / "seed=0" / "grpo.parquet"
    assert code == 0 and str(path) in printed and path.exists()


def test_the_cli_verb_reports_missing_partitions_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    code = main(
        [
            "export",
            "--format",
            "trl",
            "--versions",
            VERSION,
            "--warehouse",
            str(tmp_path / "empty"),
            "--out",
            str(tmp_path / "out"),
        ]
    )
    error = capsys.readouterr().err
    assert code == 2 and error.startswith("error: the cut partitions to export are not materialized")
    assert f"sim-pipeline run --domain retail --seed 0 --versions {VERSION}" in error
    assert not (tmp_path / "out").exists()


def test_the_cli_verb_refuses_a_file_without_its_sidecar_before_writing_anything(tmp_path, warehouse, inputs, capsys,
                                                                                 monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))  # an instance with no record of these files
    write_partition(warehouse, "agent-v2", *inputs)
    grades = partition_path(warehouse, "retail", "grades", policy_version="agent-v2", seed=0)
    checksum_path(grades).unlink()  # copied without its sidecar
    args = ["export", "--format", "trl", "--versions", f"{VERSION},agent-v2", "--seeds", "0", "--warehouse",
            str(warehouse), "--out", str(tmp_path / "out")]
    assert main(args) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: {grades}: cannot be verified: its sidecar .seed=0.parquet.sha256 is missing")
    assert not (tmp_path / "out").exists()  # agent-v1's partition, read first and clean, was not written either
    assert main([*args, "--allow-unverified"]) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith(f"WARNING: UNVERIFIED READ of {grades}") and "agent-v2" in captured.out
