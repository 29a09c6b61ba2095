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
from sim_pipeline.defs.launch import step_error
from sim_pipeline.defs.partitions import POLICY_STEPS, SEED_STEPS, partition_key
from sim_pipeline.errors import SimPipelineError
from sim_pipeline.redaction import redact
from sim_pipeline.registry import PolicyVersion

BACKFILL_DAEMON = "BACKFILL"  # the daemon type that runs asset backfills (dagster-daemon, started by `make dev`)
LAUNCHED_BY_BACKFILL = "sim-pipeline backfill"


@dataclass(frozen=True)
class BackfillPlan:
    """What one backfill materializes: its title and (asset, partition) pairs."""

    title: str
    targets: frozenset[AssetKeyPartitionKey]


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


def failure_lines(instance: dg.DagsterInstance, backfill_id: str) -> list[str]:
    """One line per failed run of the backfill: its id, partition and each failed step's error in one line, so a
    failed backfill says why without opening the UI."""
    lines = []
    failed = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/backfill": backfill_id},
                                                      statuses=[dg.DagsterRunStatus.FAILURE]))
    for run in failed:
        where = run.tags.get("dagster/partition", "no partition")
        steps = [f"{e.dagster_event.step_key}: {_short(step_error(e.dagster_event.step_failure_data.error))}"
                 for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE)]
        if not steps:  # the run failed outside any step (launch, orchestrator): the run's own failure says why
            steps = [_short(redact(e.message.splitlines()[0])) if e.message else "run failed"
                     for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)]
        lines.append(f"run {run.run_id} ({where}) failed: " + "; ".join(steps or ["no failure event recorded"]))
    return lines


def _short(text: str) -> str:
    """An error line without its exception's module path, cut at defaults.BACKFILL_FAILURE_CHARS."""
    head, _, rest = text.partition(": ")
    if rest and "." in head and " " not in head:  # "dagster._core.errors.SomeError: ..." -> "SomeError: ..."
        text = f"{head.rsplit('.', 1)[1]}: {rest}"
    return text if len(text) <= defaults.BACKFILL_FAILURE_CHARS else text[:defaults.BACKFILL_FAILURE_CHARS - 3] + "..."


def _targets(backfill: PartitionBackfill) -> str:
    """What a backfill materializes: its title (sim-pipeline's names versions x seeds), else its assets, and how many
    partitions."""
    what = backfill.title or ", ".join("/".join(key.path) for key in backfill.asset_selection or []) or "a backfill"
    if backfill.asset_backfill_data is not None:
        return f"{what} ({backfill.asset_backfill_data.target_subset.num_partitions_and_non_partitioned_assets} " \
            "asset partitions)"
    if backfill.partition_names is not None:  # a job backfill, launched from the UI
        return f"{what} ({len(backfill.partition_names)} partitions)"
    return what


def backfill_lines(instance: dg.DagsterInstance, limit: int = defaults.BACKFILL_LIST_LIMIT) -> list[str]:
    """One line per backfill in the instance, newest first: id, status, when requested, its partitions, its runs."""
    lines = []
    for backfill in instance.get_backfills(limit=limit):
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(backfill.backfill_timestamp))
        runs = backfill_progress(instance, backfill.backfill_id).line().split(": ", 1)[1]
        lines.append(f"{backfill.backfill_id}  {backfill.status.value.lower():<17} {when}  {_targets(backfill)}; "
                     f"runs: {runs}")
    if len(lines) == limit and instance.get_backfills_count() > limit:
        lines.append(f"(the newest {limit}; the UI's Overview > Backfills lists them all)")
    return lines


def cancel_backfill(instance: dg.DagsterInstance, backfill_id: str) -> str:
    """Mark a requested backfill CANCELING, as the UI's Cancel does (the daemon then launches none of its remaining
    runs, stops those in flight and marks it canceled); one line saying so."""
    backfill = instance.get_backfill(backfill_id)
    if backfill is None:
        raise SimPipelineError(f"backfill '{backfill_id}' is not in the Dagster instance at {instance.root_directory}. "
                               "Fix: `sim-pipeline backfill list` shows its backfills' ids (with the same DAGSTER_HOME)")
    if backfill.status in (BulkActionStatus.CANCELING, BulkActionStatus.CANCELED):
        return f"backfill {backfill_id} is already {backfill.status.value.lower()}: nothing more to do"
    if backfill.status != BulkActionStatus.REQUESTED:
        raise SimPipelineError(f"backfill '{backfill_id}' is {backfill.status.value.lower()}: only a requested "
                               "backfill can be canceled. Fix: `sim-pipeline backfill list` shows which still are")
    instance.update_backfill(backfill.with_status(BulkActionStatus.CANCELING))
    return f"backfill {backfill_id} marked canceling: {_targets(backfill)}"


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
            for line in failure_lines(instance, backfill_id):
                log(f"  {line}")
            return progress
        time.sleep(poll_s)
