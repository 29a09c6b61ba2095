"""An external trainer: a registry version's `trainer:` command, run on the export of one cut, prints a model.

For a real model the fitting happens elsewhere (TRL, verl, a hosted fine-tuning API): sim_pipeline writes the
method's cut as the TRL export into a directory, runs the command with that directory and the method, and takes
the last line the command prints as the trained model's string (a litellm string such as
`hosted_vllm/my-agent-sft`, or `python:module:function`). A new registry version names that model, with the
source version as its baseline, and the delta measures it. The command's contract:

    <command...> EXPORT_DIR METHOD      (also $SIM_PIPELINE_EXPORT_DIR, $SIM_PIPELINE_TRAIN_METHOD,
                                         $SIM_PIPELINE_SOURCE_MODEL)
    exit status 0, the model string on the last line of stdout
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from sim_pipeline import defaults
from sim_pipeline.errors import SimPipelineError
from sim_pipeline.redaction import redact
from sim_pipeline.registry import TrainerSpec

_MODEL_LINE_MAX = 300  # a model string is short; a longer last line is output, not a model


class TrainerError(SimPipelineError):
    """An external trainer failed or printed no model."""


def run_trainer(spec: TrainerSpec, *, export_dir: Path, method: str, source_model: str,
                cwd: Path | None = None) -> str:
    """Run the trainer on one method's export; the model string it printed last."""
    command = [*spec.command, str(export_dir), method]
    env = {**os.environ, "SIM_PIPELINE_EXPORT_DIR": str(export_dir), "SIM_PIPELINE_TRAIN_METHOD": method,
           "SIM_PIPELINE_SOURCE_MODEL": source_model}
    try:
        done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=spec.timeout_s)
    except FileNotFoundError:
        raise TrainerError(f"trainer command {spec.command[0]!r} not found. Fix: give the trainer's full path or put "
                           "it on PATH (registry: policies/<version>/trainer/command)") from None
    except subprocess.TimeoutExpired:
        raise TrainerError(f"trainer {' '.join(spec.command)} ran past its {spec.timeout_s:g} s timeout on the {method} "
                           "export. Fix: raise trainer/timeout_s, or make the trainer return sooner") from None
    if done.returncode != 0:
        tail = redact(done.stderr.strip())[-defaults.TRAINER_OUTPUT_TAIL:]
        raise TrainerError(f"trainer {' '.join(spec.command)} exited with status {done.returncode} on the {method} "
                           f"export ({export_dir}):\n{tail}\nFix: run the same command by hand on that directory")
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    model = lines[-1] if lines else ""
    if not model or len(model) > _MODEL_LINE_MAX or any(c.isspace() for c in model) or (
            "/" not in model and not model.startswith("python:")):
        raise TrainerError(f"trainer {' '.join(spec.command)} printed no model string last (got {redact(model)[:80]!r})"
                           ". Fix: print the trained model, e.g. hosted_vllm/my-agent-sft or python:pkg.mod:respond, "
                           "as the last line of stdout")
    return model
