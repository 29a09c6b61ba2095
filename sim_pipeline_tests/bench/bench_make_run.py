"""What `make run` costs a newcomer: the retail run, cold (empty warehouse, cache and Dagster instance) and warm.

The warm run is the baseline of the wall figures, measured in the same run: it makes no model call (the response
cache answers), so the ratio shows what the model calls and their grading add to the fixed cost of Dagster and the
steps.

`make_run_cold_step_seconds` (issue 32, goal <= 12 s on 2 cores) is the time spent in the steps: from the creation of
the command's first Dagster run to the end of its last, as the instance records them, so Python's start, the imports
before the first run and the summary printed after it are left out. Its baseline is the same cold run on an
instance whose dagster.yaml names Dagster's own sqlite storage, which `sim-pipeline` then uses as it did before it
kept the event log's connections (sim_pipeline/defs/event_log.py). Both are wall clock and move with the machine's
load; `event_log_ms_per_event` isolates the event log: one run of an asset logging EVENT_LOG_LINES lines on each
storage, milliseconds per event the run stored.
"""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg

from sim_pipeline.cli import INSTANCE_CONFIG

STEP_GOAL = "<= 12"  # issue 32: seconds in the steps of a cold `make run` on a 2-core machine
EVENT_LOG_LINES = 300  # log lines of the event-log figure's run: about the ~400 events a cold `make run` stores


@dg.asset
def _chatty(context: dg.AssetExecutionContext) -> int:
    for i in range(EVENT_LOG_LINES):
        context.log.info(f"line {i}")
    return EVENT_LOG_LINES


def _run(workdir: Path) -> float:
    env = {**os.environ, "DAGSTER_HOME": str(workdir / "dagster_home"), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "sim_pipeline.cli", "run", "--domain", "retail", "--warehouse",
                    str(workdir / "warehouse")], cwd=workdir, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def step_seconds(home: Path, since: float = 0.0) -> float:
    """Seconds from the creation of the first run created after `since` (epoch seconds) in the instance at `home`
    to the end of the last one: what the command spent in its steps and Dagster's bookkeeping of them."""
    with dg.DagsterInstance.from_config(str(home)) as instance:
        records = [r for r in instance.get_run_records() if r.create_timestamp.timestamp() >= since]
    if not records or any(r.end_time is None for r in records):
        raise RuntimeError(f"the instance at {home} holds no finished run created after {since}: the command did "
                           "not run its steps")
    return max(r.end_time for r in records) - min(r.create_timestamp.timestamp() for r in records)


def _stock_storage_home(home: Path) -> None:
    """A DAGSTER_HOME whose dagster.yaml is the project's with Dagster's own sqlite storage named in it."""
    home.mkdir(parents=True)
    (home / "dagster.yaml").write_text(f"{INSTANCE_CONFIG.read_text()}\nstorage:\n  sqlite:\n    base_dir: {home}\n")


def _event_log_ms(home: Path) -> float:
    """Milliseconds per stored event of one run of _chatty on the instance `sim-pipeline` opens at `home`."""
    from sim_pipeline.defs.event_log import local_instance

    with local_instance(home) as instance:
        started = time.perf_counter()
        run_id = dg.materialize([_chatty], instance=instance).run_id
        seconds = time.perf_counter() - started
        return 1000 * seconds / len(instance.get_records_for_run(run_id, limit=10 * EVENT_LOG_LINES).records)


def figures() -> list[dict]:
    """Seconds for a cold and a warm `sim-pipeline run --domain retail` (wall clock, Python start included), and the
    cold run's seconds in its steps against the same run on Dagster's own sqlite event log."""
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as stock_tmp:
        cold = _run(Path(tmp))
        cold_steps = step_seconds(Path(tmp) / "dagster_home")
        warm_since = time.time()
        warm = _run(Path(tmp))
        warm_steps = step_seconds(Path(tmp) / "dagster_home", since=warm_since)
        _stock_storage_home(Path(stock_tmp) / "dagster_home")
        _run(Path(stock_tmp))
        stock_steps = step_seconds(Path(stock_tmp) / "dagster_home")
        stock_ms = _event_log_ms(Path(stock_tmp) / "dagster_home")
        kept_ms = _event_log_ms(Path(tmp) / "dagster_home")
    return [
        {"name": "make_run_warm_seconds (retail, response cache answers)", "value": warm, "unit": "s"},
        {"name": "make_run_cold_seconds (retail, every model call made)", "value": cold, "unit": "s",
         "baseline_name": "make_run_warm_seconds", "baseline_value": warm, "ratio": cold / warm},
        {"name": "make_run_warm_step_seconds", "value": warm_steps, "unit": "s"},
        {"name": "make_run_cold_step_seconds", "value": cold_steps, "unit": "s", "goal": STEP_GOAL,
         "baseline_name": "make_run_cold_step_seconds_dagster_sqlite_event_log", "baseline_value": stock_steps,
         "ratio": cold_steps / stock_steps},
        {"name": "event_log_ms_per_event", "value": kept_ms, "unit": "ms",
         "baseline_name": "event_log_ms_per_event_dagster_sqlite_event_log", "baseline_value": stock_ms,
         "ratio": kept_ms / stock_ms},
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
