"""Parquet storage: hive paths, nested columns round trip, and a crash mid-write leaves no file."""

import pandas as pd
import pyarrow.parquet as pq
import pytest

from sim_pipeline import warehouse
from sim_pipeline.rollout.row import ROLLOUT_SCHEMA


def test_hive_paths():
    base = "/w"
    assert str(warehouse.partition_path(base, "retail", "grades", policy_version="v1", seed="3")) == \
        "/w/retail/grades/policy_version=v1/seed=3.parquet"
    assert str(warehouse.partition_path(base, "retail", "world", seed=0)) == "/w/retail/world/seed=0.parquet"
    assert str(warehouse.partition_path(base, "retail", "delta", policy_version="v2")) == \
        "/w/retail/delta/policy_version=v2.parquet"
    assert str(warehouse.partition_path(base, "retail", "axes")) == "/w/retail/axes.parquet"


def test_nested_columns_round_trip_as_python_objects(tmp_path):
    messages = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_order", "arguments": '{"order_id": "4821"}'}}],
        "tool_call_id": None, "name": None}]
    frame = pd.DataFrame({"rollout_id": ["a"], "messages": [messages], "scores": [[0.5, 1.0]]})
    path = warehouse.partition_path(tmp_path, "retail", "x", policy_version="v1", seed=0)
    assert warehouse.write_table(path, frame) == 1
    back = warehouse.read_table(path)
    assert back["messages"][0] == messages and back["scores"][0] == [0.5, 1.0]


def test_crash_mid_write_leaves_no_partial_file(tmp_path, monkeypatch):
    path = warehouse.partition_path(tmp_path, "retail", "rollouts", policy_version="v1", seed=0)
    warehouse.write_table(path, pd.DataFrame({"a": [1]}))
    before = path.read_bytes()

    def crash(table, where, **kwargs):
        with open(where, "wb") as handle:
            handle.write(b"PAR1 half a file")
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", crash)
    with pytest.raises(OSError, match="disk full"):
        warehouse.write_table(path, pd.DataFrame({"a": [2]}))
    assert path.read_bytes() == before  # the old file is untouched
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # and no temporary file is left


def test_read_partitions_reports_missing(tmp_path):
    present = warehouse.partition_path(tmp_path, "d", "g", policy_version="v", seed=0)
    warehouse.write_table(present, pd.DataFrame({"a": [1]}))
    absent = warehouse.partition_path(tmp_path, "d", "g", policy_version="v", seed=1)
    frame, missing = warehouse.read_partitions([present, absent])
    assert len(frame) == 1 and missing == [str(absent)]


def test_rollout_schema_is_fixed_even_for_empty_partitions():
    from sim_pipeline.rollout.row import rollout_table

    assert rollout_table(pd.DataFrame()).schema == ROLLOUT_SCHEMA
