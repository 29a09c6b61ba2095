"""Step 09, training: a new policy from one (version, seed)'s cuts, by SFT, DPO and GRPO, one row per method.

An embedded agent (`sim/agent-*`, or a profile fitted earlier, `sim/trained-*`) is fitted here (train/fit.py) and
saved as a new embedded model, `sim/trained-<hash>`. Any other model is trained by the version's `trainer:` command
(train/external.py) on the TRL export of the method's cut, and the model string it prints is recorded. Either way a
new registry version names the model, with the source version as its baseline, and the delta measures it on the
held-out tasks, which no cut holds (cut/decontaminate.py): `trained_on` lists the situations each method learned
from, so the wall can be checked.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from sim_pipeline import defaults
from sim_pipeline.cut.export import export_trl
from sim_pipeline.models.trained_profiles import load_profile, save_profile, trained_hash
from sim_pipeline.registry import PolicyVersion
from sim_pipeline.seeding import canonical_json
from sim_pipeline.situation import Situation
from sim_pipeline.protocol.train_methods import CUT_OF_METHOD, TRAIN_METHODS
from sim_pipeline.train.external import run_trainer

if TYPE_CHECKING:  # scipy.optimize (~1 s, tens of MB) is imported when a cut is fitted, not at load
    from sim_pipeline.train.fit import FitResult

TRAINED_COLUMNS = [
    "policy_version", "seed", "method", "cut", "status", "reason", "model", "trainer", "source_model",
    "cut_rows", "cut_sha256", "judge_version", "trained_on", "examples", "scored_turns", "skipped_turns", "steps",
    "loss_first", "loss_last", "losses", "source_profile", "profile", "seconds",
]
TRAINED = "trained"
SKIPPED = "skipped"
EMBEDDED_TRAINER = "embedded fit (sim_pipeline/train/fit.py)"


def source_profile(model: str) -> dict[str, float] | None:
    """The flaw logits of an embedded agent model (sim/agent-v1, sim/trained-<hash>), or None for any other model."""
    name = model.removeprefix("sim/")
    if model.startswith("sim/") and name in defaults.AGENT_PROFILES:
        return dict(defaults.AGENT_PROFILES[name])
    if model.startswith("sim/") and trained_hash(model) is not None:
        return load_profile(model)
    return None


def _base_row(version: PolicyVersion, seed: str, method: str, table: pd.DataFrame | None,
              cut_sha256: str | None) -> dict[str, Any]:
    cut = CUT_OF_METHOD[method]
    rows = 0 if table is None else len(table)
    judges = sorted({str(j) for j in table["judge_version"].dropna()}) if rows and "judge_version" in table else []
    situations = sorted({str(s) for s in table["situation_id"]}) if rows else []
    return {"policy_version": version.slug, "seed": int(seed), "method": method, "cut": cut, "status": SKIPPED,
            "reason": "", "model": None, "trainer": None, "source_model": version.agent_backend, "cut_rows": rows,
            "cut_sha256": cut_sha256, "judge_version": ",".join(judges) or None,
            "trained_on": json.dumps(situations), "examples": 0, "scored_turns": 0, "skipped_turns": 0, "steps": 0,
            "loss_first": None, "loss_last": None, "losses": "[]", "source_profile": None, "profile": None,
            "seconds": 0.0}


def _fitted(row: dict[str, Any], fit: FitResult, model: str) -> dict[str, Any]:
    return {**row, "status": TRAINED, "model": model, "trainer": EMBEDDED_TRAINER, "examples": fit.examples,
            "scored_turns": fit.scored_turns, "skipped_turns": fit.skipped_turns, "steps": fit.steps,
            "loss_first": fit.losses[0], "loss_last": fit.losses[-1], "losses": json.dumps(fit.losses),
            "source_profile": canonical_json(fit.source), "profile": canonical_json(fit.profile)}


def train_policy(version: PolicyVersion, seed: str, cuts: Mapping[str, pd.DataFrame | None], *,
                 tools: list[dict[str, Any]], situations: Iterable[Situation] = (),
                 cut_sha256: Mapping[str, str | None] | None = None, trained_dir: Path | None = None,
                 repo_root: Path | None = None) -> pd.DataFrame:
    """One row per method: the model trained from this partition's cut, or why none was (skipped)."""
    profile = source_profile(version.agent_backend)
    methods = version.trainer.methods if profile is None and version.trainer else TRAIN_METHODS
    situations = list(situations)
    rows = []
    for method in TRAIN_METHODS:
        cut = CUT_OF_METHOD[method]
        table = cuts.get(cut)
        row = _base_row(version, seed, method, table, (cut_sha256 or {}).get(cut))
        started = time.perf_counter()
        if method not in methods:
            row["reason"] = f"the version's trainer trains {list(methods)} only"
        elif profile is None and version.trainer is None:
            row["reason"] = (f"{version.agent_backend} is no embedded agent and the version names no trainer. Fix: add "
                             "trainer: {command: [...]} to the version in the registry (docs/training.md)")
        elif table is None or not len(table):
            row["reason"] = f"the {cut} cut has no rows for this partition (empty, or refused by its publish gate)"
        elif profile is not None:
            from sim_pipeline.train.fit import fit_cut

            fit = fit_cut(cut, table, profile, tools=tools)
            if fit.scored_turns == 0:
                row["reason"] = f"no turn of the {cut} cut is one the embedded agent could have written"
            else:
                model = save_profile(fit.profile, {"source_version": version.slug, "source_model": version.agent_backend,
                                                   "seed": int(seed), "method": method, "cut": cut,
                                                   "cut_sha256": row["cut_sha256"], "steps": fit.steps},
                                     trained_dir)
                row = _fitted(row, fit, model)
        else:
            row = {**row, **_external(version, method, table, tools=tools, situations=situations, repo_root=repo_root)}
        row["seconds"] = round(time.perf_counter() - started, 3)
        rows.append(row)
    return pd.DataFrame(rows, columns=TRAINED_COLUMNS)


def _external(version: PolicyVersion, method: str, table: pd.DataFrame, *, tools: list[dict[str, Any]],
              situations: list[Situation], repo_root: Path | None) -> dict[str, Any]:
    """Export the method's cut in TRL's format and run the version's trainer on it."""
    assert version.trainer is not None
    with tempfile.TemporaryDirectory(prefix=f"sim-pipeline-{method}-") as export_dir:
        written = export_trl({CUT_OF_METHOD[method]: table}, export_dir, tools=tools,
                             situations=situations if method == "grpo" else None)
        if not any(f.path for f in written):
            return {"reason": f"the TRL export of the {CUT_OF_METHOD[method]} cut kept no row"}
        # A failing trainer fails the step (TrainerError, with its output): a model that was not trained must not
        # look like one that was skipped on purpose.
        model = run_trainer(version.trainer, export_dir=Path(export_dir), method=method,
                            source_model=version.agent_backend, cwd=repo_root)
    return {"status": TRAINED, "model": model, "trainer": " ".join(version.trainer.command),
            "examples": int(sum(f.rows for f in written))}
