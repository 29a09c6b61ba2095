"""PNG plots of the measures: paired differences per task with the interval, and pass@k / pass^k curves.

Figures are drawn on matplotlib's Agg canvas directly (no pyplot, so no global backend or figure state) under
matplotlib's default style, and saved without the Software tag, so the same inputs give the same bytes.
"""

import base64
import io
from collections.abc import Callable

import matplotlib.style
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from sim_pipeline.defaults import (
    BOOTSTRAP_RESAMPLES,
    CI_LEVEL,
    PASS_CURVE_RESAMPLES,
    PLOT_DPI,
    PLOT_SIZE_INCHES,
)
from sim_pipeline.errors import StatisticsError
from sim_pipeline.measure.passat import pass_curve
from sim_pipeline.measure.stats import paired_bootstrap_ci

_COLOURS = {"pass@k": "tab:blue", "pass^k": "tab:orange", "mean": "tab:red", "points": "tab:gray"}


def plot_paired_differences(
    differences: pd.DataFrame,
    *,
    metric: str = "pass@1",
    report: pd.DataFrame | None = None,
    seed: int = 0,
    n_resamples: int = BOOTSTRAP_RESAMPLES,
) -> bytes:
    """PNG of the per-task paired differences of one metric (sorted), their mean, and its confidence interval.

    `differences` is a `paired_differences` table; the interval and verdict come from `report` (a
    `delta_report` table) when given, else from the delta's own paired bootstrap over tasks (`DELTA_CI_METHOD`,
    bounded to [-1, 1] as differences of rates are) with `seed`.
    """
    missing = [col for col in ("metric", "difference") if col not in differences.columns]
    if missing:
        raise StatisticsError(f"differences lack column(s) {missing}; pass a paired_differences table.")
    values = np.sort(differences.loc[differences["metric"] == metric, "difference"].to_numpy(dtype=float))
    row = None
    if report is not None and "metric" in report.columns and (report["metric"] == metric).any():
        row = report.loc[report["metric"] == metric].iloc[0]
    if row is not None:
        mean, low, high, verdict = (float(row["delta"]), float(row["ci_low"]), float(row["ci_high"]),
                                    str(row["verdict"]))
    else:
        interval = paired_bootstrap_ci(values, n_resamples=n_resamples, seed=seed, bounds=(-1.0, 1.0))
        mean, low, high, verdict = interval.estimate, interval.low, interval.high, ""
    title = f"{metric}: candidate - baseline per task (n={values.size})" + (f" - {verdict}" if verdict else "")

    def draw(axes: Axes) -> None:
        axes.set_title(title)
        axes.set_xlabel("tasks, sorted by difference")
        axes.set_ylabel("paired difference")
        axes.axhline(0.0, color="black", linewidth=0.8)
        if not values.size:
            _no_data(axes, "no paired tasks for this metric")
            return
        axes.scatter(np.arange(1, values.size + 1), values, s=12, color=_COLOURS["points"], alpha=0.7, label="task")
        if np.isfinite(mean):
            axes.axhline(mean, color=_COLOURS["mean"], linewidth=1.5, label=f"mean {mean:+.3f}")
        if np.isfinite(low) and np.isfinite(high):
            axes.axhspan(low, high, color=_COLOURS["mean"], alpha=0.2,
                         label=f"{CI_LEVEL:.0%} interval [{low:+.3f}, {high:+.3f}]")
        axes.legend(loc="upper left", fontsize="small")

    return _render(draw)


def plot_pass_curves(
    grades: pd.DataFrame,
    *,
    k_max: int | None = None,
    seed: int = 0,
    n_resamples: int = PASS_CURVE_RESAMPLES,
    curve: pd.DataFrame | None = None,
) -> bytes:
    """PNG of pass@k (Chen et al. 2021) and pass^k (Yao et al. 2024) against k, with bootstrap bands over tasks
    (`curve`: a `pass_curve` table already computed from these grades)."""
    if curve is None:
        curve = pass_curve(grades, k_max=k_max, seed=seed, n_resamples=n_resamples)
    n_tasks = int(curve["n_tasks"].max()) if len(curve) else 0

    def draw(axes: Axes) -> None:
        axes.set_title(f"pass@k and pass^k over {n_tasks} tasks ({CI_LEVEL:.0%} bootstrap bands)")
        axes.set_xlabel("k (samples per task)")
        axes.set_ylabel("rate")
        axes.set_ylim(-0.02, 1.02)
        if not n_tasks:
            _no_data(axes, "no graded tasks")
            return
        for metric, points in curve.groupby("metric", sort=True):
            colour = _COLOURS[str(metric)]
            axes.plot(points["k"], points["value"], marker="o", color=colour, label=str(metric))
            axes.fill_between(points["k"], points["ci_low"], points["ci_high"], color=colour, alpha=0.2)
        axes.set_xticks(sorted(set(curve["k"])))
        axes.legend(loc="center right", fontsize="small")

    return _render(draw)


def plot_loss_curves(curves: dict[str, list[float]]) -> bytes:
    """PNG of each training method's loss by step (trained_policy): the value at the source profile is step 0."""
    def draw(axes: Axes) -> None:
        axes.set_title("training loss by step (step 0: the source profile)")
        axes.set_xlabel("step")
        axes.set_ylabel("loss (each method its own objective)")
        if not curves:
            _no_data(axes, "no method trained")
            return
        for method, losses in sorted(curves.items()):
            axes.plot(range(len(losses)), losses, marker="." if len(losses) < 40 else None, label=method)
        axes.legend(loc="upper right", fontsize="small")

    return _render(draw)


def png_markdown(png: bytes, *, alt: str) -> str:
    """Markdown that shows a PNG inline (a base64 data URI), e.g. for Dagster's Markdown metadata."""
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode('ascii')})"


def _render(draw: Callable[[Axes], None]) -> bytes:
    """PNG bytes of a fresh figure drawn by `draw` (default style, own Agg canvas, no Software tag)."""
    with matplotlib.style.context("default"):
        figure = Figure(figsize=PLOT_SIZE_INCHES, dpi=PLOT_DPI, layout="constrained")
        FigureCanvasAgg(figure)
        draw(figure.add_subplot())
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=PLOT_DPI, metadata={"Software": None})
    return buffer.getvalue()


def _no_data(axes: Axes, text: str) -> None:
    """Say on the plot that there is nothing to draw."""
    axes.text(0.5, 0.5, text, ha="center", va="center", transform=axes.transAxes)
