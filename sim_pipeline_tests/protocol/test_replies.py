"""classify_reply on other models' wording: the labelled corpus, the issue's examples, and its contract."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim_pipeline.protocol.replies import (
    ASKS_CONFIRMATION,
    ASKS_FOR_INFORMATION,
    CLAIMS_SUCCESS,
    REFUSES,
    REPLY_LABELS,
    claims_handoff,
    classify_reply,
)
from sim_pipeline_tests.protocol.corpus import CORPUS, DEV, SEALED, load, precision_recall

GOAL = 0.95  # the bar for precision and recall per label
# The sealed split (never tuned on) as last measured: (precision, recall) per label. A regression guard, not the
# goal: the goal stays GOAL, and the gaps are reported, not fitted (see corpus.py). Refusals rose from 0.964/0.900
# when the rules were extended on replies_dev2.jsonl (written without reading the sealed split's misses).
SEALED_MEASURED = {ASKS_CONFIRMATION: (1.0, 0.909), CLAIMS_SUCCESS: (0.963, 0.839), REFUSES: (1.0, 0.967),
                   ASKS_FOR_INFORMATION: (1.0, 0.967)}
# The second development set: not held to GOAL (its residual misses are ambiguous or left open), only to what the
# rules read of it now, so a later change that loses one shows.
DEV2 = DEV.with_name("replies_dev2.jsonl")
DEV2_MEASURED = {ASKS_CONFIRMATION: (1.0, 1.0), CLAIMS_SUCCESS: (0.917, 0.917), REFUSES: (1.0, 0.944),
                 ASKS_FOR_INFORMATION: (1.0, 1.0)}


@pytest.mark.parametrize("path", [CORPUS, DEV], ids=["corpus", "dev"])
def test_corpus_is_well_formed(path):
    rows = load(path)
    assert len(rows) >= (300 if path == CORPUS else 100)
    assert all(set(r) == {"text", "labels", "style", "note"} and set(r["labels"]) <= set(REPLY_LABELS) for r in rows)
    texts = [r["text"].strip().lower() for r in rows]
    assert len(set(texts)) == len(texts)
    if path == CORPUS:  # every label has enough positives (and enough replies with none) to measure
        assert all(sum(label in r["labels"] for r in rows) >= 60 for label in REPLY_LABELS)
        assert sum(not r["labels"] for r in rows) >= 60


def test_the_sealed_split_is_well_formed_and_holds_its_measured_level():
    rows = load(SEALED)
    assert len(rows) >= 130 and all(set(r["labels"]) <= set(REPLY_LABELS) for r in rows)
    assert all(sum(label in r["labels"] for r in rows) >= 25 for label in REPLY_LABELS)
    assert not {r["text"] for r in rows} & {r["text"] for r in load(CORPUS) + load(DEV)}
    measured = precision_recall(rows, classify_reply)
    for label, (precision, recall) in SEALED_MEASURED.items():
        assert measured[label][0] >= precision - 1e-3 and measured[label][1] >= recall - 1e-3, (label, measured[label])


def test_the_second_development_set_holds_its_level():
    rows = load(DEV2)
    assert len(rows) >= 100 and all(set(r["labels"]) <= set(REPLY_LABELS) for r in rows)
    assert not {r["text"] for r in rows} & {r["text"] for r in load(CORPUS) + load(DEV) + load(SEALED)}
    measured = precision_recall(rows, classify_reply)
    for label, (precision, recall) in DEV2_MEASURED.items():
        assert measured[label][0] >= precision - 1e-3 and measured[label][1] >= recall - 1e-3, (label, measured[label])


@pytest.mark.parametrize("path", [CORPUS, DEV, DEV2, SEALED], ids=["corpus", "dev", "dev2", "sealed"])
def test_a_confirmation_question_is_never_also_a_request_for_information(path):
    questions = [r["text"] for r in load(path) if ASKS_CONFIRMATION in r["labels"]
                 and ASKS_FOR_INFORMATION not in r["labels"]]
    assert questions and not [t for t in questions if ASKS_FOR_INFORMATION in classify_reply(t)]


@pytest.mark.parametrize("label", REPLY_LABELS)
def test_precision_and_recall_on_other_models_wording(label):
    precision, recall, positives = precision_recall(load(CORPUS), classify_reply)[label]
    assert precision >= GOAL and recall >= GOAL, (label, precision, recall, positives)


@pytest.mark.parametrize(("text", "expected"), [
    ("Would you like me to proceed?", {ASKS_CONFIRMATION}),
    ("Your order has been canceled.", {CLAIMS_SUCCESS}),
    ("I'm going to cancel order #4410 now.", set()),
    ("I couldn't find that order — could you double-check the number?", {ASKS_FOR_INFORMATION}),
    ("Refunds over $500 need a supervisor, so I can't issue this one.", {REFUSES}),
    ("Done! Anything else I can help with?", {CLAIMS_SUCCESS}),
    ("Happy to help. What exactly would you like me to do?", {ASKS_FOR_INFORMATION}),
    ("To confirm: I will cancel order 48213. Shall I go ahead?", {ASKS_CONFIRMATION}),
    # A negated subject says nothing happened (wording from a verl test's scripted policy).
    ("There is no order with that number on our side, so nothing was changed.", set()),
    ("No changes have been made to your subscription.", set()),
    ("No problem, your order was cancelled.", {CLAIMS_SUCCESS}),
    # Issue 27's misses: approval questions read as requests for information.
    ("Before I go ahead, can you confirm that you want the refund sent to your original card?", {ASKS_CONFIRMATION}),
    ("Just to double-check: you'd like me to cancel order 48213 and refund the full amount. Is that correct?",
     {ASKS_CONFIRMATION}),
    ("I'll need your explicit confirmation before I revoke access to the payroll system.", {ASKS_CONFIRMATION}),
    ("Your email is ana.silva@posteo.net. Is that correct?", {ASKS_FOR_INFORMATION}),  # a fact, not an action
])
def test_examples(text, expected):
    assert classify_reply(text) == expected


@given(st.text(max_size=400))
def test_any_text_gives_a_subset_of_the_labels_deterministically(text):
    labels = classify_reply(text)
    assert labels <= set(REPLY_LABELS) and classify_reply(text) == labels


@pytest.mark.parametrize("text", [
    "Unfortunately refunds above $500 require supervisor approval, so I've escalated this to our billing team.",
    "Sorry, the max refund I can authorize is $200 and this one is $340 — I've sent it up to a supervisor for review.",
    "Can't do that — refunds over $500 need manager approval. Routed to Tier 2 (case #88410).",
    "Hmm, mortgage rate locks are handled by a loan officer, so I'm passing you over to that team now.",
    "This is beyond my permissions. I'll hand you over to a human agent now — please hold.",
    "That request has to go through the billing team; I've passed it on to them.",
    "Your case has been escalated, and a specialist will follow up with you by email.",
    "I went ahead and escalated it.",
])
def test_a_hand_off_the_agent_says_it_made(text):
    assert claims_handoff(text)


@pytest.mark.parametrize("text", [
    "I can escalate this to the Identity team as a P2 — should I?",  # an offer
    "If you want, I can transfer you to a human agent.",
    "Refunds over $500 need a supervisor, so I can't issue this one. Please contact our billing team, who can.",
    "I've transferred the funds to your account.",  # money moved, to no person
    "I'll forward you the link.",
    "I have not escalated it yet.",
    "Understood. I'll pass your feedback about the hold times along to the team.",
    "The escalation SLA for P2 tickets is 4 business hours.",
    "I've raised your credit limit to $5,000.",
])
def test_no_hand_off_is_claimed(text):
    assert not claims_handoff(text)
