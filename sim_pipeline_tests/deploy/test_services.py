"""The deploy tests' service checks: a missing service or [scale] module skips a test outside CI and fails it under
CI, so a CI machine without PostgreSQL or Redis can never pass these tests by skipping them."""

import socket

import pytest

from sim_pipeline_tests.deploy.services import require, require_modules


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("check", [lambda: require("a service", ("127.0.0.1", closed_port())),
                                   lambda: require_modules("json", "sim_pipeline_no_such_module")],
                         ids=["service", "module"])
def test_an_absent_dependency_skips_outside_ci_and_fails_under_ci(monkeypatch, check):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="under CI it would fail"):
        check()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must provide it"):
        check()


def test_a_present_dependency_passes(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        require("a listening socket", server.getsockname())
    require_modules("json", "dagster")
