"""The Parquet IO manager: every asset partition is one hive-style Parquet file, written atomically."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import dagster as dg
import pandas as pd
import pyarrow as pa
from pydantic import PrivateAttr
from upath import UPath

from sim_pipeline import warehouse
from sim_pipeline.defs.partitions import partition_key, split_key


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

# Output metadata an asset sets when its output was computed from some policy versions' partitions of what it loaded
# (the delta loads every version's grades and compares two): its lineage keeps only those versions' inputs, so a
# third version's new grades do not call it stale.
LINEAGE_VERSIONS = "lineage_versions"


def _latest_materialization(instance: dg.DagsterInstance, asset_key: dg.AssetKey, partition: str | None):
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=[partition] if partition is not None else None),
        limit=1).records
    return records[0] if records else None


def _instance_name(instance: dg.DagsterInstance) -> str:
    root = getattr(instance, "root_directory", None)
    return f"the Dagster instance at {root}" if root else "this Dagster instance"


def materialized_sha256(instance: dg.DagsterInstance, asset_key: dg.AssetKey,
                        partition: str | None) -> warehouse.RecordedHash | None:
    """The content_sha256 the latest materialization of an asset partition recorded, or None (never materialized
    here, or before hashes were recorded)."""
    record = _latest_materialization(instance, asset_key, partition)
    entry = record.asset_materialization.metadata.get(CONTENT_SHA256) if record else None
    if record is None or entry is None or not entry.value:
        return None
    asset = "/".join(asset_key.path) + (f" partition {partition}" if partition is not None else "")
    return warehouse.RecordedHash(str(entry.value), f"{_instance_name(instance)} for {asset} (run "
                                                    f"{record.run_id[:8]}, field {CONTENT_SHA256})")


def path_partition(path: UPath) -> tuple[dg.AssetKey, str | None]:
    """The asset key and partition key a warehouse path holds."""
    domain, asset, parts = warehouse.path_parts(path)
    version, seed = parts.get("policy_version"), parts.get("seed")
    key = str(partition_key(version, seed)) if version is not None and seed is not None else (version or seed)
    return dg.AssetKey([domain, asset]), key


def instance_lookup(instance: dg.DagsterInstance) -> warehouse.HashLookup:
    """For `warehouse.verifying`: a warehouse path -> the content_sha256 this instance recorded for it."""
    return lambda path: materialized_sha256(instance, *path_partition(path))


def verifying_with(instance: dg.DagsterInstance, *, allow_unverified: bool = False,
                   warn: Callable[[str], None] | None = None) -> AbstractContextManager[warehouse.Verification]:
    """`warehouse.verifying` with this instance's recorded content_sha256 as the record for files without a
    sidecar."""
    return warehouse.verifying(instance_lookup(instance), allow_unverified=allow_unverified, warn=warn,
                               consulted=_instance_name(instance))


def _check_materialized_content(context: dg.InputContext, key: str | None,
                                path: UPath) -> warehouse.RecordedHash | None:
    """Refuse a file that is not the one this instance materialized (its sidecar names another content); return
    the recorded hash, which a file without a sidecar is checked against when read."""
    recorded = materialized_sha256(context.instance, context.asset_key, str(key) if key is not None else None)
    found = warehouse.recorded_sha256(path) if path.exists() else None
    if recorded is None or found is None:  # materialized elsewhere or before hashes; or no sidecar: read checks it
        return recorded
    if found != recorded.sha256:
        asset = "/".join(context.asset_key.path)
        raise dg.Failure(f"input '{asset}' partition {key}: {path} is not the file {recorded.source} names "
                         f"(sha256 {found[:12]}..., recorded {recorded.sha256[:12]}...). "
                         f"{warehouse.rematerialize_hint(path)}")
    return recorded


def _for_versions(lineage: warehouse.Lineage, versions: object) -> warehouse.Lineage:
    """The entries of a lineage an output set with LINEAGE_VERSIONS was computed from (all, without it)."""
    kept = getattr(versions, "value", versions)  # a MetadataValue.json, or the plain list
    if not kept:
        return lineage

    def used(name: str) -> bool:
        version = warehouse.path_parts(UPath(name))[2].get("policy_version")
        return version is None or version in kept

    return {name: sha for name, sha in lineage.items() if used(name)}


class ParquetIOManager(dg.ConfigurableIOManager):
    """Stores DataFrames and Arrow tables under `base_path` (a local path or any fsspec URL such as s3://); each
    file records the content sha256 of the inputs its step loaded (and the outputs the step wrote before it)."""

    base_path: str = "data/warehouse"
    # (run id, step key) -> the step's lineage so far. One manager serves a run, so this lives as long as the run.
    _steps: dict[tuple[str, str], warehouse.Lineage] = PrivateAttr(default_factory=dict)

    def _step_lineage(self, context: dg.OutputContext | dg.InputContext) -> warehouse.Lineage | None:
        """What the step this context belongs to has read so far; None outside a step (a context built by hand),
        whose outputs then record no lineage rather than a wrong one."""
        try:
            step = context.step_context
        except dg.DagsterInvariantViolationError:
            return None
        return self._steps.setdefault((step.run_id, step.step.key), {})

    def _path(self, context: dg.OutputContext | dg.InputContext, key: str | dg.MultiPartitionKey | None):
        domain, asset = context.asset_key.path[0], context.asset_key.path[-1]
        return warehouse.partition_path(self.base_path, domain, asset, **_parts(context, key))

    def handle_output(self, context: dg.OutputContext, obj: pd.DataFrame | pa.Table) -> None:
        key = context.partition_key if context.has_partition_key else None
        path = self._path(context, key)
        step = self._step_lineage(context)
        lineage = None if step is None else _for_versions(step, context.output_metadata.get(LINEAGE_VERSIONS))
        rows = warehouse.write_table(path, obj, lineage=lineage)
        digest = warehouse.recorded_sha256(path)
        if step is not None:  # a later output of the same step (rollouts after search) was written with this one
            step[warehouse.relative_path(path)] = digest
        context.add_output_metadata({"path": dg.MetadataValue.path(str(path)), "rows": rows,
                                     CONTENT_SHA256: digest})

    def load_input(self, context: dg.InputContext) -> pd.DataFrame:
        step = self._step_lineage(context)
        if not context.has_asset_partitions:
            path = self._path(context, None)
            frame, digest = warehouse.read_verified(path, expected=_check_materialized_content(context, None, path))
            if step is not None:
                step[warehouse.relative_path(path)] = digest
            return frame
        keys = list(context.asset_partition_keys)
        paths = [self._path(context, k) for k in keys]
        expected = {str(path): recorded for key, path in zip(keys, paths)
                    if path.exists() and (recorded := _check_materialized_content(context, key, path))}
        read: dict[str, str] = {}
        frame, missing = warehouse.read_partitions(paths, expected, sha256=read)
        if step is not None:  # an absent partition is recorded as such: its later arrival makes the output stale
            step.update({warehouse.relative_path(path): read.get(str(path)) for path in paths})
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
