"""`sim-pipeline backfill`: one Dagster asset backfill over versions x seeds, the same object the UI's
"Materialize" dialog creates, so it shows under Overview > Backfills and the daemon (`make dev`) runs it.

The backfill targets the axes, each seed's plan, world and situations, every (version, seed) policy partition and
the delta of each version that has a baseline. The asset graph orders them: a policy partition waits for its seed's
situations, and a delta (which declares every version's grades as input) waits for every grades partition the
backfill targets, so its baseline's grades exist before it runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import dagster as dg
from dagster._core.definitions.assets.graph.asset_graph_subset import AssetGraphSubset
from dagster._core.definitions.events import AssetKeyPartitionKey
from dagster._core.execution.backfill import BULK_ACTION_TERMINAL_STATUSES, BulkActionStatus, PartitionBackfill
from dagster._core.utils import make_new_backfill_id

from sim_pipeline import defaults
from sim_pipeline.definitions import build_definitions
from sim_pipeline.defs.partitions import POLICY_STEPS, SEED_STEPS, partition_key
from sim_pipeline.errors import SimPipelineError
from sim_pipeline.registry import PolicyVersion

BACKFILL_DAEMON = "BACKFILL"  # the daemon type that runs asset backfills (dagster-daemon, started by `make dev`)
LAUNCHED_BY_BACKFILL = "sim-pipeline backfill"


@dataclass(frozen=True)
class BackfillPlan:
    """What one backfill materializes: its title and (asset, partition) pairs."""

    title: str
    targets: frozenset[AssetKeyPartitionKey]


def parse_seeds(text: str) -> list[str]:
    """Seeds from '0-7', '0,2,5' or '3'; anything else, or a seed that is not a partition, is a clear error."""
    seeds: list[str] = []
    for item in (part.strip() for part in text.split(",") if part.strip()):
        low, _, high = item.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise SimPipelineError(f"--seeds '{text}': '{item}' is neither a seed nor a range. Fix: write 0-7 or 0,1")
        seeds += [str(s) for s in range(int(low), int(high or low) + 1)]
    unknown = sorted(set(seeds) - set(defaults.SEEDS), key=int)
    if unknown or not seeds:
        raise SimPipelineError(f"--seeds '{text}': {unknown or 'nothing'} is not a seed partition. Fix: use some "
                               f"of {defaults.SEEDS[0]}-{defaults.SEEDS[-1]}")
    return sorted(set(seeds), key=int)


def plan_backfill(domain: str, versions: Sequence[PolicyVersion], seeds: Sequence[str]) -> BackfillPlan:
    """Every step of the domain for the versions on the seeds (deltas only for versions with a baseline)."""
    def asset(step: str) -> dg.AssetKey:
        return dg.AssetKey([domain, step])

    targets = {AssetKeyPartitionKey(asset("axes"), None)}
    targets |= {AssetKeyPartitionKey(asset(step), seed) for step in SEED_STEPS for seed in seeds}
    targets |= {AssetKeyPartitionKey(asset(step), str(partition_key(v.slug, seed)))
                for step in POLICY_STEPS for v in versions for seed in seeds}
    targets |= {AssetKeyPartitionKey(asset("delta"), v.slug) for v in versions if v.baseline}
    seeds_text = f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 and len(seeds) == int(seeds[-1]) - int(seeds[0]) + 1 \
        else ",".join(seeds)
    return BackfillPlan(title=f"{domain}: {','.join(v.slug for v in versions)} x seeds {seeds_text}",
                        targets=frozenset(targets))


def launch_backfill(instance: dg.DagsterInstance, domain: str, plan: BackfillPlan,
                    defs: dg.Definitions | None = None) -> str:
    """Add the asset backfill to the instance (the daemon launches its runs); returns its id."""
    graph = (defs or build_definitions([domain])).resolve_asset_graph()
    backfill_id = make_new_backfill_id()
    subset = AssetGraphSubset.from_asset_partition_set(set(plan.targets), graph)
    instance.add_backfill(PartitionBackfill.from_asset_graph_subset(
        backfill_id=backfill_id, backfill_timestamp=time.time(), tags={"sim_pipeline/launched_by": "backfill"},
        dynamic_partitions_store=instance, asset_graph_subset=subset, title=plan.title,
        description=f"Launched by {LAUNCHED_BY_BACKFILL}: {len(plan.targets)} asset partitions.", run_config=None))
    return backfill_id


def daemon_running(instance: dg.DagsterInstance) -> bool:
    """Whether a backfill daemon has sent a recent heartbeat to this instance."""
    status = instance.get_daemon_statuses([BACKFILL_DAEMON]).get(BACKFILL_DAEMON)
    return bool(status and status.healthy)


@dataclass(frozen=True)
class BackfillProgress:
    """A backfill's status and how its runs stand."""

    status: str
    runs_by_status: dict[str, int]

    @property
    def done(self) -> bool:
        """Whether the backfill reached a terminal status."""
        return BulkActionStatus(self.status) in BULK_ACTION_TERMINAL_STATUSES

    @property
    def succeeded(self) -> bool:
        """Whether it finished and every run it launched succeeded."""
        return self.status == BulkActionStatus.COMPLETED_SUCCESS.value

    def line(self) -> str:
        """One line: status and run counts."""
        runs = ", ".join(f"{n} {s.lower()}" for s, n in sorted(self.runs_by_status.items())) or "no run yet"
        return f"{self.status.lower()}: {runs}"


def backfill_progress(instance: dg.DagsterInstance, backfill_id: str) -> BackfillProgress:
    """The backfill's status and its runs' statuses, from the instance."""
    backfill = instance.get_backfill(backfill_id)
    if backfill is None:
        raise SimPipelineError(f"backfill '{backfill_id}' is not in the instance at $DAGSTER_HOME. Fix: use the id "
                               "`sim-pipeline backfill` printed, with the same DAGSTER_HOME")
    runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/backfill": backfill_id}))
    counts: dict[str, int] = {}
    for run in runs:
        counts[run.status.value] = counts.get(run.status.value, 0) + 1
    return BackfillProgress(status=backfill.status.value, runs_by_status=counts)


def wait_for_backfill(instance: dg.DagsterInstance, backfill_id: str, *, log: Callable[[str], None] = print,
                      poll_s: float = defaults.BACKFILL_POLL_SECONDS) -> BackfillProgress:
    """Poll until the backfill is done, logging each change of its progress line."""
    last = ""
    while True:
        progress = backfill_progress(instance, backfill_id)
        if progress.line() != last:
            last = progress.line()
            log(f"  {backfill_id}: {last}")
        if progress.done:
            return progress
        time.sleep(poll_s)
