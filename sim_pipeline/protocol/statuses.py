"""Statuses: how a rollout ended (and which endings are not the agent's doing), and what a tool call returned."""

from __future__ import annotations

from collections.abc import Mapping

# --- How a rollout ended -------------------------------------------------------------------------------------------
OK = "ok"  # the conversation ended on a protocol reason: goal reached in the world, or the user was satisfied
USER_LEFT = "user_left"  # the user walked away: a refusal accepted, or patience spent
TURN_CAP = "turn_cap"  # the runner stopped the conversation after MAX_TURNS agent turns
AGENT_ERROR = "agent_error"  # the agent's own doing (an empty reply, a harness that quit mid-way): conduct, graded
PROVIDER_ERROR = "provider_error"  # the policy call failed: HTTP/connection error, timeout, an exception in a callable
INVALID_RESPONSE = "invalid_response"  # the provider answered, but not with a valid completion
USER_ERROR = "user_error"  # the simulated user's call failed or answered outside the user protocol
ROLLOUT_STATUSES: tuple[str, ...] = (OK, USER_LEFT, TURN_CAP, AGENT_ERROR, PROVIDER_ERROR, INVALID_RESPONSE, USER_ERROR)
# Failures outside the agent's conduct: such a rollout is kept with its error text but never graded.
ERROR_STATUSES: tuple[str, ...] = (PROVIDER_ERROR, INVALID_RESPONSE, USER_ERROR)


def is_error(status: str | None) -> bool:
    """Whether a rollout status is a failure outside the agent's conduct (the row is never graded)."""
    return status in ERROR_STATUSES


# What to fix for each kind of ungraded rollout: a user model that ignores the user protocol is no endpoint fault.
REMEDIES: dict[str, str] = {
    PROVIDER_ERROR: "fix the agent's model endpoint (or its callable)",
    INVALID_RESPONSE: "fix what the agent's endpoint returns (see the error: not a valid completion)",
    USER_ERROR: ("fix the simulated user's model: its calls failed or its replies did not follow the user_action "
                 "protocol (see the error; a user_model that cannot follow it needs a stronger model)"),
}


def remedy(errored: Mapping[str, int]) -> str:
    """What to fix, from errored rollouts counted by status, most frequent first (one clause per status seen)."""
    seen = sorted(errored, key=lambda status: (-errored[status], status))
    return "; ".join(REMEDIES.get(status, f"see the {status} rollouts' error") for status in seen)


# --- What a tool call returned (the `status` of every sandbox result) ----------------------------------------------
APPLIED_STATUSES: tuple[str, ...] = ("created", "updated", "deleted")  # a write that changed the world
SUCCESS_STATUSES: tuple[str, ...] = ("ok", *APPLIED_STATUSES)
ANSWER_STATUSES: tuple[str, ...] = ("not_found", "rejected", "already_done")  # the world answered: the request was wrong
FAULT_STATUSES: tuple[str, ...] = (
    "timeout", "malformed", "stale", "permission_denied", "rate_limited", "partial_write",
)  # the service failed (a scheduled fault)
TOOL_STATUSES: tuple[str, ...] = (*SUCCESS_STATUSES, *ANSWER_STATUSES, *FAULT_STATUSES)
UNKNOWN_VALUE = "unknown"  # what a masked field of a record reads as when the world cannot tell (not a state)
# Results that show why a change cannot be made: the record is missing or already done, or the service failed.
DISCOVERY_STATUSES: tuple[str, ...] = ("not_found", "already_done", *FAULT_STATUSES)
# The `error` of a rejected result that says something about the record (the rest are the caller's own arguments).
INFORMATIVE_REJECTIONS: tuple[str, ...] = ("invalid_state", "ambiguous", "state_unknown")
