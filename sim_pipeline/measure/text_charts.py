"""Charts as short Markdown in monospace: Dagster's UI renders Markdown metadata under
`defaults.INLINE_MARKDOWN_LIMIT` characters inline on the asset page, while a PNG (tens of KB of base64) always
hides behind "[Show Markdown]". Each chart here is the inline view; the PNG beside it keeps the detail.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim_pipeline.defaults import INLINE_BAR_WIDTH, INLINE_CHART_WIDTH, INLINE_MARKDOWN_LIMIT

LEVELS = "▁▂▃▄▅▆▇█"  # eight bar heights for sparklines


def _cell(text: str) -> str:
    """A table cell in monospace that keeps its spaces (Markdown collapses them outside code)."""
    return f"`{text.replace(' ', chr(0xA0))}`"


def interval_strip(point: float, low: float, high: float, *, lo: float = -1.0, hi: float = 1.0,
                   width: int = INLINE_CHART_WIDTH) -> str:
    """One interval on the axis [lo, hi]: ━ the interval, ● the estimate, ┆ zero, · the rest."""
    def at(x: float) -> int:
        return int(round((min(max(x, lo), hi) - lo) / (hi - lo) * (width - 1)))

    strip = ["·"] * width
    if lo < 0 < hi:
        strip[at(0.0)] = "┆"
    if np.isfinite(low) and np.isfinite(high):
        for i in range(at(low), at(high) + 1):
            strip[i] = "━"
    if np.isfinite(point):
        strip[at(point)] = "●"
    return "".join(strip)


def bar(value: float, *, width: int = INLINE_BAR_WIDTH) -> str:
    """A rate in [0, 1] as a horizontal bar of `width` cells."""
    filled = int(round(min(max(value, 0.0), 1.0) * width)) if np.isfinite(value) else 0
    return "█" * filled + "░" * (width - filled)


def sparkline(values: list[float], *, top: float = 1.0) -> str:
    """Values in [0, top] as one line of bar heights."""
    return "".join(LEVELS[min(int(v / top * len(LEVELS)), len(LEVELS) - 1)] if np.isfinite(v) else " "
                   for v in values)


def fit_inline(lines: list[str], *, header: int, note: str) -> str:
    """Join table lines, dropping body rows from the end until the Markdown fits the inline limit."""
    text = "\n".join(lines)
    if len(text) <= INLINE_MARKDOWN_LIMIT:
        return text
    kept, tail = list(lines), f"\n\n{note}"
    while len("\n".join(kept)) + len(tail) > INLINE_MARKDOWN_LIMIT and len(kept) > header + 1:
        kept.pop()
    return "\n".join(kept) + tail


def delta_chart(report: pd.DataFrame) -> str:
    """The delta table's intervals as a forest plot on [-1, +1]: one row per metric with estimate and verdict."""
    lines = ["| metric | delta | 95% CI, -1 to +1 | verdict |", "|---|---:|---|---|"]
    for r in report.itertuples(index=False):
        lines.append(f"| {r.metric} | {r.delta:+.3f} | {_cell(interval_strip(r.delta, r.ci_low, r.ci_high))} "
                     f"| {r.verdict} |")
    return fit_inline(lines, header=2, note="(more metrics in the `delta` table)")


def pass_curve_chart(curve: pd.DataFrame) -> str:
    """pass@k and pass^k by k (from `passat.pass_curve`) as bars side by side."""
    if not len(curve):
        return "no graded tasks"
    wide = curve.pivot_table(index="k", columns="metric", values="value").sort_index()
    metrics = [m for m in ("pass@k", "pass^k") if m in wide.columns]
    lines = [f"| k | {' | '.join(metrics)} |", "|---:|" + "---|" * len(metrics)]
    for k, row in wide.iterrows():
        lines.append(f"| {k} | " + " | ".join(f"{_cell(bar(row[m]))} {row[m]:.2f}" for m in metrics) + " |")
    return fit_inline(lines, header=2, note="(larger k in the `pass_curves` plot)")


def weights_chart(by_batch: pd.DataFrame, arms: tuple[str, ...]) -> str:
    """Each arm's weight per batch as a sparkline (0 to 1), with its first and last weight."""
    if not len(by_batch):
        return "no search batch"
    step = max(1, int(np.ceil(len(by_batch) / INLINE_CHART_WIDTH)))  # at most one chart width of batches
    shown = by_batch.iloc[::step]
    lines = [f"| arm | weight per batch ({len(by_batch)} batches) | first | last |", "|---|---|---:|---:|"]
    for arm in arms:
        column = by_batch[f"w_{arm}"]
        lines.append(f"| {arm} | {_cell(sparkline(shown[f'w_{arm}'].astype(float).tolist()))} "
                     f"| {column.iloc[0]:.2f} | {column.iloc[-1]:.2f} |")
    return fit_inline(lines, header=2, note="(every arm in the `weights_plot`)")


def loss_chart(curves: dict[str, list[float]]) -> str:
    """Each method's loss by step as a sparkline (its own scale), with the first and last value."""
    if not curves:
        return "no method trained"
    lines = ["| method | loss by step | first | last | steps |", "|---|---|---:|---:|---:|"]
    for method, losses in sorted(curves.items()):
        values = np.asarray(losses, dtype=float)
        low, high = float(np.nanmin(values)), float(np.nanmax(values))
        step = max(1, int(np.ceil(len(values) / INLINE_CHART_WIDTH)))
        scaled = ((values[::step] - low) / (high - low) if high > low else np.zeros(len(values[::step]))).tolist()
        lines.append(f"| {method} | {_cell(sparkline(scaled))} | {values[0]:.3f} | {values[-1]:.3f} "
                     f"| {len(values) - 1} |")
    return fit_inline(lines, header=2, note="(every step in the `loss_plot`)")
