"""Markup a chat format leaks into replies is repaired before anything reads them, and counted."""

import asyncio
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim_pipeline.models.gateway import Gateway, Sampling
from sim_pipeline.models.markup import HTML_ENTITIES, TEMPLATE_TOKENS, repair_arguments, repair_message, repair_text
from sim_pipeline.models.model_config import ModelConfig
from sim_pipeline_tests.scripted_server import ScriptedServer, replies


@pytest.mark.parametrize(("raw", "clean", "kinds"), [
    ("I&#39;m checking order 48213.", "I'm checking order 48213.", (HTML_ENTITIES,)),
    ("She said &amp;#34;cancel it&amp;#34;", 'She said "cancel it"', (HTML_ENTITIES,)),  # encoded twice
    ("Refund of 25 &euro; &mdash; done", "Refund of 25 \u20ac \u2014 done", (HTML_ENTITIES,)),
    ("Your room is booked.<|im_end|>", "Your room is booked.", (TEMPLATE_TOKENS,)),
    ("Done &#x2714;</s>", "Done \u2714", (HTML_ENTITIES, TEMPLATE_TOKENS)),
    ("AT&T and R&D; 5 < 6 > 4", "AT&T and R&D; 5 < 6 > 4", ()),  # no entity, no token: untouched
])
def test_leaked_markup_is_decoded_and_named(raw, clean, kinds):
    assert repair_text(raw) == (clean, kinds)


@given(st.text())
def test_text_without_markup_comes_back_unchanged(text):
    fixed, kinds = repair_text(text)
    assert (fixed == text) == (not kinds)


def test_arguments_are_repaired_inside_their_values_or_whole_when_only_decoded_they_are_json():
    inside, kinds = repair_arguments('{"guestName": "O&#39;Brien", "rooms": [{"note": "king &amp; sofa"}]}')
    assert json.loads(inside) == {"guestName": "O'Brien", "rooms": [{"note": "king & sofa"}]} and kinds
    whole, kinds = repair_arguments("{&quot;bookingRef&quot;: &quot;BK-77&quot;}")
    assert json.loads(whole) == {"bookingRef": "BK-77"} and kinds == (HTML_ENTITIES,)
    assert repair_arguments('{"id": "A-1"}') == ('{"id": "A-1"}', ())
    assert repair_arguments("not json &amp; never") == ("not json &amp; never", ())  # the world refuses it as sent


def test_a_message_without_markup_is_the_same_object():
    message = {"role": "assistant", "content": "Order 48213 is on its way.", "tool_calls": None}
    assert repair_message(message) == (message, ())


def test_replies_through_real_http_are_decoded_and_the_completion_says_so():
    reply = {"content": "I&#39;m on it &mdash; one moment.<|eot_id|>",
             "tool_calls": [{"name": "findBooking", "arguments": '{"guestName": "O&#39;Brien"}'}]}
    with ScriptedServer(replies(reply)) as server:
        gateway = Gateway(backoff_s=0, models={"local": ModelConfig(name="local", model="openai/scripted-agent",
                                                                    api_base=server.base_url)})
        got = asyncio.run(gateway.complete("local", [{"role": "user", "content": "hi"}], sampling=Sampling()))
    assert got.message["content"] == "I'm on it \u2014 one moment."
    assert json.loads(got.message["tool_calls"][0]["function"]["arguments"]) == {"guestName": "O'Brien"}
    assert got.repaired == (HTML_ENTITIES, TEMPLATE_TOKENS)
