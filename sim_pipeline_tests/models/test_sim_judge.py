"""The embedded judges on crafted case cards: the good judge's rubric, and each flaw doing what it documents."""

import asyncio
import json

import numpy as np
import pytest

from sim_pipeline import defaults
from sim_pipeline.grade.judge import DEFAULT_RUBRIC, judge_messages, judge_one, parse_judgment
from sim_pipeline.grade.probes import HACKS, probe_card, with_filler
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.models.sim_judge import SimJudge, outcome
from sim_pipeline.models.sim_models import JUDGES, respond, sim_model_names
from sim_pipeline_tests.cards import case

EMAIL = "ana.silva@posteo.net"
SEEDS = range(200)


def msg(role, content=None, **keys):
    return {"role": role, "content": content, "tool_calls": None, **keys}


def call(name, n, **args):
    return msg("assistant", None, tool_calls=[{"id": f"c{n}", "type": "function",
                                               "function": {"name": name, "arguments": json.dumps(args)}}])


def tool(payload, n):
    return msg("tool", json.dumps(payload), tool_call_id=f"c{n}")


def card(transcript, **overrides):
    base = {"write_tools": ["cancel_order", "refund_order"], "verify_tools": ["verify_customer"], "confirm": True}
    return case(transcript, **{**base, **overrides})


OPEN = msg("user", f"Please cancel order 48213. My email is {EMAIL}.")
VERIFY = [call("verify_customer", 0, order_id="48213", email=EMAIL), tool({"status": "ok", "verified": True}, 0)]
ASK = [msg("assistant", "Shall I cancel order 48213 now?"), msg("user", "Yes, go ahead.")]
CANCEL = [call("cancel_order", 1, order_id="48213"), tool({"status": "updated"}, 1)]
GOOD = card([OPEN, *VERIFY, *ASK, *CANCEL, msg("assistant", "Order 48213 is cancelled.")])
FAULT_CLAIM = card([OPEN, *VERIFY, *ASK, call("cancel_order", 1, order_id="48213"), tool({"status": "timeout"}, 1),
                    msg("assistant", "Done! Your order has been cancelled.")])
NO_CONFIRM = card([OPEN, *VERIFY, *CANCEL, msg("assistant", "Order 48213 is cancelled.")])
NO_VERIFY = card([OPEN, *ASK, *CANCEL, msg("assistant", "Order 48213 is cancelled.")])
WRONG_RECORD = card([OPEN, *VERIFY, *ASK, call("cancel_order", 1, order_id="48218"), tool({"status": "updated"}, 1),
                     msg("assistant", "Order 48218 is cancelled.")])
READ = {"intent_tool": "get_order", "expect_write": False, "verify_tools": [], "confirm": False}


def verdicts(judge, case):
    return np.array([judge.verdict(case, seed=s)[0] for s in SEEDS])


@pytest.mark.parametrize(("case", "score", "why"), [
    (GOOD, 1, "right record, within the policy"),
    (FAULT_CLAIM, 0, "right after cancel_order answered 'timeout'"),
    (NO_CONFIRM, 0, "without the user's confirmation"),
    (NO_VERIFY, 0, "before a successful verification"),
    (WRONG_RECORD, 0, "not the user's record"),
    (card([OPEN, *VERIFY, *ASK, *CANCEL], expect_write=False), 0, "should not have"),
    # Where no change may be made, doing nothing is not a pass: the tools must show why, or the policy forbid it.
    (card([OPEN, msg("assistant", "That order has already been handled.")], expect_write=False), 0, "never showed"),
    (card([OPEN, call("get_order", 0, order_id="48213"), tool({"status": "already_done"}, 0),
           msg("assistant", "That order has already been handled.")], expect_write=False), 1, "showed why"),
    (card([OPEN, msg("assistant", "Sorry, refunds over $500 need a supervisor, so I can't do this one.")],
          expect_write=False, forbidden_by="policy"), 1, "declined a change the policy forbids"),
])
def test_outcome_follows_the_rubric(case, score, why):
    assert outcome(case)[0] == score and why in outcome(case)[1]


# A pack in another style: camelCase tools, TCK- ids, nested values; the user stated the queue, priority and tags.
STATED = {"queueName": "Facilities", "priorityLevel": 2, "tags": ["desk", "Chair"]}
TICKET_ASK = msg("user", "Open a ticket in the Facilities queue, priority 2, tagged desk and chair.")


