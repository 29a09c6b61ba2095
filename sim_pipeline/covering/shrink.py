"""Post-optimisation: drop redundant rows, then repeatedly drop a row and repair the array by local search.

The repair is a tabu search in the style of CASA and TCA (Garvin, Cohen & Dwyer 2011, "Evaluating
improvements to a meta-heuristic search for constrained interaction testing"; Lin et al. 2015, "TCA: an
efficient two-mode meta-heuristic algorithm for combinatorial test generation"): pick an uncovered pair
(or triple), and among all rows choose the one where writing it in gains the most coverage, scoring every
row at once with numpy. The budget is a number of moves, so the result does not depend on the machine.
"""

from itertools import combinations

import numpy as np

from sim_pipeline import defaults
from sim_pipeline.covering.tally import Tally

TIE_NOISE = 0.5  # scores are integers: noise below 1 only breaks ties


def unique_counts(tally: Tally, rows: np.ndarray) -> np.ndarray:
    """Per row, the required pairs and triples no other row covers."""
    if not len(rows):
        return np.zeros(0, dtype=np.int64)
    i, j = np.triu_indices(rows.shape[1], 1)
    g = rows + tally.space.offsets
    counts = (tally.pairs[g[:, i], g[:, j]] == 1).sum(axis=1)
    if len(tally.triple_cols):
        counts += (tally.triples[tally.triple_ids(rows)] == 1).sum(axis=1)
    return counts


def shrink(tally: Tally, rows: np.ndarray, n_fixed: int, rng: np.random.Generator, moves: int,
           floor: int, n_kept: int = 0) -> np.ndarray:
    """A covering array no larger than `rows`; the tally follows it.

    The first n_fixed rows never change. The next n_kept rows (an earlier plan's) are first held fixed
    too; then, if rows remain above the floor, they may change, each at a cost, so the search
    prefers to reshape rows that have already changed.
    """
    budget = [moves]
    rows = _shrink(tally, rows, n_fixed + n_kept, rng, budget, floor, None)
    if n_kept and len(rows) > floor:
        pristine = np.zeros(len(rows), dtype=bool)
        pristine[n_fixed:n_fixed + n_kept] = True
        rows = _shrink(tally, rows, n_fixed, rng, budget, floor, pristine)
    return rows


def _shrink(tally: Tally, rows: np.ndarray, n_fixed: int, rng: np.random.Generator, budget: list[int],
            floor: int, pristine: np.ndarray | None) -> np.ndarray:
    keep = _redundant_free(tally, rows, n_fixed)
    best, pristine = rows[keep], None if pristine is None else pristine[keep]
    while budget[0] > 0 and len(best) > max(floor, n_fixed):
        cost = unique_counts(tally, best[n_fixed:]) + rng.random(len(best) - n_fixed) * TIE_NOISE
        if pristine is not None:
            cost = cost + defaults.COVER_KEEP_COST * pristine[n_fixed:]
        drop = n_fixed + int(np.argmin(cost))
        trial = np.delete(best, drop, axis=0)
        marks = None if pristine is None else np.delete(pristine, drop)
        tally.add(best[drop], -1)
        used, ok = _repair(tally, trial, n_fixed, rng, min(budget[0], defaults.COVER_MOVES_PER_ROW), marks)
        budget[0] -= used
        if not ok:
            for row in trial:
                tally.add(row, -1)
            tally.add_all(best)
            break
        keep = _redundant_free(tally, trial, n_fixed)
        best, pristine = trial[keep], None if marks is None else marks[keep]
    return best


def _redundant_free(tally: Tally, rows: np.ndarray, n_fixed: int) -> np.ndarray:
    """Mask of rows kept after uncounting, last first, every free row whose pairs all appear elsewhere."""
    keep = np.ones(len(rows), dtype=bool)
    for r in range(len(rows) - 1, n_fixed - 1, -1):
        if unique_counts(tally, rows[r:r + 1])[0] == 0:
            tally.add(rows[r], -1)
            keep[r] = False
    return keep


def _repair(tally: Tally, rows: np.ndarray, n_fixed: int, rng: np.random.Generator, budget: int,
            pristine: np.ndarray | None) -> tuple[int, bool]:
    """Tabu search changing free rows in place until all is covered; returns (moves used, success).

    Changing a row still marked pristine costs COVER_KEEP_COST (and clears the mark).
    """
    space = tally.space
    off = space.offsets
    tabu = np.full(rows.shape, -1, dtype=np.int64)  # step until which a cell may not change again
    free = np.arange(n_fixed, len(rows))
    if not len(free):
        return 0, tally.done()
    for step in range(budget):
        missing = tally.missing_pairs()
        if len(missing):
            pick = int(missing[rng.integers(len(missing))])
            g, h = int(tally.pair_rows[pick]), int(tally.pair_cols[pick])
            target = [(int(space.axis_of[g]), g - int(off[space.axis_of[g]])),
                      (int(space.axis_of[h]), h - int(off[space.axis_of[h]]))]
        else:
            missing = tally.missing_triples()
            if not len(missing):
                return step, True
            target = tally.triple_entries(int(missing[rng.integers(len(missing))]))
        cols = np.array([a for a, _ in target])
        old = rows[free]
        new = old.copy()
        new[:, cols] = [v for _, v in target]
        score = _gain(tally, old, new, cols) + rng.random(len(free)) * TIE_NOISE
        if pristine is not None:
            score -= defaults.COVER_KEEP_COST * pristine[free]
        changed = old != new
        allowed = ~(changed & (tabu[free] > step)).any(axis=1) & changed.any(axis=1)
        if space.forbidden:
            allowed &= space.valid_rows(new, touching=cols)
        if not allowed.any():
            continue
        r = int(np.argmax(np.where(allowed, score, -np.inf)))
        tally.add(rows[free[r]], -1)
        rows[free[r]] = new[r]
        tally.add(rows[free[r]])
        tabu[free[r], cols[changed[r, cols]]] = step + defaults.COVER_TABU_TENURE
        if pristine is not None:
            pristine[free[r]] = False
    return budget, tally.done()


def _gain(tally: Tally, old: np.ndarray, new: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Per row: required pairs and triples newly covered minus those lost if the row became `new`."""
    off = tally.space.offsets
    go, gn = old + off, new + off
    flat = tally.pairs.ravel()
    n = tally.pairs.shape[0]
    changed = go != gn
    score = np.zeros(len(old), dtype=np.int64)
    for c in cols:
        # whole-row sums; pairs with the other target columns are corrected below
        lost = (flat.take(go[:, c, None] * n + go) == 1).sum(axis=1)
        won = (flat.take(gn[:, c, None] * n + go) == 0).sum(axis=1)
        for c2 in cols:
            if c2 != c:
                lost -= flat.take(go[:, c] * n + go[:, c2]) == 1
                won -= flat.take(gn[:, c] * n + go[:, c2]) == 0
        score += changed[:, c] * (won - lost)
    for a, b in combinations(cols, 2):
        either = changed[:, a] | changed[:, b]
        score += either * ((flat.take(gn[:, a] * n + gn[:, b]) == 0).astype(np.int64)
                           - (flat.take(go[:, a] * n + go[:, b]) == 1))
    if len(tally.triple_cols):
        ids_old, ids_new = tally.triple_ids(old), tally.triple_ids(new)
        moved = ids_old != ids_new
        score += (moved & (tally.triples[ids_new] == 0)).sum(axis=1)
        score -= (moved & (tally.triples[ids_old] == 1)).sum(axis=1)
    return score
