"""Materialize a domain's graph for one seed and its registered versions, through the Dagster instance.

Runs go to the instance in $DAGSTER_HOME, so they show in the UI (`make dev`) like any other run.
"""

import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import dagster as dg

from sim_pipeline.definitions import build_definitions
from sim_pipeline.defs.automation import (
    LAUNCHED_BY_CLI,
    LAUNCHED_BY_TAG,
    axes_job,
    axes_job_name,
    delta_job,
    delta_job_name,
    policy_job,
    policy_job_name,
    seed_job,
    seed_job_name,
    train_job,
    train_job_name,
)
from sim_pipeline.defs.partitions import POLICY_STEPS, SEED_STEPS, partition_key, policy_version_partitions
from sim_pipeline.defs.resources import replaced
from sim_pipeline.registry import PolicyVersion, load_registry, versions_for
from sim_pipeline.redaction import redact

# Where a `sim-pipeline run` run executes: its process, so a later command can tell a killed run from a live one.
PID_TAG = "sim_pipeline/pid"
HOST_TAG = "sim_pipeline/host"
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}  # the summary says what matters; the UI has the rest


def sync_partitions(instance: dg.DagsterInstance, domains: list[str],
                    registry_path: str | None = None) -> dict[str, list[str]]:
    """Register every registry version of the domains as a dynamic partition; returns what was added."""
    registry = load_registry(registry_path)
    added: dict[str, list[str]] = {}
    for domain in domains:
        name = policy_version_partitions(domain).name
        known = set(instance.get_dynamic_partitions(name))
        new = [v.slug for v in versions_for(registry, domain) if v.slug not in known]
        if new:
            instance.add_dynamic_partitions(name, new)
        added[domain] = new
    return added


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def fail_orphaned_runs(instance: dg.DagsterInstance) -> list[str]:
    """Mark failed the runs a `sim-pipeline run` on this host started and never finished because its process died
    (killed, out of memory): in-process runs have no worker for Dagster's run monitoring to check. One line each."""
    unfinished = instance.get_runs(filters=dg.RunsFilter(
        statuses=[dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING],
        tags={LAUNCHED_BY_TAG: LAUNCHED_BY_CLI, HOST_TAG: socket.gethostname()}))
    lines = []
    for run in unfinished:
        pid = run.tags.get(PID_TAG, "")
        if pid.isdigit() and not _process_alive(int(pid)):
            instance.report_run_failed(run, message=f"the sim-pipeline process that ran it (pid {pid}) is gone")
            lines.append(f"run {run.run_id[:8]} ({run.job_name}) was left STARTED by a sim-pipeline process that "
                         f"died (pid {pid}); marked failed")
    return lines


def _step_order(step: str) -> tuple[int, str]:
    """Where a step comes in the pipeline (seed steps, then policy steps, then the rest by name)."""
    order = ("axes", *SEED_STEPS, *POLICY_STEPS)
    return (order.index(step) if step in order else len(order), step)


@dataclass(frozen=True)
class RunOutcome:
    """One run `materialize_domain` launched."""

    label: str
    success: bool
    run_id: str
    partition: str = ""  # its partition key as text ('agent-v1|0', '0'), "" for an unpartitioned run
    failure: str = ""  # why it stopped, one line: the first failed step and its root error ("" when no step failed)
    not_run: tuple[str, ...] = ()  # the assets it planned and did not materialize, in pipeline order


def made_by(instance: dg.DagsterInstance, domain: str, seed: str, versions: list[PolicyVersion],
            these_runs: set[str] | None = None) -> dict[str, str]:
    """Which run wrote each version's grades and delta, as the summary prints it ('grades|<v>', 'delta|<v>');
    a run outside `these_runs` (when given) is called out as earlier, so old rows never pass for new ones."""
    def label(step: str, partition: str) -> str | None:
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey([domain, step]), asset_partitions=[partition]), limit=1).records
        if not records:
            return None
        run_id = records[0].run_id
        earlier = these_runs is not None and run_id not in these_runs
        return f"run {run_id[:8]}" + (", an earlier run: this command's run did not write it" if earlier else "")

    found = {f"grades|{v.slug}": label("grades", str(partition_key(v.slug, seed))) for v in versions}
    found |= {f"delta|{v.slug}": label("delta", v.slug) for v in versions if v.baseline}
    return {key: text for key, text in found.items() if text}


