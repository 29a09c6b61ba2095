"""Domains and tool sets the world tests share: both shipped packs and a schema set with no id-like parameters."""

import json
from pathlib import Path
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


RX_NUMBER = {"type": "string", "pattern": "^RX-[0-9]{6}$", "description": "The prescription number, e.g. RX-123456."}
PICKUP = {"type": "object", "required": ["storeId", "window"], "additionalProperties": False, "properties": {
    "storeId": {"type": "string", "pattern": "^ST[0-9]{3}$"}, "window": {"enum": ["morning", "afternoon"]}}}
PHARMACY_TOOLS = {
    "getPrescription": ("Look up a prescription.", {"rxNumber": RX_NUMBER}),
    "verifyPatient": ("Check that the caller is the patient: the date of birth on file must match.",
                      {"rxNumber": RX_NUMBER, "dateOfBirth": {"type": "string", "format": "date"}}),
    "refillPrescription": ("Submit a refill of a prescription for pickup at a store.",
                           {"rxNumber": RX_NUMBER, "daysSupply": {"type": "integer", "enum": [30, 60, 90]},
                            "pickup": PICKUP}),
    "cancelRefill": ("Cancel a refill that was requested and not yet filled.",
                     {"rxNumber": RX_NUMBER, "reason": {"enum": ["no_longer_needed", "wrong_store", "other"]}}),
    "transferToPharmacist": ("Hand the conversation to a pharmacist.", {"summary": {"type": "string",
                                                                                   "minLength": 5}}),
}
PHARMACY_YAML = """name: pharmacy
title: Pharmacy refill desk
agent_role: You help patients of Larkspur Pharmacy refill and cancel refills of their prescriptions.
entities:
  prescription:
    id_argument: rxNumber
    id_pattern: "^RX-[0-9]{6}$"
    fields:
      status: {kind: enum, values: [active, refill_requested, on_hold]}
      dateOfBirth: {kind: date}
      drug: {kind: enum, values: [atorvastatin, metformin, lisinopril, sertraline]}
tools:
  refillPrescription: {kind: update}
  cancelRefill: {kind: update}
  transferToPharmacist: {kind: transfer}
actions:
  refillPrescription: {sets: {status: refill_submitted, daysSupply: "$daysSupply"}, requires: {status: [active]}}
  cancelRefill: {sets: {status: refill_cancelled}, requires: {status: [refill_requested]}}
rules:
  verify_patient: {kind: verify_before, verify_tool: verifyPatient, tools: [refillPrescription, cancelRefill]}
  confirm_cancel: {kind: confirm_before, tools: [cancelRefill]}
  one_refill: {kind: max_calls, tool: refillPrescription, max: 1}
  active_only: {kind: eligibility, tools: [refillPrescription]}
"""
PHARMACY_POLICY = """# Larkspur Pharmacy refill desk

- **verify_patient**: Check the patient's date of birth with verifyPatient before a refill or a cancellation.
- **confirm_cancel**: Read the cancellation back and get the patient's yes before cancelling a refill.
- **one_refill**: Submit at most one refill per conversation.
- **active_only**: Only active prescriptions can be refilled; on hold means the prescriber must renew it.
"""


def write_pharmacy_pack(root: Path) -> Path:
    """A pack in another hand: camelCase tools, RX-123456 ids, a nested pickup object, declared kinds, a call count."""
    pack = root / "pharmacy"
    (pack / "tools").mkdir(parents=True)
    for name, (description, properties) in PHARMACY_TOOLS.items():
        (pack / "tools" / f"{name}.json").write_text(json.dumps(fn(name, description, properties, list(properties))))
    (pack / "domain.yaml").write_text(PHARMACY_YAML)
    (pack / "policy.md").write_text(PHARMACY_POLICY)
    return pack


@pytest.fixture(scope="session")
def pharmacy_pack(tmp_path_factory) -> Domain:
    """The pharmacy pack (write_pharmacy_pack), loaded."""
    return load_domain(write_pharmacy_pack(tmp_path_factory.mktemp("packs")))
