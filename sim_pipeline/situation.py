"""A situation: one covering-array cell made concrete (entity, hidden facts, goal, world setup, phrasings)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from sim_pipeline.errors import SimPipelineError
from sim_pipeline.protocol.expected import Expected
from sim_pipeline.seeding import canonical_json
from sim_pipeline.world.sandbox import Fault, WorldSetup

AXES = ("tool", "rule", "stance", "world_state", "tool_condition", "history")


def _optional(value: Any) -> str | None:
    """A nullable string column's value: None for None, NaN or '' (Parquet round trips turn None into NaN)."""
    return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class Situation:
    """Everything the user simulator, the world and the oracle need to play and label one situation."""

    situation_id: str
    seed: int
    domain: str
    cell: dict[str, str]
    split: str  # heldout | train
    goal: str  # what the user wants, in words (the user and the judge see it; the agent does not)
    intent_tool: str | None  # the tool that achieves the goal; None when no tool fits
    entity: str | None
    entity_id: str | None  # the id the user refers to; may not exist in the world
    facts: dict[str, Any]  # what the user knows: argument name -> value (text, or a list/object for nested arguments)
    opening_facts: tuple[str, ...]  # facts the opening message gives away
    expect_write: bool  # whether a correct agent ends with the intended write applied
    effect: dict[str, Any]  # the fields the intended write sets
    setup: WorldSetup
    phrasings: tuple[str, ...]
    source: str = "structured"  # the arm or writer that made it
    notes: dict[str, Any] = field(default_factory=dict)  # stance details the user simulator plays
    expected: Expected | None = None  # what a correct rollout does: written once by the situation builder

    @property
    def want(self) -> Expected:
        """The situation's expected outcome (every grader reads this one, never a recomputation)."""
        if self.expected is None:
            raise SimPipelineError(f"situation {self.situation_id} has no expected outcome: situations are made by "
                                   "search/situations.build_situation, which writes it. Fix: rebuild the situation "
                                   "with build_situation (or re-materialize the situations asset)")
        if self.expected.tool != self.intent_tool or self.expected.write and not self.expect_write:
            # A writer that changed the request (a probe, a mutation) must write the outcome its change implies.
            raise SimPipelineError(f"situation {self.situation_id}: its expected outcome ({self.expected.tool}, "
                                   f"write={self.expected.write}) is not about its request ({self.intent_tool}, "
                                   f"expect_write={self.expect_write}). Fix: the code that made it from another "
                                   "situation must replace `expected` too")
        return self.expected

    def to_row(self) -> dict[str, Any]:
        """A flat row for the situations table (nested parts as canonical JSON: their shape varies by domain)."""
        return {
            "situation_id": self.situation_id, "seed": self.seed, "domain": self.domain, "split": self.split,
            **{a: self.cell[a] for a in AXES},
            "goal": self.goal, "intent_tool": self.intent_tool, "entity": self.entity, "entity_id": self.entity_id,
            "facts": canonical_json(self.facts), "opening_facts": list(self.opening_facts),
            "expect_write": self.expect_write, "effect": canonical_json(self.effect),
            "setup": canonical_json(asdict(self.setup)), "phrasings": list(self.phrasings),
            "source": self.source, "notes": canonical_json(self.notes),
            "expected": self.expected.to_json() if self.expected is not None else None,
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Situation:
        """Rebuild a situation from a row of the situations table."""
        setup = json.loads(row["setup"])
        fault = Fault(**setup["fault"]) if setup.get("fault") else None
        return cls(
            situation_id=row["situation_id"], seed=int(row["seed"]), domain=row["domain"],
            cell={a: row[a] for a in AXES}, split=row["split"], goal=row["goal"],
            intent_tool=_optional(row["intent_tool"]), entity=_optional(row["entity"]),
            entity_id=_optional(row["entity_id"]),
            facts=json.loads(row["facts"]), opening_facts=tuple(row["opening_facts"]),
            expect_write=bool(row["expect_write"]), effect=json.loads(row["effect"]),
            setup=WorldSetup(
                upserts=tuple((e, r) for e, r in setup["upserts"]),
                deletes=tuple((e, i) for e, i in setup["deletes"]),
                masked=tuple((e, i, tuple(f)) for e, i, f in setup["masked"]),
                fault=fault,
            ),
            phrasings=tuple(row["phrasings"]), source=row["source"], notes=json.loads(row["notes"]),
            expected=Expected.from_json(row["expected"]) if _optional(row.get("expected")) else None,
        )