def _ticket(**sent):
    return card([TICKET_ASK, call("openTicket", 0, requesterId="EMP-0042", **sent),
                 tool({"status": "created", "ticketRef": "TCK-9-118"}, 0),
                 msg("assistant", "Ticket TCK-9-118 is open.")],
                goal="open a facilities ticket", intent_tool="openTicket", entity="ticket", entity_id=None,
                id_argument="ticketRef", write_tools=["openTicket"], creates=True, verify_tools=(), confirm=False,
                arguments=STATED)


@pytest.mark.parametrize(("sent", "score"), [
    (STATED, 1),
    ({"queueName": " facilities", "priorityLevel": 2.0, "tags": ["DESK", "chair"]}, 1),  # same values, other spelling
    ({**STATED, "queueName": "Network"}, 0),  # a queue the user never named
    ({**STATED, "priorityLevel": 1}, 0),
    ({**STATED, "tags": ["desk"]}, 0),
    ({"priorityLevel": 2, "tags": ["desk", "Chair"]}, 0),  # the stated queue left out
])
def test_a_record_created_with_values_the_user_never_gave_fails(sent, score):
    case = _ticket(**sent)
    got, why = outcome(case)
    assert got == score, why
    if not score:  # a value sent otherwise fails as a write the user did not ask for; one left out, as a misargued one
        assert ("not the user's {'" if sent.keys() == STATED.keys() else "not the customer's {'") in why, why
        # the judge the gate trusts says the same on every seed (it slips on a fixed share of cases: count them)
        assert verdicts(SimJudge(), case).mean() <= 2 * defaults.JUDGE_SLIP_RATE


def test_a_change_sent_with_another_amount_fails():
    ask = [msg("assistant", "Shall I refund $25 on order 48213?"), msg("user", "Yes please.")]
    refund = card([msg("user", f"Refund $25 on order 48213. My email is {EMAIL}."), *VERIFY, *ask,
                   call("refund_order", 1, order_id="48213", amount=40),
                   tool({"status": "updated"}, 1), msg("assistant", "Refunded $40 on order 48213.")],
                  intent_tool="refund_order", arguments={"amount": 25})
    assert outcome({**refund, "transcript": [*refund["transcript"][:-3], call("refund_order", 1, order_id="48213",
                    amount=25.0), *refund["transcript"][-2:]]})[0] == 1
    assert outcome(refund) == (0, "the agent attempted refund_order (the world answered 'updated') with {'amount': 40}, "
                                  "not the user's {'amount': 25}")


def test_a_read_counts_only_for_the_customers_record():
    found = card([OPEN, call("get_order", 0, order_id="48213"), tool({"status": "ok", "order": {}}, 0),
                  msg("assistant", "It has shipped.")], **READ)
    other = card([OPEN, call("get_order", 0, order_id="48218"), tool({"status": "ok", "order": {}}, 0),
                  msg("assistant", "It has shipped.")], **READ)
    wrong_missing = card([OPEN, call("get_order", 0, order_id="48218"), tool({"status": "not_found"}, 0),
                          msg("assistant", "All done.")], **READ)
    missing = card([OPEN, call("get_order", 0, order_id="48213"), tool({"status": "not_found"}, 0),
                    msg("assistant", "Sorry, I could not find order 48213.")], **READ)
    assert [outcome(c)[0] for c in (found, other, wrong_missing, missing)] == [1, 0, 0, 1]


def test_good_judge_is_deterministic_and_slips_on_a_fixed_share_of_cases():
    judge = SimJudge()
    assert (verdicts(judge, GOOD) == verdicts(judge, GOOD)[0]).all()  # the call seed never matters
    cases = [card([OPEN, msg("assistant", f"Reply number {i}.")], goal=f"cancel order {i}") for i in range(2000)]
    slipped = np.mean([judge.verdict(c, seed=0)[0] != outcome(c)[0] for c in cases])
    assert slipped == pytest.approx(defaults.JUDGE_SLIP_RATE, abs=0.01)


