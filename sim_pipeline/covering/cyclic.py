"""Cyclic rows for k axes of v values each, after Meagher & Stevens (2005), "New covering arrays and
covering codes": k*(v-f) rows developed from one starter vector.

Values 0..m-1 (m = v - f) form the group Z_m; the f values m..v-1 are fixed points. The rows are every
cyclic shift of the starter, each with every group element added to its non-fixed entries. Two columns
at cyclic distance d then see the starter's pairs (s[i], s[i+d]) moved by the group, so they cover every
pair except (fixed, fixed) ones iff, for each d, those pairs hit every orbit: each difference in Z_m and
each (moving, fixed) and (fixed, moving) combination. A weighted tabu search looks for such a starter;
whatever it leaves uncovered (and the fixed-fixed pairs) the greedy adds afterwards.
"""

import numpy as np

from sim_pipeline import defaults

TIE_NOISE = 1e-3  # below one unit of orbit weight: only breaks ties


def fixed_point_options(v: int, k: int) -> list[int]:
    """Fixed-value counts f for which a starter can exist by counting, fewest rows first.

    With M moving positions, the ordered moving pairs M(M-1) must give each of the k-1 distances all
    m = v-f differences, and each fixed value needs ceil((k-1)/M) positions to meet every distance.
    """
    def possible(f: int) -> bool:
        m = v - f
        return any(moving * (moving - 1) >= m * (k - 1) and k - moving >= f * -(-(k - 1) // moving)
                   for moving in range(2, k))
    return [f for f in range(v - 2, 0, -1) if possible(f)]


def _orbits(x: np.ndarray, y: np.ndarray, m: int, f: int) -> np.ndarray:
    """Orbit of (x, y): a difference, a (moving, fixed) or (fixed, moving) kind, m+2f for two fixed."""
    xf, yf = x >= m, y >= m
    return np.where(~xf & ~yf, (y - x) % m,
                    np.where(~xf & yf, y, np.where(xf & ~yf, x + f, m + 2 * f)))


def find_starter(v: int, k: int, f: int, rng: np.random.Generator, moves: int) -> tuple[np.ndarray, int]:
    """The starter with the fewest missing (distance, orbit) combinations found, and that number.

    Breakout weighting (Morris 1993, "The breakout method for escaping from local minima"): at a local
    minimum the weights of the orbits still missing grow, reshaping the landscape instead of restarting.
    """
    m, n_orbits = v - f, v - f + 2 * f + 1  # the last orbit (fixed, fixed) is never required
    dist = np.arange(1, k)
    s = rng.integers(v, size=k)
    counts = np.zeros((k - 1, n_orbits), dtype=np.int64)
    pairs = _orbits(np.broadcast_to(s, (k - 1, k)), s[(np.arange(k)[None, :] + dist[:, None]) % k], m, f)
    np.add.at(counts, (np.repeat(np.arange(k - 1), k), pairs.ravel()), 1)
    weight = np.ones((k - 1, n_orbits))
    weight[:, -1] = 0.0
    pos, val = np.divmod(np.arange(k * v), v)
    row = np.arange(k - 1)[None, :]
    orbit = _orbits(*np.meshgrid(np.arange(v), np.arange(v), indexing="ij"), m, f)  # orbit[x, y] lookup
    tabu = np.full(k, -1)
    best, best_missing = s.copy(), int(((counts == 0) & (weight > 0)).sum())
    for step in range(moves):
        if best_missing == 0:
            break
        left, right = s[(pos[:, None] - dist) % k], s[(pos[:, None] + dist) % k]
        old, new = np.broadcast_arrays(s[pos][:, None], val[:, None], left)[:2]
        # each candidate (position, value) removes two pairs per distance and adds two
        cells = [orbit[left, old], orbit[old, right], orbit[left, new], orbit[new, right]]
        change = _cost_change(cells, counts, weight, row)
        change += rng.random(len(change)) * TIE_NOISE
        change[(val == s[pos]) | (tabu[pos] > step)] = np.inf
        pick = int(np.argmin(change))
        if change[pick] >= 0:  # a local minimum: make the orbits still missing weigh more
            weight += (counts == 0) & (weight > 0)
        p = int(pos[pick])
        for sign, cell in ((-1, cells[0]), (-1, cells[1]), (1, cells[2]), (1, cells[3])):
            np.add.at(counts, (row[0], cell[pick]), sign)
        s = s.copy()
        s[p] = val[pick]
        tabu[p] = step + defaults.COVER_STARTER_TABU_TENURE
        missing = int(((counts == 0) & (weight > 0)).sum())
        if missing < best_missing:
            best, best_missing = s.copy(), missing
    return best, best_missing


def _cost_change(cells: list[np.ndarray], counts: np.ndarray, weight: np.ndarray,
                 row: np.ndarray) -> np.ndarray:
    """Per candidate, the change in total weight of missing orbits (removed cells first, then added)."""
    signs = (-1, -1, 1, 1)
    change = np.zeros(cells[0].shape[0])
    for i, cell in enumerate(cells):
        net = sum(sign * (other == cell) for sign, other in zip(signs, cells))
        fresh = np.ones(cell.shape, dtype=bool)  # count each distinct (distance, orbit) cell once
        for other in cells[:i]:
            fresh &= other != cell
        before = counts[row, cell]
        term = weight[row, cell] * (((before + net) == 0).astype(np.float64) - (before == 0))
        change += (term * fresh).sum(axis=1)
    return change


def develop(starter: np.ndarray, v: int, f: int) -> np.ndarray:
    """All cyclic shifts of the starter, each moved by every element of Z_(v-f): (k*(v-f), k) rows."""
    k, m = len(starter), v - f
    shifts = starter[(np.arange(k)[:, None] + np.arange(k)[None, :]) % k]
    return np.vstack([np.where(shifts < m, (shifts + g) % m, shifts) for g in range(m)])
