"""The embedded user approves only what it asked for: a question about another action or record gets a no and
what it wants, whatever the agent's wording."""

import json

import pytest

from sim_pipeline.models.cards import render_card
from sim_pipeline.models.sim_user import SimUser
from sim_pipeline.protocol.user_events import CONFIRM, REFUSE

CARD = {"goal": "refill my prescription", "request": "refill my prescription", "stance": "ordinary",
        "facts": {"rxNumber": "RX-104233", "dateOfBirth": "1961-04-02"}, "opening_facts": [], "history": "fresh",
        "wrong_value": {}, "wants_change": True, "patience": 6, "wanted_action": "refillPrescription",
        "other_actions": ["cancelRefill"], "record": "RX-104233"}


def _answer(question):
    messages = [{"role": "system", "content": render_card("situation", CARD)},
                {"role": "assistant", "content": "Hi, I need a refill of RX-104233."},
                {"role": "user", "content": question}]
    reply = SimUser().respond(messages, temperature=0.0, seed=0)
    return json.loads(reply.message["tool_calls"][0]["function"]["arguments"])


@pytest.mark.parametrize(("question", "decision"), [
    ("Just so we're clear, I'm going to cancel the refill on RX-104233. OK to proceed?", REFUSE),
    ("Before I go ahead: refill RX-550012 for pickup at ST101 - correct?", REFUSE),
    ("Shall I submit the prescription refill for RX-104233?", CONFIRM),
    ("Can I go ahead with that now?", CONFIRM),
])
def test_the_user_approves_only_its_own_action_on_its_own_record(question, decision):
    answer = _answer(question)
    assert answer["decision"] == decision
    if decision == REFUSE:
        assert "refill my prescription" in answer["message"] and "RX-104233" in answer["message"]