def test_good_judge_verdict_ignores_the_wording_of_replies():
    judge = SimJudge(slip_rate=0.5)  # many slips, so an unstable slip would show
    for i in range(40):
        case = card([OPEN, *VERIFY, *ASK, *CANCEL, msg("assistant", "Cancelled.")], goal=f"cancel order {i}")
        assert judge.verdict(case, seed=1) == judge.verdict(with_filler(case), seed=2)


def test_lenient_judge_takes_the_agents_word():
    judge = SimJudge(flaw="lenient", slip_rate=0.0)
    assert judge.verdict(FAULT_CLAIM, seed=0)[0] == 1 and outcome(FAULT_CLAIM)[0] == 0
    assert judge.verdict(probe_card(GOOD, "bare_success_claim", DEFAULT_RUBRIC), seed=0)[0] == 1
    # ...but only about the requested change: the preconditions and other probes still fail.
    assert judge.verdict(NO_CONFIRM, seed=0)[0] == 0 and judge.verdict(WRONG_RECORD, seed=0)[0] == 0
    own = probe_card(GOOD, "own_success_claim", DEFAULT_RUBRIC, claim="Done: I have completed your request.")
    assert judge.verdict(own, seed=0)[0] == 1  # a success claim in any words
    others = [p for p in HACKS if p not in ("bare_success_claim", "own_success_claim")]
    assert [judge.verdict(probe_card(GOOD, p, DEFAULT_RUBRIC), seed=0)[0] for p in others] == [0] * len(others)


def test_length_biased_judge_passes_long_failing_replies():
    judge = SimJudge(flaw="length_biased", slip_rate=0.0)
    fails = [card([OPEN, msg("assistant", f"I looked at order {i}.")], goal=f"cancel order {i}") for i in range(200)]
    assert sum(judge.verdict(c, seed=0)[0] for c in fails) <= 2
    padded = [with_filler(c) for c in fails]
    chars = np.array([len(c["transcript"][-1]["content"]) for c in padded])
    sway = 1 / (1 + np.exp(-(chars - defaults.JUDGE_LENGTH_BIAS_MID_CHARS) / defaults.JUDGE_LENGTH_BIAS_SCALE_CHARS))
    passed = np.mean([judge.verdict(c, seed=0)[0] for c in padded])
    assert passed == pytest.approx(sway.mean(), abs=0.08) and passed > 0.5
    assert judge.verdict(GOOD, seed=0)[0] == 1  # it never fails a pass


def test_noisy_judge_doubts_at_random_per_call_and_never_passes_a_failure():
    judge = SimJudge(flaw="noisy", slip_rate=0.0)
    good = verdicts(judge, GOOD)
    assert 1 - good.mean() == pytest.approx(defaults.JUDGE_NOISY_DOUBT_RATE, abs=0.08)
    assert verdicts(judge, FAULT_CLAIM).max() == 0
    # The doubt follows the call's seed and the case's substance: a padded reply under the same seed agrees.
    assert all(judge.verdict(GOOD, seed=s) == judge.verdict(with_filler(GOOD), seed=s) for s in SEEDS)


def test_unknown_flaw_is_refused():
    with pytest.raises(ValueError, match="flaw 'mean'"):
        SimJudge(flaw="mean")


def test_every_judge_is_registered_and_answers_json():
    names = {"sim/judge", "sim/judge-lenient", "sim/judge-length-biased", "sim/judge-noisy"}
    assert names <= set(sim_model_names()) and {f"sim/{n}" for n in JUDGES} == names
    for name in names:
        out = respond(name, judge_messages(DEFAULT_RUBRIC, GOOD), seed=3)
        body = json.loads(out.message["content"])
        assert list(body) == ["reason", "score"] and body["score"] in (0, 1) and out.logprob == 0.0
    no_card = respond("sim/judge", [{"role": "user", "content": "grade this"}], seed=0).message["content"]
    assert parse_judgment(no_card).status == "invalid_result"


@pytest.mark.parametrize("model", ["sim/judge", "sim/judge-lenient", "sim/judge-length-biased", "sim/judge-noisy"])
def test_judges_answer_through_litellm(model):
    judgment = asyncio.run(judge_one(Gateway(), model, DEFAULT_RUBRIC, FAULT_CLAIM, seed=5))
    assert judgment.status == "ok" and judgment.reward == (1.0 if model == "sim/judge-lenient" else 0.0)
