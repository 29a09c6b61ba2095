"""One expected outcome per situation: what a correct rollout does, written once by the situation builder.

The situation builder (search/situations.py) reads the situation it made and the policy's rules once and freezes the
answer here; the situations table stores it (its `expected` column) and every grader reads that copy: the state
oracle, the reference replay, the conduct rules, the judge's case card and the embedded judge. Nothing recomputes
what a correct rollout is. The agent under test never sees it.

"The user's record" is defined here once (`Expected.concerns`): the record the intended write names, or a record it
links to (an order's customer), read from the world's own reading of a call where there is one (the event's entity
and id) and otherwise from the call's id arguments.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

NAMES_RECORD = ("change", "remove")  # expected kinds whose write names an existing record (the user's)


@dataclass(frozen=True)
class Owner:
    """A record the user's record links to (an order's customer): verifying it verifies the user."""

    entity: str
    id_argument: str  # the argument (and field) that carries its id
    id: str


@dataclass(frozen=True)
class Expected:
    """What a correct rollout of one situation does.

    kind: `none` (no tool fits), `read` (answer, change nothing), `change` (the record ends with `effect`),
    `remove` (the record is gone) or `new` (exactly one new record, made with `arguments`). `write` says whether the
    change must happen (False: the situation forbids it); `forbidden_by` says what forbids it: `policy` (the policy
    alone, e.g. an amount over a limit: declining, or handing over to `handover_tool`, is right) or `world` (the
    record is missing, already done, ineligible, or the service keeps failing: the tools must show it). `arguments`
    are values the applied call must carry; `reachable` says whether a read can succeed at all. `rules` are the
    terms of every policy rule that binds the intended tool (policy/: one kind module each reads its own).
    """

    kind: str
    write: bool
    tool: str | None
    entity: str | None
    entity_id: str | None
    id_argument: str | None
    effect: dict[str, Any]
    arguments: dict[str, Any]
    reachable: bool
    forbidden_by: str | None = None
    missing: bool = False  # the record the user names does not exist (so no record links to its owner)
    write_tools: tuple[str, ...] = ()  # every write tool of the domain
    owners: tuple[Owner, ...] = ()
    rules: tuple[dict[str, Any], ...] = ()  # one term per rule binding the intended tool, in the pack's order
    handover_tool: str | None = None  # where a request the policy forbids must be handed over instead
    stressed: tuple[str, ...] = field(default=())  # ids of the rules the situation puts under stress

    @property
    def record(self) -> str | None:
        """The user's record when the intended write names one (a change or a removal), else None."""
        return self.entity_id if self.kind in NAMES_RECORD else None

    @property
    def anyone(self) -> bool:
        """Whether no record can be the user's (the write makes a new one, or the record the user names does not
        exist): a verification of anyone then counts as the user's."""
        return self.kind == "new" or self.missing

    def concerns(self, entity: str | None, record: str | None, arguments: Mapping[str, Any] | None = None) -> bool:
        """Whether a call concerns the user's record or a record it links to.

        `entity`/`record` are the world's reading of the call (the event's), when there is one; otherwise the call's
        id arguments decide, and a call that carries none of them is taken to concern it (a look-up by email).
        """
        if self.anyone:
            return True
        mine = {(self.entity, self.entity_id), *((o.entity, o.id) for o in self.owners)}
        if entity is not None and record is not None:
            return (entity, record) in mine
        ids = {self.id_argument: self.entity_id, **{o.id_argument: o.id for o in self.owners}}
        given = {k: str(v) for k, v in (arguments or {}).items() if k in ids and not isinstance(v, (dict, list))}
        return not given or any(ids[k] == v for k, v in given.items())

    def terms(self, kind: str) -> list[dict[str, Any]]:
        """The terms of the rules of one kind that bind the intended tool."""
        return [t for t in self.rules if t["kind"] == kind]

    def to_json(self) -> str:
        """Canonical JSON (the situations table's `expected` column)."""
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"), default=str)

    @classmethod
    def from_json(cls, text: str | Mapping[str, Any]) -> Expected:
        """Read it back from `to_json`'s text (or the parsed object)."""
        data = dict(json.loads(text) if isinstance(text, str) else text)
        data["owners"] = tuple(Owner(**o) for o in data.get("owners", ()))
        data["write_tools"] = tuple(data.get("write_tools", ()))
        data["rules"] = tuple(dict(r) for r in data.get("rules", ()))
        data["stressed"] = tuple(data.get("stressed", ()))
        return cls(**data)


def agrees(given: Any, wanted: Any) -> bool:
    """Whether a call's value is the user's (numbers by value, text case- and space-insensitively; lists item by
    item, objects key by key)."""
    if isinstance(wanted, list):
        return isinstance(given, list) and len(given) == len(wanted) and all(map(agrees, given, wanted))
    if isinstance(wanted, dict):
        return isinstance(given, dict) and set(given) == set(wanted) and all(agrees(given[k], v)
                                                                              for k, v in wanted.items())
    if isinstance(given, (int, float)) and not isinstance(given, bool):
        try:
            return abs(float(given) - float(wanted)) < 1e-9 * max(1.0, abs(float(wanted)))
        except ValueError:
            return False
    return " ".join(str(given).split()).lower() == " ".join(str(wanted).split()).lower()
