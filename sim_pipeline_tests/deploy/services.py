"""The machine's services the deploy tests use (PostgreSQL, RabbitMQ and Redis on loopback), a fresh database per
test, and a DAGSTER_HOME holding the production deploy/dagster.yaml, unchanged, pointed at that database.

A service that is not there skips its tests outside CI; under CI (the CI variable set) they fail instead, so a CI
machine without the service can never pass by skipping.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PRODUCTION_INSTANCE = REPO / "deploy" / "dagster.yaml"
PRODUCTION_CELERY = REPO / "deploy" / "celery.yaml"
POSTGRES = ("127.0.0.1", 5432)  # loopback only: the tests never reach another host
REDIS = ("127.0.0.1", 6379)
RABBITMQ = ("127.0.0.1", 5672)
# The Celery URLs of deploy/README-scale.md: RabbitMQ as the broker (a dead worker's unacknowledged step returns to
# the queue when its connection drops) and Redis as the result backend. RabbitMQ's default `guest` account, which
# it accepts only over loopback.
CELERY_BROKER = f"pyamqp://guest@{RABBITMQ[0]}:{RABBITMQ[1]}//"
CELERY_BACKEND = f"redis://{REDIS[0]}:{REDIS[1]}/1"
PG_USER = "postgres"  # trust authentication on this machine and CI's: no password
PG_MAINTENANCE_DB = "test"  # an existing database to connect to while creating and dropping the test's own
# Trust authentication ignores a password, so the tests give one nobody uses and check it is written nowhere.
PG_PASSWORD_SENTINEL = "sentinel-pg-password-3f9c2e7b"
CONNECT_TIMEOUT_S = 3  # a loopback service answers in milliseconds; three seconds means it is not there


def _missing(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: CI must provide it, so this test fails rather than skips")
    pytest.skip(f"{reason}: provide it to run this test (under CI it would fail)")


def require(service: str, address: tuple[str, int]) -> None:
    """Skip the test when the service does not accept connections, or fail it under CI."""
    try:
        socket.create_connection(address, timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        _missing(f"{service} is not reachable at {address[0]}:{address[1]} ({exc})")


def require_modules(*modules: str) -> None:
    """Skip the test when a module of the [scale] extra is not installed, or fail it under CI."""
    absent = [name for name in modules if importlib.util.find_spec(name) is None]
    if absent:
        _missing(f"{', '.join(absent)} not installed (the [scale] extra: .venv/bin/pip install -e '.[dev,scale]')")


def _connect(database: str):
    import psycopg2  # comes with dagster-postgres (the [scale] extra)

    return psycopg2.connect(host=POSTGRES[0], port=POSTGRES[1], user=PG_USER, dbname=database,
                            connect_timeout=CONNECT_TIMEOUT_S)


@contextmanager
def fresh_database() -> Iterator[str]:
    """A new, empty PostgreSQL database for one test, dropped afterwards (its connections closed first)."""
    from psycopg2 import sql

    name = f"sim_pipeline_test_{uuid.uuid4().hex[:12]}"
    admin = _connect(PG_MAINTENANCE_DB)
    admin.autocommit = True  # CREATE/DROP DATABASE cannot run inside a transaction
    try:
        with admin.cursor() as cursor:
            cursor.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        yield name
    finally:
        with admin.cursor() as cursor:
            cursor.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.close()


def database_exists(name: str) -> bool:
    """Whether a database of that name exists (the cleanup test's check)."""
    connection = _connect(PG_MAINTENANCE_DB)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            return cursor.fetchone() is not None
    finally:
        connection.close()


def query(database: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Rows of one SELECT, read straight from PostgreSQL (not through Dagster)."""
    connection = _connect(database)
    try:
        with connection.cursor() as cursor:
            cursor.execute(statement, params)
            return cursor.fetchall()
    finally:
        connection.close()


def production_home(home: Path, database: str) -> dict[str, str]:
    """Copy deploy/dagster.yaml into `home`; returns the environment that points it at `database`."""
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(PRODUCTION_INSTANCE, home / "dagster.yaml")
    return {"DAGSTER_HOME": str(home), "DAGSTER_PG_HOST": POSTGRES[0], "DAGSTER_PG_PORT": str(POSTGRES[1]),
            "DAGSTER_PG_USER": PG_USER, "DAGSTER_PG_PASSWORD": PG_PASSWORD_SENTINEL, "DAGSTER_PG_DB": database}


POSTGRES_BIN = sorted(Path("/usr/lib/postgresql").glob("*/bin"))  # Debian's server binaries, newest last
PRIVATE_PG_START_TIMEOUT_S = 30  # pg_ctl -w waits this long for the server to accept connections


class PrivatePostgres:
    """A PostgreSQL server of one test's own (initdb in a temporary directory, loopback, a free port, trust
    authentication), so a test can stop and restart it without touching the machine's server other tests use."""

    def __init__(self, root: Path, port: int):
        self.root, self.port = root, port
        self.address = (POSTGRES[0], port)

    def _pg_ctl(self, *args: str) -> None:
        options = f"-p {self.port} -c listen_addresses={POSTGRES[0]} -k {self.root} -c fsync=off"
        _as_postgres(str(POSTGRES_BIN[-1] / "pg_ctl"), "-D", str(self.root / "data"), "-o", options,
                     "-l", str(self.root / "server.log"), "-w", "-t", str(PRIVATE_PG_START_TIMEOUT_S), *args)

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        self._pg_ctl("start")

    def stop(self) -> None:
        """Stop the server at once (fast shutdown: open connections are closed, as in a restart)."""
        self._pg_ctl("-m", "fast", "stop")

    def restart(self) -> None:
        """Stop and start the server (fast shutdown), as `systemctl restart postgresql` does."""
        self._pg_ctl("-m", "fast", "restart")

    def create_database(self) -> str:
        """A new empty database on this server; its name."""
        import psycopg2

        name = f"sim_pipeline_test_{uuid.uuid4().hex[:12]}"
        connection = psycopg2.connect(host=self.address[0], port=self.port, user=PG_USER, dbname="postgres",
                                      connect_timeout=CONNECT_TIMEOUT_S)
        connection.autocommit = True
        try:
            with connection.cursor() as cursor:
                cursor.execute(f'CREATE DATABASE "{name}"')
        finally:
            connection.close()
        return name


def _as_postgres(*command: str) -> None:
    # The server refuses to run as root; the Debian package's `postgres` account owns its files.
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    subprocess.run([*prefix, *command], check=True, capture_output=True, text=True,
                   timeout=PRIVATE_PG_START_TIMEOUT_S + 10)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((POSTGRES[0], 0))
        return probe.getsockname()[1]


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """A started PrivatePostgres, stopped and deleted afterwards; skips (fails under CI) without the server's
    binaries or the `postgres` account."""
    import pwd

    if not POSTGRES_BIN or shutil.which("runuser") is None:
        _missing("PostgreSQL's server binaries (/usr/lib/postgresql/<version>/bin) or runuser are not installed")
    try:
        account = pwd.getpwnam("postgres")
    except KeyError:
        _missing("there is no `postgres` account to run a private PostgreSQL server as")
    if os.geteuid() not in (0, account.pw_uid):
        _missing("a private PostgreSQL server needs root or the `postgres` account")
    # Not under pytest's tmp_path: the `postgres` account must be able to reach the directory.
    root = Path(tempfile.mkdtemp(prefix="sim-pipeline-pg-"))
    os.chown(root, account.pw_uid, account.pw_gid)
    server = PrivatePostgres(root, _free_port())
    try:
        _as_postgres(str(POSTGRES_BIN[-1] / "initdb"), "-D", str(root / "data"), "-A", "trust", "-U", PG_USER,
                     "--no-sync", "-E", "UTF8")
        server.start()
        yield server
    finally:
        try:
            if (root / "data" / "postmaster.pid").exists():
                server._pg_ctl("-m", "immediate", "stop")
        finally:
            shutil.rmtree(root, ignore_errors=True)


# Debian's server scripts, run directly: /usr/sbin's wrappers switch to the account with `su`, which drops the
# environment that names the private node.
RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")
RABBITMQ_ACCOUNT = "rabbitmq"  # the server runs as this account, whose home holds the Erlang cookie the CLI needs
PRIVATE_RABBITMQ_START_TIMEOUT_S = 60  # a node boots in about 8 s here the first time, 3 s on a restart
PRIVATE_RABBITMQ_POLL_S = 0.25  # how often start and stop look at the node's AMQP port


class PrivateRabbitMQ:
    """A RabbitMQ node of one test's own (its own name, data directory, loopback AMQP and distribution ports), so a
    test can stop and restart it without touching the machine's broker other tests use."""

    def __init__(self, root: Path, port: int, dist_port: int):
        self.root, self.port, self.dist_port = root, port, dist_port
        self.node = f"sim-pipeline-test-{uuid.uuid4().hex[:12]}@localhost"
        self.url = f"pyamqp://guest@{RABBITMQ[0]}:{port}//"

    def _run(self, script: str, *args: str) -> None:
        import pwd

        home = pwd.getpwnam(RABBITMQ_ACCOUNT).pw_dir
        environment = {"HOME": home, "RABBITMQ_NODENAME": self.node, "RABBITMQ_DIST_PORT": str(self.dist_port),
                       "RABBITMQ_CONFIG_FILE": str(self.root / "rabbitmq.conf"),
                       "RABBITMQ_MNESIA_BASE": str(self.root / "mnesia"), "RABBITMQ_LOG_BASE": str(self.root / "log"),
                       "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.root / "enabled_plugins"),
                       "RABBITMQ_PID_FILE": str(self.root / "pid")}
        prefix = ["runuser", "-u", RABBITMQ_ACCOUNT, "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, "env", *(f"{k}={v}" for k, v in environment.items()), str(RABBITMQ_BIN / script),
                        *args], check=True, capture_output=True, text=True, timeout=PRIVATE_RABBITMQ_START_TIMEOUT_S)

    def _accepts(self) -> bool:
        try:
            socket.create_connection((RABBITMQ[0], self.port), timeout=CONNECT_TIMEOUT_S).close()
            return True
        except OSError:
            return False

    def _wait(self, accepting: bool) -> None:
        deadline = time.monotonic() + PRIVATE_RABBITMQ_START_TIMEOUT_S
        while self._accepts() != accepting:
            if time.monotonic() > deadline:
                raise TimeoutError(f"RabbitMQ node {self.node} still {'closed' if accepting else 'open'} after "
                                   f"{PRIVATE_RABBITMQ_START_TIMEOUT_S} s (its log: {self.root / 'log'})")
            time.sleep(PRIVATE_RABBITMQ_POLL_S)

    def start(self) -> None:
        """Start the node and wait until it accepts AMQP connections."""
        self._run("rabbitmq-server", "-detached")
        self._wait(accepting=True)

    def stop(self) -> None:
        """Stop the node (its connections close; durable queues and persistent messages stay on disk)."""
        self._run("rabbitmqctl", "-n", self.node, "stop")
        self._wait(accepting=False)

    def kill(self) -> None:
        """Kill the node's Erlang VM, named by its pid file, if it still runs."""
        try:
            pid = int((self.root / "pid").read_text().strip())
        except (FileNotFoundError, ValueError):
            return
        try:
            ours = self.node.split("@")[0].encode() in Path(f"/proc/{pid}/cmdline").read_bytes()  # not a recycled pid
        except FileNotFoundError:
            return
        if ours:
            os.kill(pid, signal.SIGKILL)


