"""Typed Dagster metadata from engine tables."""

from __future__ import annotations

import math

import dagster as dg
import pandas as pd

MAX_TABLE_ROWS = 50  # rows shown in a metadata table; the Parquet file holds the rest


def _cell(value: object) -> str | int | float | bool | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return round(value, 4)
    if hasattr(value, "item"):
        return _cell(value.item())
    return str(value)


def table_metadata(frame: pd.DataFrame) -> dg.TableMetadataValue:
    """A DataFrame (first rows) as a UI table; a labelled index (a confusion matrix's rows) becomes its first column."""
    labelled = frame.index.name is not None or not pd.api.types.is_integer_dtype(frame.index)
    # A filtered table keeps its row numbers as index: those are not labels, so they are dropped.
    frame = frame.reset_index(drop=not labelled)
    head = frame.head(MAX_TABLE_ROWS)
    schema = dg.TableSchema(columns=[dg.TableColumn(str(c), "string") for c in head.columns])
    records = [dg.TableRecord({str(k): _cell(v) for k, v in row.items()}) for row in head.to_dict("records")]
    return dg.MetadataValue.table(records=records, schema=schema)
