"""The embedded writer: varied openings whose facts stay readable, registers that reach the agent's weaknesses, and
an exact log-probability of each draw."""

import math

import pytest

from sim_pipeline import defaults
from sim_pipeline.domain import load_domain
from sim_pipeline.models.cards import render_card
from sim_pipeline.models.conversation import distances, indirectness, known_values, read
from sim_pipeline.models.sim_writer import GREETINGS, SimWriter
from sim_pipeline.models.phrasing import HEDGED, MIXED, RECAP, URGENT, recap_permutations

DOMAIN = load_domain("retail")
CARD = {"request": "cancel my order", "noun": "order", "stance": "ordinary", "history": "fresh",
        "facts": {"order_id": "48213", "email": "ana.silva12@posteo.net", "reason": "I changed my mind"}}
PROPERTIES = {k: v for t in DOMAIN.tool_schemas for k, v in t["function"]["parameters"]["properties"].items()}


def write(seed, temperature=1.0, card=CARD):
    prompt = [{"role": "user", "content": "Write the opening.\n\n" + render_card("writer", card)}]
    return SimWriter().respond(prompt, temperature=temperature, seed=seed)


def test_every_opening_keeps_its_facts_readable():
    for seed in range(60):
        text, _ = write(seed)
        known = known_values(read([{"role": "user", "content": text}]), PROPERTIES)
        assert known["order_id"] == "48213" and known["email"] == "ana.silva12@posteo.net", text


def test_registers_reach_the_agents_weaknesses():
    texts = [write(seed)[0] for seed in range(80)]
    assert any(len(t) > defaults.LONG_HISTORY_CHARS for t in texts)  # a story before the request
    assert sum(indirectness(t) >= 3 for t in texts) > 20  # hedged or mixed with another language
    assert any(u in t for t in texts for u in URGENT)
    story = next(t for t in texts if len(t) > defaults.LONG_HISTORY_CHARS)
    assert distances([{"role": "user", "content": story}], {"order_id": "48213"})["order_id"] >= \
        defaults.LONG_HISTORY_CHARS


def test_greedy_writing_is_the_plain_register():
    text, _ = write(0, temperature=0.0)
    assert len(text) < 300 and indirectness(text) == 0


@pytest.mark.parametrize("seed", range(12))
def test_the_log_probability_is_the_sum_of_each_choice(seed):
    text, logp = write(seed)
    n_facts = len(CARD["facts"])
    fixed = -math.log(len(GREETINGS)) - math.log(3) - math.log(math.factorial(n_facts)) - n_facts * math.log(3) \
        - 4 * math.log(2)  # greeting, template, fact order, fact styles, four registers on or off
    extra = {"indirect": -math.log(len(HEDGED)), "urgent": -math.log(len(URGENT)), "mixed": -math.log(len(MIXED)),
             "story": -recap_permutations(defaults.LONG_HISTORY_CHARS) * math.lgamma(len(RECAP) + 1)}
    on = {"indirect": any(h.split("{")[0] in text for h in HEDGED), "urgent": any(u in text for u in URGENT),
          "mixed": any(g in text for g, _, _ in MIXED.values()), "story": len(text) > defaults.LONG_HISTORY_CHARS}
    assert logp == pytest.approx(fixed + sum(extra[k] for k, v in on.items() if v))
