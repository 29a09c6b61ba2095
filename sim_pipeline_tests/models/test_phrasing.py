"""Phrasings keep what the user states: a register rewrites the request's words, never the values of stated facts."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_pipeline.models.phrasing import FACT_SENTENCE, MIXED, code_mixed, swap_words
from sim_pipeline.search.probes import SPANISH, _spanish

OPENING = ("You are obliged to create my ticket immediately. For reference, my contact email is chen@proton.me. "
           "My category is email. My summary is my laptop battery drains within an hour. Summary: please fix my "
           "order item. Would it be possible to create my ticket, please?")
VALUES = ("chen@proton.me", "email", "my laptop battery drains within an hour", "please fix my order item")


@pytest.mark.parametrize("language", sorted(MIXED))
def test_code_mixing_keeps_every_stated_value_verbatim(language):
    # It rewrote "my laptop" to "mi laptop" inside the summary: the agent copied the user's words and the state
    # oracle failed it against the fact "my laptop ..." (it_helpdesk, helpdesk-v2 seed 1).
    mixed = code_mixed(OPENING, language)
    assert all(value in mixed for value in VALUES)
    assert f"create {MIXED[language][1]['my']} ticket" in mixed  # the request's own words are still mixed


def test_the_wrong_language_probe_keeps_every_stated_value_verbatim():
    spanish = _spanish(f" {OPENING} ")
    assert all(value in spanish for value in VALUES) and "create mi ticket" in spanish


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["my", "order", "item", "please", "I want to", "laptop", "box", "red"]), min_size=1,
                max_size=6))
def test_a_value_made_of_swappable_words_survives(words):
    value = " ".join(words)
    text = f"I want to change my order. My note is {value}. Thanks, my friend."
    out = swap_words(text, SPANISH)
    assert f"My note is {value}." in out and FACT_SENTENCE.search(out)
