"""Kinds of failure: what the search's arms are credited for finding (issue 35).

A rollout's failure kind is the situation's intended tool with what failed it: the first conduct rule it breaks
(grade/conduct.py, the rules the grades step applies), else the name of the oracle's check that failed it
(`Verdict.check`: `never_applied`, `other_value_attempt`...). A kind is a name, holding no id, value or words of the
agent's, so two rollouts that fail the same way on the same tool share a kind whatever the agent wrote. A behaviour
signature is one way a kind was met: the trajectory's shape (rollout/signature.py).

An arm earns one for each kind it opens, on top of the behaviour novelty the reference engine credits (new
signatures and new grid cells, REFERENCE 3): opening a kind earns more than failing a known way in new words. A credit
on kinds alone (1 / (1 + the signatures a kind already had) per new signature) was measured on bench_search and
found fewer distinct failures at no gain in speed (docs/training.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sim_pipeline.domain import Domain
from sim_pipeline.grade import conduct
from sim_pipeline.protocol.statuses import is_error
from sim_pipeline.situation import Situation

ORACLE_FAILED = "oracle"  # the check name of a row from a runner that records no `oracle_check`


def _records(value: Any) -> list[dict[str, Any]]:
    return [dict(v) for v in value] if value is not None else []


def failure_kind(row: Mapping[str, Any], domain: Domain, situation: Situation) -> str | None:
    """The kind of failure a rollout shows, as 'tool: conduct rule or oracle check'; None when it passed (or errored:
    a failed endpoint shows nothing of the agent)."""
    if is_error(row["status"]):
        return None
    violation = conduct.check(_records(row["messages"]), _records(row["tool_events"]), row["final_text"], domain,
                              _records(row.get("user_events")), situation.want)
    if violation is not None and violation.reward < 1:
        what = violation.rule
    elif row["oracle_reward"] is not None and row["oracle_reward"] < 1:
        what = row.get("oracle_check") or ORACLE_FAILED
    else:
        return None
    return f"{situation.intent_tool or 'no tool'}: {what}"


@dataclass
class KindLedger:
    """The failure kinds the search has met."""

    met: set[str] = field(default_factory=set)

    def meet(self, kind: str | None) -> bool:
        """Record a rollout's kind; whether it opened one (a pass opens none)."""
        if kind is None or kind in self.met:
            return False
        self.met.add(kind)
        return True
