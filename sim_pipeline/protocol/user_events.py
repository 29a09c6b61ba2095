"""The user protocol: every simulated-user turn is a decision, recorded as a structured event in the rollout.

Whichever model plays the user (the embedded `sim/user` or any litellm model) answers through one tool call,
`user_action(message, decision)`, so the oracle and the conduct rules read decisions, never the user's wording.
"""

from __future__ import annotations

from typing import Any

CONFIRM = "confirm"  # yes to the agent's request to approve an action
REFUSE = "refuse"  # no to the agent's request to approve an action
PROVIDE_FACT = "provide_fact"  # gives details the agent asked for (or corrects one)
ASK = "ask"  # asks, restates the request, or pushes back
LEAVE = "leave"  # ends the conversation without the goal: a refusal accepted, or patience spent
SATISFIED = "satisfied"  # ends the conversation content: the user believes the goal was met
DECISIONS: tuple[str, ...] = (CONFIRM, REFUSE, PROVIDE_FACT, ASK, LEAVE, SATISFIED)
ENDING: tuple[str, ...] = (LEAVE, SATISFIED)  # decisions that end the conversation

USER_ACTION = "user_action"  # the one tool the user answers through
USER_ACTION_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": USER_ACTION,
        "description": "Your next turn as the customer: what you say to the agent, and the decision it carries.",
        "parameters": {
            "type": "object",
            "properties": {
                "message": {"type": "string", "description": "What you say to the agent, in your own words."},
                "decision": {"type": "string", "enum": list(DECISIONS), "description": (
                    "confirm: you approve the action the agent asked to take; refuse: you do not approve it; "
                    "provide_fact: you give details the agent asked for; ask: you ask, restate or push back; "
                    "leave: you end the conversation without your goal (the agent cannot or will not help, or "
                    "you ran out of patience); satisfied: you end the conversation because your goal is met.")},
            },
            "required": ["message", "decision"],
            "additionalProperties": False,
        },
    },
}
USER_ACTION_CHOICE: dict[str, Any] = {"type": "function", "function": {"name": USER_ACTION}}

# Why a conversation ended (the rollout's finish_reason); what each means, in words: protocol/endings.py.
FINISH_GOAL_REACHED = "goal_reached"
FINISH_TRANSFERRED = "transferred"
FINISH_USER_SATISFIED = "user_satisfied"
FINISH_USER_LEFT = "user_left"
FINISH_TURN_CAP = "turn_cap"
FINISH_EMPTY_REPLY = "empty_reply"
FINISH_ERROR = "error"
FINISH_AGENT_EXITED = "agent_exited"  # an MCP agent harness exited before the conversation ended (rollout/mcp_agent.py)
FINISH_REASONS: tuple[str, ...] = (FINISH_GOAL_REACHED, FINISH_TRANSFERRED, FINISH_USER_SATISFIED, FINISH_USER_LEFT,
                                   FINISH_TURN_CAP, FINISH_EMPTY_REPLY, FINISH_AGENT_EXITED, FINISH_ERROR)


def user_event(turn: int, decision: str) -> dict[str, Any]:
    """One user decision, at the message index of the user's message in the agent's transcript."""
    return {"turn": int(turn), "decision": decision}
