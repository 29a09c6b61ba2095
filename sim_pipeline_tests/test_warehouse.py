"""Parquet storage: hive paths, nested columns round trip, a crash mid-write leaves no file, and a changed byte
is refused with the file and the fix named."""

from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_pipeline import warehouse
from sim_pipeline.errors import WarehouseError
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
    real_write = Path.write_bytes

    def crash(self, data):
        real_write(self, data[: len(data) // 2])  # half the bytes reach the disk, then the disk is full
        raise OSError("disk full")

    monkeypatch.setattr(Path, "write_bytes", crash)
    with pytest.raises(OSError, match="disk full"):
        warehouse.write_table(path, pd.DataFrame({"a": [2]}))
    monkeypatch.undo()
    assert path.read_bytes() == before  # the old file is untouched, and still matches its recorded sha256
    assert warehouse.read_table(path)["a"].tolist() == [1]
    # and no temporary file is left: the table and its hidden checksum
    assert sorted(p.name for p in path.parent.iterdir()) == sorted([path.name, warehouse.checksum_path(path).name])


def test_a_lineage_is_kept_in_the_file_and_the_same_inputs_give_the_same_bytes(tmp_path):
    path = warehouse.partition_path(tmp_path, "retail", "grades", policy_version="v1", seed=0)
    rollouts = warehouse.partition_path(tmp_path, "retail", "rollouts", policy_version="v1", seed=0)
    assert warehouse.relative_path(rollouts) == "retail/rollouts/policy_version=v1/seed=0.parquet"  # copies keep it
    lineage = {warehouse.relative_path(rollouts): "ab" * 32, "retail/grades/policy_version=v1/seed=1.parquet": None}
    warehouse.write_table(path, pd.DataFrame({"a": [1]}), lineage=lineage)
    first = path.read_bytes()
    assert warehouse.recorded_lineage(first) == lineage
    assert warehouse.read_table(path)["a"].tolist() == [1]  # the rows read as before
    warehouse.write_table(path, pd.DataFrame({"a": [1]}), lineage=dict(reversed(lineage.items())))
    assert path.read_bytes() == first  # content hashes, sorted: determinism holds
    warehouse.write_table(path, pd.DataFrame({"a": [1]}))
    assert warehouse.recorded_lineage(path.read_bytes()) is None  # written without one: "not recorded", not "{}"


def test_read_partitions_reports_missing(tmp_path):
    present = warehouse.partition_path(tmp_path, "d", "g", policy_version="v", seed=0)
    warehouse.write_table(present, pd.DataFrame({"a": [1]}))
    absent = warehouse.partition_path(tmp_path, "d", "g", policy_version="v", seed=1)
    frame, missing = warehouse.read_partitions([present, absent])
    assert len(frame) == 1 and missing == [str(absent)]


def test_rollout_schema_is_fixed_even_for_empty_partitions():
    from sim_pipeline.rollout.row import rollout_table

    assert rollout_table(pd.DataFrame()).schema == ROLLOUT_SCHEMA


def _written(tmp_path):
    path = warehouse.partition_path(tmp_path, "retail", "grades", policy_version="agent-v1", seed=0)
    warehouse.write_table(path, pd.DataFrame({"rollout_id": [f"r{i}" for i in range(50)], "reward": [1.0] * 50}))
    return path


@settings(max_examples=60, deadline=None)
@given(position=st.floats(min_value=0, max_value=1, exclude_max=True), bit=st.integers(min_value=0, max_value=7))
def test_any_flipped_bit_is_refused_naming_the_file_and_the_fix(tmp_path_factory, position, bit):
    path = _written(tmp_path_factory.mktemp("w"))
    content = bytearray(path.read_bytes())
    content[int(position * len(content))] ^= 1 << bit
    path.write_bytes(bytes(content))
    with pytest.raises(WarehouseError, match="Fix: rematerialize retail/grades for policy_version=agent-v1, seed=0") as error:
        warehouse.read_table(path)
    assert str(path) in str(error.value)


def test_a_truncated_file_names_itself_even_without_its_checksum(tmp_path):
    path = _written(tmp_path)
    warehouse.checksum_path(path).unlink()  # as an older release or another tool would have left it
    path.write_bytes(path.read_bytes()[:40])
    with warehouse.verifying(allow_unverified=True, warn=[].append), \
            pytest.raises(WarehouseError, match="not a readable Parquet file") as error:
        warehouse.read_table(path)
    assert str(path) in str(error.value) and "<Buffer>" not in str(error.value)


def test_a_file_without_its_sidecar_and_no_record_is_refused_naming_it_and_the_fixes(tmp_path):
    path = _written(tmp_path)
    warehouse.checksum_path(path).unlink()  # `cp *.parquet` or `rsync --exclude='.*'` leave the sidecar behind
    with pytest.raises(WarehouseError) as error:
        warehouse.read_table(path)
    message = str(error.value)
    assert message.startswith(f"{path}: cannot be verified: its sidecar .seed=0.parquet.sha256 is missing")
    assert "Fix: restore .seed=0.parquet.sha256 beside it" in message
    assert "rematerialize retail/grades for policy_version=agent-v1, seed=0" in message
    assert "--allow-unverified" in message
    with warehouse.verifying(lambda _: None, consulted="the Dagster instance at /x"), pytest.raises(WarehouseError) \
            as error:
        warehouse.read_table(path)
    assert "the Dagster instance at /x holds no content_sha256 for it" in str(error.value)


def test_a_file_without_its_sidecar_is_checked_against_the_recorded_hash(tmp_path):
    path = _written(tmp_path)
    sha256 = warehouse.recorded_sha256(path)
    warehouse.checksum_path(path).unlink()
    recorded = warehouse.RecordedHash(sha256, "the test's record")
    asked = []

    def lookup(p):
        asked.append(str(p))
        return recorded

    with warehouse.verifying(lookup):
        assert len(warehouse.read_table(path)) == 50  # the clean file reads
        assert asked == [str(path)]
        table = warehouse.read_table(path).assign(reward=0.99)
        warehouse.write_table(path, table, checksum_file=False)  # rewritten, still without a sidecar
        with pytest.raises(WarehouseError, match=r"does not match content_sha256 .* recorded by the test's record "
                                                 r"\(its sidecar .seed=0.parquet.sha256 is missing\)") as error:
            warehouse.read_table(path)
    assert str(error.value).startswith(str(path)) and "Fix: rematerialize retail/grades" in str(error.value)
    # A sidecar, when present, is what the file is checked against; the lookup is not asked.
    warehouse.write_table(path, table)
    before = len(asked)
    with warehouse.verifying(lookup):
        assert warehouse.read_table(path)["reward"].eq(0.99).all() and len(asked) == before


def test_allow_unverified_reads_a_file_no_record_vouches_for_with_a_loud_warning(tmp_path):
    path = _written(tmp_path)
    warehouse.checksum_path(path).unlink()
    warned = []
    with warehouse.verifying(lambda _: None, allow_unverified=True, warn=warned.append):
        assert len(warehouse.read_table(path)) == 50
    assert warned == [warehouse.unverified_warning(path)] and warned[0].startswith(f"WARNING: UNVERIFIED READ of {path}")
    # Allowing unverified reads does not let a file through that a recorded hash contradicts.
    with warehouse.verifying(lambda _: warehouse.RecordedHash("0" * 64, "a record"), allow_unverified=True,
                             warn=warned.append), pytest.raises(WarehouseError, match="does not match content_sha256"):
        warehouse.read_table(path)
    with pytest.raises(WarehouseError, match="cannot be verified"):  # the setting ends with its block
        warehouse.read_table(path)


def test_report_on_a_corrupt_partition_is_one_clear_line(tmp_path, capsys, monkeypatch):
    from sim_pipeline.cli import main

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    path = _written(tmp_path / "warehouse")
    path.write_bytes(path.read_bytes()[:-10])
    assert main(["report", "--warehouse", str(tmp_path / "warehouse")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}") and "Traceback" not in err and err.count("\n") == 1


def test_read_digest_names_the_files_a_read_frame_came_from_and_nothing_else(tmp_path):
    present = warehouse.partition_path(tmp_path, "d", "g", policy_version="v", seed=0)
    warehouse.write_table(present, pd.DataFrame({"a": [1, 2]}))
    absent = warehouse.partition_path(tmp_path, "d", "g", policy_version="v", seed=1)
    frame, _ = warehouse.read_partitions([present, absent])
    assert warehouse.read_digest(frame) == (warehouse.recorded_sha256(present), None)
    assert warehouse.read_digest(frame[frame["a"] > 1]) is None  # a filtered copy is not the file
    assert warehouse.read_digest(frame.copy()) is None
    assert warehouse.read_digest(pd.DataFrame({"a": [1, 2]})) is None
