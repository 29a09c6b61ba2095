"""Materialize a domain's graph for one seed and its registered versions, through the Dagster instance.

Runs go to the instance in $DAGSTER_HOME, so they show in the UI (`make dev`) like any other run.
"""

import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from sim_pipeline import defaults
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
from sim_pipeline.defs.partition_lock import PartitionClaim, describe
from sim_pipeline.defs.partitions import POLICY_STEPS, SEED_STEPS, partition_key, policy_version_partitions
from sim_pipeline.defs.resources import replaced
from sim_pipeline.errors import PartitionBusy
from sim_pipeline.registry import PolicyVersion, load_registry, versions_for
from sim_pipeline.redaction import redact

# Where a `sim-pipeline run` run executes: its process, so a later command can tell a killed run from a live one.
PID_TAG = "sim_pipeline/pid"
HOST_TAG = "sim_pipeline/host"
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}  # the summary says what matters; the UI has the rest
LOCK_DIRECTORY = "locks"  # under the instance's root ($DAGSTER_HOME): one lock file per partition a command ran
PARTITION_TAG = "dagster/partition"  # the tag Dagster gives every run of one partition; the run queue limits it too


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


def partition_lock_name(domain: str, partition: str | dg.MultiPartitionKey | None) -> str:
    """The lock of one partition of a domain ('retail' for its axes, 'retail+0' for seed 0, 'retail+agent-v1+0'):
    the partition key, as the run queue's per-partition limit counts it, within the domain."""
    return domain if partition is None else f"{domain}+{str(partition).replace('|', '+')}"


def _label(partition: str | dg.MultiPartitionKey) -> str:
    """A partition as a refusal names it: 'seed 0', 'partition agent-v1|0', or a version's delta."""
    if isinstance(partition, dg.MultiPartitionKey):
        return f"partition {partition}"
    return f"seed {partition}" if partition in defaults.SEEDS else f"the delta of version {partition}"


def new_claim(instance: dg.DagsterInstance, *, wait: bool = False,
              log: Callable[[str], None] = print) -> PartitionClaim:
    """An empty claim on the instance's partition locks; `wait`: wait for a busy partition instead of refusing it."""
    return PartitionClaim(Path(instance.root_directory) / LOCK_DIRECTORY, wait=wait, log=log)


def _of_domain(run: dg.DagsterRun, domain: str) -> bool:
    """Whether a run materializes the domain's assets (named jobs and asset backfills' __ASSET_JOB alike)."""
    return any(key.path[0] == domain for key in run.asset_selection or ()) or run.job_name in {
        axes_job_name(domain), seed_job_name(domain), policy_job_name(domain), delta_job_name(domain),
        train_job_name(domain)}


def _runs_elsewhere(instance: dg.DagsterInstance, domain: str, partition: str | dg.MultiPartitionKey) -> list[str]:
    """The domain's runs of the partition in progress that no sim-pipeline process on this host runs (the daemon's,
    from a backfill, sensor, schedule or the UI; or another host's), one 'id (job, status)' each. This host's are
    left to the partition locks, which a dead process no longer holds."""
    runs = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED,
                                                             dg.DagsterRunStatus.CANCELING],
                                                   tags={PARTITION_TAG: str(partition)}))
    here = {LAUNCHED_BY_TAG: LAUNCHED_BY_CLI, HOST_TAG: socket.gethostname()}
    return [f"{run.run_id[:8]} ({run.job_name}, {run.status.value.lower()})" for run in runs
            if _of_domain(run, domain) and any(run.tags.get(k) != v for k, v in here.items())]


def await_runs_elsewhere(instance: dg.DagsterInstance, domain: str, partition: str | dg.MultiPartitionKey, *,
                         wait: bool, log: Callable[[str], None] = print) -> None:
    """Return once no run launched elsewhere (the daemon) is materializing the partition: wait for it (polling the
    instance) or raise PartitionBusy naming it."""
    said = False
    while runs := _runs_elsewhere(instance, domain, partition):
        if not wait:
            raise PartitionBusy(f"{_label(partition)} of domain '{domain}' is being materialized by run(s) "
                                f"{', '.join(runs)}, launched by the Dagster daemon (a backfill, sensor, schedule or "
                                "the UI) or on another host. Fix: wait for it to finish (the UI shows it), or pass "
                                "--wait to start when it does", partition_lock_name(domain, partition))
        if not said:
            log(f"  waiting for run(s) {', '.join(runs)} of {_label(partition)} to finish")
            said = True
        time.sleep(defaults.PARTITION_POLL_SECONDS)


def claim_partitions(instance: dg.DagsterInstance, claim: PartitionClaim, domain: str, seeds: Sequence[str],
                     versions: Sequence[PolicyVersion]) -> None:
    """Add to the claim every seed and (version, seed) partition a command will run, before it runs anything."""
    _acquire(instance, claim, domain, [p for seed in seeds for p in (seed, *(partition_key(v.slug, seed)
                                                                             for v in versions))])


