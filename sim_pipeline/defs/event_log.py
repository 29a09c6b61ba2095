"""The local instance's event log with its sqlite connections kept open between writes, for `sim-pipeline`.

Dagster's SqliteEventLogStorage opens a new connection for every event it writes and closes it after: the close of
the last connection to a WAL database checkpoints it (copies the log into the database file and syncs it), so each
of a run's few hundred events paid a connect, a commit and a checkpoint (30% of a cold `make run`, profiled).
This subclass keeps one connection per database file (the cross-run index, and the few runs written last) and
writes the same files in the same format: the UI, the daemon and any other process read them with Dagster's own
class. Its connections put each file in WAL mode before its tables are made (Dagster does right after) and commit
with `synchronous` at defaults.EVENT_LOG_SQLITE_SYNCHRONOUS: in WAL mode a commit then waits for no disk sync (the
syncs were most of what each event and each new run's file cost). Only `sim-pipeline` commands use it
(`local_instance`); dagster.yaml is not changed, so `make dev` runs Dagster's class, and an instance configured
with other storage (PostgreSQL in deploy/) is left as it is.
"""

import os
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.instance.config import dagster_instance_config
from dagster._core.instance.ref import InstanceRef
from dagster._core.storage.event_log import SqliteEventLogStorage
from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from dagster._serdes import ConfigurableClassData
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, Engine

from sim_pipeline import defaults

STORAGE_KEYS = ("storage", "run_storage", "event_log_storage", "schedule_storage")  # dagster.yaml's storage choices


def _set_pragmas(dbapi_connection: Any, _record: Any) -> None:
    """WAL, and commits that do not wait for a disk sync (a WAL file stays consistent through a crash)."""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA synchronous={defaults.EVENT_LOG_SQLITE_SYNCHRONOUS}")
    cursor.close()


class KeptConnectionEventLogStorage(SqliteEventLogStorage):
    """SqliteEventLogStorage whose connection to each database file stays open between writes (the index's for
    the process's life, runs' for the last few runs touched), instead of one connection per event."""

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None) -> None:
        self._engines: OrderedDict[str, Engine] = OrderedDict()  # before super(): its init may connect
        super().__init__(base_dir, inst_data=inst_data)

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData | None,  # ty: ignore[invalid-method-override]
                          config_value: Mapping[str, Any]) -> "KeptConnectionEventLogStorage":
        """The storage for dagster.yaml's `event_log_storage: config:` (base_dir), as Dagster builds it."""
        return cls(inst_data=inst_data, **config_value)

    def _engine(self, shard: str) -> Engine:
        """The shard's engine, made (and its database initialized) on first use; the least recently used run
        shard's is closed when more than defaults.EVENT_LOG_KEPT_RUN_SHARDS are open."""
        engine = self._engines.get(shard)
        if engine is not None:
            self._engines.move_to_end(shard)
            return engine
        # One connection kept; one more only while a first use initializes the file (its table listing).
        engine = create_engine(self.conn_string_for_shard(shard), pool_size=1, max_overflow=1,
                               connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS})
        event.listen(engine, "connect", _set_pragmas)
        if shard not in self._initialized_dbs:
            self._initdb(engine)
            self._initialized_dbs.add(shard)
        self._engines[shard] = engine
        runs = [name for name in self._engines if name != INDEX_SHARD_NAME]
        for name in runs[:max(0, len(runs) - defaults.EVENT_LOG_KEPT_RUN_SHARDS)]:
            self._engines.pop(name).dispose()
        return engine

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        with self._db_lock, self._engine(shard).connect() as conn, conn.begin():
            yield conn

    def store_event(self, event: dg.EventLogEntry) -> None:
        """Store the event as Dagster's class does, then mark the run's database file modified: the UI follows a
        live run by watching that file, which a kept connection's writes (to its -wal file) leave untouched until
        a checkpoint."""
        super().store_event(event)
        path = self.path_for_shard(event.run_id)
        if os.path.exists(path):
            os.utime(path)

    def _close_connections(self) -> None:
        with self._db_lock:
            while self._engines:
                self._engines.popitem()[1].dispose()

    def wipe(self) -> None:
        """Close the kept connections before Dagster deletes the run files and empties the index."""
        self._close_connections()
        super().wipe()

    def dispose(self) -> None:
        """Close the kept connections (checkpointing each file) and stop any watcher."""
        self._close_connections()
        super().dispose()


def local_instance(home: Path) -> dg.DagsterInstance:
    """The instance in `home` (its dagster.yaml), its sqlite event log keeping its connections when the file
    chooses no storage of its own; else exactly what the file says."""
    config, _ = dagster_instance_config(str(home))
    if any(config.get(key) for key in STORAGE_KEYS) or config.get("instance_class"):
        return dg.DagsterInstance.from_config(str(home))
    event_log = {"module": __name__, "class": KeptConnectionEventLogStorage.__name__,
                 "config": {"base_dir": str(home / "history" / "runs")}}  # where Dagster's default puts it
    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home), overrides={"event_log_storage": event_log}))
