"""Arm weights: multiplicative updates toward the arms whose batches found new behaviour, with floors and caps.

After each batch, w_a *= 1 + step * yield_a; the weights are renormalised, clamped to [floor_a, cap_a] and
renormalised again until they satisfy the bounds (REFERENCE 3). An arm that did not run gets the batch's mean yield,
so silence is neither rewarded nor punished. Novelty search, not importance sampling (Lehman & Stanley 2011).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sim_pipeline import defaults

CLAMP_ROUNDS = 100  # bisection steps for the scale factor: far below float resolution


@dataclass(frozen=True)
class WeightRule:
    """The arms, their starting weights, floors, caps and the update step."""

    arms: tuple[str, ...] = defaults.SEARCH_ARMS
    start: dict[str, float] = field(default_factory=lambda: dict(defaults.SEARCH_START_WEIGHTS))
    floors: dict[str, float] = field(default_factory=lambda: dict(defaults.SEARCH_WEIGHT_FLOORS))
    caps: dict[str, float] = field(default_factory=lambda: dict(defaults.SEARCH_WEIGHT_CAPS))
    step: float = defaults.SEARCH_WEIGHT_STEP

    def initial(self) -> np.ndarray:
        """The starting weights, clamped."""
        return self.clamp(np.array([self.start[a] for a in self.arms], dtype=float))

    def clamp(self, weights: np.ndarray) -> np.ndarray:
        """Scale and clip: w_a = clip(c * v_a, floor_a, cap_a) with the one c that makes the weights sum to 1.

        Renormalising after clamping, repeated until nothing moves, converges to exactly this; the sum is monotone
        in c, so c is found by bisection.
        """
        low = np.array([self.floors[a] for a in self.arms])
        high = np.array([self.caps[a] for a in self.arms])
        v = np.asarray(weights, dtype=float) / np.sum(weights)
        lo, hi = 0.0, 1.0
        while np.clip(hi * v, low, high).sum() < 1.0 and hi < 1e12:
            hi *= 2.0
        for _ in range(CLAMP_ROUNDS):
            mid = (lo + hi) / 2.0
            lo, hi = (mid, hi) if np.clip(mid * v, low, high).sum() < 1.0 else (lo, mid)
        w = np.clip(hi * v, low, high)
        return w / w.sum()

    def update(self, weights: np.ndarray, yields: dict[str, float | None]) -> np.ndarray:
        """One batch's update; `yields[a]` is None when arm a did not run."""
        ran = [y for y in yields.values() if y is not None]
        mean = float(np.mean(ran)) if ran else 0.0
        y = np.array([mean if yields.get(a) is None else yields[a] for a in self.arms], dtype=float)
        return self.clamp(weights * (1.0 + self.step * y))


def allocate(weights: np.ndarray, n: int, gen: np.random.Generator) -> np.ndarray:
    """How many of a batch's n situations each arm draws: a seeded multinomial, so rare arms get their share."""
    return gen.multinomial(n, weights / weights.sum())