def _jobs(domain: str, *, warehouse: str, sizes: Mapping[str, Any] | None, concurrency: int | None,
          registry: str | None) -> dg.Definitions:
    """The domain's named jobs (the ones the UI lists, not Dagster's __ephemeral_asset_job__) with this command's
    resources: run sizes, calls in flight, and another registry file when given."""
    defs = build_definitions([domain], warehouse=warehouse)
    resources = dict(defs.resources)
    for name, fields in (("simulation", sizes), ("gateway", {"concurrency": concurrency} if concurrency else None),
                         ("registry", {"path": registry} if registry else None)):
        if fields:
            resources[name] = replaced(resources[name], **fields)
    return dg.Definitions(assets=list(defs.assets or []), resources=resources,
                          jobs=[axes_job(domain), seed_job(domain), policy_job(domain), delta_job(domain),
                                train_job(domain)])


def _runner(instance: dg.DagsterInstance, jobs: dg.Definitions, outcomes: list[RunOutcome],
            log: Callable[[str], None]) -> Callable[[str, str, str | dg.MultiPartitionKey | None], bool]:
    """A function that executes one named job for one partition in this process, logs why a step failed, and
    records the outcome."""
    def run(label: str, job_name: str, partition: str | dg.MultiPartitionKey | None) -> bool:
        log(f"  running {label} ...")
        result = jobs.resolve_job_def(job_name).execute_in_process(
            instance=instance, partition_key=partition, raise_on_error=False, run_config=QUIET,
            tags={"sim_pipeline/step": label, LAUNCHED_BY_TAG: LAUNCHED_BY_CLI, PID_TAG: str(os.getpid()),
                  HOST_TAG: socket.gethostname()})
        failed = [e.step_key for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
        causes = []
        for event in result.all_events:
            if event.event_type_value == "STEP_FAILURE" and event.event_specific_data is not None:
                error = event.event_specific_data.error
                while error.cause is not None:  # the engine's own message, not Dagster's "error in op" wrapper
                    error = error.cause
                causes.append(redact(f"{event.step_key} failed: {' '.join(error.message.split())}"))
                log(f"    {causes[-1]}"[:600])
        planned = [r.asset_key for r in instance.get_records_for_run(  # written when the run was made, not executed
            result.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED).records]
        made = {e.asset_key for e in result.get_asset_materialization_events()}
        outcomes.append(RunOutcome(label, result.success, result.run_id, str(partition or ""),
                                   causes[0] if causes else "",
                                   tuple(sorted({key.path[-1] for key in planned if key not in made}, key=_step_order))))
        if not result.success and not failed:
            log(f"    {label}: a blocking check failed; steps after it were skipped (see the summary)")
        return result.success

    return run


def materialize_domain(instance: dg.DagsterInstance, domain: str, seed: str, versions: list[PolicyVersion], *,
                       warehouse: str, log: Callable[[str], None] = print,
                       sizes: Mapping[str, Any] | None = None, concurrency: int | None = None,
                       registry: str | None = None) -> list[RunOutcome]:
    """Run the eight steps for one seed and the given versions; returns each run's label, success and id.

    `sizes` overrides fields of the `simulation` resource (n_phrasings, train_samples, heldout_samples,
    max_situations, ...) for a smaller or larger run; `concurrency` the model calls the gateway keeps in flight;
    `registry` another registry file (the versions must be in it).
    """
    outcomes: list[RunOutcome] = []
    run = _runner(instance, _jobs(domain, warehouse=warehouse, sizes=sizes, concurrency=concurrency,
                                  registry=registry), outcomes, log)
    run("axes", axes_job_name(domain), None)
    if not run(f"seed {seed}: cover, world, situations", seed_job_name(domain), seed):
        # Rollouts over situations the world cannot solve (or that were never built) would only measure the world.
        log(f"  seed {seed}'s situations are not ready (see situations_solvable in the summary): no rollouts run")
        return outcomes
    for v in versions:
        run(f"{v.slug}|{seed}: search, rollouts, grades, cuts, scores", policy_job_name(domain),
            partition_key(v.slug, seed))
    for v in versions:
        if v.baseline:
            run(f"{v.slug}: delta vs {v.baseline}", delta_job_name(domain), v.slug)
    return outcomes


def train_partition(instance: dg.DagsterInstance, domain: str, seed: str, version: PolicyVersion, *, warehouse: str,
                    log: Callable[[str], None] = print, registry: str | None = None) -> RunOutcome:
    """Step 09 for one (version, seed): new policies from its cuts (the partition's cuts must exist)."""
    outcomes: list[RunOutcome] = []
    run = _runner(instance, _jobs(domain, warehouse=warehouse, sizes=None, concurrency=None, registry=registry),
                  outcomes, log)
    run(f"{version.slug}|{seed}: train (SFT, DPO, GRPO)", train_job_name(domain), partition_key(version.slug, seed))
    return outcomes[0]
