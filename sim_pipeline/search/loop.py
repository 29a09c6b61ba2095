"""Step 04: the search loop. Each batch draws situations from five arms in proportion to their weights, runs them,
credits each arm with the kinds of failure (search/kinds.py), behaviour signatures and grid cells it found first, and
moves the weights toward the arms that keep finding new behaviour. It stops on budget, time, saturation, or when every
planned cell is filled.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pandas as pd

from sim_pipeline import defaults
from sim_pipeline.protocol.statuses import is_error
from sim_pipeline.search.arms import Arms, SearchContext, cell_of
from sim_pipeline.search.kinds import failure_kind
from sim_pipeline.search.weights import WeightRule, allocate
from sim_pipeline.seeding import rng
from sim_pipeline.situation import Situation

ARM_STRUCTURED = "structured"
RunBatch = Callable[[list[Situation], int], Awaitable[pd.DataFrame]]


@dataclass(frozen=True)
class SearchSettings:
    """Budget and stopping rules of one search."""

    batch_situations: int = defaults.SEARCH_BATCH_SITUATIONS
    budget_rows: int = defaults.SEARCH_BUDGET_ROWS
    saturation_yield: float = defaults.SEARCH_SATURATION_YIELD
    patience: int = defaults.SEARCH_SATURATION_PATIENCE
    cell_target: int = defaults.SEARCH_CELL_TARGET
    max_seconds: float | None = None  # wall-clock budget; off by default because it makes results machine-dependent
    stream: str = defaults.SEARCH_STREAM  # the label of the draws' random stream, with the seed


@dataclass
class Credit:
    """One arm's finds in one batch."""

    rows: int = 0
    new_signatures: int = 0
    new_cells: int = 0
    new_kinds: int = 0  # kinds of failure met first (search/kinds.py)

    @property
    def found(self) -> int:
        """What the arm is credited for: new kinds of failure + new signatures + new cells."""
        return self.new_kinds + self.new_signatures + self.new_cells


def _credit(rows: pd.DataFrame, arm_of: dict[str, str], arms: Arms) -> dict[str, Credit]:
    """Per arm: its rows and what they found first (crediting each discovery to the first row by rollout id)."""
    seen_sigs, seen_cells = set(arms.archive.signatures), set(arms.archive.rows_per_cell)
    ledger = arms.archive.kinds
    out: dict[str, Credit] = {}
    for row in rows.sort_values("rollout_id").to_dict("records"):
        sid, sig = row["situation_id"], row["behavior_signature"]
        tally = out.setdefault(arm_of[sid], Credit())
        tally.rows += 1
        if is_error(row["status"]):
            continue  # an errored rollout costs its row but discovers nothing: the endpoint failed, not the agent
        if sig not in seen_sigs:
            seen_sigs.add(sig)
            tally.new_signatures += 1
        cell = cell_of(arms.archive.drawn[sid])
        if cell not in seen_cells:
            seen_cells.add(cell)
            tally.new_cells += 1
        tally.new_kinds += ledger.meet(failure_kind(row, arms.ctx.domain, arms.archive.drawn[sid]))
    return out


def _stop_reason(arms: Arms, settings: SearchSettings, rows_used: int, flat: int, started: float) -> str | None:
    if rows_used >= settings.budget_rows:
        return f"budget: {rows_used} rows >= {settings.budget_rows}"
    if settings.max_seconds is not None and time.perf_counter() - started > settings.max_seconds:
        return f"time: over {settings.max_seconds} s"
    if flat >= settings.patience:
        return f"saturation: {flat} batches in a row below yield {settings.saturation_yield}"
    if arms.planned and min(arms.archive.rows_per_cell[c] for c in arms.planned) >= settings.cell_target:
        return f"filled: every planned cell has >= {settings.cell_target} rows"
    return None


