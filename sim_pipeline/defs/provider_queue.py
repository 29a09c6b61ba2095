"""A queued run coordinator that tags every (policy_version, seed) run with the model providers it calls, so the
instance's tag concurrency limits (deploy/dagster.yaml, `concurrency: runs:`) cap runs per provider across every
backfill, sensor and schedule together.

Why here: which provider a run calls depends on its partition (the registry maps a version to its models), while an
asset backfill gives all of its runs the same tags and a Dagster pool is fixed per asset. Every run reaches the
queue through `submit_run` (the backfill daemon, sensors, schedules, the UI, run retries), so tagging there covers
all of them, and before the run is queued, so the daemon never sees it untagged. Runs of `sim-pipeline run`
execute in its own process and never pass through a queue.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dagster as dg

from sim_pipeline import defaults
from sim_pipeline.models.model_config import ModelConfig
from sim_pipeline.registry import REGISTRY_PATH, PolicyVersion, load_models, load_registry

# The run tag a (policy_version, seed) partition gives its version under (Dagster's multi-partition tags).
VERSION_TAG = "dagster/partition/policy_version"
PROVIDER_TAG_PREFIX = "sim_pipeline/provider."  # + provider: one tag per provider the run calls, value = its roles
REMOTE_MODELS_TAG = "sim_pipeline/remote_models"  # every run that calls any remote provider; value = the providers
# Backends that run in the worker's own process: no rate limit to protect, so no tag.
LOCAL_PROVIDERS = frozenset({"sim", "python", "mcp-agent"})
REGISTRY_VARIABLE = "SIM_PIPELINE_REGISTRY"  # the registry file the code location reads, when not the default one
_TAG_SECTION = re.compile(r"[^A-Za-z0-9_.-]")  # Dagster tag keys allow these characters per section


def backend_of(model: str, models: Mapping[str, ModelConfig]) -> str:
    """The litellm model string a registry model field resolves to (a `models:` entry's `model`, else itself)."""
    return models[model].model if model in models else model


def provider_of(model: str, models: Mapping[str, ModelConfig]) -> str:
    """The provider a model field calls: the litellm prefix ('openai/gpt-4o' -> 'openai'), 'python' for a callable
    agent, 'mcp-agent' for an MCP agent harness, and for a bare name the provider litellm infers for it."""
    backend = backend_of(model, models)
    if backend.startswith("python:"):
        return "python"
    if backend.startswith("mcp-agent:"):  # a harness process (its own model calls are its own to limit)
        return "mcp-agent"
    head, slash, _ = backend.partition("/")
    if slash:
        return head
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # as the gateway does: never fetch the price map
    import litellm  # only for a bare model name; a slow import the daemon otherwise never pays

    try:
        return str(litellm.get_llm_provider(backend)[1])
    except Exception:  # noqa: BLE001 -- a name litellm cannot place: its own bucket, so it is still limited
        return "unknown"


def model_roles(version: PolicyVersion, writer_model: str = defaults.SEARCH_WRITER_MODEL) -> dict[str, str]:
    """Every model a policy run of the version may call, by role (the search's writer included)."""
    roles = {"agent": version.model, "user": version.user_model, "judge": version.judge_model, "writer": writer_model}
    return roles | ({"replies": version.reply_classifier} if version.reply_classifier else {})


def provider_tags(version: PolicyVersion, models: Mapping[str, ModelConfig],
                  writer_model: str = defaults.SEARCH_WRITER_MODEL) -> dict[str, str]:
    """The run tags for a policy run of the version: one per remote provider (value: the roles calling it), and
    REMOTE_MODELS_TAG when there is any. A version on embedded models only gets none."""
    roles: dict[str, list[str]] = {}
    for role, model in model_roles(version, writer_model).items():
        provider = provider_of(model, models)
        if provider not in LOCAL_PROVIDERS:
            roles.setdefault(_TAG_SECTION.sub("_", provider)[:63], []).append(role)
    tags = {f"{PROVIDER_TAG_PREFIX}{p}": "+".join(r) for p, r in sorted(roles.items())}
    if tags:
        tags[REMOTE_MODELS_TAG] = "+".join(sorted(roles))
    return tags


def registry_path(configured: str | None = None) -> Path:
    """The registry the queue reads: the coordinator's `registry_path`, else $SIM_PIPELINE_REGISTRY, else the
    default one (the one the code location's RegistryResource reads)."""
    return Path(configured or os.environ.get(REGISTRY_VARIABLE) or REGISTRY_PATH)


def tags_for_run(tags: Mapping[str, str], path: Path) -> dict[str, str]:
    """The provider tags for a run with these tags: none for a run that is not a (policy_version, seed) partition
    (seed steps, axes and deltas call no model)."""
    slug = tags.get(VERSION_TAG)
    if slug is None:
        return {}
    registry = load_registry(path)
    if slug not in registry:
        raise dg.DagsterInvariantViolationError(
            f"run for policy version '{slug}': it is not registered in {path}, so the queue cannot tell which "
            f"provider it calls. Fix: register it, or point {REGISTRY_VARIABLE} at the registry the code location "
            "reads")
    return provider_tags(registry[slug], load_models(path))


class ProviderQueuedRunCoordinator(dg.QueuedRunCoordinator):
    """Dagster's queued run coordinator, adding the provider tags of each policy run before it is queued."""

    _registry_path: str | None = None

    @classmethod
    def config_type(cls) -> dict[str, Any]:
        """The queued coordinator's fields and `registry_path`."""
        return {**super().config_type(),
                "registry_path": dg.Field(dg.StringSource, is_required=False,
                                          description="The policy registry; default $SIM_PIPELINE_REGISTRY, else "
                                                      "data/policies.yaml.")}

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Mapping[str, Any]) -> ProviderQueuedRunCoordinator:
        """Built as the queued coordinator is, then given the registry path."""
        coordinator = super().from_config_value(inst_data, {k: v for k, v in config_value.items()
                                                            if k != "registry_path"})
        coordinator._registry_path = config_value.get("registry_path")
        return coordinator

    def submit_run(self, context: dg.SubmitRunContext) -> dg.DagsterRun:
        """Tag the run with its providers, then queue it."""
        run = context.dagster_run
        tags = tags_for_run(run.tags, registry_path(self._registry_path))
        if tags:
            self._instance.add_run_tags(run.run_id, tags)
        return super().submit_run(context)
