"""Tool kinds guessed from names: one vocabulary, any naming style; the declared list matches domain.yaml's schema."""

import json
from pathlib import Path

import pytest

from sim_pipeline.protocol.tool_kinds import (DECLARED_KINDS, folded_name, guess_kind, name_keys, name_words, snake_name,
                                            writes)


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


@pytest.mark.parametrize(("a", "b", "same"), [
    ("get_order", "Get_Order", True), ("get_order", "get-order", True), ("get_order", "getOrder", True),
    ("GetOrder", "getorder", True), ("get_order", "get_orders", False), ("get_order", "getorder", False),
])
def test_name_keys_make_one_name_of_case_separator_and_camel_case_spellings(a, b, same):
    assert bool(name_keys(a) & name_keys(b)) is same


def test_a_folded_name_ignores_case_and_reads_dash_as_underscore():
    assert folded_name("Agent-V1") == folded_name("agent_v1") == "agent_v1"
    assert folded_name("agent.v1") != folded_name("agent_v1")  # '.' is a character of its own in a slug
