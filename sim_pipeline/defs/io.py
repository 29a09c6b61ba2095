"""The Parquet IO manager: every asset partition is one hive-style Parquet file, written atomically."""

from __future__ import annotations

import dagster as dg
import pandas as pd
import pyarrow as pa

from sim_pipeline import warehouse
from sim_pipeline.defs.partitions import split_key


def _parts(context: dg.OutputContext | dg.InputContext, key: str | dg.MultiPartitionKey | None) -> dict[str, str]:
    if key is None:
        return {}
    if isinstance(key, dg.MultiPartitionKey) or "|" in str(key):
        version, seed = split_key(key)
        return {"policy_version": version, "seed": seed}
    defn = context.asset_partitions_def if hasattr(context, "asset_partitions_def") else None
    name = "seed" if isinstance(defn, dg.StaticPartitionsDefinition) else "policy_version"
    return {name: str(key)}


class ParquetIOManager(dg.ConfigurableIOManager):
    """Stores DataFrames and Arrow tables under `base_path` (a local path or any fsspec URL such as s3://)."""

    base_path: str = "data/warehouse"

    def _path(self, context: dg.OutputContext | dg.InputContext, key: str | dg.MultiPartitionKey | None):
        domain, asset = context.asset_key.path[0], context.asset_key.path[-1]
        return warehouse.partition_path(self.base_path, domain, asset, **_parts(context, key))

    def handle_output(self, context: dg.OutputContext, obj: pd.DataFrame | pa.Table) -> None:
        key = context.partition_key if context.has_partition_key else None
        path = self._path(context, key)
        rows = warehouse.write_table(path, obj)
        context.add_output_metadata({"path": dg.MetadataValue.path(str(path)), "rows": rows})

    def load_input(self, context: dg.InputContext) -> pd.DataFrame:
        if not context.has_asset_partitions:
            return warehouse.read_table(self._path(context, None))
        keys = list(context.asset_partition_keys)
        frame, missing = warehouse.read_partitions([self._path(context, k) for k in keys])
        if missing:
            context.log.info(f"{len(missing)} of {len(keys)} upstream partitions are not materialized; using the rest")
        return frame
