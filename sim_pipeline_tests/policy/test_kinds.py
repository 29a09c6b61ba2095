"""Every registered rule kind through every hook, on a pack written here in another hand (a library desk: camelCase
tools, LN-12345 ids, an integer limit, an enum argument, a hand-off). A kind that is half wired (a hook that never
does anything, a kind the loader, the schema or this pack does not know) fails here; a module outside policy/ that
branches on a kind's name fails the layering check below."""

import ast
import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from sim_pipeline import policy
from sim_pipeline.domain import load_domain
from sim_pipeline.errors import DomainPackError
from sim_pipeline.grade import conduct
from sim_pipeline.grade.judge import case_card
from sim_pipeline.models.sim_judge import outcome
from sim_pipeline.protocol.careful import Reading
from sim_pipeline.protocol.statuses import APPLIED_STATUSES
from sim_pipeline.search.situations import build_situation
from sim_pipeline.world.oracle import label, row_reading
from sim_pipeline.world.reference import solve
from sim_pipeline.world.sandbox import Event
from sim_pipeline.world.state import build_state
from sim_pipeline_tests.world.conftest import fn

PACKAGE = Path(policy.__file__).parent.parent
LOAN_ID = {"type": "string", "pattern": "^LN-[0-9]{5}$", "description": "The loan number, e.g. LN-10442."}
TOOLS = {
    "getLoan": ("Look up a library loan.", {"loanId": LOAN_ID}),
    "verifyMember": ("Check the caller is the member: the birth date on file must match.",
                     {"loanId": LOAN_ID, "birthDate": {"type": "string", "format": "date"}}),
    "renewLoan": ("Renew a loan for a number of weeks.",
                  {"loanId": LOAN_ID, "weeks": {"type": "integer", "minimum": 1, "maximum": 8}}),
    "payFine": ("Pay the fine on an overdue loan.",
                {"loanId": LOAN_ID, "amount": {"type": "number"}, "method": {"enum": ["card", "account", "cash"]}}),
    "reportDamage": ("Record the state a returned book is in.",
                     {"loanId": LOAN_ID, "condition": {"enum": ["scuffed", "torn", "soaked"]}}),
    "handToLibrarian": ("Pass the conversation to a librarian.", {"summary": {"type": "string", "minLength": 5}}),
}
SPEC = {
    "name": "library", "title": "Library loans desk", "agent_role": "You help members of Fernhill Library with loans.",
    "entities": {"loan": {"id_argument": "loanId", "id_pattern": "^LN-[0-9]{5}$", "fields": {
        "status": {"kind": "enum", "values": ["active", "overdue", "returned"]},
        "birthDate": {"kind": "date"}, "fine": {"kind": "money", "min": 1, "max": 60}, "returnedOn": {"kind": "date"},
        "title": {"kind": "enum", "values": ["Middlemarch", "Dune", "Beloved", "Emma"]}}}},
    "tools": {"renewLoan": {"kind": "update"}, "payFine": {"kind": "update"}, "reportDamage": {"kind": "update"},
              "handToLibrarian": {"kind": "transfer"}},
    "actions": {"renewLoan": {"sets": {"renewal": "granted", "weeks": "$weeks"}, "requires": {"status": ["active"]}},
                "payFine": {"sets": {"status": "returned"}, "requires": {"status": ["overdue"]}},
                "reportDamage": {"sets": {"condition": "$condition"}}},
    "rules": {
        "member_check": {"kind": "verify_before", "verify_tool": "verifyMember", "tools": ["renewLoan", "payFine"]},
        "read_back": {"kind": "confirm_before", "tools": ["payFine"]},
        "renew_cap": {"kind": "argument_limit", "tool": "renewLoan", "argument": "weeks", "max": 4},
        "pay_methods": {"kind": "allowed_values", "tool": "payFine", "argument": "method", "values": ["card", "account"]},
        "no_soaked": {"kind": "forbidden_argument", "tool": "reportDamage", "argument": "condition",
                      "values": ["soaked"]},
        "one_renewal": {"kind": "max_calls", "tool": "renewLoan", "max": 1},
        "active_only": {"kind": "eligibility", "tools": ["renewLoan"]},
        "fines_to_staff": {"kind": "transfer_when", "transfer_tool": "handToLibrarian", "tools": ["payFine"]},
        # A record predicate with the world's clock and a table: damage is reported within 3 days of the return,
        # except for the titles the library is lenient about.
        "damage_window": {"kind": "expression", "tools": ["reportDamage"],
                          "when": "now - date(record.returnedOn) <= duration('72h') || record.title in tables.lenient"},
        # A predicate on the request against the record: a fine is paid in full, never in part.
        "whole_fine": {"kind": "expression", "tools": ["payFine"], "when": "args.amount == record.fine"},
    },
    "tables": {"lenient": ["Emma"]},
}
POLICY = "\n".join(f"- **{rule}**: Rule {rule} of the desk." for rule in SPEC["rules"])


