"""Arm weights: multiplicative updates toward the arms whose batches found new behaviour, with floors and caps.

After each batch, w_a *= 1 + step * yield_a; the weights are renormalised, clamped to [floor_a, cap_a] and
renormalised again until they satisfy the bounds (REFERENCE 3). An arm that did not run gets the batch's mean yield,
so silence is neither rewarded nor punished. Novelty search, not importance sampling (Lehman & Stanley 2011).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from sim_pipeline import defaults
from sim_pipeline.search.arms import ARMS
from sim_pipeline.search.registry import Arm, build

CLAMP_ROUNDS = 100  # bisection steps for the scale factor: far below float resolution


@dataclass(frozen=True)
class WeightRule:
    """The registered arms (each with its start weight, floor and cap) and the update step."""

    registry: tuple[Arm, ...] = ARMS
    step: float = defaults.SEARCH_WEIGHT_STEP

    @property
    def arms(self) -> tuple[str, ...]:
        """The arms' names in draw order."""
        return tuple(a.name for a in self.registry)

    @property
    def start(self) -> dict[str, float]:
        """Each arm's start weight."""
        return {a.name: a.start for a in self.registry}

    @property
    def floors(self) -> dict[str, float]:
        """Each arm's floor."""
        return {a.name: a.floor for a in self.registry}

    @property
    def caps(self) -> dict[str, float]:
        """Each arm's cap."""
        return {a.name: a.cap for a in self.registry}

    @classmethod
    def from_table(cls, table: Mapping[str, Mapping[str, float]], *, origin: str,
                   step: float = defaults.SEARCH_WEIGHT_STEP) -> WeightRule:
        """A rule from a table like defaults.SEARCH_ARM_WEIGHTS (checked as the registry checks it)."""
        return cls(build(table, origin=origin), step)

    @classmethod
    def fixed(cls, weights: Mapping[str, float], *, origin: str = "fixed search weights") -> WeightRule:
        """Weights that never move (floor and cap at the start): a baseline to measure the update against."""
        return cls.from_table({a: dict.fromkeys(("start", "floor", "cap"), w) for a, w in weights.items()},
                              origin=origin)

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
