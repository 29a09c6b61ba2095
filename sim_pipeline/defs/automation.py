"""Schedules and sensors: the nightly evaluation of the newest version, and registry-driven partitions."""


import os

import dagster as dg

from sim_pipeline import defaults
from sim_pipeline.defs.partitions import partition_key, policy_version_partitions
from sim_pipeline.registry import REGISTRY_PATH, load_registry, versions_for

NIGHTLY_CRON = "0 2 * * *"  # 02:00, after the day's training runs have registered their versions


def policy_job_name(domain: str) -> str:
    """The job that materializes one (policy_version, seed) partition of a domain's graph."""
    return f"{domain}_policy_job"


def policy_job(domain: str):
    """search, rollouts, grades, cuts and scores of one domain for one partition."""
    steps = ["search", "rollouts", "grades", "sft", "preference_pairs", "grpo_groups", "reward_model_set",
             "reward_model_pairs", "scores"]
    return dg.define_asset_job(policy_job_name(domain), selection=[dg.AssetKey([domain, s]) for s in steps])


def nightly_schedule(domain: str) -> dg.ScheduleDefinition:
    """Every night: the newest registered version of the domain, one run per seed (its delta follows by automation)."""

    @dg.schedule(name=f"{domain}_nightly", cron_schedule=NIGHTLY_CRON, job_name=policy_job_name(domain),
                 default_status=dg.DefaultScheduleStatus.STOPPED)
    def _nightly(context: dg.ScheduleEvaluationContext):
        versions = versions_for(load_registry(REGISTRY_PATH), domain)
        if not versions:
            return dg.SkipReason(f"no version of domain '{domain}' is registered")
        newest = versions[-1]
        date = context.scheduled_execution_time.strftime("%Y-%m-%d")
        return [dg.RunRequest(run_key=f"{newest.slug}|{seed}|{date}", partition_key=partition_key(newest.slug, seed))
                for seed in defaults.SEEDS]

    return _nightly


def registry_sensor(domain: str) -> dg.SensorDefinition:
    """Adds newly registered versions as partitions and requests their runs (applies under the daemon)."""

    @dg.sensor(name=f"{domain}_registry_sensor", job_name=policy_job_name(domain), minimum_interval_seconds=60,
               default_status=dg.DefaultSensorStatus.STOPPED)
    def _sensor(context: dg.SensorEvaluationContext):
        partitions = policy_version_partitions(domain)
        known = set(context.instance.get_dynamic_partitions(partitions.name))
        new = [v.slug for v in versions_for(load_registry(REGISTRY_PATH), domain) if v.slug not in known]
        if not new:
            return dg.SkipReason(f"no new version in {os.path.relpath(REGISTRY_PATH)}")
        return dg.SensorResult(
            dynamic_partitions_requests=[partitions.build_add_request(new)],
            run_requests=[dg.RunRequest(run_key=f"{slug}|{seed}", partition_key=partition_key(slug, seed))
                          for slug in new for seed in defaults.SEEDS[:1]],
        )

    return _sensor
