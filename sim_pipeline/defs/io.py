"""The Parquet IO manager: every asset partition is one hive-style Parquet file, written atomically."""

from __future__ import annotations

import dagster as dg
import pandas as pd
import pyarrow as pa
from upath import UPath

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


# The materialization metadata field holding the file's sha256; a downstream load compares the file with it.
CONTENT_SHA256 = "content_sha256"


def _check_materialized_content(context: dg.InputContext, key: str | None, path: UPath) -> None:
    """Refuse a file that is not the one this instance materialized (changed, swapped or restored since)."""
    records = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=context.asset_key, asset_partitions=[str(key)] if key is not None else None),
        limit=1).records
    entry = records[0].asset_materialization.metadata.get(CONTENT_SHA256) if records else None
    if entry is None or not path.exists():  # materialized elsewhere, or before hashes were recorded
        return
    found = warehouse.recorded_sha256(path)
    if found != entry.value:
        asset = "/".join(context.asset_key.path)
        raise dg.Failure(f"input '{asset}' partition {key}: {path} is not the file run {records[0].run_id[:8]} "
                         f"materialized (sha256 {str(found)[:12]}..., recorded {str(entry.value)[:12]}...). "
                         f"{warehouse.rematerialize_hint(path)}")


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
        context.add_output_metadata({"path": dg.MetadataValue.path(str(path)), "rows": rows,
                                     CONTENT_SHA256: warehouse.recorded_sha256(path)})

    def load_input(self, context: dg.InputContext) -> pd.DataFrame:
        if not context.has_asset_partitions:
            path = self._path(context, None)
            _check_materialized_content(context, None, path)
            return warehouse.read_table(path)
        keys = list(context.asset_partition_keys)
        paths = [self._path(context, k) for k in keys]
        for key, path in zip(keys, paths):
            if path.exists():
                _check_materialized_content(context, key, path)
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
