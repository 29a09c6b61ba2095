"""The view as one self-contained HTML file: a Jinja2 template (autoescaped: model output is untrusted) and plotly
figures whose library is inlined once, so the file opens from disk with no network."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from typing import Any

import jinja2
import markupsafe
import pandas as pd
import plotly.graph_objects as go
import plotly.offline

from sim_pipeline.view.assemble import DISAGREES, FILTERS, STALE_MARK, DeltaView, VersionView, ViewData, ending_rows, prompt_uses

VERDICT_COLOURS = {"PASS": "#1a7f37", "FAIL": "#cf222e", "INCONCLUSIVE": "#6e7781", "INSUFFICIENT DATA": "#afb8c1"}
ARROWS = {"higher_is_better": "higher is better", "lower_is_better": "lower is better"}
AXIS_LABELS = {"tool": "tool", "rule": "rule", "stance": "stance", "world_state": "world state",
               "tool_condition": "fault", "history": "history"}
_CONFIG = {"displaylogo": False, "responsive": True}


def _html(fig: go.Figure, div_id: str) -> str:
    """A figure's div and script, without the library (the page inlines it once); a fixed id: same bytes per run."""
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=_CONFIG)


def forest(delta: DeltaView) -> str:
    """Each metric's delta with its 95% interval around zero, coloured by verdict; the label says which way is
    better and whether the metric is guarded."""
    table = delta.table
    assert table is not None
    labels = [f"{r.metric} ({ARROWS.get(r.direction, r.direction)})" + (" [guarded]" if r.guarded else "")
              for r in table.itertuples(index=False)]
    fig = go.Figure(go.Scatter(
        x=table["delta"].tolist(), y=labels, mode="markers",
        marker={"size": 11, "color": [VERDICT_COLOURS.get(v, "#000") for v in table["verdict"]]},
        error_x={"type": "data", "symmetric": False, "array": (table["ci_high"] - table["delta"]).tolist(),
                 "arrayminus": (table["delta"] - table["ci_low"]).tolist()},
        customdata=table[["verdict", "ci_low", "ci_high"]].values.tolist(), name="delta",
        hovertemplate="%{y}<br>delta %{x:+.3f} [%{customdata[1]:+.3f}, %{customdata[2]:+.3f}]"
                      "<br>%{customdata[0]}<extra></extra>"))
    fig.add_vline(x=0, line_dash="dash", line_color="#444")
    fig.update_layout(title=f"{delta.candidate} minus {delta.baseline}: delta and 95% interval (paired bootstrap)",
                      xaxis_title="delta (candidate - baseline)", yaxis={"autorange": "reversed"},
                      height=120 + 36 * len(table), margin={"l": 20, "r": 20, "t": 50, "b": 40})
    return _html(fig, f"forest-{delta.candidate}")


def curves(view: VersionView) -> str:
    """pass@k and pass^k against k with their bootstrap intervals."""
    fig = go.Figure()
    assert view.curves is not None
    for metric, dash in (("pass@k", "solid"), ("pass^k", "dot")):
        rows = view.curves[view.curves["metric"] == metric]
        fig.add_trace(go.Scatter(
            x=rows["k"].tolist(), y=rows["value"].tolist(), name=metric, mode="lines+markers",
            line={"dash": dash},
            error_y={"type": "data", "symmetric": False, "array": (rows["ci_high"] - rows["value"]).tolist(),
                     "arrayminus": (rows["value"] - rows["ci_low"]).tolist()}))
    fig.update_layout(title=f"{view.slug}, seed {view.seed}: held-out pass@k and pass^k (95% bootstrap over tasks)",
                      xaxis={"title": "k", "dtick": 1}, yaxis={"title": "share of tasks", "range": [0, 1.05]},
                      height=340, margin={"l": 20, "r": 20, "t": 50, "b": 40})
    return _html(fig, f"curves-{view.slug}-{view.seed}")


def slice_chart(delta: DeltaView, axis: str, rows: pd.DataFrame) -> str:
    """pass@1 of baseline and candidate per value of one axis (the paired slices of measure/slices.py)."""
    fig = go.Figure([go.Bar(x=rows["value"].tolist(), y=rows["before"].tolist(), name=delta.baseline),
                     go.Bar(x=rows["value"].tolist(), y=rows["after"].tolist(), name=delta.candidate)])
    fig.update_layout(title=f"held-out pass@1 by {AXIS_LABELS.get(axis, axis)}", barmode="group",
                      yaxis={"range": [0, 1.05]}, height=300, margin={"l": 20, "r": 20, "t": 50, "b": 40})
    return _html(fig, f"slices-{delta.candidate}-{axis}")


def _code(text: str) -> markupsafe.Markup:
    """A protocol sentence with its `names` as <code> (escaped first: only the <code> tags are markup)."""
    return markupsafe.Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", str(markupsafe.escape(text))))


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("sim_pipeline.view", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["num"] = lambda v, spec=".3f": "n/a" if v is None or v != v else format(v, spec)
    env.filters["code"] = _code
    env.filters["pct"] = lambda v: "n/a" if v is None or v != v else f"{v:.1%}"
    return env


def _versions(data: ViewData) -> list[str]:
    """The versions shown, in the page's order (each once)."""
    return list(dict.fromkeys(v.slug for v in data.versions))


def render(data: ViewData) -> str:
    """The page's HTML."""
    charts: dict[str, Any] = {"forest": {}, "curves": {}, "slices": {}}
    for delta in data.deltas:
        if delta.table is not None:
            charts["forest"][delta.candidate] = forest(delta)
        charts["slices"][delta.candidate] = {axis: slice_chart(delta, axis, rows) for axis, rows in delta.slices.items()}
    for view in data.versions:
        if view.curves is not None and len(view.curves):
            charts["curves"][(view.slug, view.seed)] = curves(view)
    return _environment().get_template("report.html.j2").render(
        data=data, charts=charts, plotly_js=plotly.offline.get_plotlyjs(), filters=FILTERS, disagrees=DISAGREES,
        stale_mark=STALE_MARK, axis_labels=AXIS_LABELS, arrows=ARROWS, colours=VERDICT_COLOURS,
        prompt_uses=prompt_uses(data.transcripts), ending_versions=(versions := _versions(data)),
        endings=ending_rows(data.transcripts, versions))


def write(data: ViewData, out: Path) -> Path:
    """Write the page atomically (a reader sees the old file or the new one); returns its path."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{uuid.uuid4().hex}")
    try:
        tmp.write_text(render(data), encoding="utf-8")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out
