"""Domains and tool sets the world tests share: both shipped packs and a schema set with no id-like parameters."""

from typing import Any

import pytest

from sim_pipeline.domain import Domain, load_domain


def fn(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """One OpenAI function schema."""
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required, "additionalProperties": False}}}


EMAIL = {"type": "string", "format": "email"}
# No argument is an id: the world must infer entities from names and lookup fields alone.
NO_ID_TOOLS = [
    fn("get_weather", "Current weather for a city.", {"city": {"type": "string"}, "units": {"enum": ["c", "f"]}},
       ["city"]),
    fn("send_message", "Send a text message.", {"to": EMAIL, "body": {"type": "string", "minLength": 1}},
       ["to", "body"]),
    fn("list_messages", "Messages sent to a recipient.", {"to": EMAIL}, ["to"]),
    fn("update_preferences", "Change how a user is notified.",
       {"email": EMAIL, "channel": {"enum": ["sms", "email", "push"]}}, ["email", "channel"]),
    fn("find_preferences", "Notification preferences of a user.", {"email": EMAIL}, ["email"]),
    fn("search", "Search the help center.", {"query": {"type": "string"}}, ["query"]),
]


@pytest.fixture(scope="session")
def no_id_tools() -> list[dict[str, Any]]:
    return NO_ID_TOOLS


@pytest.fixture(scope="session")
def tool() -> Any:
    """The `fn` helper: build an OpenAI function schema in a test."""
    return fn


@pytest.fixture(scope="session")
def retail() -> Domain:
    return load_domain("retail")


@pytest.fixture(scope="session")
def helpdesk() -> Domain:
    return load_domain("it_helpdesk")
