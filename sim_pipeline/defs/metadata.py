"""Typed Dagster metadata from engine tables, and the UI's links to one asset partition."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from urllib.parse import quote

import dagster as dg
import pandas as pd

from sim_pipeline.defs.partitions import partition_key

MAX_TABLE_ROWS = 50  # rows shown in a metadata table; the Parquet file holds the rest
DIGITS = 4  # decimals a number keeps in the UI (the Parquet file keeps them all)
# The catalog lists assets by key (alphabetically); grouped by this tag (Catalog > Group by > Tag) it lists them in
# pipeline order. A tag, not a key prefix: keys name the warehouse's directories and users' selections.
STEP_TAG = "step"
STEPS = {"axes": "01-axes", "covering_array": "02-cover", "world": "03-world", "situations": "03-world",
         "search": "04-search", "rollouts": "05-rollout", "grades": "06-grade",
         **dict.fromkeys(("sft", "preference_pairs", "grpo_groups", "reward_model_set", "reward_model_pairs"), "07-cut"),
         "scores": "08-measure", "delta": "08-measure", "trained_policy": "09-train"}


def _cell(value: object) -> str | int | float | bool | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return round(value, DIGITS)
    if hasattr(value, "item"):
        return _cell(value.item())
    return str(value)


def rounded(value: object) -> object:
    """A JSON-able value with every float rounded for the UI (a weight prints 0.3125, not 0.31249999999999994)."""
    if isinstance(value, Mapping):
        return {str(k): rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v) for v in value]
    return _cell(value)


def table_metadata(frame: pd.DataFrame) -> dg.TableMetadataValue:
    """A DataFrame (first rows) as a UI table; a labelled index (a confusion matrix's rows) becomes its first column."""
    labelled = frame.index.name is not None or not pd.api.types.is_integer_dtype(frame.index)
    # A filtered table keeps its row numbers as index: those are not labels, so they are dropped.
    frame = frame.reset_index(drop=not labelled)
    head = frame.head(MAX_TABLE_ROWS)
    schema = dg.TableSchema(columns=[dg.TableColumn(str(c), "string") for c in head.columns])
    records = [dg.TableRecord({str(k): _cell(v) for k, v in row.items()}) for row in head.to_dict("records")]
    return dg.MetadataValue.table(records=records, schema=schema)


def split_tables(frame: pd.DataFrame, key: str, groups: Sequence[Sequence[str]]) -> list[dg.TableMetadataValue]:
    """A wide table as narrow ones, each led by `key`: one per group of columns, then one with the rest (a UI table
    wider than its pane scrolls its last columns out of sight, and those were the ones a reader came for)."""
    named = [c for group in groups for c in group]
    missing = [c for c in (key, *named) if c not in frame.columns]
    if missing:
        raise KeyError(f"split_tables: columns {missing} are not in the table (it has {list(frame.columns)})")
    rest = [c for c in frame.columns if c != key and c not in named]
    return [table_metadata(frame[[key, *group]]) for group in (*groups, rest)]


def step_tag(step: str) -> dict[str, str]:
    """The asset's step tag ('01-axes' ... '09-train'), by which the catalog can list the steps in order."""
    return {STEP_TAG: STEPS[step]}


def partition_path(domain: str, step: str, partition: str | dg.MultiPartitionKey) -> str:
    """The UI page of one partition of `<domain>/<step>`: the asset's Partitions tab with that partition chosen.

    The asset's Overview tab always shows the newest materialization of any partition and ignores `partition=`;
    the Partitions tab reads it (a multi-partition key as Dagster writes it, 'agent-v2|0') and shows that
    partition's own latest materialization and metadata. The path is relative to the UI's root, so it works on any
    host and port the UI is served on.
    """
    return f"/assets/{quote(domain, safe='')}/{quote(step, safe='')}?view=partitions&partition={quote(str(partition), safe='')}"


def version_links(domain: str, lines: Sequence[tuple[str, str, bool]], seeds: Sequence[str]) -> dg.MarkdownMetadataValue:
    """One line per version (role, slug, whether it has a delta of its own), each linking to that version's own
    partitions: its delta, and its scores and grades on each seed compared."""
    out = []
    for role, slug, has_delta in lines:
        links = [f"[delta]({partition_path(domain, 'delta', slug)})"] if has_delta else []
        for step in ("scores", "grades"):
            links += [f"[{step} seed {seed}]({partition_path(domain, step, partition_key(slug, seed))})" for seed in seeds]
        out.append(f"- {role} **{slug}**: " + (" · ".join(links) if links else "no graded seed"))
    return dg.MetadataValue.md("\n".join(out))