def _acquire(instance: dg.DagsterInstance, claim: PartitionClaim, domain: str,
             partitions: Sequence[str | dg.MultiPartitionKey]) -> None:
    """Add the partitions to the claim, all or none; one another sim-pipeline process or a daemon-launched run is
    running is waited for (claim.wait) or refused, naming who runs it and the fix."""
    named = {partition_lock_name(domain, p): p for p in partitions}
    try:
        claim.acquire(list(named))
    except PartitionBusy as exc:
        raise PartitionBusy(f"{_label(named[exc.name])} of domain '{domain}' is being run by another "
                            f"sim-pipeline process: {describe(exc.holder)}{_runs_of(instance, exc.holder)}. Fix: "
                            "wait for it to finish, or pass --wait to start when it does (the model calls it made "
                            "are then read from the response cache, not paid again)", exc.name, exc.holder) from None
    for partition in named.values():
        await_runs_elsewhere(instance, domain, partition, wait=claim.wait, log=claim.log)


def _runs_of(instance: dg.DagsterInstance, holder: Mapping[str, Any]) -> str:
    """'; its run <id> (<job>)' for the runs in progress of the lock holder's process, as the refusal names them."""
    if not holder.get("pid"):
        return ""
    runs = instance.get_runs(filters=dg.RunsFilter(
        statuses=[dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED],
        tags={PID_TAG: str(holder["pid"]), HOST_TAG: str(holder.get("host", ""))}))
    return "".join(f"; its run {run.run_id[:8]} ({run.job_name})" for run in runs)


@contextmanager
def _claimed(instance: dg.DagsterInstance, claim: PartitionClaim | None, wait: bool,
             log: Callable[[str], None]) -> Iterator[PartitionClaim]:
    """The caller's claim (kept when the block ends), or a new one released when it ends."""
    if claim is not None:
        yield claim
        return
    with new_claim(instance, wait=wait, log=log) as own:
        yield own


