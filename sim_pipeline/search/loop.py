"""Step 03: the search loop. Draws train situations batch by batch and measures each batch's novelty yield.

This first version runs the `structured` arm only (the next unrendered covering-array cell); its weight is 1.0 and
the table records it so the five-arm search can replace it without changing the asset's shape.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pandas as pd

from sim_pipeline import defaults
from sim_pipeline.situation import AXES, Situation

ARM_STRUCTURED = "structured"


@dataclass(frozen=True)
class SearchSettings:
    """Budget and stopping rules of one search."""

    batch_situations: int = defaults.SEARCH_BATCH_SITUATIONS
    budget_rows: int = defaults.SEARCH_BUDGET_ROWS
    saturation_yield: float = defaults.SEARCH_SATURATION_YIELD
    patience: int = defaults.SEARCH_SATURATION_PATIENCE


async def run_search(train: list[Situation], run_batch: Callable[[list[Situation], int], Awaitable[pd.DataFrame]],
                     settings: SearchSettings = SearchSettings()) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """Run batches until budget, saturation or no cell is left; returns (search table, rollouts, stop reason)."""
    seen_signatures: set[str] = set()
    seen_cells: set[tuple[str, ...]] = set()
    draws, frames = [], []
    queue = list(train)
    flat, rows_used, batch, reason = 0, 0, 0, "no train situations"
    while queue:
        if rows_used >= settings.budget_rows:
            reason = f"budget: {rows_used} rows >= {settings.budget_rows}"
            break
        chosen, queue = queue[: settings.batch_situations], queue[settings.batch_situations:]
        rows = await run_batch(chosen, batch)
        signatures = set(rows["behavior_signature"]) if len(rows) else set()
        cells = {tuple(s.cell[a] for a in AXES) for s in chosen}
        new_sig, new_cells = len(signatures - seen_signatures), len(cells - seen_cells)
        seen_signatures |= signatures
        seen_cells |= cells
        yield_ = (new_sig + new_cells) / max(len(rows), 1)
        for s in chosen:
            draws.append({"batch": batch, "arm": ARM_STRUCTURED, "situation_id": s.situation_id,
                          "weight_structured": 1.0, "batch_rows": len(rows), "new_signatures": new_sig,
                          "new_cells": new_cells, "yield": yield_})
        frames.append(rows)
        rows_used += len(rows)
        batch += 1
        flat = flat + 1 if yield_ < settings.saturation_yield else 0
        if flat >= settings.patience:
            reason = f"saturation: {flat} batches in a row below yield {settings.saturation_yield}"
            break
    else:
        if train:
            reason = "exhausted: every planned train cell was drawn"
    search = pd.DataFrame(draws, columns=["batch", "arm", "situation_id", "weight_structured", "batch_rows",
                                          "new_signatures", "new_cells", "yield"])
    search["stop_reason"] = reason
    frames = [f for f in frames if len(f)]
    rollouts = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return search, rollouts, reason
