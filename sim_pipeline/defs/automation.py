"""Schedules and sensors: the nightly evaluation of the compared versions, and registry-driven partitions.

A policy run (one version on one seed) reads its seed's `covering_array`, `world` and `situations`, which are
partitioned by seed alone, so one Dagster run cannot hold both. The chain is explicit instead: the nightly schedule
requests the seed job for every seed (it rebuilds the seed's plan, world and situations, keeping the plan's rows
that are still valid, so a changed domain pack is never evaluated on stale situations), and the seed-ready sensor
requests, for each seed whose seed run succeeded, the policy run of every version a delta compares (each
candidate and each baseline, plus the newest version), so every delta has its two sides graded on every seed. The registry sensor does the
same for a new version: its seed-0 run comes straight away when seed 0 is ready, else after the seed job. When a
policy run succeeds, the delta sensor runs the delta of that version (when it has a baseline) and of every version
whose baseline it is, each of which reads every seed both of its versions have graded.
"""


import os
from functools import cache

import dagster as dg

from sim_pipeline import defaults
from sim_pipeline.defs.partitions import (
    POLICY_STEPS,
    SEED_STEPS,
    partition_key,
    policy_version_partitions,
    split_key,
)
from sim_pipeline.registry import REGISTRY_PATH, PolicyVersion, load_registry, versions_for

NIGHTLY_CRON = "0 2 * * *"  # 02:00, after the day's training runs have registered their versions
# Runs `sim-pipeline run` launches carry this tag: it runs every step itself, so the sensors must not follow them.
LAUNCHED_BY_TAG = "sim_pipeline/launched_by"
LAUNCHED_BY_CLI = "cli"


def axes_job_name(domain: str) -> str:
    """The job that materializes a domain's axes."""
    return f"{domain}_axes_job"


def seed_job_name(domain: str) -> str:
    """The job that materializes one seed's plan, world and situations."""
    return f"{domain}_seed_job"


def policy_job_name(domain: str) -> str:
    """The job that materializes one (policy_version, seed) partition of a domain's graph."""
    return f"{domain}_policy_job"


def delta_job_name(domain: str) -> str:
    """The job that materializes one version's delta against its baseline."""
    return f"{domain}_delta_job"


def train_job_name(domain: str) -> str:
    """The job that trains new policies from one (policy_version, seed) partition's cuts."""
    return f"{domain}_train_job"


def _asset_job(name: str, domain: str, steps: tuple[str, ...], description: str):
    return dg.define_asset_job(name, selection=[dg.AssetKey([domain, s]) for s in steps], description=description)


@cache  # one definition per domain: the sensors monitor and request the very job the Definitions hold
def axes_job(domain: str):
    """The axes of one domain (unpartitioned)."""
    return _asset_job(axes_job_name(domain), domain, ("axes",),
                      f"Step 01 of '{domain}': the axes of what varies, from its tools and policy.")


@cache
def seed_job(domain: str):
    """covering_array, world and situations of one domain for one seed."""
    return _asset_job(seed_job_name(domain), domain, SEED_STEPS,
                      f"Steps 02 and 03 of '{domain}' for one seed: the covering-array plan, the seeded world and "
                      "the situations built from them.")


@cache
def policy_job(domain: str):
    """search, rollouts, grades, cuts and scores of one domain for one partition."""
    return _asset_job(policy_job_name(domain), domain, POLICY_STEPS,
                      f"Steps 04-08 of '{domain}' for one (version, seed): search, rollouts, grades, cuts "
                      "and scores. Needs the seed's situations.")


@cache
def train_job(domain: str):
    """Step 09 of one domain for one partition: new policies from its cuts (started by hand or `sim-pipeline loop`)."""
    return _asset_job(train_job_name(domain), domain, ("trained_policy",),
                      f"Step 09 of '{domain}' for one (version, seed): a new policy per method (SFT, DPO, GRPO) from "
                      "its cuts. Needs the partition's cuts; no sensor starts it.")


@cache
def delta_job(domain: str):
    """The delta of one domain for one policy version."""
    return _asset_job(delta_job_name(domain), domain, ("delta",),
                      f"Step 08 of '{domain}' for one version: its held-out delta against its registry baseline, "
                      "over the seeds both have graded.")


def compared_versions(versions: list[PolicyVersion]) -> list[PolicyVersion]:
    """The versions the nightly evaluates, in registry order: every candidate and baseline of a delta, and the newest."""
    baselines = {v.baseline for v in versions if v.baseline}
    return [v for i, v in enumerate(versions) if v.baseline or v.slug in baselines or i == len(versions) - 1]


def nightly_schedule(domain: str) -> dg.ScheduleDefinition:
    """Every night: every seed's plan, world and situations; the seed-ready sensor then runs the compared versions."""

    @dg.schedule(name=f"{domain}_nightly", cron_schedule=NIGHTLY_CRON, job_name=seed_job_name(domain),
                 default_status=dg.DefaultScheduleStatus.STOPPED,
                 description=f"02:00: rebuilds each seed of '{domain}' (seed job), after which "
                             f"{domain}_seed_ready_sensor evaluates on that seed every version a delta compares "
                             "(candidates and baselines) and the newest.")
    def _nightly(context: dg.ScheduleEvaluationContext):
        if not versions_for(load_registry(REGISTRY_PATH), domain):
            return dg.SkipReason(f"no version of domain '{domain}' is registered")
        date = context.scheduled_execution_time.strftime("%Y-%m-%d")
        return [dg.RunRequest(run_key=f"seed|{seed}|{date}", partition_key=seed) for seed in defaults.SEEDS]

    return _nightly