@dataclass(frozen=True)
class RunOutcome:
    """One run `materialize_domain` launched."""

    label: str
    success: bool
    run_id: str
    partition: str = ""  # its partition key as text ('agent-v1|0', '0'), "" for an unpartitioned run
    failure: str = ""  # why it stopped, one line: the first failed step and its root error ("" when no step failed)
    not_run: tuple[str, ...] = ()  # the assets it planned and did not materialize, in pipeline order
    interrupted: bool = False  # stopped by Ctrl-C (or a terminate): the command launches nothing after it


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
            log: Callable[[str], None], domain: str,
            claim: PartitionClaim) -> Callable[[str, str, str | dg.MultiPartitionKey | None], bool]:
    """A function that executes one named job for one partition in this process, logs why a step failed, and
    records the outcome. The partition's lock is held while it runs: a claimed one for the whole claim, another
    (the axes, a delta: no model call, seconds) for the job, waited for."""
    def run(label: str, job_name: str, partition: str | dg.MultiPartitionKey | None) -> bool:
        name = partition_lock_name(domain, partition)
        claimed = claim.holds(name)
        with claim.held(name):
            if partition is not None:  # the daemon may have started one since the claim was taken
                await_runs_elsewhere(instance, domain, partition, wait=claim.wait or not claimed, log=log)
            log(f"  running {label} ...")
            result = jobs.resolve_job_def(job_name).execute_in_process(
                instance=instance, partition_key=partition, raise_on_error=False, run_config=QUIET,
                tags={"sim_pipeline/step": label, LAUNCHED_BY_TAG: LAUNCHED_BY_CLI, PID_TAG: str(os.getpid()),
                      HOST_TAG: socket.gethostname()})
        failed = [e.step_key for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
        causes = []
        interrupted = result.dagster_run.status == dg.DagsterRunStatus.CANCELED
        for event in result.all_events:
            if event.event_type_value == "STEP_FAILURE" and event.event_specific_data is not None:
                error = event.event_specific_data.error
                interrupted |= _interrupt(event.event_specific_data)
                causes.append(f"{event.step_key} failed: {step_error(error)}")
                log(f"    {causes[-1]}"[:600])
        planned = [r.asset_key for r in instance.get_records_for_run(  # written when the run was made, not executed
            result.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED).records]
        made = {e.asset_key for e in result.get_asset_materialization_events()}
        outcomes.append(RunOutcome(label, result.success, result.run_id, str(partition or ""),
                                   causes[0] if causes else "",
                                   tuple(sorted({key.path[-1] for key in planned if key not in made}, key=_step_order)),
                                   interrupted))
        if interrupted:
            log(f"    {label}: interrupted; this command launches no further step")
        if not result.success and not failed:
            log(f"    {label}: a blocking check failed; steps after it were skipped (see the summary)")
        return result.success

    return run


def step_error(error: Any) -> str:
    """A failed step's error (a SerializableErrorInfo) in one line, secrets redacted: its innermost cause, the
    engine's own message, not Dagster's "error in op" wrapper."""
    while error.cause is not None:
        error = error.cause
    return redact(" ".join((error.message or "").split()))


def _interrupt(failure: Any) -> bool:
    """Whether a step failed because the process was interrupted (Ctrl-C, a terminate), not because of its work."""
    error = getattr(failure, "error", None)
    names = set()
    while error is not None:
        names.add(error.cls_name)
        error = error.cause
    return str(getattr(failure, "error_source", "")).endswith("INTERRUPT") or bool(
        names & {"KeyboardInterrupt", "DagsterExecutionInterruptedError"})


def materialize_domain(instance: dg.DagsterInstance, domain: str, seed: str, versions: list[PolicyVersion], *,
                       warehouse: str, log: Callable[[str], None] = print,
                       sizes: Mapping[str, Any] | None = None, concurrency: int | None = None,
                       registry: str | None = None, claim: PartitionClaim | None = None,
                       wait: bool = False) -> list[RunOutcome]:
    """Run the eight steps for one seed and the given versions; returns each run's label, success and id.

    `sizes` overrides fields of the `simulation` resource (n_phrasings, train_samples, heldout_samples,
    max_situations, ...) for a smaller or larger run; `concurrency` the model calls the gateway keeps in flight;
    `registry` another registry file (the versions must be in it). The seed's and each (version, seed) partition
    are claimed first (`claim_partitions`), in `claim` when given (it keeps them), else for this call, refusing a
    busy partition unless `wait`.
    """
    with _claimed(instance, claim, wait, log) as held:
        claim_partitions(instance, held, domain, [seed], versions)
        return _materialize(instance, domain, seed, versions, warehouse=warehouse, log=log, sizes=sizes,
                            concurrency=concurrency, registry=registry, claim=held)


def _materialize(instance: dg.DagsterInstance, domain: str, seed: str, versions: list[PolicyVersion], *,
                 warehouse: str, log: Callable[[str], None], sizes: Mapping[str, Any] | None,
                 concurrency: int | None, registry: str | None, claim: PartitionClaim) -> list[RunOutcome]:
    """materialize_domain's runs, its partitions claimed."""
    outcomes: list[RunOutcome] = []
    run = _runner(instance, _jobs(domain, warehouse=warehouse, sizes=sizes, concurrency=concurrency,
                                  registry=registry), outcomes, log, domain, claim)
    if not run("axes", axes_job_name(domain), None) and outcomes[-1].interrupted:
        return outcomes
    if not run(f"seed {seed}: cover, world, situations", seed_job_name(domain), seed):
        # Rollouts over situations the world cannot solve (or that were never built) would only measure the world.
        log(f"  seed {seed}'s situations are not ready (see situations_solvable in the summary): no rollouts run")
        return outcomes
    for v in versions:
        run(f"{v.slug}|{seed}: search, rollouts, grades, cuts, scores", policy_job_name(domain),
            partition_key(v.slug, seed))
        if outcomes[-1].interrupted:  # the person at the terminal asked the command to stop
            return outcomes
    ungraded = {o.partition for o in outcomes if not o.success and "grades" in o.not_run}
    for v in versions:
        if not v.baseline:
            continue
        # A policy run that stopped before its grades leaves its delta unlaunched: it would compare old grades, or
        # none, and its "not computed" line would blame the wrong side.
        short = [slug for slug in (v.slug, v.baseline) if str(partition_key(slug, seed)) in ungraded]
        if short:
            log(f"  {v.slug}: delta vs {v.baseline} not launched: the run of {' and '.join(short)} for seed {seed} "
                "stopped before its grades")
            continue
        run(f"{v.slug}: delta vs {v.baseline}", delta_job_name(domain), v.slug)
        if outcomes[-1].interrupted:
            break
    return outcomes


def train_partition(instance: dg.DagsterInstance, domain: str, seed: str, version: PolicyVersion, *, warehouse: str,
                    log: Callable[[str], None] = print, registry: str | None = None,
                    claim: PartitionClaim | None = None, wait: bool = False) -> RunOutcome:
    """Step 09 for one (version, seed): new policies from its cuts (the partition's cuts must exist); the
    partition is claimed as materialize_domain claims it."""
    key = partition_key(version.slug, seed)
    with _claimed(instance, claim, wait, log) as held:
        _acquire(instance, held, domain, [key])
        outcomes: list[RunOutcome] = []
        run = _runner(instance, _jobs(domain, warehouse=warehouse, sizes=None, concurrency=None, registry=registry),
                      outcomes, log, domain, held)
        run(f"{version.slug}|{seed}: train (SFT, DPO, GRPO)", train_job_name(domain), key)
        return outcomes[0]