@contextmanager
def private_rabbitmq() -> Iterator[PrivateRabbitMQ]:
    """A started PrivateRabbitMQ, stopped and deleted afterwards; skips (fails under CI) without the server's scripts
    or the `rabbitmq` account."""
    import pwd

    if not (RABBITMQ_BIN / "rabbitmq-server").exists() or shutil.which("runuser") is None:
        _missing(f"RabbitMQ's server scripts ({RABBITMQ_BIN}) or runuser are not installed")
    try:
        account = pwd.getpwnam(RABBITMQ_ACCOUNT)
    except KeyError:
        _missing(f"there is no `{RABBITMQ_ACCOUNT}` account to run a private RabbitMQ node as")
    if os.geteuid() not in (0, account.pw_uid):
        _missing("a private RabbitMQ node needs root or the `rabbitmq` account")
    root = Path(tempfile.mkdtemp(prefix="sim-pipeline-rabbitmq-"))  # not under tmp_path: the account must reach it
    port = _free_port()
    server = PrivateRabbitMQ(root, port, next(p for p in iter(_free_port, None) if p != port))
    (root / "rabbitmq.conf").write_text(f"listeners.tcp.local = {RABBITMQ[0]}:{server.port}\n")
    for path in (root, root / "rabbitmq.conf"):
        os.chown(path, account.pw_uid, account.pw_gid)
    try:
        server.start()
        yield server
    finally:
        try:
            server.stop()
        except (subprocess.SubprocessError, TimeoutError):
            server.kill()  # it never started, or does not stop
        finally:
            shutil.rmtree(root, ignore_errors=True)
