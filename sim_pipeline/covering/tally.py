"""How many rows cover each pair and each strength-3 triple: the bookkeeping every builder shares."""

import numpy as np

from sim_pipeline.covering.space import Requirements, Space

UNREQUIRED = 1 << 30  # count offset for pairs that need no cover: never reads as 0 or 1 (uncovered or unique)


class Tally:
    """Counts of rows covering each pair (dense V x V) and each required-group triple (flat).

    Pairs that need no cover (same axis, impossible) start at UNREQUIRED, so `pairs == 0` means
    "required and uncovered" and `pairs == 1` "required and covered once" without a second lookup.
    """

    def __init__(self, space: Space, req: Requirements) -> None:
        self.space, self.req = space, req
        n = space.n_values
        self.pairs = np.where(req.pairs, 0, UNREQUIRED).astype(np.int32)
        shapes = [m.shape for m in req.triples]
        sizes = [int(np.prod(s)) for s in shapes]
        self.triple_offsets = np.cumsum([0] + sizes)[:-1].astype(np.int64)
        self.triple_cols = np.array(space.triple_axes, dtype=np.int64).reshape(-1, 3)
        self.triple_mult = np.array([[s[1] * s[2], s[2], 1] for s in shapes], dtype=np.int64).reshape(-1, 3)
        self.triple_required = (np.concatenate([m.ravel() for m in req.triples]) if sizes
                                else np.zeros(0, dtype=bool))
        self.triples = np.where(self.triple_required, 0, UNREQUIRED).astype(np.int32)
        upper = np.triu(req.pairs)
        self.pair_rows, self.pair_cols = np.nonzero(upper)
        # pair id of each (g, h), either order; -1 marks pairs that need no cover
        self.pair_id = np.full((n, n), -1, dtype=np.int64)
        self.pair_id[self.pair_rows, self.pair_cols] = np.arange(len(self.pair_rows))
        self.pair_id[self.pair_cols, self.pair_rows] = np.arange(len(self.pair_rows))
        self.missing = np.ones(len(self.pair_rows), dtype=bool)  # kept equal to pairs[...] == 0
        self._upper = np.triu_indices(space.k, 1)

    def triple_ids(self, rows: np.ndarray) -> np.ndarray:
        """Flat triple index of each strength-3 triple in each row: (N, S) for rows (N, k)."""
        if not len(self.triple_cols):
            return np.zeros((len(rows), 0), dtype=np.int64)
        return self.triple_offsets + (rows[:, self.triple_cols] * self.triple_mult).sum(axis=2)

    def add(self, row: np.ndarray, sign: int = 1) -> None:
        """Count (sign=1) or uncount (sign=-1) one row."""
        g = self.space.offsets + row
        self.pairs[g[:, None], g[None, :]] += sign
        a, b = g[self._upper[0]], g[self._upper[1]]
        ids = self.pair_id[a, b]
        hit = ids >= 0
        self.missing[ids[hit]] = self.pairs[a[hit], b[hit]] == 0
        if len(self.triple_cols):
            self.triples[self.triple_ids(row[None, :])[0]] += sign

    def add_all(self, rows: np.ndarray) -> None:
        """Count every row of an (N, k) array."""
        for row in rows:
            self.add(row)

    def missing_pairs(self) -> np.ndarray:
        """Indices into (pair_rows, pair_cols) of required pairs no row covers."""
        return np.flatnonzero(self.missing)

    def missing_triples(self) -> np.ndarray:
        """Flat indices of required triples no row covers."""
        return np.flatnonzero(self.triples == 0)

    def need_pairs(self) -> np.ndarray:
        """(V, V) bool: required pairs not yet covered."""
        return self.pairs == 0

    def triple_entries(self, flat: int) -> list[tuple[int, int]]:
        """(axis, value) entries of the flat triple index."""
        s = int(np.searchsorted(self.triple_offsets, flat, side="right") - 1)
        rest = flat - int(self.triple_offsets[s])
        values = np.unravel_index(rest, self.req.triples[s].shape)
        return [(int(a), int(v)) for a, v in zip(self.triple_cols[s], values)]

    def done(self) -> bool:
        """Whether every required pair and triple is covered."""
        return not len(self.missing_pairs()) and not len(self.missing_triples())
