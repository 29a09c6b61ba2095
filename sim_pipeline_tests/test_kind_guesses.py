"""No silent guesses: every tool kind a pack leaves to its name is named, and the guesses that would silently break
the desk (a refill tool that can never write, a hand-off read as a money transfer) are warned about with the fix."""

import json

from sim_pipeline.domain import load_domain
from sim_pipeline.kind_guesses import guess_lines, guesses


def _pack(root, tools, yaml_extra=""):
    pack = root / "refills"
    (pack / "tools").mkdir(parents=True)
    for name, description in tools.items():
        (pack / "tools" / f"{name}.json").write_text(json.dumps({"type": "function", "function": {
            "name": name, "description": description, "parameters": {"type": "object", "properties": {
                "prescription_id": {"type": "string"}}, "required": ["prescription_id"]}}}))
    (pack / "policy.md").write_text("# Refills\n\n- **be_kind**: Be kind.\n")
    (pack / "domain.yaml").write_text("name: refills\ntitle: Refills\nagent_role: You refill prescriptions.\n"
                                      + yaml_extra)
    return load_domain(pack)


TOOLS = {"get_prescription": "Look up a prescription.", "refill_prescription": "Submit a refill of a prescription.",
         "transfer_to_pharmacist": "Hand the conversation to a pharmacist.", "cancel_refill": "Cancel a refill."}


def test_weak_guesses_are_warned_about_with_the_line_that_fixes_them(tmp_path):
    domain = _pack(tmp_path, TOOLS)
    by_tool = {g.tool: g for g in guesses(domain)}
    assert by_tool["refill_prescription"].kind == "other" and by_tool["refill_prescription"].suggest == "create"
    assert by_tool["transfer_to_pharmacist"].kind == "destructive"
    assert by_tool["transfer_to_pharmacist"].suggest == "transfer"
    assert by_tool["get_prescription"].weak is None and by_tool["cancel_refill"].weak is None
    lines = guess_lines(domain)
    assert lines[0].startswith("note: refills: tool kinds guessed") and "cancel_refill destructive" in lines[0]
    warnings = [line for line in lines if line.startswith("WARNING")]
    assert len(warnings) == 2
    assert "refill_prescription was guessed kind 'other'" in warnings[0] and "never writes" in warnings[0]
    assert "tools: {refill_prescription: {kind: create}}" in warnings[0]
    assert "tools: {transfer_to_pharmacist: {kind: transfer}}" in warnings[1]


def test_declared_kinds_are_not_guesses(tmp_path):
    declared = "tools:\n" + "".join(f"  {name}: {{kind: {kind}}}\n" for name, kind in (
        ("get_prescription", "read"), ("refill_prescription", "update"), ("transfer_to_pharmacist", "transfer"),
        ("cancel_refill", "update")))
    domain = _pack(tmp_path, TOOLS, declared)
    assert guesses(domain) == [] and guess_lines(domain) == []


def test_a_shipped_pack_names_its_guesses_without_warnings():
    lines = guess_lines(load_domain("retail"))
    assert len(lines) == 1 and "verify_customer verify" in lines[0] and "data/domains/retail/domain.yaml" in lines[0]
