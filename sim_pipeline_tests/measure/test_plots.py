"""Plots: valid PNG bytes, identical for identical inputs (no timestamp or version tag), robust to empty data."""

import base64
import struct

import matplotlib
import numpy as np
import pandas as pd
import pytest

from sim_pipeline.errors import StatisticsError
from sim_pipeline.measure.delta import delta_report
from sim_pipeline.measure.pairing import paired_differences
from sim_pipeline.measure.plots import plot_paired_differences, plot_pass_curves, png_markdown

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
VERSIONS = {"baseline_version": "v1", "candidate_version": "v2"}


def _chunks(png: bytes) -> list[tuple[bytes, bytes]]:
    """(type, data) of every PNG chunk."""
    out, pos = [], len(PNG_MAGIC)
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos:pos + 4])
        out.append((png[pos + 4:pos + 8], png[pos + 8:pos + 8 + length]))
        pos += 12 + length
    return out


def _pair(grades_builder) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(0)
    return (grades_builder("v1", (rng.random((30, 4)) < 0.3).astype(float)),
            grades_builder("v2", (rng.random((30, 4)) < 0.6).astype(float)))


def test_paired_differences_plot_is_deterministic_png(grades_builder) -> None:
    baseline, candidate = _pair(grades_builder)
    differences = paired_differences(baseline, candidate, **VERSIONS)
    report = delta_report(baseline, candidate, n_resamples=500, **VERSIONS)
    png = plot_paired_differences(differences, report=report)
    assert png.startswith(PNG_MAGIC) and _chunks(png)[-1][0] == b"IEND"
    assert png == plot_paired_differences(differences, report=report)
    chunk_types = {kind for kind, _ in _chunks(png)}
    assert b"tIME" not in chunk_types
    assert not any(b"Software" in data for kind, data in _chunks(png) if kind in (b"tEXt", b"iTXt", b"zTXt"))
    # Without a report the interval is bootstrapped here, seeded: still the same bytes twice.
    alone = plot_paired_differences(differences, metric="pass^4", seed=3, n_resamples=500)
    assert alone == plot_paired_differences(differences, metric="pass^4", seed=3, n_resamples=500)
    assert alone != png


def test_pass_curves_plot_is_deterministic_png(grades_builder) -> None:
    grades = _pair(grades_builder)[1]
    png = plot_pass_curves(grades, n_resamples=300)
    assert png.startswith(PNG_MAGIC)
    assert png == plot_pass_curves(grades, n_resamples=300)
    assert png != plot_pass_curves(grades, k_max=2, n_resamples=300)


def test_user_style_does_not_change_the_bytes(grades_builder) -> None:
    grades = _pair(grades_builder)[1]
    png = plot_pass_curves(grades, n_resamples=300)
    with matplotlib.rc_context({"lines.linewidth": 6.0, "axes.facecolor": "black", "font.size": 20}):
        assert plot_pass_curves(grades, n_resamples=300) == png


def test_empty_inputs_still_plot(grades_builder) -> None:
    empty_diffs = pd.DataFrame({"metric": pd.Series(dtype=str), "difference": pd.Series(dtype=float)})
    assert plot_paired_differences(empty_diffs).startswith(PNG_MAGIC)
    assert plot_pass_curves(pd.DataFrame({"situation_id": [], "reward": []})).startswith(PNG_MAGIC)
    with pytest.raises(StatisticsError, match="differences lack column"):
        plot_paired_differences(pd.DataFrame({"metric": ["pass@1"]}))


def test_png_markdown_round_trips() -> None:
    text = png_markdown(PNG_MAGIC + b"rest", alt="delta")
    assert text.startswith("![delta](data:image/png;base64,")
    assert base64.b64decode(text.split(",", 1)[1].rstrip(")")) == PNG_MAGIC + b"rest"
