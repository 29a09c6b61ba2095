"""The embedded situation writer (`sim/writer`): writes a user's opening message for a situation card.

It draws a greeting, a stance template, the order of the facts, how each fact is said, and whether the message is
indirect (a hedged restatement of the request), urgent, mixed with another language, and a story (the facts first,
a long recap of earlier contacts before the request) (REGISTERS), each uniformly and seeded per card, and returns the
exact log-probability of the draw (the sum of the log of each choice's 1/n). Customers' own words vary this way, and
an online writer (any litellm model) given the same prompt and card writes as freely.
"""

from __future__ import annotations

import math
from typing import Any

from sim_pipeline.models.cards import find_card
from sim_pipeline.models.conversation import tokens, transcript_digest
from sim_pipeline import defaults
from sim_pipeline.models.phrasing import (
    HEDGED,
    HISTORY_LINES,
    MIXED,
    OPENINGS,
    RECAP,
    URGENT,
    code_mixed,
    hedged,
    recap_permutations,
    said_value,
    story_first,
    words,
)
from sim_pipeline.seeding import rng

GREETINGS = ("", "Hi there. ", "Hello, ", "Good morning! ", "Hey, ")
FACT_STYLES = ("My {name} is {value}.", "{Name}: {value}.", "For reference, my {name} is {value}.")
REGISTERS = ("indirect", "urgent", "mixed", "story")  # each drawn on or off: 16 combinations, plain among them


class SimWriter:
    """Writes varied openings: different words for the same situation, so the agent is tested on phrasing."""

    def respond(self, messages: list[dict[str, Any]], *, temperature: float, seed: int) -> tuple[str, float]:
        """(opening message, its log-probability)."""
        card = find_card(messages, "writer") or {}
        gen = rng(seed, "writer", transcript_digest(messages))
        logp = 0.0

        def choose(n: int) -> int:
            nonlocal logp
            logp -= math.log(n)
            return 0 if temperature <= 0 else int(gen.integers(n))

        stance = card.get("stance", "ordinary")
        templates = OPENINGS.get(stance, OPENINGS["ordinary"])
        greeting = GREETINGS[choose(len(GREETINGS))]
        template = templates[choose(len(templates))]
        facts = list((card.get("facts") or {}).items())
        order = list(range(len(facts)))
        if len(facts) > 1:
            logp -= math.log(math.factorial(len(facts)))
            order = list(range(len(facts))) if temperature <= 0 else list(gen.permutation(len(facts)))
        said = []
        for index in order:
            name, value = facts[int(index)]
            style = FACT_STYLES[choose(len(FACT_STYLES))]
            said.append(style.format(name=words(name), Name=words(name).capitalize(), value=said_value(value)))
        request = card.get("request") or "get some help"
        register = {name for name in REGISTERS if choose(2)}
        facts_said = " ".join(said)
        body = " ".join(template.format(request=request, noun=card.get("noun", "account"),
                                        facts="" if "story" in register else facts_said).split())
        if "indirect" in register:
            body = f"{body} {hedged(request, choose(len(HEDGED)))}"
        if "urgent" in register:
            body = f"{body} {URGENT[choose(len(URGENT))]}"
        first = body[0] if greeting.endswith(", ") else body[0].upper()  # "Hello, could..." / "Hi there. Could..."
        text = HISTORY_LINES.get(card.get("history", "fresh"), "") + greeting + first + body[1:]
        if "mixed" in register:
            text = code_mixed(text, sorted(MIXED)[choose(len(MIXED))])
        if "story" in register:
            draws = recap_permutations(defaults.LONG_HISTORY_CHARS)
            logp -= draws * math.lgamma(len(RECAP) + 1)  # each draw is one of len(RECAP)! orders
            text = story_first(facts_said, text, gen if temperature > 0 else None, defaults.LONG_HISTORY_CHARS)
        return " ".join(text.split()), logp


def writer_tokens(text: str) -> int:
    """Token count of a written opening."""
    return len(tokens(text))