async def run_search(ctx: SearchContext, run_batch: RunBatch, settings: SearchSettings = SearchSettings(),
                     rule: WeightRule = WeightRule()) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """Run batches until a stop rule fires; returns (search table, rollouts, stop reason)."""
    arms = Arms(ctx)
    gen = rng(ctx.seed, settings.stream)
    weights = rule.initial()
    grid = next(a for a in rule.registry if a.name == ARM_STRUCTURED)
    draws: list[dict] = []
    frames: list[pd.DataFrame] = []
    rows_used, flat, batch = 0, 0, 0
    started = time.perf_counter()
    reason = "no train situations" if not ctx.train else None
    while reason is None:
        counts = allocate(weights, settings.batch_situations, gen)
        drawn: list[tuple[str, Situation]] = []
        for arm, n in zip(rule.registry, counts):
            got = await arms.draw(arm, int(n), gen)
            drawn += [(arm.name, s) for s in got]
            if len(got) < n:  # an arm with nothing to offer yet lends its slots to the grid
                drawn += [(grid.name, s) for s in await arms.draw(grid, int(n) - len(got), gen)]
        situations = [s for _, s in drawn]
        for _, s in drawn:
            arms.archive.drawn[s.situation_id] = s
        rows = await run_batch(situations, batch)
        arm_of = {s.situation_id: arm for arm, s in drawn}
        credit = _credit(rows, arm_of, arms) if len(rows) else {}
        yields = {arm: (c.found / c.rows if c.rows else None) for arm, c in credit.items()}
        total = sum(c.rows for c in credit.values())
        batch_yield = sum(c.found for c in credit.values()) / total if total else 0.0
        for arm, s in drawn:
            c = credit.get(arm, Credit())
            draws.append({"batch": batch, "arm": arm, **s.to_row(),
                          "parent": s.notes.get("parent"), "kind": s.notes.get("probe") or s.notes.get("mutation"),
                          **{f"w_{a}": float(w) for a, w in zip(rule.arms, weights)},
                          "arm_rows": c.rows, "arm_new_signatures": c.new_signatures, "arm_new_cells": c.new_cells,
                          "arm_new_kinds": c.new_kinds, "arm_yield": yields.get(arm), "batch_yield": batch_yield})
        arms.archive.record(situations, rows)
        frames.append(rows)
        rows_used += len(rows)
        batch += 1
        weights = rule.update(weights, {a: yields.get(a) for a in rule.arms})
        flat = flat + 1 if batch_yield < settings.saturation_yield else 0
        reason = _stop_reason(arms, settings, rows_used, flat, started)
    search = pd.DataFrame(draws)
    if len(search):
        search["stop_reason"] = reason
    frames = [f for f in frames if len(f)]
    rollouts = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return search, rollouts, reason or ""


def final_weights(search: pd.DataFrame, rule: WeightRule = WeightRule()) -> dict[str, float]:
    """The weights the last batch was drawn with."""
    if not len(search):
        return dict(zip(rule.arms, rule.initial().tolist()))
    last = search[search["batch"] == search["batch"].max()].iloc[0]
    return {a: float(last[f"w_{a}"]) for a in rule.arms}


def weights_by_batch(search: pd.DataFrame, rule: WeightRule = WeightRule()) -> pd.DataFrame:
    """One row per batch: the weights it was drawn with and its yield."""
    if not len(search):
        return pd.DataFrame()
    columns = [f"w_{a}" for a in rule.arms]
    return search.groupby("batch", as_index=False)[[*columns, "batch_yield"]].first()


def kinds_opened(search: pd.DataFrame) -> dict[str, int]:
    """Per arm, the kinds of failure it met first (search/kinds.py): what its weight was credited for."""
    if not len(search) or "arm_new_kinds" not in search:
        return {}
    per_batch = search.groupby(["batch", "arm"])["arm_new_kinds"].first()  # one value per arm and batch, repeated
    return {str(arm): int(n) for arm, n in per_batch.groupby(level="arm").sum().items()}


def unique_signatures_per_1000(rollouts: pd.DataFrame) -> float:
    """Distinct behaviour signatures per 1000 rollouts (the search's novelty rate)."""
    return float(1000 * rollouts["behavior_signature"].nunique() / len(rollouts)) if len(rollouts) else float("nan")
