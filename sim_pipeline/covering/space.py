"""Integer encoding of a covering-array problem: value indices, forbidden tuples, required pairs and triples.

Axis i has values 0..sizes[i]-1; a global value index is offsets[i] + value, so pair coverage fits a dense
(V, V) count matrix. Forbidden tuples are checked by a small depth-first search with forward checking,
which also decides which pairs and triples can appear in any valid row (only those are required).
"""

from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

Entry = tuple[int, int]  # (axis, value)


@dataclass(frozen=True)
class Space:
    """Axis sizes, forbidden tuples and strength-3 axis triples of one covering-array problem."""

    sizes: tuple[int, ...]
    forbidden: tuple[tuple[Entry, ...], ...] = ()
    triple_axes: tuple[tuple[int, int, int], ...] = ()
    offsets: np.ndarray = field(init=False, repr=False)
    axis_of: np.ndarray = field(init=False, repr=False)
    by_entry: dict[Entry, tuple[tuple[Entry, ...], ...]] = field(init=False, repr=False)
    # Forbidden tuples grouped by their axes, (axes, values (m, len(axes))), with the groups touching each axis:
    # valid_rows tests a group in one numpy comparison instead of one per tuple (its Python loop was about half of
    # the covering array's time in the tabu repair, which calls it once per move).
    by_axes: tuple[tuple[np.ndarray, np.ndarray], ...] = field(init=False, repr=False)
    groups_of_axis: dict[int, tuple[int, ...]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        sizes = np.asarray(self.sizes, dtype=np.int64)
        object.__setattr__(self, "offsets", np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64))
        object.__setattr__(self, "axis_of", np.repeat(np.arange(len(sizes)), sizes))
        index: dict[Entry, list[tuple[Entry, ...]]] = {}
        for tup in self.forbidden:
            for entry in tup:
                index.setdefault(entry, []).append(tup)
        object.__setattr__(self, "by_entry", {e: tuple(ts) for e, ts in index.items()})
        grouped: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        for tup in self.forbidden:
            grouped.setdefault(tuple(a for a, _ in tup), []).append(tuple(v for _, v in tup))
        object.__setattr__(self, "by_axes", tuple((np.array(axes, dtype=np.int64), np.array(vals, dtype=np.int64))
                                                  for axes, vals in grouped.items()))
        touching: dict[int, list[int]] = {}
        for g, axes in enumerate(grouped):
            for a in set(axes):
                touching.setdefault(a, []).append(g)
        object.__setattr__(self, "groups_of_axis", {a: tuple(gs) for a, gs in touching.items()})

    @property
    def k(self) -> int:
        """Number of axes."""
        return len(self.sizes)

    @property
    def n_values(self) -> int:
        """Total number of values over all axes (V)."""
        return int(sum(self.sizes))

    def clashes(self, assign: dict[int, int], axis: int, value: int) -> bool:
        """Whether setting axis=value completes a forbidden tuple given the partial assignment."""
        for tup in self.by_entry.get((axis, value), ()):
            if all(a == axis or assign.get(a) == v for a, v in tup):
                return True
        return False

    def valid_rows(self, rows: np.ndarray, touching: np.ndarray | None = None) -> np.ndarray:
        """Boolean mask of rows (N, k) that contain no forbidden tuple (only those touching given axes)."""
        ok = np.ones(len(rows), dtype=bool)
        if touching is None:
            groups = range(len(self.by_axes))
        else:
            groups = sorted({g for a in np.asarray(touching).ravel().tolist() for g in self.groups_of_axis.get(a, ())})
        for g in groups:
            axes, values = self.by_axes[g]
            ok &= ~(rows[:, axes][:, None, :] == values[None, :, :]).all(axis=2).any(axis=1)
        return ok

    def complete(self, partial: dict[int, int], prefer: np.ndarray | None = None) -> np.ndarray | None:
        """A full valid row extending the partial assignment, or None when none exists.

        `prefer` (length V) orders the values tried per axis, highest first; the search picks the
        unassigned axis with the fewest allowed values first (forward checking), so dead ends are found early.
        """
        assign = dict(partial)
        for axis, value in partial.items():
            rest = {a: v for a, v in partial.items() if a != axis}
            if self.clashes(rest, axis, value):
                return None
        if not self.forbidden:
            return self._fill(assign, prefer)
        found = self._search(assign, prefer)
        return None if found is None else np.array([found[i] for i in range(self.k)], dtype=np.int64)

    def _fill(self, assign: dict[int, int], prefer: np.ndarray | None) -> np.ndarray:
        row = np.zeros(self.k, dtype=np.int64)
        for axis in range(self.k):
            if axis in assign:
                row[axis] = assign[axis]
            elif prefer is not None:
                lo = self.offsets[axis]
                row[axis] = int(np.argmax(prefer[lo:lo + self.sizes[axis]]))
        return row

    def _search(self, assign: dict[int, int], prefer: np.ndarray | None) -> dict[int, int] | None:
        free = [a for a in range(self.k) if a not in assign]
        if not free:
            return assign
        best_axis, best_values = -1, None
        for axis in free:
            allowed = [v for v in range(self.sizes[axis]) if not self.clashes(assign, axis, v)]
            if best_values is None or len(allowed) < len(best_values):
                best_axis, best_values = axis, allowed
            if not allowed:
                return None
        if prefer is not None:
            lo = self.offsets[best_axis]
            best_values.sort(key=lambda v: -prefer[lo + v])
        for value in best_values:
            assign[best_axis] = value
            if self._search(assign, prefer) is not None:
                return assign
            del assign[best_axis]
        return None


