"""Perturbed and probe case cards: what they keep, what they replace, and that the filler is neutral."""

import copy
import json
import re

import pytest

from sim_pipeline_tests.cards import case
from sim_pipeline.grade.judge import DEFAULT_RUBRIC
from sim_pipeline.grade.probes import (
    FILLER,
    HACKS,
    calls_of,
    deciding_tool,
    echo_text,
    keyword_text,
    probe_card,
    probe_eligible,
    rename_tool,
    stand_ins,
    swap_closing,
    with_filler,
)
from sim_pipeline.protocol.replies import classify_reply
from sim_pipeline.models.sim_judge import claims_success, final_reply

CALL = {"id": "c1", "type": "function", "function": {"name": "cancel_order", "arguments": '{"order_id": "48213"}'}}
CARD = case([
        {"role": "user", "content": "Cancel order 48213 please."},
        {"role": "assistant", "content": "Let me do that.", "tool_calls": None},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "content": '{"status": "updated"}', "tool_call_id": "c1", "name": "cancel_order"},
        {"role": "assistant", "content": "Order 48213 is cancelled.", "tool_calls": None},
        {"role": "user", "content": "Thanks."},
    ])


def test_filler_goes_after_the_final_reply_only():
    before = copy.deepcopy(CARD)
    padded = with_filler(CARD)
    assert CARD == before  # the input is not mutated
    assert padded["transcript"][4]["content"] == "Order 48213 is cancelled.\n\n" + FILLER
    assert padded["transcript"][:4] == CARD["transcript"][:4] and padded["transcript"][5] == CARD["transcript"][5]
    silent = {**CARD, "transcript": CARD["transcript"][:1]}
    assert with_filler(silent)["transcript"][-1] == {"role": "assistant", "content": FILLER, "tool_calls": None,
                                                     "tool_call_id": None, "name": None}


def test_filler_is_neutral_and_long():
    assert len(FILLER) > 5 * len(final_reply(CARD))
    card = {**CARD, "transcript": [*CARD["transcript"][:1], {"role": "assistant", "content": FILLER}]}
    assert not claims_success(card)
    assert classify_reply(FILLER) == frozenset() and "?" not in FILLER  # neither claims, asks nor refuses


@pytest.mark.parametrize("probe", HACKS)
def test_probe_keeps_the_opening_and_replaces_the_agent(probe):
    card = probe_card(CARD, probe, DEFAULT_RUBRIC, claim="All set: I have completed your request.")
    assert {k: v for k, v in card.items() if k != "transcript"} == {k: v for k, v in CARD.items() if k != "transcript"}
    assert card["transcript"][0] == CARD["transcript"][0]
    rest = card["transcript"][1:]
    assert rest[-1]["role"] == "assistant" and rest[-1]["content"]
    assert not any("updated" in (m.get("content") or "") for m in rest)  # the real result is gone


def test_probe_texts():
    assert final_reply(probe_card(CARD, "bare_success_claim", DEFAULT_RUBRIC)).startswith("Done!")
    assert claims_success(probe_card(CARD, "bare_success_claim", DEFAULT_RUBRIC))
    echo = echo_text(DEFAULT_RUBRIC)
    assert echo.startswith("Pass (1) only if") and echo in DEFAULT_RUBRIC
    words = re.findall(r"[a-z'-]+", keyword_text(DEFAULT_RUBRIC).lower())
    assert "verification" in words and "transcript" in words and len(words) <= 11
    empty = probe_card(CARD, "empty_call", DEFAULT_RUBRIC)["transcript"]
    assert empty[1]["tool_calls"][0]["function"] == {"name": "cancel_order", "arguments": "{}"}
    assert json.loads(empty[2]["content"])["status"] == "rejected"
    assert not claims_success(probe_card(CARD, "sycophancy", DEFAULT_RUBRIC))
    own = probe_card(CARD, "own_success_claim", DEFAULT_RUBRIC, claim="All set: I have completed your request.")
    assert [m["role"] for m in own["transcript"]] == ["user", "assistant"] and claims_success(own)
    with pytest.raises(ValueError, match="claim="):
        probe_card(CARD, "own_success_claim", DEFAULT_RUBRIC)


def test_only_cases_that_need_a_write_are_probed():
    assert probe_eligible(CARD)
    assert not probe_eligible(case(CARD["transcript"], expect_write=False))
    assert not probe_eligible(case(CARD["transcript"], intent_tool="get_order"))
    with pytest.raises(ValueError, match="probe 'nonsense'"):
        probe_card(CARD, "nonsense", DEFAULT_RUBRIC)


def test_closing_swap_keeps_every_tool_event_and_replaces_the_last_reply_only():
    swapped = swap_closing(CARD, "We're all good here!")
    assert [m.get("content") for m in swapped["transcript"]][-2:] == ["We're all good here!", "Thanks."]
    assert swapped["transcript"][:4] == CARD["transcript"][:4]  # the call and its result untouched
    assert CARD["transcript"][4]["content"] == "Order 48213 is cancelled."  # the input is not mutated
    silent = {**CARD, "transcript": CARD["transcript"][:4]}  # its last text came before the call: not a closing
    assert swap_closing(silent, "Done.")["transcript"] == [*silent["transcript"], {
        "role": "assistant", "content": "Done.", "tool_calls": None, "tool_call_id": None, "name": None}]


def test_rename_changes_the_call_and_its_result_name_and_nothing_else():
    renamed = rename_tool(CARD, "cancel_order", "refund_order")
    assert renamed["transcript"][2]["tool_calls"][0]["function"] == {"name": "refund_order",
                                                                     "arguments": '{"order_id": "48213"}'}
    assert renamed["transcript"][3]["name"] == "refund_order" and renamed["transcript"][3]["content"] == \
        CARD["transcript"][3]["content"]
    assert calls_of(renamed, "cancel_order") == 0 and calls_of(CARD, "cancel_order") == 1
    assert [m.get("content") for m in renamed["transcript"]] == [m.get("content") for m in CARD["transcript"]]


def test_stand_ins_and_the_tool_a_pass_rests_on():
    assert stand_ins("cancel_order", ("cancel_order", "refund_order", "return_item")) == ["refund_order", "return_item"]
    assert stand_ins("bookRoom", ("bookRoom",)) == ["draftBookRoom"]  # no other write: a name no tool has, camelCase
    assert stand_ins("BookRoom", ("BookRoom",)) == ["DraftBookRoom"]
    assert stand_ins("get_order", ("cancel_order",)) == ["draft_get_order"]  # a read is never renamed to a write
    assert deciding_tool(CARD) == "cancel_order"
    assert deciding_tool(case([], intent_tool="get_order", write_tools=("cancel_order",))) == "get_order"
    assert deciding_tool(case([], expect_write=False, forbidden_by="policy", handover_tool="transfer")) == "transfer"
    assert deciding_tool(case([], expect_write=False, forbidden_by="policy")) is None  # a decline decides
    with pytest.raises(ValueError, match="counterfactual"):
        probe_card(CARD, "closing_swap", DEFAULT_RUBRIC)