def write_pack(root: Path, spec: dict) -> Path:
    pack = root / "library"
    (pack / "tools").mkdir(parents=True)
    for name, (description, properties) in TOOLS.items():
        (pack / "tools" / f"{name}.json").write_text(json.dumps(fn(name, description, properties, list(properties))))
    (pack / "domain.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    (pack / "policy.md").write_text("# Fernhill Library\n\n" + POLICY + "\n")
    return pack


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    return load_domain(write_pack(tmp_path_factory.mktemp("packs"), SPEC))


@pytest.fixture(scope="module")
def state(library):
    return build_state(library, 0)


def cell(tool, rule, world_state="entity_exists"):
    return {"tool": tool, "rule": rule, "stance": "ordinary", "world_state": world_state,
            "tool_condition": "success", "history": "fresh"}


def test_the_registry_the_schema_and_this_pack_know_the_same_kinds(library):
    schema = json.loads((PACKAGE / "domain.schema.json").read_text())
    assert set(schema["properties"]["rules"]["additionalProperties"]["properties"]["kind"]["enum"]) == set(policy.KINDS)
    assert {r.kind for r in library.rules} == set(policy.KINDS)  # a new kind needs a rule here, so every hook runs
    assert all(k.name and k.conduct_rule and k.needs for k in policy.KINDS.values())


def test_no_module_outside_policy_branches_on_a_kind():
    """A kind's name, as a string, appears only in its own module (and the embedded agent, a model under test whose
    reading of its policy card is its own behaviour, not ground truth)."""
    allowed = {PACKAGE / "models" / "sim_agent.py"}
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.parent.name == "policy" or path in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in policy.KINDS:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.value}")
    assert not found, found


@pytest.mark.parametrize("kind", sorted(policy.KINDS))
def test_validate_names_the_rule_and_the_missing_key(kind, tmp_path, library):
    rule_id = next(r.id for r in library.rules if r.kind == kind)
    tools = {t.name: t for t in library.tools}
    rule = next(r for r in library.rules if r.id == rule_id)
    assert policy.KINDS[kind].validate(rule, tools, library.actions) is None
    for key in policy.KINDS[kind].needs:
        spec = json.loads(json.dumps(SPEC))
        del spec["rules"][rule_id][key]
        with pytest.raises(DomainPackError, match=rf"rules/{rule_id}.*{key}"):
            load_domain(write_pack(tmp_path / key, spec))


@pytest.mark.parametrize("rule_id", list(SPEC["rules"]))
def test_each_rule_is_stressed_solved_and_kept(rule_id, library, state):
    """Under stress the right move changes and the reference still passes; with another rule on the axis the rule
    is kept satisfied and the reference passes too; the term is stored in the expected outcome."""
    rule = next(r for r in library.rules if r.id == rule_id)
    kind = rule.kind
    for tool in rule.tools:
        for i, (rule_value, stressed) in enumerate(((rule.id, True), ("unspecified", False))):
            situation = build_situation(library, state, cell(tool, rule_value), seed=0, variant=i)
            want = situation.want
            assert (rule.id in want.stressed) is stressed, (kind, tool, rule_value, situation.facts, situation.notes)
            term = next(t for t in want.rules if t["id"] == rule.id)
            assert term["kind"] == kind and json.loads(json.dumps(term)) == term
            reference = solve(library, situation, seed=0, state=state)
            assert reference.solvable, (kind, tool, rule_value, reference.reason, reference.calls)


def _played(reading: Reading):
    """The breach as a transcript: an assistant call and its tool result per call (turns renumbered)."""
    messages = [{"role": "user", "content": "Hello, I need help with my loan."}]
    calls = []
    for i, c in enumerate(reading.calls):
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"b{i}", "type": "function", "function": {"name": c.tool, "arguments": json.dumps(c.arguments)}}]})
        messages.append({"role": "tool", "tool_call_id": f"b{i}", "content": json.dumps(dict(c.result))})
        calls.append(dataclasses.replace(c, turn=len(messages) - 1))
    messages.append({"role": "assistant", "content": "I have taken care of what I could."})
    return messages, calls


