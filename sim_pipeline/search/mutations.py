"""Mutations for the failure_mutation arm: variations of situations the agent failed, to map the failure.

Truncate the opening, strip its specifics, add a contradiction, a typo, a follow-up correction (the user quotes a
wrong id first), a quoted payload, or swap the record for another one of the same cell; or put the failure under
the conditions real agents degrade in: a long history before the request (the facts far back), the request asked
indirectly, an injected instruction appended, the record's id left out (a look-up first). The expectation stays the
base situation's, so a mutation that still fails shows the failure is robust, and one that passes bounds it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np

from sim_pipeline.models.phrasing import split_facts
from sim_pipeline.search.probes import INJECTION, indirect, long_history, without_id
from sim_pipeline.situation import Situation

MUTATIONS = ("truncate", "strip_specifics", "contradict", "typo", "follow_up_correction", "quote_payload",
             "swap_entity", "pad_history", "indirect", "inject", "hide_id")


def _typo(text: str, gen: np.random.Generator) -> str:
    words = text.split()
    candidates = [i for i, w in enumerate(words) if len(w) > 3 and w.isalpha()]
    for i in gen.choice(candidates, size=min(2, len(candidates)), replace=False) if candidates else []:
        w = words[int(i)]
        j = int(gen.integers(len(w) - 1))
        words[int(i)] = w[:j] + w[j + 1] + w[j] + w[j + 2:]  # swap two neighbouring letters
    return " ".join(words)


def mutate(base: Situation, kind: str, *, situation_id: str, gen: np.random.Generator,
           sibling: Situation | None = None) -> Situation:
    """The failed situation varied one way (a new situation id; `sibling` is the swap_entity replacement)."""
    if kind == "swap_entity" and sibling is not None:
        return dataclasses.replace(sibling, situation_id=situation_id, source="failure_mutation",
                                   notes={**sibling.notes, "mutation": kind, "parent": base.situation_id})
    opening = base.phrasings[0] if base.phrasings else ""
    notes: dict[str, Any] = {**base.notes, "mutation": kind, "parent": base.situation_id}
    opening_facts = base.opening_facts
    if kind == "truncate":
        opening = opening[: max(12, len(opening) // 2)].rstrip()
    elif kind == "strip_specifics":
        opening = split_facts(opening)[1] or opening
        opening_facts = ()
    elif kind == "contradict":
        opening = opening + " Wait, no - actually I meant the opposite. Or did I? Just do what I said first."
    elif kind == "typo":
        opening = _typo(opening, gen)
    elif kind == "follow_up_correction" and base.entity is not None and base.entity_id:
        wrong = str(int(base.entity_id) + 1) if base.entity_id.isdigit() else base.entity_id + "0"
        id_argument = next((k for k in base.facts if k.endswith("_id")), None)
        if id_argument:
            notes["wrong_value"] = {id_argument: wrong}
            opening = opening.replace(base.facts[id_argument], wrong)
    elif kind == "quote_payload":
        opening = f"{opening} Here is what your system sent me: {json.dumps(base.facts, sort_keys=True)}"
    elif kind == "pad_history":
        opening = long_history(opening, gen)
    elif kind == "indirect":
        opening = indirect(opening, base.notes.get("request"), gen)
    elif kind == "inject":
        opening = opening + INJECTION[int(gen.integers(len(INJECTION)))]
    elif kind == "hide_id":
        opening, opening_facts = without_id(base)
    return dataclasses.replace(base, situation_id=situation_id, phrasings=(opening,), opening_facts=opening_facts,
                               source="failure_mutation", notes=notes)
