"""`make loop` (issue 19): agent-v1 -> its cuts -> SFT, DPO and GRPO versions -> their held-out deltas, offline.

Figures: the loop's wall time on a clean warehouse, cache and instance, against the same run of agent-v1 alone (the
baseline measured in the same run: what training and three more policy runs add); and each method's held-out
pass@1 after training, against agent-v1's, with the delta, its interval and verdict in the name.
"""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sim_pipeline import warehouse

SOURCE = "agent-v1"
METHODS = ("sft", "dpo", "grpo")


def _command(workdir: Path, *argv: str) -> float:
    env = {**os.environ, "DAGSTER_HOME": str(workdir / "dagster_home"), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "SIM_PIPELINE_TRAINED_DIR": str(workdir / "trained")}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "sim_pipeline.cli", *argv, "--warehouse", str(workdir / "warehouse")],
                          cwd=workdir, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"bench_loop: {' '.join(argv)} exited {done.returncode}:\n{done.stdout[-3000:]}\n"
                           f"{done.stderr[-3000:]}")
    return time.perf_counter() - started


def figures() -> list[dict]:
    """Seconds for `sim-pipeline loop --from agent-v1` and for agent-v1's run alone; pass@1 per method."""
    with tempfile.TemporaryDirectory() as alone, tempfile.TemporaryDirectory() as tmp:
        source_seconds = _command(Path(alone), "run", "--domain", "retail", "--versions", SOURCE)
        loop_seconds = _command(Path(tmp), "loop", "--from", SOURCE)
        deltas = {m: warehouse.read_table(warehouse.partition_path(Path(tmp) / "warehouse", "retail", "delta",
                                                                   policy_version=f"{SOURCE}-{m}")) for m in METHODS}
    out = [
        {"name": "loop_source_run_seconds (sim-pipeline run --versions agent-v1, cold)", "value": source_seconds,
         "unit": "s"},
        {"name": "loop_wall_seconds (make loop: agent-v1, train x3, three policy runs and deltas, cold)",
         "value": loop_seconds, "unit": "s", "baseline_name": "loop_source_run_seconds",
         "baseline_value": source_seconds, "ratio": loop_seconds / source_seconds},
    ]
    for method, delta in deltas.items():
        row = delta[delta["metric"] == "pass@1"].iloc[0]
        out.append({"name": f"loop_heldout_pass@1_{method} (delta {row['delta']:+.3f} [{row['ci_low']:+.3f}, "
                            f"{row['ci_high']:+.3f}] {row['verdict']}, n={row['n_tasks']})",
                    "value": float(row["after"]), "unit": "pass@1", "baseline_name": f"loop_heldout_pass@1_{SOURCE}",
                    "baseline_value": float(row["before"]),
                    "ratio": float(row["after"]) / float(row["before"]) if row["before"] else float("nan")})
    return out
