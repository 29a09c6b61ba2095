"""Validate named axes, constraints, strength-3 groups and seeded rows, and encode them as integers."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd

from sim_pipeline.covering.space import Requirements, Space, requirements
from sim_pipeline.errors import CoverageError

PAIR = 2  # a constraint forbids a combination of at least two axis values
TRIPLE = 3  # higher-strength groups are covered at strength three


@dataclass(frozen=True)
class Problem:
    """A validated covering-array problem: names and values, its integer space and what must be covered."""

    names: tuple[str, ...]
    values: tuple[tuple[Any, ...], ...]
    space: Space
    req: Requirements
    seeds: tuple[tuple[tuple[int, int], ...], ...]  # must-include rows as (axis, value) entries

    def decode(self, rows: np.ndarray) -> pd.DataFrame:
        """Integer rows (N, k) as a DataFrame of the given values, one column per axis."""
        data = {}
        for i, name in enumerate(self.names):
            column = np.empty(len(self.values[i]), dtype=object)
            column[:] = self.values[i]
            data[name] = column[rows[:, i]] if len(rows) else column[:0]
        return pd.DataFrame(data)

    def encode(self, frame: pd.DataFrame) -> np.ndarray:
        """Rows of a DataFrame with the axis columns as integers; rows with an unknown value are dropped."""
        _require_columns(frame, self.names)
        codes = []
        for i, name in enumerate(self.names):
            lookup = {v: j for j, v in enumerate(self.values[i])}
            codes.append(frame[name].map(lookup).to_numpy(dtype=float, na_value=np.nan))
        stacked = np.column_stack(codes) if codes else np.zeros((len(frame), 0))
        keep = ~np.isnan(stacked).any(axis=1)
        return stacked[keep].astype(np.int64).reshape(-1, len(self.names))


def compile_problem(axes: Mapping[str, Sequence[Any]], *, strength: int,
                    constraints: Sequence[Mapping[str, Any]],
                    higher_strength: Sequence[Sequence[str]],
                    must_include: Sequence[Mapping[str, Any]], allow_impossible: bool = False) -> Problem:
    """Check the inputs (raising CoverageError with the fix) and encode them.

    With allow_impossible, values the constraints leave no row for are accepted (and never required).
    """
    names, values, index = _axes(axes)
    forbidden = tuple(_entries(c, names, values, index, "constraint") for c in constraints)
    for c, tup in zip(constraints, forbidden):
        if len(tup) < PAIR:
            raise CoverageError(f"constraint {dict(c)!r} names fewer than two axes; a single forbidden value "
                                "is better removed from its axis")
    if strength not in (PAIR, TRIPLE):
        raise CoverageError(f"strength={strength} is not supported; use 2, and list the axes to cover at "
                            "strength 3 in higher_strength (or strength=3 for all axes)")
    groups = list(higher_strength) + ([list(names)] if strength == TRIPLE and len(names) >= TRIPLE else [])
    triple_axes: list[tuple[int, int, int]] = []
    for group in groups:
        axes_in = [_axis(a, names, "higher_strength group") for a in group]
        if len(set(axes_in)) < TRIPLE or len(set(axes_in)) != len(axes_in):
            raise CoverageError(f"higher_strength group {list(group)!r} must name at least three distinct "
                                "axes")
        for t in combinations(sorted(axes_in), TRIPLE):
            if t not in triple_axes:
                triple_axes.append(t)
    space = Space(tuple(len(v) for v in values), forbidden, tuple(triple_axes))
    req = requirements(space)
    for g in np.flatnonzero(~req.feasible_values) if not allow_impossible else ():
        axis = int(space.axis_of[g])
        value = values[axis][g - int(space.offsets[axis])]
        raise CoverageError(f"value {names[axis]}={value!r} can appear in no row: every combination with it "
                            "is forbidden; remove the value from the axis or relax the constraints naming it")
    seeds = tuple(_entries(row, names, values, index, "must_include row") for row in must_include)
    for row, seed in zip(must_include, seeds):
        if space.complete(dict(seed)) is None:
            raise CoverageError(f"must_include row {dict(row)!r} contains a forbidden combination; "
                                "drop the row or the constraint")
    return Problem(names, values, space, req, seeds)


def _axes(axes: Mapping[str, Sequence[Any]]) -> tuple[tuple[str, ...], tuple[tuple[Any, ...], ...],
                                                       list[dict[Any, int]]]:
    if not axes:
        raise CoverageError("no axes given; pass a mapping of axis name to its list of values")
    names, values, index = [], [], []
    for name, vals in axes.items():
        vals = tuple(vals)
        if not vals:
            raise CoverageError(f"axis {name!r} has no values; give it at least one value or drop the axis")
        lookup: dict[Any, int] = {}
        for v in vals:
            if v in lookup:
                raise CoverageError(f"axis {name!r} lists value {v!r} twice; list each value once")
            lookup[v] = len(lookup)
        names.append(str(name))
        values.append(vals)
        index.append(lookup)
    return tuple(names), tuple(values), index


def _axis(name: str, names: tuple[str, ...], what: str) -> int:
    if name not in names:
        raise CoverageError(f"{what} names unknown axis {name!r}; known axes: {list(names)}")
    return names.index(name)


def _entries(combo: Mapping[str, Any], names: tuple[str, ...], values: tuple[tuple[Any, ...], ...],
             index: list[dict[Any, int]], what: str) -> tuple[tuple[int, int], ...]:
    entries = []
    for name, value in combo.items():
        axis = _axis(name, names, what)
        if value not in index[axis]:
            raise CoverageError(f"{what} {dict(combo)!r} gives {name}={value!r}, which is not a value of "
                                f"axis {name!r}; use one of {list(values[axis])}")
        entries.append((axis, index[axis][value]))
    return tuple(sorted(entries))


def _require_columns(frame: pd.DataFrame, names: Sequence[str]) -> None:
    missing = [n for n in names if n not in frame.columns]
    if missing:
        raise CoverageError(f"table lacks axis columns {missing}; pass a table with one column per axis")
