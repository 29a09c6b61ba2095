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


# Runs a command as its child and prints the child's peak RSS in KiB (Linux ru_maxrss). A fresh process: the bench's
# own RUSAGE_CHILDREN holds every earlier child's peak too. Processes the command spawns and waits for count as well.
_PEAK_RSS = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, capture_output=True); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def _peak_rss_mb(argv: list[str], workdir: Path) -> float:
    env = {**os.environ, "DAGSTER_HOME": str(workdir / "dagster_home"), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run([sys.executable, "-c", _PEAK_RSS, *argv], cwd=workdir, env=env, check=True,
                          capture_output=True, text=True)
    return int(done.stdout.split()[-1]) / 1024


def figures_peak_memory() -> list[dict]:
    """Peak RSS of a cold `sim-pipeline run --domain retail`, against the floor of importing the code location."""
    with tempfile.TemporaryDirectory() as tmp:
        floor = _peak_rss_mb([sys.executable, "-c", "import sim_pipeline.definitions"], Path(tmp))
        peak = _peak_rss_mb([sys.executable, "-m", "sim_pipeline.cli", "run", "--domain", "retail", "--warehouse",
                             str(Path(tmp) / "warehouse")], Path(tmp))
    return [
        {"name": "code_location_import_rss_mb (import sim_pipeline.definitions)", "value": floor, "unit": "MB"},
        {"name": "make_run_peak_rss_mb (retail, cold, peak RSS of the process)", "value": peak, "unit": "MB",
         "baseline_name": "code_location_import_rss_mb", "baseline_value": floor, "ratio": peak / floor},
    ]