def seed_ready_sensor(domain: str) -> dg.RunStatusSensorDefinition:
    """When a seed run succeeds, the policy run on that seed of every version a delta compares, and of the newest
    (the nightly's second half)."""

    @dg.run_status_sensor(name=f"{domain}_seed_ready_sensor", run_status=dg.DagsterRunStatus.SUCCESS,
                          monitored_jobs=[seed_job(domain)],
                          request_job=policy_job(domain), default_status=dg.DefaultSensorStatus.RUNNING,
                          description=f"After a successful {seed_job_name(domain)} run: every version of "
                                      f"'{domain}' a delta compares (candidates and baselines) and the newest, on "
                                      "that seed (search, rollouts, grades, cuts, scores).")
    def _ready(context: dg.RunStatusSensorContext):
        if context.dagster_run.tags.get(LAUNCHED_BY_TAG) == LAUNCHED_BY_CLI:
            return dg.SkipReason("a `sim-pipeline run` seed run: that command runs the versions itself")
        seed = context.dagster_run.tags.get("dagster/partition")
        versions = versions_for(load_registry(REGISTRY_PATH), domain)
        if seed is None or not versions:
            return dg.SkipReason(f"the seed run has no seed partition, or domain '{domain}' has no version")
        return [dg.RunRequest(run_key=f"{v.slug}|{seed}|{context.dagster_run.run_id}",
                              partition_key=partition_key(v.slug, seed)) for v in compared_versions(versions)]

    return _ready


def delta_follow_sensor(domain: str) -> dg.RunStatusSensorDefinition:
    """When a version's policy run succeeds, its delta against its baseline and the delta of every version whose
    baseline it is (each over the seeds both of its versions have graded)."""

    @dg.run_status_sensor(name=f"{domain}_delta_sensor", run_status=dg.DagsterRunStatus.SUCCESS,
                          monitored_jobs=[policy_job(domain)], request_job=delta_job(domain),
                          default_status=dg.DefaultSensorStatus.RUNNING,
                          description=f"After a successful {policy_job_name(domain)} run: the delta of that "
                                      "version if it has a baseline, and of every version whose baseline it is "
                                      "(a delta reads every seed both of its versions have).")
    def _follow(context: dg.RunStatusSensorContext):
        if context.dagster_run.tags.get(LAUNCHED_BY_TAG) == LAUNCHED_BY_CLI:
            return dg.SkipReason("a `sim-pipeline run` policy run: that command runs the delta itself")
        key = context.dagster_run.tags.get("dagster/partition")
        slug = split_key(key)[0] if key else None
        versions = versions_for(load_registry(REGISTRY_PATH), domain)
        deltas = [v.slug for v in versions if v.baseline and slug in (v.slug, v.baseline)]
        if not deltas:
            return dg.SkipReason(f"run {context.dagster_run.run_id}: {slug or 'its version'} is in no delta "
                                 "(no baseline, and no version's baseline)")
        return [dg.RunRequest(run_key=f"delta|{d}|{context.dagster_run.run_id}", partition_key=d) for d in deltas]

    return _follow


def registry_sensor(domain: str) -> dg.SensorDefinition:
    """Adds newly registered versions as partitions and requests their seed-0 runs (applies under the daemon)."""

    @dg.sensor(name=f"{domain}_registry_sensor", jobs=[seed_job(domain), policy_job(domain)],
               minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.STOPPED,
               description=f"Registers new versions of '{domain}' from data/policies.yaml as partitions and runs "
                           "each on seed 0 (first the seed job when seed 0 has no situations yet).")
    def _sensor(context: dg.SensorEvaluationContext):
        partitions = policy_version_partitions(domain)
        known = set(context.instance.get_dynamic_partitions(partitions.name))
        new = [v.slug for v in versions_for(load_registry(REGISTRY_PATH), domain) if v.slug not in known]
        if not new:
            return dg.SkipReason(f"no new version in {os.path.relpath(REGISTRY_PATH)}")
        seed = defaults.SEEDS[0]
        if not _seed_ready(context.instance, domain, seed):  # the seed-ready sensor runs the newest one after it
            runs = [dg.RunRequest(run_key=f"seed|{seed}|{'+'.join(new)}", partition_key=seed,
                                  job_name=seed_job_name(domain))]
        else:
            runs = [dg.RunRequest(run_key=f"{slug}|{seed}", partition_key=partition_key(slug, seed),
                                  job_name=policy_job_name(domain)) for slug in new]
        return dg.SensorResult(dynamic_partitions_requests=[partitions.build_add_request(new)], run_requests=runs)

    return _sensor


def _seed_ready(instance: dg.DagsterInstance, domain: str, seed: str) -> bool:
    """Whether the seed's situations are materialized."""
    key = dg.AssetKey([domain, "situations"])
    return seed in instance.get_materialized_partitions(key)
