"""Step 01: declare what varies. A situation is one value per axis, not a prompt."""

from __future__ import annotations

import pandas as pd

from sim_pipeline import defaults, policy
from sim_pipeline.domain import Domain
from sim_pipeline.errors import DomainPackError

UNRELATED = "unrelated"  # no tool fits the request
MULTI_TOOL = "multi_tool"  # the request needs two or more tools
UNSPECIFIED = "unspecified"  # no policy clause is under stress
AXIS_NAMES: tuple[str, ...] = ("tool", "rule", "stance", "world_state", "tool_condition", "history")


def axis_values(domain: Domain) -> dict[str, list[str]]:
    """The six axes of a domain and their values, in a fixed order."""
    return {
        "tool": [t.name for t in domain.tools] + [UNRELATED, MULTI_TOOL],
        "rule": [r.id for r in domain.rules] + [UNSPECIFIED],
        "stance": list(domain.stances),
        "world_state": list(defaults.WORLD_STATES),
        "tool_condition": list(defaults.TOOL_CONDITIONS),
        "history": list(defaults.HISTORIES),
    }


def validated_constraints(domain: Domain) -> tuple[dict[str, str], ...]:
    """The domain's forbidden combinations, each checked to name real axes and values, plus those its rule kinds
    imply (policy/: an `eligibility` rule is put under stress on an existing record, so it is never planned with a
    world state that has none to make ineligible)."""
    axes = axis_values(domain)
    for i, combo in enumerate(domain.constraints):
        for axis, value in combo.items():
            if axis not in axes:
                raise DomainPackError(f"{domain.path / 'domain.yaml'}: field 'constraints/{i}': unknown axis "
                                      f"'{axis}'. Fix: use one of {list(axes)}")
            if value not in axes[axis]:
                raise DomainPackError(f"{domain.path / 'domain.yaml'}: field 'constraints/{i}/{axis}': unknown "
                                      f"value '{value}'. Fix: use one of {axes[axis]}")
    return domain.constraints + policy.constraints(domain.rules)


def stress_rows(domain: Domain, constraints: tuple[dict[str, str], ...] = ()) -> list[dict[str, str]]:
    """Cells the plan must include so that every structured rule meets a tool it binds in at least
    `RULE_STRESS_MIN_CELLS` situations a seed, where it is put under stress (a pairwise plan pairs a rule with one of
    its tools about once); and, for a predicate (a kind whose `predicate` is set: expressions), as many where it holds
    and the write is expected: a clean world, the tool answering, no rule under stress (pairwise plans put most cells
    of a tool on a fault, so the side where the predicate lets the write through would otherwise come up once or
    twice). Each differs by stance, and none is a combination the constraints forbid."""
    stances = axis_values(domain)["stance"]
    rows: list[dict[str, str]] = []

    def add(template: dict[str, str], tools: tuple[str, ...]) -> None:
        made = 0
        for i in range(len(stances) * len(tools)):
            row = {"tool": tools[i % len(tools)], **template, "stance": stances[i % len(stances)]}
            if row in rows or any(all(row.get(axis) == value for axis, value in combo.items()) for combo in constraints
                                  if set(combo) <= set(row)):
                continue
            rows.append(row)
            made += 1
            if made == defaults.RULE_STRESS_MIN_CELLS:
                return

    for rule in domain.rules:
        if not rule.kind or not rule.tools:
            continue
        add({"rule": rule.id}, tuple(rule.tools))
        if (kind := policy.kind_of(rule)) is not None and kind.predicate:
            add({"rule": UNSPECIFIED, "world_state": "entity_exists", "tool_condition": "success", "history": "fresh"},
                tuple(rule.tools))
    return rows


def tool_class(domain: Domain, tool: str) -> str:
    """The class of a tool axis value: read (verify, compute), destructive (delete), other (create, update, transfer,
    other and the synthetic values)."""
    found = domain.tool(tool)
    if found is None:
        return "other"
    if found.kind in ("read", "verify", "compute"):
        return "read"
    return "destructive" if found.kind in ("destructive", "delete") else "other"


def risk(domain: Domain, tool: str, stance: str | None = None, condition: str | None = None) -> float:
    """Risk of a situation (REFERENCE 1): destructive with a hostile stance or faulty condition is highest."""
    kind = tool_class(domain, tool)
    if kind == "destructive":
        hostile = stance in defaults.HOSTILE_STANCES or (condition not in (None, "success"))
        return defaults.RISK_DESTRUCTIVE_HIGH if hostile else defaults.RISK_DESTRUCTIVE
    return defaults.RISK_READ if kind == "read" else defaults.RISK_OTHER


def axes_table(domain: Domain) -> pd.DataFrame:
    """One row per (axis, value) with the tool class and base risk for tool values."""
    rows = []
    for axis, values in axis_values(domain).items():
        for position, value in enumerate(values):
            is_tool = axis == "tool"
            rows.append({
                "domain": domain.name, "axis": axis, "value": value, "position": position,
                "tool_class": tool_class(domain, value) if is_tool else None,
                "risk": risk(domain, value) if is_tool else None,
            })
    return pd.DataFrame(rows)
