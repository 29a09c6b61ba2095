"""Tool kinds guessed from names: one vocabulary, any naming style; the declared list matches domain.yaml's schema."""

import json
from pathlib import Path

import pytest

from sim_pipeline.protocol.tool_kinds import DECLARED_KINDS, guess_kind, name_words, snake_name, writes


@pytest.mark.parametrize(("name", "kind"), [
    ("get_order", "read"), ("getOrder", "read"), ("get-order", "read"), ("GetOrderByID", "read"),
    ("reset_password", "destructive"), ("createTicket", "create"), ("update-phone", "update"),
    ("unlock_account", "update"), ("delete_user", "delete"), ("removeItem", "delete"),
    ("verify_identity", "verify"), ("authenticateUser", "verify"), ("calculate", "compute"),
    ("transfer_to_human_agents", "transfer"), ("escalateToSupervisor", "transfer"), ("transfer_funds", "destructive"),
    ("approve_refund", "destructive"), ("suspend_account", "destructive"), ("escalate_ticket", "update"),
    ("book_reservation", "create"), ("frobnicate", "other"),
])
def test_kind_comes_from_the_first_word_in_any_naming_style(name, kind):
    assert guess_kind(name) == kind


def test_words_of_names():
    assert name_words("GetOrderByID") == ["get", "order", "by", "id"]
    assert snake_name("listOpenTickets") == "list_open_tickets"


def test_only_state_changing_kinds_write():
    assert [k for k in DECLARED_KINDS if writes(k)] == ["create", "update", "delete"]
    assert writes("destructive")


def test_declared_kinds_are_the_ones_domain_yaml_accepts():
    schema = json.loads((Path(__file__).parents[2] / "sim_pipeline" / "domain.schema.json").read_text())
    assert tuple(schema["properties"]["tools"]["additionalProperties"]["properties"]["kind"]["enum"]) == DECLARED_KINDS