@pytest.mark.parametrize("rule_id", list(SPEC["rules"]))
def test_a_breach_fails_the_oracle_the_conduct_rules_and_the_judge_alike(rule_id, library, state):
    rule = next(r for r in library.rules if r.id == rule_id)
    kind = rule.kind
    situation = build_situation(library, state, cell(rule.tools[0], rule.id), seed=0)
    term = next(t for t in situation.want.rules if t["id"] == rule.id)
    alone = dataclasses.replace(situation.want, rules=(term,))  # only this rule, so its check is what decides
    situation = dataclasses.replace(situation, expected=alone)
    breach = policy.KINDS[kind].breach(term, alone)
    assert policy.KINDS[kind].violation(term, breach.reading, alone)
    messages, calls = _played(breach.reading)
    assert policy.KINDS[kind].violation(term, Reading(tuple(calls)), alone)
    events = [Event(i, c.tool, dict(c.arguments), c.status, c.entity, c.record, c.status in APPLIED_STATUSES,
                    dict(c.result)) for i, c in enumerate(calls)]
    verdict = label(library, situation, events, state, messages)
    assert verdict.reward == 0.0 and rule.id in verdict.reason, verdict
    rows = [{"tool": c.tool, "arguments": json.dumps(c.arguments), "status": c.status, "entity_id": c.record,
             "turn": c.turn} for c in calls]
    assert row_reading(library, rows, messages).calls[-1].tool == calls[-1].tool
    violation = conduct.check(messages, rows, messages[-1]["content"], library, [], alone)
    assert violation is not None and violation.rule == policy.KINDS[kind].conduct_rule, violation
    card = case_card(situation, messages)
    [on_card] = card["expected"]["rules"]
    assert {k: v for k, v in on_card.items() if k != "means"} == term and on_card["means"]
    score, reason = outcome(card)
    assert score == 0 and rule.id in reason, reason


def test_a_state_the_world_masks_shows_nothing(library, state):
    """`unknown` is what a masked field reads as: trying the write after seeing it is no eligibility breach."""
    rule = next(r for r in library.rules if r.kind == "eligibility")
    situation = build_situation(library, state, cell(rule.tools[0], rule.id), seed=0)
    term = next(t for t in situation.want.rules if t["id"] == rule.id)
    breach = policy.KINDS["eligibility"].breach(term, situation.want).reading
    seen, write = breach.calls
    masked = dataclasses.replace(seen, result={**seen.result, "loan": {**seen.result["loan"], "status": "unknown"}})
    assert policy.KINDS["eligibility"].violation(term, Reading((masked, write)), situation.want) is None
    assert policy.KINDS["eligibility"].violation(term, breach, situation.want)


@pytest.mark.parametrize(("when", "message"), [
    ("record.status ==", r"rules/damage_window/when'?: not a CEL expression"),
    ("reservation.status == 'open'", r"rules/damage_window/when'?: reads \['reservation'\], which no situation provides"),
])
def test_an_expression_that_cannot_be_read_is_refused_at_load(when, message, tmp_path):
    spec = json.loads(json.dumps(SPEC))
    spec["rules"]["damage_window"]["when"] = when
    with pytest.raises(DomainPackError, match=message):
        load_domain(write_pack(tmp_path, spec))


def test_an_expression_on_the_record_and_one_on_the_request_ask_for_different_moves(library, state):
    """A record the predicate rules out: read it, then decline (the reference looks before it writes). A request
    it rules out: the policy alone refuses it, and the hand-off rule on the tool sends it to a librarian."""
    late = build_situation(library, state, cell("reportDamage", "damage_window"), seed=0)
    assert not late.expect_write and late.want.forbidden_by == "world" and late.notes["ineligible"]
    reference = solve(library, late, seed=0, state=state)
    assert reference.solvable and [t for t, _ in reference.calls] == ["getLoan"], reference.calls
    partial = build_situation(library, state, cell("payFine", "whole_fine"), seed=0)
    record = next(r for _, r in partial.setup.upserts)
    assert float(partial.facts["amount"]) != record["fine"] and partial.want.forbidden_by == "policy"
    assert partial.want.handover_tool == "handToLibrarian"
    reference = solve(library, partial, seed=0, state=state)
    assert reference.solvable and [t for t, _ in reference.calls] == ["handToLibrarian"], reference.calls
    kept = build_situation(library, state, cell("payFine", "unspecified"), seed=0)
    record = next(r for _, r in kept.setup.upserts)
    assert float(kept.facts["amount"]) == record["fine"] and "whole_fine" not in kept.want.stressed
