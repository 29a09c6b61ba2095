"""Step 04: the search loop. Each batch draws situations from five arms in proportion to their weights, runs them,
credits each arm with the behaviour signatures and grid cells it found first, and moves the weights toward the arms
that keep finding new behaviour. It stops on budget, time, saturation, or when every planned cell is filled.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pandas as pd

from sim_pipeline import defaults
from sim_pipeline.protocol.statuses import is_error
from sim_pipeline.search.arms import Arms, SearchContext, cell_of
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


def _credit(rows: pd.DataFrame, arm_of: dict[str, str], arms: Arms) -> dict[str, tuple[int, int, int]]:
    """Per arm: (rows, new signatures, new cells), crediting each discovery to the first row (by rollout id)."""
    seen_sigs, seen_cells = set(arms.archive.signatures), set(arms.archive.rows_per_cell)
    out: dict[str, list[int]] = {}
    columns = ["situation_id", "behavior_signature", "status"]
    for sid, sig, status in rows.sort_values("rollout_id")[columns].itertuples(index=False):
        arm = arm_of[sid]
        tally = out.setdefault(arm, [0, 0, 0])
        tally[0] += 1
        if is_error(status):
            continue  # an errored rollout costs its row but discovers nothing: the endpoint failed, not the agent
        if sig not in seen_sigs:
            seen_sigs.add(sig)
            tally[1] += 1
        cell = cell_of(arms.archive.drawn[sid])
        if cell not in seen_cells:
            seen_cells.add(cell)
            tally[2] += 1
    return {arm: (a, b, c) for arm, (a, b, c) in out.items()}


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
    gen = rng(ctx.seed, "search")
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
        yields = {arm: ((c[1] + c[2]) / c[0] if c[0] else None) for arm, c in credit.items()}
        total = sum(c[0] for c in credit.values())
        batch_yield = sum(c[1] + c[2] for c in credit.values()) / total if total else 0.0
        for arm, s in drawn:
            rows_, sigs, cells = credit.get(arm, (0, 0, 0))
            draws.append({"batch": batch, "arm": arm, **s.to_row(),
                          "parent": s.notes.get("parent"), "kind": s.notes.get("probe") or s.notes.get("mutation"),
                          **{f"w_{a}": float(w) for a, w in zip(rule.arms, weights)},
                          "arm_rows": rows_, "arm_new_signatures": sigs, "arm_new_cells": cells,
                          "arm_yield": yields.get(arm), "batch_yield": batch_yield})
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


def unique_signatures_per_1000(rollouts: pd.DataFrame) -> float:
    """Distinct behaviour signatures per 1000 rollouts (the search's novelty rate)."""
    return float(1000 * rollouts["behavior_signature"].nunique() / len(rollouts)) if len(rollouts) else float("nan")
