"""Same seed, same inputs, same bytes: every Parquet file two `sim-pipeline run`s write is identical, whatever the
hash seed of the process and however many model calls are in flight."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

# Large enough for a trusted judge (its gold rows), so the cuts and the delta are written too.
SMALL = ["--situations", "40", "--samples", "2", "--heldout-samples", "2", "--allow-failed-checks"]


def _start(workdir: Path, hash_seed: str, concurrency: str) -> subprocess.Popen:
    """One run in its own directory (its own model cache and Dagster home, so nothing is answered from or recorded
    beside the other run); its output goes to files there."""
    workdir.mkdir()
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "DAGSTER_HOME": str(workdir / "dagster_home")}
    with open(workdir / "stdout.txt", "w") as out, open(workdir / "stderr.txt", "w") as err:
        return subprocess.Popen([sys.executable, "-m", "sim_pipeline.cli", "run", "--warehouse",
                                 str(workdir / "warehouse"), "--concurrency", concurrency, *SMALL], cwd=workdir,
                                env=env, stdout=out, stderr=err)


def _written(workdir: Path, run: subprocess.Popen) -> dict[str, str]:
    """The finished run's Parquet files and their sha256."""
    assert run.wait(timeout=600) == 0, (workdir / "stderr.txt").read_text()[-2000:]
    return {str(p.relative_to(workdir / "warehouse")): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((workdir / "warehouse").rglob("*.parquet"))}


def test_two_runs_write_byte_identical_parquet_across_hash_seeds_and_concurrency(tmp_path):
    # The two processes at once: they share nothing, and a 2-core machine runs them in the time of one.
    runs = {tmp_path / "a": _start(tmp_path / "a", "1", "1"), tmp_path / "b": _start(tmp_path / "b", "4242", "16")}
    try:
        first, second = [_written(workdir, run) for workdir, run in runs.items()]
    finally:
        for run in runs.values():
            run.kill()  # a no-op once it has exited; a run left behind by a failure must not outlive the test
    # Every step's file: plan, world, situations, search, rollouts, grades, cuts, scores and the delta.
    assert {Path(name).parts[1] for name in first} >= {"covering_array", "world", "situations", "search", "rollouts",
                                                       "grades", "sft", "scores", "delta"}
    assert first.keys() == second.keys()
    assert [name for name in first if first[name] != second[name]] == []
