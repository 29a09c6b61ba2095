"""Schema-echo detection: templates and slot descriptions are caught, real values are not."""

import pytest

from sim_pipeline.world.placeholder import is_placeholder, placeholder_arguments

SCHEMA = {"type": "string", "description": "The customer's email address."}


@pytest.mark.parametrize("value", ["<order_id>", "string", "your email", "xxx", "user@example.com", "email",
                                   "The customer's email address.", "the customer's email", "[email]", "000", "N/A"])
def test_echoes_are_placeholders(value: str) -> None:
    assert is_placeholder(value, "email", SCHEMA)


@pytest.mark.parametrize("value", ["ana.silva12@proton.me", "1111", "48213", "user interface is broken",
                                   "customer service was rude", "it arrived too late", ""])
def test_real_values_are_not(value: str) -> None:
    assert not is_placeholder(value, "email", SCHEMA)


def test_nested_arguments_are_checked_with_their_paths() -> None:
    props = {"items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}}}},
             "kind": {"enum": ["string"]}}
    args = {"items": [{"sku": "A-1"}, {"sku": "<sku>"}], "kind": "string"}
    assert placeholder_arguments(args, props) == ["items/1/sku"]
