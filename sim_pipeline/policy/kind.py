"""The protocol every policy rule kind implements, and what each hook is given.

A rule kind is one module of this package holding one `RuleKind` object named `KIND`. Its hooks are everything the
pipeline knows about the kind, so no other module branches on a rule's kind:

- `needs` and `validate`: what domain.yaml must give (the loader's clear errors);
- `stress`: how a situation puts the rule under stress (the right move changes) or keeps it satisfied, and
  `constraints`: the axis combinations in which it never can be (the covering array does not plan them);
- `term`: the rule's terms in the situation's frozen `Expected` (what the checks below read; a `handover` key names
  where a request the policy forbids must go instead);
- `reference`: the step a correct agent takes for it in the reference replay;
- `violation`: the check the oracle, the conduct rules and the embedded judge share (one function, three readers);
- `card`: what the judge's case card says of it;
- `breach`: the smallest reading that breaks it (the sweep test and the docs use it).
A test sweeps every registered kind through every hook (sim_pipeline_tests/policy/test_kinds.py).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from sim_pipeline.protocol.careful import Call, Reading
from sim_pipeline.protocol.expected import Expected

if TYPE_CHECKING:
    import numpy as np

    from sim_pipeline.domain import Action, Domain, Entity, Rule, Tool

Term = dict[str, Any]  # a rule's terms as stored in Expected.rules: id, kind, text, tools, then the kind's own


@dataclass(frozen=True)
class Problem:
    """What is wrong with a rule in a pack: the field under `rules/<id>`, the problem and the fix."""

    field: str  # '' for the rule itself, else e.g. 'verify_tool'
    problem: str
    fix: str


@dataclass
class Draft:
    """A situation being built, as a rule kind's `stress` sees it (search/situations.py fills it).

    `stress` is called twice per rule that binds the intended tool: at stage `record` (the user's record is chosen,
    facts not drawn yet) and at stage `facts` (the user's facts are drawn). `under_stress` says whether the cell's
    rule axis names this rule.
    """

    domain: Domain
    cell: dict[str, str]
    tool: Tool
    entity: Entity | None
    action: Action | None
    record: dict[str, Any] | None  # the user's record (mutable: the situation's world holds this dict)
    existing: bool  # whether the record exists in the world and is not a new one the write makes
    facts: dict[str, Any]  # what the user knows (mutable)
    notes: dict[str, Any]  # what the user simulator plays (mutable)
    gen: np.random.Generator
    linked: dict[str, Any] = field(default_factory=dict)  # the records the user's record links to, by link field
    relinked: dict[str, Any] = field(default_factory=dict)  # linked records a stress changed (copies to set up)
    stage: str = "record"
    under_stress: bool = False
    draw_fact: Callable[[str, Mapping[str, Any]], Any] = lambda name, spec: None  # a value the user knows
    refuse_by_policy: Callable[[], bool] = lambda: False  # make another rule on the tool refuse the request

    def pick(self, items: list[Any] | tuple[Any, ...]) -> Any:
        """One of `items`, drawn from the situation's generator."""
        return items[int(self.gen.integers(len(items)))]

    def press(self, sentence: str) -> None:
        """Add what the user says to push against the rule (appended to every opening)."""
        self.notes["pressure"] = " ".join(filter(None, (self.notes.get("pressure"), sentence)))


@dataclass
class ReferenceStep:
    """The reference replay at the point before the intended write, as a rule kind's `reference` sees it."""

    expected: Expected
    writes: bool  # whether the reference is about to try a write (not for a request the policy forbids)
    call: Callable[[str, dict[str, Any]], dict[str, Any]]  # call a tool, retrying a transient fault
    arguments: Callable[[str], dict[str, Any]]  # what the user knows, as a tool's arguments
    fill: Callable[[str], dict[str, Any]]  # the same, with required arguments the user cannot know written in
    confirm: Callable[[], None]  # ask the user's approval and get their yes
    look: Callable[[], dict[str, Any] | None] = lambda: None  # read the user's record with a read tool (None: none)
    cannot: str = ""  # what the reference says when the request cannot be done
    verified: bool = True
    reply: str | None = None  # set when the rule settles the request (a hand-off): the reference says this, and stops


@dataclass(frozen=True)
class TermContext:
    """What `term` may read: the pack, the intended tool and the entity it acts on, and the situation's world: the
    user's record as the world holds it, the records it links to (by link field) and the world's clock."""

    domain: Domain
    tool: Tool
    entity: Entity | None
    result_keys: tuple[str, ...] = ()  # keys a tool result shows the entity's records under (order, orders)
    record: Mapping[str, Any] | None = None
    linked: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    now: str = ""


@dataclass(frozen=True)
class Breach:
    """The smallest reading that breaks a rule, for the situation's expected outcome."""

    reading: Reading
    expected: Expected


class RuleKind(ABC):
    """One policy rule kind (see the module)."""

    name: ClassVar[str]
    needs: ClassVar[tuple[str, ...]]  # domain.yaml keys besides `kind` (`tool` stands for `tools` with one entry)
    conduct_rule: ClassVar[str]  # the conduct rule its violation is reported as
    order: ClassVar[int] = 50  # checks and reference steps run in this order (verification before approval)
    # A condition on the record or the request that may hold or not: the plan also needs cells where it holds and the
    # write goes through, not only cells that break it (axes.stress_rows).
    predicate: ClassVar[bool] = False

    def binds(self, rule: Rule, tool: str | None) -> bool:
        """Whether the rule constrains calls of `tool` (the situation's intended tool)."""
        return tool is not None and tool in rule.tools

    @abstractmethod
    def validate(self, rule: Rule, tools: Mapping[str, Tool], actions: Mapping[str, Action]) -> Problem | None:
        """What is wrong with the rule in this pack, or None."""

    def watches(self, rule: Rule) -> tuple[str, ...]:
        """The call arguments whose values the rule judges (an applied call must carry the user's own values)."""
        return ()

    def constraints(self, rule: Rule) -> tuple[dict[str, str], ...]:
        """Axis combinations (rule and another axis's value) in which the rule can never be put under stress, so the
        covering array never plans them."""
        return ()

    @abstractmethod
    def stress(self, rule: Rule, draft: Draft) -> bool:
        """Put the rule under stress (`draft.under_stress`) or keep it satisfied; whether it is under stress now."""

    @abstractmethod
    def term(self, rule: Rule, context: TermContext) -> Term:
        """The rule's own terms for the situation's Expected (JSON values only)."""

    @abstractmethod
    def reference(self, term: Term, step: ReferenceStep) -> None:
        """What a correct agent does for the rule before the intended write (nothing, for most kinds)."""

    @abstractmethod
    def violation(self, term: Term, reading: Reading, expected: Expected) -> str | None:
        """Why a rollout breaks the rule, or None; the oracle, the conduct rules and the embedded judge all call this."""

    @abstractmethod
    def card(self, term: Term) -> dict[str, Any]:
        """What the judge's case card says of the rule."""

    @abstractmethod
    def breach(self, term: Term, expected: Expected) -> Breach:
        """The smallest reading that breaks the rule."""


def write_call(expected: Expected, turn: int = 1, **changes: Any) -> Call:
    """The intended write applied to the user's record (what a breach usually varies)."""
    record = expected.record
    arguments = {expected.id_argument: record} if expected.id_argument and record else {}
    values = {"turn": turn, "tool": expected.tool or "", "record": record, "status": "updated",
              "entity": expected.entity, "arguments": arguments, **changes}
    return Call(**values)


def attempts(term: Term, reading: Reading) -> list[Call]:
    """The calls of the tools a rule binds."""
    return reading.attempts(frozenset(term["tools"]))