@dataclass(frozen=True)
class Requirements:
    """What a covering array must cover: a (V, V) pair mask and one triple mask per strength-3 axis triple."""

    feasible_values: np.ndarray  # (V,) bool: the value appears in some valid row
    pairs: np.ndarray  # (V, V) bool, symmetric, False on same-axis pairs and impossible pairs
    triples: tuple[np.ndarray, ...]  # per Space.triple_axes entry, bool (v_x, v_y, v_z)


def requirements(space: Space) -> Requirements:
    """Decide which values, pairs and triples can appear in a valid row (and so must be covered)."""
    n, off = space.n_values, space.offsets
    involved = {e for tup in space.forbidden for e in tup}
    any_row = space.complete({}) is not None
    feasible = np.full(n, any_row)
    for axis, value in involved:
        feasible[off[axis] + value] = space.complete({axis: value}) is not None
    pairs = np.logical_and.outer(feasible, feasible)
    pairs &= space.axis_of[:, None] != space.axis_of[None, :]
    # A pair with a value outside every forbidden tuple is possible iff its other value is (see module doc):
    # only pairs of two involved values need a search.
    for (a, x), (b, y) in combinations(sorted(involved), 2):
        if a != b and pairs[off[a] + x, off[b] + y]:
            ok = space.complete({a: x, b: y}) is not None
            pairs[off[a] + x, off[b] + y] = pairs[off[b] + y, off[a] + x] = ok
    triples = []
    for axes in space.triple_axes:
        x, y, z = axes
        blocks = [off[a] + np.arange(space.sizes[a]) for a in axes]
        mask = (pairs[np.ix_(blocks[0], blocks[1])][:, :, None]
                & pairs[np.ix_(blocks[0], blocks[2])][:, None, :]
                & pairs[np.ix_(blocks[1], blocks[2])][None, :, :])
        for i, j, m in zip(*np.nonzero(mask)):
            if (x, int(i)) in involved and (y, int(j)) in involved and (z, int(m)) in involved:
                mask[i, j, m] = space.complete({x: int(i), y: int(j), z: int(m)}) is not None
        triples.append(mask)
    return Requirements(feasible_values=feasible, pairs=pairs, triples=tuple(triples))
