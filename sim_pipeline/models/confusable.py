"""Tools the embedded agent cannot tell apart: which pairs of a pack's tools its intent picker confuses.

The embedded agents (`sim/agent-v1`, `sim/agent-v2`) decide which tool a request is for by word overlap with each
tool's name and description before any policy choice is made. When two tools share the words a user says, the agent
picks the wrong one, or asks what the user means, whichever version runs: both versions then fail the same
situations for the same reason, so their pass rates and their delta measure the picker, not the policy. This module
asks the agent itself (its own `_Turn.intents` and `_Turn.resolve`) about the request the simulated user makes for
each tool, so a pack author learns of a confusable pair before a run rather than from its numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sim_pipeline.models.phrasing import opening, request_phrase
from sim_pipeline.models.sim_agent import _Turn, log_probs
from sim_pipeline.models.sim_user import restatements

VAGUE_OPENING = "Hi, I need some help with something."  # a first message that names no tool
WHAT_DO_YOU_NEED = "Sure, what would you like me to do?"  # the agent's question before the user restates

if TYPE_CHECKING:
    from sim_pipeline.domain import Domain, Tool


@dataclass(frozen=True)
class ConfusablePair:
    """A tool whose request the embedded agent takes for another tool, or cannot tell from it."""

    tool: str  # the tool the user asks for
    taken_for: str  # the other tool the agent picks instead, or hesitates with
    probability: float  # the agent's intent probability for the right tool
    sentence: str  # one line naming both tools and what to change


def _opening(tool: Tool) -> tuple[str, str]:
    """The request the simulated user makes for a tool, and the plain first message that carries it."""
    request, noun = request_phrase(tool.name, tool.description, tool.phrase)
    return request, opening("ordinary", "fresh", request, noun, {}, 0)


def _sentence(tool: str, rival: str, request: str, probability: float, rival_probability: float) -> str:
    return (f"tools {tool} and {rival} are hard for the embedded agent to tell apart (asked to '{request}', it gives "
            f"{tool} p={probability:.2f} and {rival} p={rival_probability:.2f}; fix: give each tool's name or "
            f"description distinctive words the other lacks, or declare a `phrase:` for {tool} under `tools:` in "
            "domain.yaml)")


def _turns(tool: Tool) -> list[tuple[str, list[dict[str, str]]]]:
    """The conversations in which the simulated user asks for a tool: its opening, and each way it restates the
    request in a later turn (after a vague first message and the agent's question)."""
    request, text = _opening(tool)
    later = [[{"role": "user", "content": VAGUE_OPENING}, {"role": "assistant", "content": WHAT_DO_YOU_NEED},
              {"role": "user", "content": said}] for said in restatements(request)]
    return [(request, [{"role": "user", "content": text}]), *((request, m) for m in later)]


def confusable_pairs(domain: Domain) -> list[ConfusablePair]:
    """Each tool whose user request (opening or a later restatement) the embedded agent takes for, or cannot tell
    from, another tool; at most one pair per tool, by tool name."""
    pairs = []
    for tool in sorted(domain.tools, key=lambda t: t.name):
        for request, messages in _turns(tool):
            pair = _confused(domain, tool, request, messages)
            if pair is not None:
                pairs.append(pair)
                break
    return pairs


def _confused(domain: Domain, tool: Tool, request: str, messages: list[dict[str, str]]) -> ConfusablePair | None:
    """The pair a conversation makes the agent confuse for `tool`, or None."""
    turn = _Turn({}, messages, domain.tool_schemas, salt="")
    intents = turn.intents()
    probs = np.exp(log_probs([logit for _, logit in intents], 1.0))
    # Most probable first; ties keep the agent's own order, as its greedy argmax does.
    ranked = [intents[i][0] for i in sorted(range(len(intents)), key=lambda i: -probs[i])]
    p = {name: float(q) for (name, _), q in zip(intents, probs)}
    rival = None
    if ranked[0] not in (tool.name, None):
        rival = ranked[0]  # the agent acts on another tool
    elif ranked[0] == tool.name and turn.resolve(tool.name, intents) == "?" and len(ranked) > 1 and \
            ranked[1] is not None:
        rival = ranked[1]  # the agent asks what the user means, torn with another tool
    if rival is not None:
        own = p.get(tool.name, 0.0)
        return ConfusablePair(tool.name, rival, own, _sentence(tool.name, rival, request, own, p[rival]))
    return None
