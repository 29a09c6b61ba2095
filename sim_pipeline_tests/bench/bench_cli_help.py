"""What `sim-pipeline --help` costs: its wall time against a bare `python -c pass` measured in the same run.

The goal (issue 32) is under 1 s on a 2-core machine: the CLI imports only the standard library until a verb runs,
so the ratio shows what the CLI module itself adds to Python's start.
"""

import statistics
import subprocess
import sys
import time

from sim_pipeline import defaults


def _median_wall(argv: list[str]) -> float:
    """The median wall time of `argv` over BENCH_CLI_HELP_REPEATS runs (the median: one slow start is noise)."""
    walls = []
    for _ in range(defaults.BENCH_CLI_HELP_REPEATS):
        started = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        walls.append(time.perf_counter() - started)
    return statistics.median(walls)


def figures() -> list[dict]:
    """Median seconds of `python -m sim_pipeline.cli --help`, with `python -c pass` as the baseline."""
    bare = _median_wall([sys.executable, "-c", "pass"])
    help_wall = _median_wall([sys.executable, "-m", "sim_pipeline.cli", "--help"])
    return [
        {"name": "python_start_seconds (python -c pass)", "value": bare, "unit": "s"},
        {"name": "cli_help_seconds (sim-pipeline --help, goal < 1 s)", "value": help_wall, "unit": "s",
         "baseline_name": "python_start_seconds", "baseline_value": bare, "ratio": help_wall / bare},
    ]
