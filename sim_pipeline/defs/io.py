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


# An input whose AssetIn metadata sets this reads whichever of its upstream partitions exist (the delta reads the
# seeds a version has); every other input must find all of its upstream partitions.
READS_AVAILABLE_PARTITIONS = "sim_pipeline/reads_available_partitions"


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
        paths = [self._path(context, k) for k in keys]
        frame, missing = warehouse.read_partitions(paths)
        if missing and not (context.definition_metadata or {}).get(READS_AVAILABLE_PARTITIONS):
            # An empty or partial table passed on would fail far downstream with a KeyError, or score less data.
            asset = "/".join(context.asset_key.path)
            absent = [str(k) for k, p in zip(keys, paths) if str(p) in missing]
            raise dg.Failure(
                f"input '{asset}' is not materialized for partition(s) {absent} ({', '.join(missing)}). Fix: "
                f"materialize {asset} for them first (the seed's steps: `sim-pipeline run --seed <n>`, or select "
                "them in the UI together with this run)")
        if missing:
            context.log.info(f"{len(missing)} of {len(keys)} upstream partitions are not materialized; using the rest")
        return frame
