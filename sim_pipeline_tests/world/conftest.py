"""Domains and tool sets the world tests share: the shipped packs, a schema set with no id-like parameters, and two
packs written here in other hands (pharmacy: camelCase; gym: PascalCase)."""

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


def _write_pack(root: Path, name: str, tools: dict[str, tuple[str, dict[str, Any]]], spec: str, policy: str) -> Path:
    """A pack folder: one schema file per tool (every argument required), domain.yaml and policy.md."""
    pack = root / name
    (pack / "tools").mkdir(parents=True)
    for tool, (description, properties) in tools.items():
        (pack / "tools" / f"{tool}.json").write_text(json.dumps(fn(tool, description, properties, list(properties))))
    (pack / "domain.yaml").write_text(spec)
    (pack / "policy.md").write_text(policy)
    return pack


def write_pharmacy_pack(root: Path) -> Path:
    """A pack in another hand: camelCase tools, RX-123456 ids, a nested pickup object, declared kinds, a call count."""
    return _write_pack(root, "pharmacy", PHARMACY_TOOLS, PHARMACY_YAML, PHARMACY_POLICY)


@pytest.fixture(scope="session")
def pharmacy_pack(tmp_path_factory) -> Domain:
    """The pharmacy pack (write_pharmacy_pack), loaded."""
    return load_domain(write_pharmacy_pack(tmp_path_factory.mktemp("packs")))


MEMBER_ID = {"type": "string", "pattern": "^GYM[0-9]{4}$", "description": "The membership number, e.g. GYM0042."}
GYM_TOOLS = {
    "GetMember": ("Look up a gym membership.", {"memberId": MEMBER_ID}),
    "VerifyMember": ("Check the caller against the postcode on file.",
                     {"memberId": MEMBER_ID, "postcode": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{1,2} [0-9][A-Z]{2}$"}}),
    "FreezeMembership": ("Pause a membership for a number of weeks.",
                         {"memberId": MEMBER_ID, "weeks": {"type": "integer", "minimum": 1, "maximum": 12}}),
    "CancelMembership": ("End a membership at the close of the billing month.",
                         {"memberId": MEMBER_ID, "reason": {"enum": ["moving", "cost", "injury", "other"]}}),
}
GYM_YAML = """name: gym
title: Gym front desk
agent_role: You run the front desk of Ironleaf Gyms for members calling about their membership.
entities:
  member:
    id_argument: memberId
    id_pattern: "^GYM[0-9]{4}$"
    fields:
      status: {kind: enum, values: [active, frozen, lapsed]}
      tier: {kind: enum, values: [basic, plus, premium]}
      postcode: {kind: text, values: ["SW1 4AB", "M4 1XY", "LS2 9JT", "EH3 5QP"]}
      joined_on: {kind: date}
tools:
  GetMember: {kind: read}
  VerifyMember: {kind: verify}
  FreezeMembership: {kind: update}
  CancelMembership: {kind: update}
actions:
  FreezeMembership: {sets: {status: frozen_now, frozen_weeks: "$weeks"}, requires: {status: [active]}}
  CancelMembership: {sets: {status: cancelled}, requires: {status: [active, frozen]}}
rules:
  check_member: {kind: verify_before, verify_tool: VerifyMember, tools: [FreezeMembership, CancelMembership]}
  confirm_cancel: {kind: confirm_before, tools: [CancelMembership]}
  one_freeze: {kind: max_calls, tool: FreezeMembership, max: 1}
  active_to_freeze: {kind: eligibility, tools: [FreezeMembership]}
"""
GYM_POLICY = """# Ironleaf front desk

- **check_member**: Verify the member's postcode with VerifyMember before freezing or cancelling.
- **confirm_cancel**: Read a cancellation back and wait for the member's yes.
- **one_freeze**: Freeze a membership at most once per call.
- **active_to_freeze**: Only active memberships can be frozen.
"""


def write_gym_pack(root: Path) -> Path:
    """A second pack in another hand: PascalCase tools whose verbs the name guesser does not know (kinds declared),
    GYM0042 ids, UK postcodes, a call count and an eligibility rule."""
    return _write_pack(root, "gym", GYM_TOOLS, GYM_YAML, GYM_POLICY)


@pytest.fixture(scope="session")
def gym_pack(tmp_path_factory) -> Domain:
    """The gym pack (write_gym_pack), loaded."""
    return load_domain(write_gym_pack(tmp_path_factory.mktemp("packs")))
