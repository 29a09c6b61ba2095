"""The engine never imports Dagster, and loading the code location never imports litellm."""

import pkgutil
import subprocess
import sys

import sim_pipeline

ENGINE = sorted(m.name for m in pkgutil.walk_packages(sim_pipeline.__path__, "sim_pipeline.")
                if not m.name.startswith(("sim_pipeline.defs", "sim_pipeline.definitions", "sim_pipeline.cli")))


def imported_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_engine_modules_do_not_import_dagster():
    assert len(ENGINE) > 20
    modules = imported_after("\n".join(f"import {m}" for m in ENGINE if not m.endswith("sim_provider")))
    assert "dagster" not in modules


def test_code_location_load_does_not_import_litellm():
    modules = imported_after("import sim_pipeline.definitions")
    assert "dagster" in modules and "litellm" not in modules
