"""The event log `sim-pipeline` writes with kept connections: Dagster's own class reads every event of it, the UI's
file watcher still follows a live run, connections are opened once per file (and only a few kept), and an instance
whose dagster.yaml chooses its storage is left as it is."""

import shutil
import sqlite3.dbapi2
import threading
import time
from pathlib import Path

import dagster as dg
import pytest

from sim_pipeline import defaults
from sim_pipeline.cli import INSTANCE_CONFIG
from sim_pipeline.defs.event_log import KeptConnectionEventLogStorage, local_instance
from sim_pipeline.errors import SimPipelineError

LOG_LINES = 30  # events one test run writes besides Dagster's own: enough that a connection per event would show
WATCH_SECONDS = 10.0  # how long the watcher test waits for the file event (inotify delivers it in milliseconds)


@dg.asset
def chatty(context: dg.AssetExecutionContext) -> int:
    for i in range(LOG_LINES):
        context.log.info(f"line {i}")
    return LOG_LINES


@dg.asset
def broken() -> int:
    raise SimPipelineError("broken on purpose")


@pytest.fixture
def home(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(INSTANCE_CONFIG, home / "dagster.yaml")
    return home


def _events(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    return [r.event_log_entry.user_message or str(r.event_log_entry.dagster_event_type)
            for r in instance.get_records_for_run(run_id).records]


def test_dagster_own_class_reads_every_event_the_kept_connections_wrote(home):
    with local_instance(home) as instance:
        assert isinstance(instance.event_log_storage, KeptConnectionEventLogStorage)
        result = dg.materialize([chatty], instance=instance)
        written = _events(instance, result.run_id)
    with dg.DagsterInstance.from_config(str(home)) as stock:  # what the UI and the daemon open
        assert type(stock.event_log_storage).__name__ == "SqliteEventLogStorage"
        assert _events(stock, result.run_id) == written
        assert sum(text.startswith("line ") for text in written) == LOG_LINES
        assert stock.get_latest_materialization_event(dg.AssetKey("chatty")).run_id == result.run_id
        assert stock.get_run_by_id(result.run_id).status == dg.DagsterRunStatus.SUCCESS
    assert not list((home / "history" / "runs").glob("*.db-wal"))  # closing the instance checkpointed every file


def test_a_failed_step_is_recorded_as_dagster_records_it(home):
    with local_instance(home) as instance:
        result = dg.materialize([broken], instance=instance, raise_on_error=False)
    with dg.DagsterInstance.from_config(str(home)) as stock:
        failures = [r for r in stock.get_records_for_run(result.run_id).records
                    if r.event_log_entry.dagster_event_type == dg.DagsterEventType.STEP_FAILURE]
        assert len(failures) == 1 and stock.get_run_by_id(result.run_id).status == dg.DagsterRunStatus.FAILURE


def test_each_file_is_connected_to_once_not_once_per_event(home, monkeypatch):
    event_log = home / "history" / "runs"
    opened: list[str] = []
    real_connect = sqlite3.dbapi2.connect  # the module SQLAlchemy's pysqlite dialect calls

    def counting_connect(database, *args, **kwargs):
        if Path(database).parent == event_log:
            opened.append(Path(database).name)
        return real_connect(database, *args, **kwargs)

    monkeypatch.setattr(sqlite3.dbapi2, "connect", counting_connect)
    with local_instance(home) as instance:
        dg.materialize([chatty], instance=instance)  # the index made and initialized
        opened.clear()
        run_id = dg.materialize([chatty], instance=instance).run_id
        assert len(_events(instance, run_id)) > LOG_LINES
    # More than LOG_LINES events in the run's file, its materialization mirrored in the index: the run's file is
    # opened once, plus once while it is initialized (Dagster lists its tables on a second connection); the index
    # once (Dagster's table check on a connection of its own), not once per write.
    assert opened.count(f"{run_id}.db") <= 2 and opened.count("index.db") <= 1, opened


def test_only_a_few_run_files_stay_open(home):
    with local_instance(home) as instance:
        for _ in range(defaults.EVENT_LOG_KEPT_RUN_SHARDS + 2):
            dg.materialize([chatty], instance=instance)
        storage = instance.event_log_storage
        runs_open = [shard for shard in storage._engines if shard != "index"]
        assert len(runs_open) == defaults.EVENT_LOG_KEPT_RUN_SHARDS
        # a closed one is reopened when read again
        first = instance.get_run_records(order_by="create_timestamp", ascending=True)[0].dagster_run.run_id
        assert any(text.startswith("line ") for text in _events(instance, first))


def test_the_ui_watcher_sees_a_live_run_written_with_kept_connections(home):
    """The UI follows a run by watching its database file (SqliteEventLogStorageWatchdog): the kept connection's
    writes go to the -wal file, so the storage marks the .db modified itself."""
    with local_instance(home) as instance, dg.DagsterInstance.from_config(str(home)) as ui:
        run = dg.materialize([chatty], instance=instance).dagster_run
        seen: list[str] = []
        got = threading.Event()

        def callback(entry, cursor):
            seen.append(entry.message)
            if entry.message == "watched":
                got.set()

        ui.event_log_storage.watch(run.run_id, None, callback)
        time.sleep(0.5)  # the observer's inotify watch is in place
        instance.report_engine_event("watched", run)  # a new event of a run the UI is showing
        assert got.wait(WATCH_SECONDS), f"the UI's watcher saw {seen[-3:]}"
        ui.event_log_storage.end_watch(run.run_id, callback)


def test_an_instance_that_names_its_storage_is_left_as_it_is(home):
    (home / "dagster.yaml").write_text(f"{INSTANCE_CONFIG.read_text()}\nstorage:\n  sqlite:\n    base_dir: {home}\n")
    with local_instance(home) as instance:
        assert type(instance.event_log_storage).__name__ == "SqliteEventLogStorage"


def test_the_cli_opens_the_instance_with_kept_connections(home, monkeypatch):
    from sim_pipeline import cli

    monkeypatch.setenv("DAGSTER_HOME", str(home))
    instance = cli._instance()
    try:
        assert isinstance(instance.event_log_storage, KeptConnectionEventLogStorage)
        assert Path(instance.root_directory) == home
    finally:
        instance.dispose()
