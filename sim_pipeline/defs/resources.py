"""Resources: the model gateway (API keys via EnvVar), the warehouse reader, the registry and run sizes."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, TypeVar

import dagster as dg
import pandas as pd
from pydantic import PrivateAttr

from sim_pipeline import defaults, warehouse
from sim_pipeline.defs.io import materialized_sha256, path_partition
from sim_pipeline.errors import RegistryError
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.models.model_config import PROVIDER_KEY_VARIABLES, ModelConfig
from sim_pipeline.registry import REGISTRY_PATH, PolicyVersion, load_models, load_registry
from sim_pipeline.rollout.simulate import RolloutSettings
from sim_pipeline.search.loop import SearchSettings

# The providers whose keys the resource takes as config fields (resolved from EnvVar at run time).
API_KEY_VARIABLES = {p: PROVIDER_KEY_VARIABLES[p] for p in ("openai", "anthropic", "gemini", "mistral", "together_ai")}


Resource = TypeVar("Resource", bound=dg.ConfigurableResource)


def replaced(resource: Resource, **changes: Any) -> Resource:
    """A new resource of the same class with some fields changed.

    Not pydantic's `model_copy(update=...)`: Dagster builds a resource at run time from the arguments it was
    constructed with, so a model_copy's changes are silently dropped (measured: a copied cache_dir never reached the
    asset, which wrote to the default data/cache instead)."""
    fields = {name: value for name, value in resource.__dict__.items() if name in type(resource).model_fields}
    return type(resource)(**{**fields, **changes})


class ModelGatewayResource(dg.ConfigurableResource):
    """Every model call goes through this gateway; keys are resolved from EnvVar at run time, never logged."""

    concurrency: int = defaults.GATEWAY_CONCURRENCY
    cache_dir: str | None = "data/cache"
    # The embedded sim/ models in-process: the same rows as through litellm (tested), without its per-call overhead.
    fast_path: bool = True
    backoff_s: float = defaults.GATEWAY_BACKOFF_SECONDS  # first back-off between tries of a failed call, doubling
    openai_api_key: str | None = None
    anthropic_api_key: str | None = None
    gemini_api_key: str | None = None
    mistral_api_key: str | None = None
    together_ai_api_key: str | None = None

    def gateway(self, models: Mapping[str, ModelConfig] | None = None) -> Gateway:
        """A gateway for one run (its cache is shared across runs), resolving names through the registry's models."""
        cache = os.path.join(self.cache_dir, defaults.MODEL_CACHE_FILE) if self.cache_dir else None
        keys = {p: getattr(self, f"{p}_api_key") for p in API_KEY_VARIABLES if getattr(self, f"{p}_api_key")}
        return Gateway(cache_path=cache, concurrency=self.concurrency, api_keys=keys, fast_path=self.fast_path,
                       backoff_s=self.backoff_s, models=models)


def api_keys_from_environment() -> dict[str, dg.EnvVar]:
    """EnvVar references (field name -> EnvVar) for the provider keys set in the environment."""
    return {f"{p}_api_key": dg.EnvVar(v) for p, v in API_KEY_VARIABLES.items() if os.environ.get(v)}


class RegistryResource(dg.ConfigurableResource):
    """The policy registry file."""

    path: str = str(REGISTRY_PATH)

    def version(self, slug: str) -> PolicyVersion:
        """One registered version; an unknown slug is a clear error."""
        registry = load_registry(self.path)
        if slug not in registry:
            raise RegistryError(f"{self.path}: policy version '{slug}' is not registered. Fix: add it under "
                                f"'policies:' or use one of {sorted(registry)}")
        return registry[slug]

    def models(self) -> dict[str, ModelConfig]:
        """The registry's named model configs."""
        return load_models(self.path)


class WarehouseResource(dg.ConfigurableResource):
    """Reads materialized partitions directly (e.g. a baseline's grades, which an asset cannot take as a 2nd input)."""

    base_path: str = "data/warehouse"
    _instance: dg.DagsterInstance | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Keep the run's instance: a file without its sidecar is checked against the content_sha256 it recorded."""
        self._instance = context.instance

    def read_one(self, domain: str, asset: str, **parts: str) -> pd.DataFrame | None:
        """One materialized partition (checked against its sidecar or, without one, the instance's recorded
        content_sha256), or None when it does not exist yet."""
        path = warehouse.partition_path(self.base_path, domain, asset, **parts)
        if not path.exists():
            return None
        expected = materialized_sha256(self._instance, *path_partition(path)) if self._instance is not None and \
            warehouse.recorded_sha256(path) is None else None
        return warehouse.read_table(path, expected=expected)

    def sha256_one(self, domain: str, asset: str, **parts: str) -> str | None:
        """The sha256 recorded when a partition's file was written (its provenance), or None without one."""
        path = warehouse.partition_path(self.base_path, domain, asset, **parts)
        return warehouse.recorded_sha256(path) if path.exists() else None

    def remove_one(self, domain: str, asset: str, **parts: str) -> bool:
        """Delete one partition's file (a gate refused its rows); whether there was one."""
        path = warehouse.partition_path(self.base_path, domain, asset, **parts)
        if not path.exists():
            return False
        path.unlink()
        warehouse.checksum_path(path).unlink(missing_ok=True)
        return True


class SimulationResource(dg.ConfigurableResource):
    """Run sizes: a mode preset (explore, sft, rl, adaptive) with optional overrides, k for held-out tasks, budget."""

    mode: str = defaults.DEFAULT_ROLLOUT_MODE
    heldout_samples: int = defaults.HELDOUT_SAMPLES
    n_phrasings: int | None = None
    train_samples: int | None = None
    probe_samples: int | None = None
    search_batch_situations: int = defaults.SEARCH_BATCH_SITUATIONS
    search_budget_rows: int = defaults.SEARCH_BUDGET_ROWS
    writer_model: str = defaults.SEARCH_WRITER_MODEL
    max_situations: int | None = None  # roll out only the plan's first N situations (held-out and train alike)

    def settings(self) -> RolloutSettings:
        """The engine's settings object."""
        return RolloutSettings.for_mode(
            self.mode, heldout_samples=self.heldout_samples, writer_model=self.writer_model,
            max_situations=self.max_situations,
            search=SearchSettings(self.search_batch_situations, self.search_budget_rows),
            n_phrasings=self.n_phrasings, train_samples=self.train_samples, probe_samples=self.probe_samples)
