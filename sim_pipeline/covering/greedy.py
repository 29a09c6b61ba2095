"""One-row-at-a-time density greedy (Bryce & Colbourn 2007, "The density algorithm for pairwise
interaction testing"), with forbidden tuples and strength-3 groups.

Each row starts from an uncovered pair (or triple), so every row makes progress; the remaining axes are
filled one value at a time, always the value whose score (pairs it covers with the values already chosen,
plus the expected pairs with the axes still free) is highest. Under constraints a value is taken only if
the row can still be completed (a witness row is kept, so the search runs only when the choice departs
from it).
"""

import numpy as np

from sim_pipeline.covering.tally import Tally

TIE_NOISE = 1e-7  # random tie-break scale: far below the smallest density step (1 / product of two sizes)


def greedy_rows(tally: Tally, rng: np.random.Generator, seeds: list[dict[int, int]]) -> np.ndarray:
    """Complete each seed row, then add rows until every required pair and triple is covered."""
    rows = []
    for partial in seeds:
        row = build_row(tally, rng, partial)
        tally.add(row)
        rows.append(row)
    while True:
        partial = _start(tally, rng)
        if partial is None:
            break
        row = build_row(tally, rng, partial)
        tally.add(row)
        rows.append(row)
    return np.array(rows, dtype=np.int64).reshape(-1, tally.space.k)


def _start(tally: Tally, rng: np.random.Generator) -> dict[int, int] | None:
    """The uncovered pair touching the value with the most uncovered pairs, or an uncovered triple."""
    space = tally.space
    need = tally.need_pairs()
    degree = need.sum(axis=1)
    if degree.any():
        g = int(np.argmax(degree + rng.random(len(degree)) * TIE_NOISE))
        h = int(np.argmax(np.where(need[g], degree + rng.random(len(degree)) * TIE_NOISE, -1.0)))
        return {int(space.axis_of[g]): g - int(space.offsets[space.axis_of[g]]),
                int(space.axis_of[h]): h - int(space.offsets[space.axis_of[h]])}
    missing = tally.missing_triples()
    if not len(missing):
        return None
    return dict(tally.triple_entries(int(missing[rng.integers(len(missing))])))


def build_row(tally: Tally, rng: np.random.Generator, partial: dict[int, int]) -> np.ndarray:
    """Fill the free axes of a partial row greedily by density score, keeping the row completable."""
    space, req = tally.space, tally.req
    off, sizes = space.offsets, np.asarray(space.sizes)
    need = tally.need_pairs().astype(np.float64)
    per_axis = np.add.reduceat(need, off, axis=1) / sizes  # expected new pairs with a free axis
    assign = dict(partial)
    chosen = [int(off[a] + v) for a, v in assign.items()]
    free = [a for a in range(space.k) if a not in assign]
    covered = need[:, chosen].sum(axis=1)
    expected = per_axis[:, free].sum(axis=1)
    candidate = np.isin(space.axis_of, free) & req.feasible_values
    noise = rng.random(space.n_values) * TIE_NOISE
    witness = space.complete(assign) if space.forbidden else None
    while free:
        score = covered + expected + _triple_scores(tally, assign) + noise
        score[~candidate] = -np.inf
        while True:
            g = int(np.argmax(score))
            axis, value = int(space.axis_of[g]), g - int(off[space.axis_of[g]])
            if witness is None or witness[axis] == value:
                break
            trial = space.complete({**assign, axis: value}, prefer=score)
            if trial is not None:
                witness = trial
                break
            score[g] = -np.inf
        assign[axis] = value
        free.remove(axis)
        candidate[off[axis]:off[axis] + sizes[axis]] = False
        covered += need[:, g]
        expected -= per_axis[:, axis]
    return np.array([assign[a] for a in range(space.k)], dtype=np.int64)


def _triple_scores(tally: Tally, assign: dict[int, int]) -> np.ndarray:
    """Per value: uncovered triples it would cover (or is expected to, when partners are still free)."""
    space = tally.space
    score = np.zeros(space.n_values)
    for s, axes in enumerate(space.triple_axes):
        shape, lo = tally.req.triples[s].shape, int(tally.triple_offsets[s])
        need = (tally.triples[lo:lo + tally.req.triples[s].size] == 0).reshape(shape)
        for pos, axis in enumerate(axes):
            if axis in assign:
                continue
            cube = np.moveaxis(need, pos, 0).astype(np.float64)
            for other in (a for i, a in enumerate(axes) if i != pos):
                cube = cube[:, assign[other]] if other in assign else cube.mean(axis=1)
            score[space.offsets[axis]:space.offsets[axis] + space.sizes[axis]] += cube
    return score
