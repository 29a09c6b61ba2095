"""Put the pieces together: seeded rows, earlier rows, construction or greedy, then the shrinking search."""

import numpy as np

from sim_pipeline import defaults
from sim_pipeline.covering.construct import binary_array, orthogonal_array
from sim_pipeline.covering.cyclic import develop, find_starter, fixed_point_options
from sim_pipeline.covering.greedy import build_row, greedy_rows
from sim_pipeline.covering.problem import Problem
from sim_pipeline.covering.shrink import shrink
from sim_pipeline.covering.tally import Tally


def build(problem: Problem, *, rng: np.random.Generator, previous: np.ndarray | None,
          moves: int) -> np.ndarray:
    """Integer rows (N, k) covering every required pair and triple of the problem.

    Seeded rows come first and never change. Rows of a previous plan follow: the search first reshapes
    only the rows added after them, then changes a previous row only where that removes rows (at a cost
    per row changed, so most situation ids survive).
    """
    space = problem.space
    if space.k == 1:  # no pairs to cover: list each value once
        return np.flatnonzero(problem.req.feasible_values)[:, None]
    tally = Tally(space, problem.req)
    fixed = []
    for seed in problem.seeds:
        row = build_row(tally, rng, dict(seed))
        tally.add(row)
        fixed.append(row)
    head = np.array(fixed, dtype=np.int64).reshape(-1, space.k)
    if previous is not None and len(previous):
        kept = _fresh(previous[space.valid_rows(previous)], head)
        tally.add_all(kept)
        head = np.vstack([head, kept])
    plain = not space.forbidden and not space.triple_axes and not len(head)
    exact = _exact(space.sizes) if plain else []
    optimal = [rows for rows, is_optimal in exact if is_optimal]
    if optimal:
        return optimal[0]
    floor = lower_bound(tally)
    rows = np.vstack([head, greedy_rows(tally, rng, [])])
    if plain:
        structured = _structured(problem, exact, rng, below=len(rows))
        if structured is not None:
            rows, tally = structured
    return shrink(tally, rows, len(fixed), rng, moves, floor, n_kept=len(head) - len(fixed))


def _structured(problem: Problem, exact: list[tuple[np.ndarray, bool]], rng: np.random.Generator,
                below: int) -> tuple[np.ndarray, Tally] | None:
    """The smallest algebraic array (completed by the greedy where it falls short) under `below` rows."""
    sizes = problem.space.sizes
    best = None
    for rows, _ in exact:
        if len(rows) < below:
            best, below = rows, len(rows)
    v, k = max(sizes), len(sizes)
    if min(sizes) == v >= 3:
        for f in fixed_point_options(v, k):
            if k * (v - f) >= below:
                continue
            # a starter move scores k*v candidates over k distances: the budget is in those units
            moves = defaults.COVER_STARTER_WORK // (k * k * v)
            starter, missing = find_starter(v, k, f, rng, moves)
            base = [develop(starter, v, f)]
            sub = binary_array((2,) * k) if f == 2 else None
            if sub is not None:  # the fixed values' own pairs: a binary array over them
                base.append(sub + (v - f))
            tally = Tally(problem.space, problem.req)
            rows = np.vstack(base)
            tally.add_all(rows)
            rows = np.vstack([rows, greedy_rows(tally, rng, [])])
            if len(rows) < below:
                best, below = rows, len(rows)
            if missing == 0:
                break  # smaller f only adds rows
    if best is None:
        return None
    tally = Tally(problem.space, problem.req)
    tally.add_all(best)
    return best, tally


def _exact(sizes: tuple[int, ...]) -> list[tuple[np.ndarray, bool]]:
    """Complete algebraic arrays that apply, each with whether its size is optimal."""
    found = []
    binary = binary_array(sizes)
    if binary is not None:
        found.append((binary, min(sizes) == 2))  # Kleitman-Spencer size is optimal for all-binary axes
    oa = orthogonal_array(sizes)
    if oa is not None:
        top = sorted(sizes)[-2:]
        found.append((oa, len(oa) == top[0] * top[1]))  # q*q rows meet the pair bound when two axes have q
    return found


def lower_bound(tally: Tally) -> int:
    """Rows any array needs: the most required pairs between two axes (or triples in one group)."""
    space, req = tally.space, tally.req
    blocks = np.add.reduceat(np.add.reduceat(req.pairs.astype(np.int64), space.offsets, axis=0),
                             space.offsets, axis=1)
    best = max(1, int(blocks.max()))
    for mask in req.triples:
        best = max(best, int(mask.sum()))
    return best


def _fresh(valid: np.ndarray, head: np.ndarray) -> np.ndarray:
    """Distinct earlier rows, in their earlier order, minus those already seeded."""
    _, first = np.unique(valid, axis=0, return_index=True)
    rows = valid[np.sort(first)]
    if len(head):
        rows = rows[~(rows[:, None, :] == head[None, :, :]).all(axis=2).any(axis=1)]
    return rows
