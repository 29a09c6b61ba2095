"""The one Definitions object: every domain pack's asset graph, checks, jobs, schedules and sensors.

`defs` is built on first use, not on import: every command imports this module (through defs/launch.py), and a
command for one domain must neither load nor fail on the others. A pack that does not load becomes one placeholder
asset in its group, so the UI shows it broken and why, and the other domains load as usual.
"""

from __future__ import annotations

import os
import re
from functools import cache
from collections.abc import Callable
from typing import Any

import dagster as dg

from sim_pipeline import domain as packs
from sim_pipeline.defs.assets import domain_assets
from sim_pipeline.defs.automation import (
    axes_job,
    delta_follow_sensor,
    delta_job,
    train_job,
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
from sim_pipeline.errors import DomainPackError, one_line

WAREHOUSE = os.environ.get("SIM_PIPELINE_WAREHOUSE", "data/warehouse")
BROKEN_STEP = "broken_pack"  # the placeholder asset's step name, beside the group of a pack that does not load


def domain_names() -> list[str]:
    """Every domain pack under data/domains (a folder with a domain.yaml), whether it loads or not."""
    return packs.pack_names()


def broken_pack_asset(name: str, error: BaseException) -> dg.AssetsDefinition:
    """A placeholder for a pack that does not load: one asset in its group that says why, and raises it when run."""
    reason = one_line(error)
    group = re.sub(r"\W", "_", name, flags=re.ASCII) or "_"  # a Dagster name, whatever the folder is called

    @dg.asset(key=dg.AssetKey([group, BROKEN_STEP]), group_name=group,
              description=f"Domain pack '{name}' is broken, so none of its steps can run: {reason}",
              metadata={"error": reason})
    def broken_pack() -> None:
        raise DomainPackError(f"domain pack '{name}' is broken: {reason}")

    return broken_pack


def build_definitions(domains: list[str] | None = None, *, warehouse: str = WAREHOUSE) -> dg.Definitions:
    """Definitions for the given domains (all by default), storing Parquet under `warehouse`; a pack that does not
    load is a placeholder asset (`broken_pack_asset`) and takes no job, schedule or sensor."""
    assets: list[Any] = []
    names = []
    for name in domains or domain_names():
        try:
            assets += domain_assets(name)
        except Exception as exc:  # noqa: BLE001 -- one pack's error, even a bug, must not hide every other domain
            assets.append(broken_pack_asset(name, exc))
        else:
            names.append(name)
    return dg.Definitions(
        assets=assets,
        jobs=[job for name in names
              for job in (axes_job(name), seed_job(name), policy_job(name), delta_job(name), train_job(name))],
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


def lazy_definitions(build: Callable[[], dg.Definitions],
                     module_globals: dict[str, Any]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module's `__getattr__` and `__dir__` (PEP 562) whose `defs` is `build()` (cache it: it is called on every
    access): importing the module for its helpers builds nothing, and Dagster's loader still finds `defs`."""
    def module_getattr(name: str) -> Any:
        if name == "defs":
            return build()
        raise AttributeError(f"module {module_globals['__name__']!r} has no attribute {name!r}")

    def module_dir() -> list[str]:
        return sorted([*module_globals, "defs"])

    return module_getattr, module_dir


# `defs` (every domain), built when the UI or a test first asks for it.
_all_definitions = cache(build_definitions)
__getattr__, __dir__ = lazy_definitions(_all_definitions, globals())
