"""What `make run` costs a newcomer: the retail run, cold (empty warehouse, cache and Dagster instance) and warm.

The warm run is the baseline measured in the same run: it makes no model call (the response cache answers), so the
ratio shows what the model calls and their grading add to the fixed cost of Dagster and the steps.
"""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _run(workdir: Path) -> float:
    env = {**os.environ, "DAGSTER_HOME": str(workdir / "dagster_home"), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "sim_pipeline.cli", "run", "--domain", "retail", "--warehouse",
                    str(workdir / "warehouse")], cwd=workdir, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def figures() -> list[dict]:
    """Seconds for a cold and a warm `sim-pipeline run --domain retail` (wall clock, Python start included)."""
    with tempfile.TemporaryDirectory() as tmp:
        cold = _run(Path(tmp))
        warm = _run(Path(tmp))
    return [
        {"name": "make_run_warm_seconds (retail, response cache answers)", "value": warm, "unit": "s"},
        {"name": "make_run_cold_seconds (retail, every model call made)", "value": cold, "unit": "s",
         "baseline_name": "make_run_warm_seconds", "baseline_value": warm, "ratio": cold / warm},
    ]
