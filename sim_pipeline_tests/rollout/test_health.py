"""Rollout health: the share of rollouts that errored outside the agent's conduct, by status and by tool."""

import json

import pandas as pd
import pytest

from sim_pipeline import defaults
from sim_pipeline.protocol.statuses import ERROR_STATUSES, ROLLOUT_STATUSES
from sim_pipeline.rollout.health import rollout_health, tool_error_shares
from sim_pipeline.rollout.row import ROW_JSON_SCHEMA


def rows(statuses, tools=None):
    tools = tools or ["get_order"] * len(statuses)
    return pd.DataFrame({"status": statuses, "tool": tools,
                         "error": [("HTTP 500" if s in ERROR_STATUSES else None) for s in statuses]})


def test_conduct_endings_are_not_errors():
    health = rollout_health(rows(["ok", "agent_error", "turn_cap", "user_left"]))
    assert health.errors == 0 and health.passed and health.share == 0.0


@pytest.mark.parametrize("status", ERROR_STATUSES)
def test_each_error_status_counts(status):
    health = rollout_health(rows(["ok"] * 9 + [status]))
    assert health.errors == 1 and health.by_status == {status: 1} and health.share == pytest.approx(0.1)
    assert not health.passed  # 10% > the 5% default
    assert health.examples == ("HTTP 500",) and status in health.sentence()


def test_the_threshold_is_inclusive_and_configurable():
    n = 100
    at_limit = rows(["provider_error"] * int(n * defaults.MAX_ERROR_SHARE) + ["ok"] * (n - int(n * defaults.MAX_ERROR_SHARE)))
    assert rollout_health(at_limit).passed
    assert not rollout_health(at_limit, max_share=0.01).passed


def test_no_rollouts_is_not_healthy():
    assert not rollout_health(pd.DataFrame()).passed


def test_errors_by_tool():
    table = tool_error_shares(rows(["ok", "provider_error", "provider_error", "ok"], ["a", "a", "b", "b"]))
    assert table.set_index("tool")["errors"].to_dict() == {"a": 1, "b": 1}
    assert table["share"].tolist() == [0.5, 0.5]


def test_row_schema_knows_every_status():
    schema = json.loads(ROW_JSON_SCHEMA.read_text())
    assert set(schema["properties"]["status"]["enum"]) == set(ROLLOUT_STATUSES)


def test_the_fix_names_what_failed_most_first_and_a_user_model_is_no_endpoint_fault():
    remedy = rollout_health(rows(["user_error"] * 6 + ["provider_error"] + ["ok"])).remedy()
    assert remedy.startswith("fix the simulated user's model") and "user_action" in remedy
    assert remedy.index("simulated user") < remedy.index("agent's model endpoint")
    assert "simulated user" not in rollout_health(rows(["provider_error", "ok"])).remedy()
    assert all(rollout_health(rows([s])).remedy() for s in ERROR_STATUSES)
