"""The one Definitions object: every domain pack's asset graph, checks, jobs, schedules and sensors."""

from __future__ import annotations

import os

import dagster as dg

from sim_pipeline.defs.assets import domain_assets
from sim_pipeline.defs.automation import (
    axes_job,
    delta_follow_sensor,
    delta_job,
    nightly_schedule,
    policy_job,
    registry_sensor,
    seed_job,
    seed_ready_sensor,
)
from sim_pipeline.defs.io import ParquetIOManager
from sim_pipeline.defs.resources import (
    ModelGatewayResource,
    RegistryResource,
    SimulationResource,
    WarehouseResource,
    api_keys_from_environment,
)
from sim_pipeline.domain import DOMAINS_DIR

WAREHOUSE = os.environ.get("SIM_PIPELINE_WAREHOUSE", "data/warehouse")


def domain_names() -> list[str]:
    """Every domain pack under data/domains."""
    return sorted(p.name for p in DOMAINS_DIR.iterdir() if (p / "domain.yaml").is_file())


def build_definitions(domains: list[str] | None = None, *, warehouse: str = WAREHOUSE) -> dg.Definitions:
    """Definitions for the given domains (all by default), storing Parquet under `warehouse`."""
    names = domains or domain_names()
    return dg.Definitions(
        assets=[a for name in names for a in domain_assets(name)],
        jobs=[job for name in names for job in (axes_job(name), seed_job(name), policy_job(name), delta_job(name))],
        schedules=[nightly_schedule(name) for name in names],
        sensors=[sensor for name in names
                 for sensor in (registry_sensor(name), seed_ready_sensor(name), delta_follow_sensor(name))],
        resources={
            "io_manager": ParquetIOManager(base_path=warehouse),
            "gateway": ModelGatewayResource(**api_keys_from_environment()),
            "registry": RegistryResource(),
            "store": WarehouseResource(base_path=warehouse),
            "simulation": SimulationResource(),
        },
    )


defs = build_definitions()
