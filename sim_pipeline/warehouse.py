"""The Parquet warehouse: hive-style paths, atomic writes, nested columns as Arrow types.

`<base>/<domain>/<asset>/policy_version=<v>/seed=<s>.parquet` (one dimension: `<domain>/<asset>/seed=<s>.parquet`,
none: `<domain>/<asset>.parquet`): readable by pyarrow.dataset, DuckDB and Spark. Base paths may be any fsspec URL
(`s3://bucket/warehouse`).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from upath import UPath


def partition_path(base: str | os.PathLike[str], domain: str, asset: str, *, policy_version: str | None = None,
                   seed: str | int | None = None) -> UPath:
    """Where one partition of an asset lives."""
    root = UPath(base) / domain / asset
    if policy_version is not None and seed is not None:
        return root / f"policy_version={policy_version}" / f"seed={seed}.parquet"
    if policy_version is not None:
        return root / f"policy_version={policy_version}.parquet"
    if seed is not None:
        return root / f"seed={seed}.parquet"
    return UPath(base) / domain / f"{asset}.parquet"


def to_arrow(data: pd.DataFrame | pa.Table, schema: pa.Schema | None = None) -> pa.Table:
    """An Arrow table from a DataFrame (index dropped) or a table, cast to the schema when one is given."""
    table = data if isinstance(data, pa.Table) else pa.Table.from_pandas(data, preserve_index=False, schema=schema)
    return table.replace_schema_metadata(None)  # no pandas metadata: same data, same bytes across pandas versions


def write_table(path: UPath, data: pd.DataFrame | pa.Table, schema: pa.Schema | None = None) -> int:
    """Write atomically: to a temporary file beside the target, then rename. Returns the row count."""
    table = to_arrow(data, schema)
    if path.protocol in ("", "file", "local"):
        target = Path(path.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex}")
        try:
            pq.write_table(table, tmp)
            os.replace(tmp, target)  # atomic on one file system: readers see the old file or the new one
        finally:
            tmp.unlink(missing_ok=True)
    else:
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        path.write_bytes(sink.getvalue().to_pybytes())  # one PUT: object stores never show a partial object
    return table.num_rows


def _nested(field_type: pa.DataType) -> bool:
    return pa.types.is_list(field_type) or pa.types.is_struct(field_type) or pa.types.is_map(field_type) or \
        pa.types.is_large_list(field_type)


def read_table(path: UPath) -> pd.DataFrame:
    """Read one partition; nested columns come back as Python lists and dicts, not numpy arrays."""
    with path.open("rb") as handle:
        table = pq.read_table(handle)
    frame = table.to_pandas()
    for name in table.column_names:
        if _nested(table.schema.field(name).type):
            frame[name] = pd.Series(table.column(name).to_pylist(), index=frame.index, dtype=object)
    return frame


def read_partitions(paths: list[UPath]) -> tuple[pd.DataFrame, list[str]]:
    """Concatenate the partitions that exist; also return the ones that do not."""
    frames: list[pd.DataFrame] = []
    missing: list[str] = []
    for path in paths:
        if path.exists():
            frames.append(read_table(path))
        else:
            missing.append(str(path))
    frames = [f for f in frames if len(f)]
    return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()), missing


def jsonable(value: Any) -> Any:
    """Plain Python values (numpy scalars and arrays converted) for JSON and metadata."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value
