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
    classify_reply,
)
from sim_pipeline_tests.protocol.corpus import CORPUS, DEV, load, precision_recall

GOAL = 0.95  # the bar for precision and recall per label


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
])
def test_examples(text, expected):
    assert classify_reply(text) == expected


@given(st.text(max_size=400))
def test_any_text_gives_a_subset_of_the_labels_deterministically(text):
    labels = classify_reply(text)
    assert labels <= set(REPLY_LABELS) and classify_reply(text) == labels
