"""Step 02: plan which situations exist (a constrained covering array) and measure what a run covered.

A covering array of strength 2 has, for every two axes, every allowed pair of their values in some row;
forbidden combinations (from a domain's `domain.yaml`) appear in no row and are not counted as gaps.
Construction: a density greedy, replaced by an algebraic design where one applies and is smaller
(orthogonal arrays, Kleitman-Spencer binary arrays, cyclic arrays for axes of equal size); then a
row-dropping tabu search shrinks the array within a fixed move budget, so the result is the same for the
same seed on any machine. Internals live in `sim_pipeline.covering`.
"""

from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd

from sim_pipeline import defaults
from sim_pipeline.covering.build import build
from sim_pipeline.covering.problem import compile_problem
from sim_pipeline.errors import CoverageError

Axes = Mapping[str, Sequence[Any]]
Combination = Mapping[str, Any]


def covering_array(axes: Axes, *, strength: int = defaults.COVER_STRENGTH, seed: int = 0,
                   constraints: Sequence[Combination] = (), higher_strength: Sequence[Sequence[str]] = (),
                   must_include: Sequence[Combination] = (), previous: pd.DataFrame | None = None,
                   moves: int = defaults.COVER_MOVES) -> pd.DataFrame:
    """A small array, one column per axis and one row per cell, covering every allowed pair of values.

    Args:
        axes: axis name -> its values, in column order.
        strength: 2 (pairs); 3 covers every triple of every three axes.
        seed: seeds the tie-breaks and the local search; the same inputs and seed give the same array.
        constraints: forbidden combinations, each a mapping of two or more axes to a value.
        higher_strength: groups of three or more axes whose every allowed triple must also appear.
        must_include: rows (full or partial mappings) that must be present; free axes are filled in.
        previous: an earlier plan over the same axis names; its rows that are still valid are kept,
            changed only where that keeps the plan small, so most situation ids stay comparable when
            an axis gains a value (about 3 in 4 rows survive adding a rule; see COVER_KEEP_COST).
        moves: local-search budget (moves, not seconds, so the result does not depend on the machine).

    Raises:
        CoverageError: bad input, or a value that the constraints leave no row for.
    """
    problem = compile_problem(axes, strength=strength, constraints=constraints,
                              higher_strength=higher_strength, must_include=must_include)
    kept = problem.encode(previous) if previous is not None else None
    rows = build(problem, rng=np.random.default_rng(seed), previous=kept, moves=moves)
    return problem.decode(rows)


def pairwise_coverage(planned: pd.DataFrame, observed: pd.DataFrame, *,
                      axes: Sequence[str] | None = None) -> dict[str, float | int]:
    """Distinct value pairs in the plan, how many of them some observed row covers, and the fraction.

    `axes` defaults to every column of `planned`. The fraction is 1.0 when the plan has no pairs.
    """
    names = list(planned.columns if axes is None else axes)
    missing = [n for n in names if n not in planned.columns or n not in observed.columns]
    if missing:
        raise CoverageError(f"axis columns {missing} are missing from the planned or observed table; "
                            "pass tables with one column per axis (or name the axes with axes=)")
    planned_n = covered_n = 0
    for a, b in combinations(names, 2):
        plan = planned[[a, b]].dropna().drop_duplicates()
        seen = observed[[a, b]].dropna().drop_duplicates()
        planned_n += len(plan)
        covered_n += len(plan.merge(seen, on=[a, b], how="inner"))
    fraction = covered_n / planned_n if planned_n else 1.0
    return {"pairs_planned": planned_n, "pairs_covered": covered_n, "fraction": fraction}


def coverage_gap(axes: Axes, observed: pd.DataFrame, *,
                 constraints: Sequence[Combination] = ()) -> dict[str, list[Any]]:
    """Per axis, the values (rules, tools, stances...) that no observed row exercised.

    Values that the constraints leave no row for cannot be exercised and are not reported.
    """
    problem = compile_problem(axes, strength=2, constraints=constraints, higher_strength=(),
                              must_include=(), allow_impossible=True)
    gaps: dict[str, list[Any]] = {}
    for i, name in enumerate(problem.names):
        if name not in observed.columns:
            raise CoverageError(f"observed table lacks axis column {name!r}; "
                                "pass rows with one column per axis")
        seen = set(observed[name].dropna().tolist())
        lo = int(problem.space.offsets[i])
        gaps[name] = [v for j, v in enumerate(problem.values[i])
                      if v not in seen and problem.req.feasible_values[lo + j]]
    return gaps


def plan_stats(axes: Axes, array: pd.DataFrame, *, constraints: Sequence[Combination] = (),
               higher_strength: Sequence[Sequence[str]] = ()) -> dict[str, int]:
    """Rows, allowed pairs (and triples) planned and covered by the array, and the row lower bound.

    The lower bound is the product of the two largest axis sizes (each of those pairs needs its own
    row), or of a strength-3 group's three largest sizes when that is larger; constraints can lower it.
    """
    problem = compile_problem(axes, strength=2, constraints=constraints, higher_strength=higher_strength,
                              must_include=(), allow_impossible=True)
    rows = problem.encode(array)
    if len(rows) != len(array):
        raise CoverageError("array has values outside the axes; pass the array built from these axes")
    space, req = problem.space, problem.req
    g = space.offsets + rows
    covered = np.zeros_like(req.pairs)
    for r in g:
        covered[np.ix_(r, r)] = True
    sizes = sorted(space.sizes, reverse=True)
    bound = sizes[0] * sizes[1] if len(sizes) > 1 else sizes[0]
    triples_planned = triples_covered = 0
    for axes_t, mask in zip(space.triple_axes, req.triples):
        bound = max(bound, int(np.prod([space.sizes[a] for a in axes_t])))
        hit = np.zeros_like(mask)
        hit[tuple(rows[:, list(axes_t)].T)] = True
        triples_planned += int(mask.sum())
        triples_covered += int((hit & mask).sum())
    return {"rows": len(rows), "pairs_planned": int(np.triu(req.pairs).sum()),
            "pairs_covered": int(np.triu(req.pairs & covered).sum()), "lower_bound": int(bound),
            "triples_planned": triples_planned, "triples_covered": triples_covered}


def rows_kept(previous: pd.DataFrame | None, current: pd.DataFrame) -> float | None:
    """Share of the previous plan's rows present verbatim in the current one (None without a previous plan)."""
    if previous is None or not len(previous):
        return None
    columns = [c for c in previous.columns if c in current.columns]
    if len(columns) != len(previous.columns):
        return 0.0
    matched = previous.merge(current[columns].drop_duplicates(), on=columns, how="inner")
    return round(len(matched) / len(previous), 4)
