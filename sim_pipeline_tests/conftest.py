"""Fixtures shared across test packages."""

import contextlib
import io
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sim_pipeline_tests.scripted_server import ScriptedServer


def pytest_configure(config):
    """The suite behaves the same started in the foreground or as a background job (`make test &`, nohup).

    A shell starts a background job with SIGINT ignored, and Dagster's in-process runs copy SIGINT's handler onto
    SIGTERM (dagster._utils.interrupts). The compute-log `tail` processes each run starts would then ignore SIGTERM,
    and each run's end would wait 2 x 30 s for them: test_launch's first run never reached its model call in time.
    """
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def http_agent(monkeypatch):
    """Point litellm's openai provider at a scripted server; yields a function that starts one with a responder."""
    servers = []

    def start(responder: Callable[[dict[str, Any]], Any]) -> ScriptedServer:
        server = ScriptedServer(responder).start()
        servers.append(server)
        for name in ("OPENAI_API_BASE", "OPENAI_BASE_URL"):
            monkeypatch.setenv(name, server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
        return server

    yield start
    for server in servers:
        server.stop()


@dataclass(frozen=True)
class SharedRun:
    """A finished `sim-pipeline run`: where it wrote, the instance that recorded it, and what it printed."""

    root: Path  # its working directory: the model cache is under data/cache there
    warehouse: Path
    home: Path  # its DAGSTER_HOME
    summary: str  # its standard output, progress lines and summary


# The run the CLI, README, lineage and view tests read: both retail versions so the summary has a delta, and 48
# situations, whose held-out tasks are enough for the delta to compare them (30 leave 8, under the 10 it needs),
# so the forest plot and slices are there too. One run of a few minutes instead of one per test module.
SHARED_RUN = ["run", "--domain", "retail", "--versions", "agent-v1,agent-v2", "--seed", "0", "--situations", "48",
              "--samples", "1", "--heldout-samples", "2", "--allow-failed-checks"]


@pytest.fixture(scope="session")
def shared_run(tmp_path_factory) -> SharedRun:
    """One small real run shared by every test that only reads it. A test that changes its files or instance works
    on a copy (`shutil.copytree`): the next test must find the run as the CLI wrote it."""
    from sim_pipeline.cli import main

    root = tmp_path_factory.mktemp("shared_run")
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out):
        patch.setenv("DAGSTER_HOME", str(root / "dagster_home"))
        patch.chdir(root)  # the model cache goes to data/cache under the working directory
        code = main([*SHARED_RUN, "--warehouse", str(root / "warehouse")])
    assert code == 0, out.getvalue()
    return SharedRun(root=root, warehouse=root / "warehouse", home=root / "dagster_home", summary=out.getvalue())


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """One line each on how to run the trainer, verl and RL environment tests when their extra is missing (they were
    skipped)."""
    import importlib.util

    if not terminalreporter.stats.get("skipped"):
        return
    if importlib.util.find_spec("trl") is None:
        terminalreporter.write_line("trainer tests skipped: the [train] extra is not installed; run `make test-train`")
    if importlib.util.find_spec("verl") is None:
        terminalreporter.write_line("verl tests skipped: they run in their own venv; run `make test-verl`")
    if importlib.util.find_spec("openenv") is None or importlib.util.find_spec("verifiers") is None:
        terminalreporter.write_line("OpenEnv and verifiers tests skipped: they run in their own venv; run `make test-rlenv`")
