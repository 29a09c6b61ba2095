"""Inline charts: they say what the PNG says at a glance and always fit the UI's inline limit."""

import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from sim_pipeline import defaults
from sim_pipeline.measure.text_charts import bar, delta_chart, interval_strip, pass_curve_chart, weights_chart

LIMIT = defaults.INLINE_MARKDOWN_LIMIT


def test_an_interval_strip_puts_zero_the_interval_and_the_estimate_where_they_are():
    strip = interval_strip(0.5, 0.3, 0.7, width=21)  # cells of 0.1 on [-1, +1]
    assert strip[10] == "┆" and strip[16:18] == "━━" and strip[15] == "●" and strip[13:15] == "━━"
    assert set(strip[:10]) == {"·"} and strip[18:] == "···"
    assert interval_strip(-2.0, -3.0, -1.5, width=21)[0] == "●"  # clipped to the axis, never out of range
    assert interval_strip(float("nan"), float("nan"), float("nan"), width=21) == "··········┆··········"
    assert len(interval_strip(0.0, -0.1, 0.1)) == defaults.INLINE_CHART_WIDTH


def test_bars_fill_in_proportion():
    assert bar(0.0, width=10) == "░" * 10 and bar(1.0, width=10) == "█" * 10 and bar(0.54, width=10).count("█") == 5


def delta_rows(n):
    return pd.DataFrame({"metric": [f"marker_number_{i}" for i in range(n)], "delta": [0.1] * n, "ci_low": [-0.1] * n,
                         "ci_high": [0.3] * n, "verdict": ["INCONCLUSIVE"] * n})


@given(st.integers(min_value=1, max_value=60))
def test_the_delta_chart_fits_inline_however_many_metrics(n):
    chart = delta_chart(delta_rows(n))
    assert len(chart) <= LIMIT and "marker_number_0" in chart
    assert ("more metrics in the `delta` table" in chart) == (f"marker_number_{n - 1} " not in chart)


@given(st.integers(min_value=1, max_value=300))
def test_the_weights_chart_shows_every_arm_however_many_batches(batches):
    table = pd.DataFrame({"batch": range(batches), **{f"w_{a}": [1 / len(defaults.SEARCH_ARMS)] * batches
                                                      for a in defaults.SEARCH_ARMS}})
    chart = weights_chart(table, defaults.SEARCH_ARMS)
    assert len(chart) <= LIMIT and all(f"| {a} |" in chart for a in defaults.SEARCH_ARMS)
    assert f"({batches} batches)" in chart


def test_the_pass_curve_chart_shows_both_metrics_per_k():
    curve = pd.DataFrame({"metric": ["pass@k", "pass^k"] * 2, "k": [1, 1, 2, 2], "value": [0.5, 0.5, 0.75, 0.3]})
    chart = pass_curve_chart(curve)
    assert "| 2 | `████████░░` 0.75 | `███░░░░░░░` 0.30 |" in chart.replace("\xa0", " ") and len(chart) <= LIMIT
