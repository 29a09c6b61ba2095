"""How a conversation ended, in words: each finish reason (a rollout's `finish_reason`), the status it comes with,
and what it means. The one place these words live: the view's legend and docs/concepts.md
(`python -m sim_pipeline.protocol.endings` prints the table the docs hold; a test keeps them equal) read it."""

from __future__ import annotations

from dataclasses import dataclass

from sim_pipeline.protocol.statuses import (
    AGENT_ERROR,
    ERROR_STATUSES,
    OK,
    TURN_CAP,
    USER_LEFT,
)
from sim_pipeline.protocol.user_events import (
    FINISH_AGENT_EXITED,
    FINISH_EMPTY_REPLY,
    FINISH_ERROR,
    FINISH_GOAL_REACHED,
    FINISH_TRANSFERRED,
    FINISH_TURN_CAP,
    FINISH_USER_LEFT,
    FINISH_USER_SATISFIED,
)


@dataclass(frozen=True)
class Ending:
    """One way a conversation ends: its finish reason, the rollout statuses it comes with, and its meaning."""

    finish_reason: str
    statuses: tuple[str, ...]
    meaning: str


ENDINGS: tuple[Ending, ...] = (
    Ending(FINISH_GOAL_REACHED, (OK,), "the agent replied after the world came to show the user's goal met (read "
           "from the sandbox's state, not from the agent's words)"),
    Ending(FINISH_TRANSFERRED, (OK,), "the agent handed the conversation to a person: a hand-off tool answered ok, "
           "then the agent replied"),
    Ending(FINISH_USER_SATISFIED, (OK,), "the simulated user ended the conversation content (its `satisfied` "
           "decision): the agent said the request was done or answered the question; whether the world agrees is "
           "the oracle's to say"),
    Ending(FINISH_USER_LEFT, (USER_LEFT,), "the simulated user ended the conversation without its goal (its `leave` "
           "decision): it accepted the agent's refusal (the right ending when the policy forbids the request, as "
           "many situations are built to test), or its patience ran out (too many agent turns for its stance, or "
           "the agent repeating itself). Not an error: graded like any ending"),
    Ending(FINISH_TURN_CAP, (TURN_CAP,), "the runner stopped the conversation at the limit of agent turns (marker "
           "`marker_truncated`)"),
    Ending(FINISH_EMPTY_REPLY, (AGENT_ERROR,), "the agent answered with neither text nor a tool call: its own "
           "doing, graded as a failure"),
    Ending(FINISH_AGENT_EXITED, (AGENT_ERROR,), "an MCP agent harness (`mcp-agent:`) exited on its own before the "
           "conversation ended: stopping mid-conversation is its conduct, graded as a failure"),
    Ending(FINISH_ERROR, ERROR_STATUSES, "a model call failed outside the agent's conduct (the provider, an "
           "invalid completion, or a user model off its protocol; the status says which): the row keeps its error "
           "text and is never graded"),
)
MEANINGS: dict[str, str] = {e.finish_reason: e.meaning for e in ENDINGS}  # finish reason -> its meaning


def meaning(finish_reason: str | None) -> str:
    """What a finish reason means (an unknown one says so, rather than failing the page that shows it)."""
    return MEANINGS.get(str(finish_reason), f"not a finish reason of this version's protocol: {finish_reason!r}")


def markdown_table() -> str:
    """The endings as docs/concepts.md shows them (a test keeps the two equal)."""
    lines = ["| `finish_reason` | `status` | what it means |", "|---|---|---|"]
    lines += [f"| `{e.finish_reason}` | {', '.join(f'`{s}`' for s in e.statuses)} | {e.meaning} |" for e in ENDINGS]
    return "\n".join(lines)


if __name__ == "__main__":  # python -m sim_pipeline.protocol.endings: the table docs/concepts.md shows
    print(markdown_table())
