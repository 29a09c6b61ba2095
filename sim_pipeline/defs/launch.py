"""Materialize a domain's graph for one seed and its registered versions, through the Dagster instance.

Runs go to the instance in $DAGSTER_HOME, so they show in the UI (`make dev`) like any other run.
"""

from collections.abc import Callable, Mapping
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
)
from sim_pipeline.defs.partitions import partition_key, policy_version_partitions
from sim_pipeline.registry import PolicyVersion, load_registry, versions_for

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}  # the summary says what matters; the UI has the rest


def sync_partitions(instance: dg.DagsterInstance, domains: list[str]) -> dict[str, list[str]]:
    """Register every registry version of the domains as a dynamic partition; returns what was added."""
    registry = load_registry()
    added: dict[str, list[str]] = {}
    for domain in domains:
        name = policy_version_partitions(domain).name
        known = set(instance.get_dynamic_partitions(name))
        new = [v.slug for v in versions_for(registry, domain) if v.slug not in known]
        if new:
            instance.add_dynamic_partitions(name, new)
        added[domain] = new
    return added


def materialize_domain(instance: dg.DagsterInstance, domain: str, seed: str, versions: list[PolicyVersion], *,
                       warehouse: str, log: Callable[[str], None] = print,
                       sizes: Mapping[str, Any] | None = None) -> list[tuple[str, bool]]:
    """Run the eight steps for one seed and the given versions; returns (run label, success) per run.

    `sizes` overrides fields of the `simulation` resource (n_phrasings, train_samples, heldout_samples,
    max_situations, ...) for a smaller or larger run.
    """
    defs = build_definitions([domain], warehouse=warehouse)
    resources = dict(defs.resources)
    if sizes:  # a new resource: Dagster builds a run's resources from their config, not from a pydantic copy
        current = resources["simulation"]
        resources["simulation"] = type(current)(**{**{k: getattr(current, k) for k in type(current).model_fields},
                                                   **sizes})
    # The named jobs the UI lists (not Dagster's __ephemeral_asset_job__), with this run's resources.
    jobs = dg.Definitions(assets=list(defs.assets or []), resources=resources,
                          jobs=[axes_job(domain), seed_job(domain), policy_job(domain), delta_job(domain)])
    outcomes = []

    def run(label: str, job_name: str, partition: str | dg.MultiPartitionKey | None) -> bool:
        log(f"  running {label} ...")
        result = jobs.resolve_job_def(job_name).execute_in_process(
            instance=instance, partition_key=partition, raise_on_error=False, run_config=QUIET,
            tags={"sim_pipeline/step": label, LAUNCHED_BY_TAG: LAUNCHED_BY_CLI})
        failed = [e.step_key for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
        for event in result.all_events:
            if event.event_type_value == "STEP_FAILURE" and event.event_specific_data is not None:
                error = event.event_specific_data.error
                while error.cause is not None:  # the engine's own message, not Dagster's "error in op" wrapper
                    error = error.cause
                log(f"    {event.step_key} failed: {error.message.strip()[:600]}")
        outcomes.append((label, result.success))
        if not result.success and not failed:
            log(f"    {label}: a blocking check failed; steps after it were skipped (see the summary)")
        return result.success

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
