"""Partitions, declared once: `seed` (static) x `policy_version` (dynamic, one set per domain)."""

from __future__ import annotations

import dagster as dg

from sim_pipeline import defaults

SEED = dg.StaticPartitionsDefinition(list(defaults.SEEDS))


def policy_version_partitions(domain: str) -> dg.DynamicPartitionsDefinition:
    """The dynamic policy versions of one domain (its registry entries, added by `policies sync` or the sensor)."""
    return dg.DynamicPartitionsDefinition(name=f"{domain}_policy_version")


def seed_by_version(domain: str) -> dg.MultiPartitionsDefinition:
    """policy_version x seed; keys read '<policy_version>|<seed>' (Dagster orders dimensions by name)."""
    return dg.MultiPartitionsDefinition({"policy_version": policy_version_partitions(domain), "seed": SEED})


def partition_key(policy_version: str, seed: str | int) -> dg.MultiPartitionKey:
    """A multi-partition key built from its parts, never by string."""
    return dg.MultiPartitionKey({"policy_version": policy_version, "seed": str(seed)})


def split_key(key: str | dg.MultiPartitionKey) -> tuple[str, str]:
    """(policy_version, seed) of a multi-partition key."""
    if not isinstance(key, dg.MultiPartitionKey):
        version, seed = str(key).split("|")
        return version, seed
    dims = key.keys_by_dimension
    return dims["policy_version"], dims["seed"]


# The steps each kind of partition holds: a seed's (its plan, world, situations) and a (version, seed)'s.
SEED_STEPS = ("covering_array", "world", "situations")
POLICY_STEPS = ("search", "rollouts", "grades", "sft", "preference_pairs", "grpo_groups", "reward_model_set",
                "reward_model_pairs", "scores")
