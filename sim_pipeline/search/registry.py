"""The search arms as registered objects: one `Arm` per generator, with its share of the budget.

An arm's generator is registered where it is written (`@arm` in search/arms.py); its start weight, floor and cap
come from one table (SEARCH_ARM_WEIGHTS in defaults.py), whose order is the draw order. `build` joins the two and
refuses a misconfigured arm with an error naming the arm, the field and the fix. The weights, the loop, the search
report and the docs' arm table read the built tuple; nothing else lists the arms.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sim_pipeline.errors import SearchConfigError

DEFAULTS_ORIGIN = "SEARCH_ARM_WEIGHTS in sim_pipeline/defaults.py"
FIELDS = ("start", "floor", "cap")
SUM_TOLERANCE = 1e-6  # start weights are typed by hand as decimals, whose float sum can miss 1 by ~1e-16
Generate = Callable[..., Awaitable[list[Any]]]  # (arms, n, numpy Generator) -> situations


@dataclass(frozen=True)
class Arm:
    """One search arm: its name, situation generator, one-line summary, and its weight's start, floor and cap."""

    name: str
    generate: Generate
    summary: str
    start: float
    floor: float
    cap: float
    order: int


_GENERATORS: dict[str, tuple[Generate, str]] = {}


def arm(name: str) -> Callable[[Generate], Generate]:
    """Register a generator as the arm `name`; its docstring's first line is the arm's summary (docs and CLI)."""

    def register(generate: Generate) -> Generate:
        if name in _GENERATORS and _GENERATORS[name][0].__qualname__ != generate.__qualname__:
            raise SearchConfigError(f"search arm '{name}' is registered twice ({_GENERATORS[name][0].__qualname__} "
                                    f"and {generate.__qualname__}). Fix: give one of them another name")
        summary = (generate.__doc__ or "").strip().splitlines()
        _GENERATORS[name] = (generate, summary[0] if summary else "")
        return generate

    return register


def registered_names() -> tuple[str, ...]:
    """The names of every registered generator (in registration order)."""
    return tuple(_GENERATORS)


def _number(name: str, settings: Mapping[str, Any], key: str, origin: str) -> float:
    """One field of an arm's settings as a share in [0, 1], or an error naming the arm, field and fix."""
    if key not in settings:
        raise SearchConfigError(f"search arm '{name}': field '{key}' is missing in {origin}. Fix: give the arm "
                                f"all of {', '.join(FIELDS)}, e.g. {{'start': 0.1, 'floor': 0.01, 'cap': 0.1}}")
    value = settings[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0 \
            or math.isnan(value):
        raise SearchConfigError(f"search arm '{name}': {key} is {value!r} in {origin}. Fix: a share of the "
                                "budget, a number from 0 to 1")
    return float(value)


def _one(name: str, settings: Any, order: int, origin: str) -> Arm:
    """The arm `name` built from its settings, checked on its own."""
    if name not in _GENERATORS:
        known = ", ".join(_GENERATORS) or "none"
        raise SearchConfigError(f"search arm '{name}' in {origin} has no generator (registered arms: {known}). "
                                f"Fix: remove it, or register a generator with @arm('{name}') in "
                                "sim_pipeline/search/arms.py")
    if not isinstance(settings, Mapping):
        raise SearchConfigError(f"search arm '{name}': its settings are {settings!r} in {origin}. Fix: a mapping "
                                "{'start': ..., 'floor': ..., 'cap': ...}")
    unknown = sorted(set(settings) - set(FIELDS))
    if unknown:
        raise SearchConfigError(f"search arm '{name}': unknown field {unknown[0]!r} in {origin}. Fix: use only "
                                f"{', '.join(FIELDS)}")
    start, floor, cap = (_number(name, settings, key, origin) for key in FIELDS)
    if floor > cap:
        raise SearchConfigError(f"search arm '{name}': floor {floor} is above cap {cap} in {origin}. Fix: a floor "
                                "at or below the cap")
    if not floor <= start <= cap:
        raise SearchConfigError(f"search arm '{name}': start {start} is outside its floor {floor} and cap {cap} in "
                                f"{origin}. Fix: a start between the two (a weight is never outside them)")
    generate, summary = _GENERATORS[name]
    return Arm(name, generate, summary, start, floor, cap, order)


def build(table: Mapping[str, Any], *, origin: str = DEFAULTS_ORIGIN) -> tuple[Arm, ...]:
    """The arms in the table's order, each with its generator; every registered arm must be in the table, each
    start within its floor and cap, and the starts must sum to 1 (they are the first batch's shares)."""
    if not isinstance(table, Mapping) or not table:
        raise SearchConfigError(f"{origin} is {table!r}. Fix: a mapping of arm name to its start, floor and cap")
    arms = tuple(_one(name, settings, i, origin) for i, (name, settings) in enumerate(table.items()))
    missing = [name for name in _GENERATORS if name not in table]
    if missing:
        name = missing[0]
        raise SearchConfigError(f"search arm '{name}' has no weights in {origin}. Fix: add '{name}': "
                                "{'start': ..., 'floor': ..., 'cap': ...} (use 0 for all three to switch it off)")
    total = sum(a.start for a in arms)
    if abs(total - 1.0) > SUM_TOLERANCE:
        starts = ", ".join(f"{a.name} {a.start}" for a in arms)
        raise SearchConfigError(f"search arms' start weights sum to {total:.6g}, not 1, in {origin} ({starts}). "
                                "Fix: scale them to sum to 1 (they are the shares of the first batch)")
    return arms


def markdown_table(arms: tuple[Arm, ...]) -> str:
    """The arms as the docs show them (docs/concepts.md, checked by a test): draw order, name, summary, weights."""
    lines = ["| arm | what it draws | start | floor | cap |", "|---|---|---|---|---|"]
    lines += [f"| `{a.name}` | {a.summary} | {a.start:g} | {a.floor:g} | {a.cap:g} |" for a in arms]
    return "\n".join(lines)


if __name__ == "__main__":  # python -m sim_pipeline.search.registry: the table docs/concepts.md shows
    from sim_pipeline.search import registry  # the module the arms registered in, not this __main__ copy
    from sim_pipeline.search.arms import ARMS

    print(registry.markdown_table(ARMS))
