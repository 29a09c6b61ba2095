"""Two nights of the nightly on one instance and warehouse at stock settings: the second night's partitions are
byte-identical to the first's (the date is in the run key only; the seed job's carried-over plan comes back
unchanged), so a gate decision on a seed is the same every night, and bench_nightly_gate, which grades seeds through
the engine functions, writes the grades the nightly's policy run writes."""

import datetime
import hashlib

import dagster as dg
import pandas as pd
import pytest
from upath import UPath

from sim_pipeline import warehouse
from sim_pipeline.definitions import build_definitions
from sim_pipeline.defs.automation import nightly_schedule, policy_job, seed_job, seed_ready_sensor
from sim_pipeline.defs.resources import replaced
from sim_pipeline.grade.judge_trust import TRUST_VERDICT_COLUMN
from sim_pipeline.registry import REGISTRY_PATH, load_registry, versions_for
from sim_pipeline_tests.bench.bench_nightly_gate import partition_grades

SEED = "0"
NIGHTS = (datetime.datetime(2026, 11, 30, 2), datetime.datetime(2026, 12, 1, 2))


@pytest.fixture(scope="module")
def two_nights(tmp_path_factory):
    """Per night: its run keys and the sha256 of every Parquet file in the warehouse after it; the warehouse path."""
    tmp = tmp_path_factory.mktemp("nights")
    built = build_definitions(["retail"], warehouse=str(tmp / "warehouse"))
    resources = dict(built.resources)  # stock run sizes and registry, as the schedule's runs get them
    resources["gateway"] = replaced(resources["gateway"], cache_dir=str(tmp / "cache"))
    defs = dg.Definitions(assets=list(built.assets), jobs=[seed_job("retail"), policy_job("retail")],
                          schedules=[nightly_schedule("retail")], sensors=[seed_ready_sensor("retail")],
                          resources=resources)
    sensor = defs.get_sensor_def("retail_seed_ready_sensor")
    nights = []
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("retail_policy_version",
                                        [v.slug for v in versions_for(load_registry(REGISTRY_PATH), "retail")])
        for when in NIGHTS:
            context = dg.build_schedule_context(instance=instance, repository_def=defs.get_repository_def(),
                                                scheduled_execution_time=when)
            (request,) = [r for r in defs.get_schedule_def("retail_nightly").evaluate_tick(context).run_requests
                          if r.partition_key == SEED]
            seeded = defs.resolve_job_def("retail_seed_job").execute_in_process(
                instance=instance, partition_key=request.partition_key, tags=request.tags, raise_on_error=False)
            assert seeded.success
            follows = sensor(dg.build_run_status_sensor_context(
                sensor_name=sensor.name, dagster_instance=instance, dagster_run=seeded.dagster_run,
                dagster_event=seeded.get_run_success_event()))
            # Every version a delta compares (and the newest) is evaluated on the seed, one policy run each.
            for follow in follows if isinstance(follows, list) else [follows]:
                graded = defs.resolve_job_def("retail_policy_job").execute_in_process(
                    instance=instance, partition_key=follow.partition_key, tags=follow.tags, raise_on_error=False)
                assert graded.success  # a refused judge would stop the run at its blocking check
            files = {str(p.relative_to(tmp / "warehouse")): hashlib.sha256(p.read_bytes()).hexdigest()
                     for p in sorted((tmp / "warehouse").rglob("*.parquet"))}
            nights.append((request.run_key, files))
    return nights, tmp / "warehouse"


def test_a_second_night_writes_the_same_bytes_as_the_first(two_nights):
    (first_key, first), (second_key, second) = two_nights[0]
    assert first_key != second_key  # two distinct nightly runs, not one deduplicated request
    steps = {name.split("/")[1] for name in first}
    assert steps >= {"covering_array", "world", "situations", "search", "rollouts", "grades", "scores"}
    assert first.keys() == second.keys()
    assert [name for name in first if first[name] != second[name]] == []


def test_the_bench_grades_a_seed_as_the_nightly_does(two_nights, tmp_path):
    _, base = two_nights
    newest = versions_for(load_registry(REGISTRY_PATH), "retail")[-1].slug
    nightly = warehouse.read_table(UPath(warehouse.partition_path(base, "retail", "grades", policy_version=newest,
                                                                  seed=SEED)))
    bench, report = partition_grades(SEED, tmp_path, versions=(newest,))[newest]
    assert report.verdict == nightly[TRUST_VERDICT_COLUMN].iloc[0]
    pd.testing.assert_frame_equal(bench.reset_index(drop=True), nightly.reset_index(drop=True))
