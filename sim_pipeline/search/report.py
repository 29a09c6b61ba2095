"""What the search asked for and what it got: arm weights per batch (table and plot), requested vs delivered."""

from __future__ import annotations

import io

import pandas as pd

from sim_pipeline import defaults
from sim_pipeline.protocol.statuses import FAULT_STATUSES
from sim_pipeline.search.weights import WeightRule


def delivery_report(search: pd.DataFrame, rollouts: pd.DataFrame) -> pd.DataFrame:
    """Requested (the drawn situations' axes) vs delivered (what the rollouts met): fault share, stance mix, turns."""
    if not len(search) or not len(rollouts):
        return pd.DataFrame(columns=["measure", "requested", "delivered"])
    train = rollouts[rollouts["split"] == "train"]
    faulted = train["tool_events"].map(lambda events: any(e["status"] in FAULT_STATUSES for e in events or []))
    rows = [{"measure": "fault share", "requested": float((search["tool_condition"] != "success").mean()),
             "delivered": float(faulted.mean())}]
    requested = search["stance"].value_counts(normalize=True)
    delivered = train["stance"].value_counts(normalize=True)
    rows += [{"measure": f"stance {s}", "requested": float(requested.get(s, 0.0)), "delivered": float(delivered.get(s, 0.0))}
             for s in sorted(set(requested.index) | set(delivered.index))]
    for arm, group in train.groupby("arm"):
        rows.append({"measure": f"mean turns ({arm})", "requested": None, "delivered": float(group["n_turns"].mean())})
    return pd.DataFrame(rows)


def plot_weights(by_batch: pd.DataFrame, rule: WeightRule = WeightRule()) -> bytes:
    """Arm weights per batch as a PNG (matplotlib without pyplot, no timestamps: the same table, the same bytes)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=defaults.PLOT_SIZE_INCHES, dpi=defaults.PLOT_DPI)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for arm in rule.arms:
        axes.plot(by_batch["batch"], by_batch[f"w_{arm}"], marker="o", markersize=3, label=arm)
    axes.set_xlabel("batch")
    axes.set_ylabel("weight at the draw")
    axes.set_ylim(0, 1)
    axes.legend(fontsize="small")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()
