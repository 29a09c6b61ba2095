"""Fixtures shared across test packages."""

from collections.abc import Callable
from typing import Any

import pytest

from sim_pipeline_tests.scripted_server import ScriptedServer


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
