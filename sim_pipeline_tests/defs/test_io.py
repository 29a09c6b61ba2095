"""The IO manager and the warehouse reader check a file without its sidecar against the content_sha256 the Dagster
instance recorded when it materialized it; with neither, the file is refused."""

from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from sim_pipeline import warehouse
from sim_pipeline.defs.io import CONTENT_SHA256, ParquetIOManager, materialized_sha256, path_partition, verifying_with
from sim_pipeline.defs.resources import WarehouseResource
from sim_pipeline.errors import WarehouseError

GRADES = Path(__file__).parent.parent / "cut" / "data" / "retail_agent-v1_seed0_grades.parquet"
FLIPS = 300  # single-bit flips, as bench_integrity.py counts them
FLIP_SEED = 0


@dg.asset(key=["d", "up"])
def up() -> pd.DataFrame:
    return pd.DataFrame({"rollout_id": [f"r{i}" for i in range(20)], "reward": [0.5] * 20})


@dg.asset(key=["d", "down"], ins={"table": dg.AssetIn(key=["d", "up"])})
def down(table: pd.DataFrame) -> pd.DataFrame:
    return table.assign(reward=table["reward"] * 2)


@dg.asset(key=["d", "direct"], deps=[up])
def direct(store: WarehouseResource) -> pd.DataFrame:
    return store.read_one("d", "up")


def _materialize(instance, base, *assets, selection=None):
    return dg.materialize([up, down, direct], selection=selection or list(assets), instance=instance,
                          resources={"io_manager": ParquetIOManager(base_path=str(base)),
                                     "store": WarehouseResource(base_path=str(base))}, raise_on_error=False)


def _failure(result) -> str:
    return " ".join(e.event_specific_data.error.to_string() for e in result.all_events if e.is_step_failure)


def test_an_input_without_its_sidecar_loads_when_the_instance_recorded_its_hash_and_is_refused_when_changed(tmp_path):
    instance = dg.DagsterInstance.ephemeral()
    base = tmp_path / "warehouse"
    assert _materialize(instance, base, selection=[dg.AssetKey(["d", "up"])]).success
    path = warehouse.partition_path(base, "d", "up")
    warehouse.checksum_path(path).unlink()  # copied without its sidecar
    both = [dg.AssetKey(["d", "down"]), dg.AssetKey(["d", "direct"])]
    assert _materialize(instance, base, selection=both).success  # clean: the instance's hash vouches for it
    assert warehouse.read_table(warehouse.partition_path(base, "d", "down"))["reward"].eq(1.0).all()

    warehouse.write_table(path, up().assign(reward=0.99), checksum_file=False)  # changed, still without a sidecar
    for key in both:  # the IO manager's input and the resource's direct read
        result = _materialize(instance, base, selection=[key])
        assert not result.success
        message = _failure(result)
        assert f"{path}: its content" in message and "does not match content_sha256" in message
        assert "(run " in message and "Fix: rematerialize d/up" in message

    fresh = dg.DagsterInstance.ephemeral()  # an instance that never materialized it: no record to check against
    result = _materialize(fresh, base, selection=[dg.AssetKey(["d", "down"])])
    assert not result.success and "cannot be verified" in _failure(result)


def test_a_changed_sidecar_is_still_not_the_file_the_instance_materialized(tmp_path):
    instance = dg.DagsterInstance.ephemeral()
    base = tmp_path / "warehouse"
    assert _materialize(instance, base, selection=[dg.AssetKey(["d", "up"])]).success
    warehouse.write_table(warehouse.partition_path(base, "d", "up"), up().assign(reward=0.99))  # new sidecar too
    result = _materialize(instance, base, selection=[dg.AssetKey(["d", "down"])])
    assert not result.success and "is not the file" in _failure(result)


def _recorded_grades(tmp_path) -> tuple[dg.DagsterInstance, warehouse.UPath, bytes]:
    """A real grades partition whose materialization the instance recorded, copied without its sidecar."""
    instance = dg.DagsterInstance.ephemeral()
    path = warehouse.partition_path(tmp_path, "retail", "grades", policy_version="agent-v1", seed=0)
    warehouse.write_table(path, pq.read_table(GRADES).replace_schema_metadata(None))
    asset_key, partition = path_partition(path)
    assert (asset_key, partition) == (dg.AssetKey(["retail", "grades"]), "agent-v1|0")
    instance.report_runless_asset_event(dg.AssetMaterialization(
        asset_key=asset_key, partition=partition, metadata={CONTENT_SHA256: warehouse.recorded_sha256(path)}))
    warehouse.checksum_path(path).unlink()
    return instance, path, path.read_bytes()


def test_300_single_bit_flips_in_a_grades_file_without_its_sidecar_are_all_refused(tmp_path):
    instance, path, clean = _recorded_grades(tmp_path)
    assert materialized_sha256(instance, *path_partition(path)).sha256 == warehouse.hashlib.sha256(clean).hexdigest()
    rng = np.random.default_rng(FLIP_SEED)
    refused = []
    with verifying_with(instance):
        assert len(warehouse.read_table(path)) > 0  # the clean copy reads, vouched for by the instance
        for _ in range(FLIPS):
            flipped = bytearray(clean)
            flipped[int(rng.integers(len(flipped)))] ^= 1 << int(rng.integers(8))
            path.write_bytes(bytes(flipped))
            try:
                warehouse.read_table(path)
            except WarehouseError as exc:
                refused.append(str(exc))
    assert len(refused) == FLIPS
    assert all(m.startswith(f"{path}: its content") and "does not match content_sha256" in m and
               "Fix: rematerialize retail/grades for policy_version=agent-v1, seed=0" in m for m in refused)


def test_verifying_with_an_instance_names_it_when_it_holds_no_hash(tmp_path):
    instance, path, _ = _recorded_grades(tmp_path)
    other = warehouse.partition_path(tmp_path, "retail", "grades", policy_version="agent-v2", seed=0)
    warehouse.write_table(other, pd.DataFrame({"reward": [1.0]}))
    warehouse.checksum_path(other).unlink()
    with verifying_with(instance), pytest.raises(WarehouseError, match="holds no content_sha256 for it") as error:
        warehouse.read_table(other)
    assert f"and the Dagster instance at {instance.root_directory} holds no content_sha256" in str(error.value)
