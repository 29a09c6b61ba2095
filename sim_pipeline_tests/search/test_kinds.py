"""Failure kinds, the search's credit: a pass has none, every rollout a careful reader fails has one, and a kind names
the intended tool and the check that failed it, never an id, a value or the agent's words; each kind is opened once."""

import itertools
import json
import re

import pytest

from sim_pipeline import cover
from sim_pipeline.axes import axis_values, validated_constraints
from sim_pipeline.domain import load_domain
from sim_pipeline.grade import conduct
from sim_pipeline.search.kinds import KindLedger, failure_kind
from sim_pipeline.search.situations import build_situation
from sim_pipeline.world.state import build_state
from sim_pipeline_tests.world.conftest import write_pharmacy_pack
from sim_pipeline_tests.world.mutants import KEPT, mutants, passing_scripts, play

CHECK_NAME = re.compile(r"^[a-z][a-z_]*$")  # a stable name: no id, value or quoted wording can be in it


def row_of(played):
    """A replayed script as the rollout row the search reads (the runner's columns)."""
    turns = [i for i, m in enumerate(played.messages) if m["role"] == "assistant" and m.get("tool_calls")]
    events = [{"index": e.index, "tool": e.tool, "arguments": json.dumps(e.arguments, sort_keys=True),
               "status": e.status, "entity_id": e.entity_id, "applied": e.applied,
               "turn": turns[e.index] if e.index < len(turns) else None} for e in played.events]
    final = next((m["content"] for m in reversed(played.messages) if m["role"] == "assistant" and m.get("content")),
                 None)
    return {"status": "ok", "messages": played.messages, "tool_events": events, "final_text": final,
            "user_events": played.user_events, "oracle_reward": played.verdict.reward,
            "oracle_check": played.verdict.check}


def _sent_values(steps):
    return {str(v) for s in steps if s.kind == "call" for v in s.arguments.values() if len(str(v)) >= 3}


@pytest.mark.parametrize("pack", ["retail", "pharmacy"])
def test_a_failure_has_a_kind_of_tool_and_check_and_a_pass_has_none(pack, tmp_path):
    domain = load_domain(write_pharmacy_pack(tmp_path) if pack == "pharmacy" else pack)
    state = build_state(domain, 0)
    cells = cover.covering_array(axis_values(domain), seed=0, constraints=validated_constraints(domain))
    situations = [build_situation(domain, state, cell, seed=0) for cell in cells.to_dict("records")]
    killed = kept = 0
    for situation, steps in itertools.islice(passing_scripts(domain, situations, state, seed=0), 12):
        # The reference passes the oracle; a conduct rule may still cap it (a read closed with "All set").
        base = failure_kind(row_of(play(domain, situation, state, steps)), domain, situation)
        assert base is None or base.partition(": ")[2] in conduct.rule_names(), base
        for mutant in mutants(domain, situation, state, steps, seed=0):
            played = play(domain, mutant.situation, state, mutant.steps)
            kind = failure_kind(row_of(played), domain, mutant.situation)
            if mutant.kind in KEPT:
                kept += 1
                # The oracle passes it, so only a conduct rule (the grades step's heuristics) can give it a kind.
                assert played.verdict.check == "" and (kind is None or kind.partition(": ")[2] in conduct.rule_names())
            elif mutant.must_fail:
                killed += 1
                assert played.verdict.reward == 0 and CHECK_NAME.match(played.verdict.check), played.verdict
                tool, _, check = kind.partition(": ")
                assert tool == (mutant.situation.intent_tool or "no tool") and CHECK_NAME.match(check), kind
                assert not any(value in kind for value in _sent_values(mutant.steps)), (kind, mutant.steps)
    assert killed >= 20 and kept >= 5, (killed, kept)  # material enough that the test can fail


def test_an_errored_rollout_has_no_kind():
    domain = load_domain("retail")
    state = build_state(domain, 0)
    cells = cover.covering_array(axis_values(domain), seed=0, constraints=validated_constraints(domain))
    situation = build_situation(domain, state, cells.to_dict("records")[0], seed=0)
    row = {"status": "provider_error", "messages": [], "tool_events": [], "final_text": None, "user_events": [],
           "oracle_reward": None, "oracle_check": ""}
    assert failure_kind(row, domain, situation) is None


def test_a_kind_is_opened_once_and_a_pass_opens_none():
    ledger = KindLedger()
    assert not ledger.meet(None)  # a pass
    assert ledger.meet("refund: never_applied")
    assert not ledger.meet("refund: never_applied")  # the same kind again, whatever its signature
    assert ledger.meet("cancel: never_applied")  # the same check on another tool is another kind
    assert ledger.met == {"refund: never_applied", "cancel: never_applied"}
