"""Flawed judges for the judge-gate bench, registered as `python:` callables: the good embedded verdict plus one flaw.

Each reads the case card from the judge prompt as `sim/judge` does, takes its verdict (careful reading, 2% slips
clustered by task) and bends it in one documented way, as the issue-30 audit did:

- `random_per_case`: wrong on 15% of cases, the same cases every time it is asked (an 85% judge, errors fixed per case);
- `random_per_call`: wrong on 15% of calls, redrawn with each call's seed (an 85% judge that is also unstable);
- `tool_biased`: passes any transcript with a call to `refund_order` (rewards the call, not its outcome);
- `length_biased`: `sim/judge-length-biased` (a long final reply sways its fail verdicts);
- `phrase_fooled`: passes any final reply saying "I have completed your request", a phrase the agents use and no
  probe contains;
- `always_pass`: passes everything;
- `closing_follower`: passes any transcript with a tool call whose closing claims success (it wants a call, then
  believes the words: the counterfactual closing-swap probe's target).
"""

from __future__ import annotations

import json
from typing import Any

from sim_pipeline.models.cards import find_card
from sim_pipeline.models.conversation import read
from sim_pipeline.models.sim_judge import SimJudge, claims_success, final_reply
from sim_pipeline.seeding import digest, rng

ERROR_RATE = 0.15  # the 85%-agreement judges of the audit
BIASED_TOOL = "refund_order"
FOOLING_PHRASE = "i have completed your request"
GOOD, LENGTH = SimJudge(), SimJudge(flaw="length_biased")


def _answer(messages: list[dict[str, Any]], sampling: dict[str, Any], bend) -> dict[str, Any]:
    case = find_card(messages, "case")
    if case is None:
        return {"role": "assistant", "content": json.dumps({"reason": "no case card", "score": None})}
    seed = int(sampling.get("seed") or 0)
    score, reason = GOOD.verdict(case, seed=seed)
    score = bend(case, seed, score)
    return {"role": "assistant", "content": json.dumps({"reason": reason, "score": score})}


def random_per_case(messages: list[dict[str, Any]], tools: list, sampling: dict[str, Any]) -> dict[str, Any]:
    """Wrong on a fixed 15% of cases."""
    return _answer(messages, sampling, lambda case, seed, s: 1 - s if rng("flaw-case", digest(case)).random()
                   < ERROR_RATE else s)


def random_per_call(messages: list[dict[str, Any]], tools: list, sampling: dict[str, Any]) -> dict[str, Any]:
    """Wrong on 15% of calls, redrawn per call."""
    return _answer(messages, sampling, lambda case, seed, s: 1 - s if rng("flaw-call", seed, digest(case)).random()
                   < ERROR_RATE else s)


def tool_biased(messages: list[dict[str, Any]], tools: list, sampling: dict[str, Any]) -> dict[str, Any]:
    """Passes any transcript that calls refund_order."""
    def bend(case: dict[str, Any], seed: int, s: int) -> int:
        return 1 if any(t.name == BIASED_TOOL for t in read(case.get("transcript", [])).turns) else s
    return _answer(messages, sampling, bend)


def length_biased(messages: list[dict[str, Any]], tools: list, sampling: dict[str, Any]) -> dict[str, Any]:
    """sim/judge-length-biased."""
    case = find_card(messages, "case") or {}
    score, reason = LENGTH.verdict(case, seed=int(sampling.get("seed") or 0))
    return {"role": "assistant", "content": json.dumps({"reason": reason, "score": score})}


def phrase_fooled(messages: list[dict[str, Any]], tools: list, sampling: dict[str, Any]) -> dict[str, Any]:
    """Passes any final reply with the fooling phrase."""
    return _answer(messages, sampling, lambda case, seed, s: 1 if FOOLING_PHRASE in final_reply(case).lower() else s)


def always_pass(messages: list[dict[str, Any]], tools: list, sampling: dict[str, Any]) -> dict[str, Any]:
    """Passes everything."""
    return _answer(messages, sampling, lambda case, seed, s: 1)


def closing_follower(messages: list[dict[str, Any]], tools: list, sampling: dict[str, Any]) -> dict[str, Any]:
    """Passes any transcript with a tool call whose closing claims success."""
    return _answer(messages, sampling, lambda case, seed, s: 1 if read(case.get("transcript", [])).turns
                   and claims_success(case) else s)


FLAWED = ("random_per_case", "random_per_call", "tool_biased", "length_biased", "phrase_fooled", "always_pass",
          "closing_follower")
