"""What a situation does to the seeded world before the conversation: upserts, deletes, masks and one fault."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim_pipeline import defaults

FAULT_STATUS = {
    "timeout": "timeout", "malformed_result": "malformed", "stale_result": "stale",
    "permission_denied": "permission_denied", "rate_limited": "rate_limited", "partial_write": "partial_write",
}  # tool_condition axis value -> the status the world answers with
PENDING_FIELD = "pending_action"  # marks a record whose write was half done (names the tool that will finish it)


@dataclass(frozen=True)
class Fault:
    """A fault scheduled on one tool: the mode, how many calls it hits (None: every call) and its rate.

    While hits remain, each call of `tool` faults with probability `rate` (a draw seeded by the world seed, the
    tool and the call's position among that tool's calls); other tools are never faulted.
    """

    tool: str
    mode: str
    hits: int | None = None
    rate: float = defaults.WORLD_FAULT_RATE


@dataclass(frozen=True)
class WorldSetup:
    """What a situation changes in the seeded world before the conversation starts.

    upserts: (entity, record) pairs written over the seeded tables; deletes: (entity, id) records removed (a later
    delete of one answers `already_done`); masked: (entity, id, fields) the world cannot tell (they read as
    `unknown` and block writes that depend on them); fault: the one scheduled fault, if any.
    """

    upserts: tuple[tuple[str, dict[str, Any]], ...] = ()
    deletes: tuple[tuple[str, str], ...] = ()
    masked: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    fault: Fault | None = None
