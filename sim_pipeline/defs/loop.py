"""Close the loop (`sim-pipeline loop`): a version's cuts -> trained versions -> their held-out rollouts -> deltas.

1. The source version's partition (search, rollouts, grades, cuts, scores) for one seed.
2. Step 09 on it: one trained model per method (trained_policy).
3. A registry for the loop, `data/trained/policies.yaml` (the project registry plus one version per trained
   method, `<source>-<method>`, whose baseline is the source); the project's registry is never edited.
4. Each trained version's partition on the same seed, and its delta against the source on the held-out tasks,
   which no cut holds (cut/decontaminate.py), so training never saw them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd

from sim_pipeline.defs.launch import RunOutcome, materialize_domain, new_claim, sync_partitions, train_partition
from sim_pipeline.defs.partition_lock import PartitionClaim
from sim_pipeline.errors import SimPipelineError
from sim_pipeline.models.trained_profiles import trained_dir
from sim_pipeline.registry import REGISTRY_PATH, PolicyVersion, load_registry, same_slug, write_with_versions
from sim_pipeline.train.trained_policy import TRAINED
from sim_pipeline.warehouse import partition_path, read_table

LOOP_REGISTRY = "policies.yaml"  # under the trained directory, beside the fitted profiles it names


@dataclass
class LoopResult:
    """What one loop ran and trained."""

    source: PolicyVersion
    seed: str
    registry: Path | None = None
    trained: dict[str, PolicyVersion] = field(default_factory=dict)  # method -> the version its model became
    methods: pd.DataFrame = field(default_factory=pd.DataFrame)  # the trained_policy rows of the chosen methods
    outcomes: list[RunOutcome] = field(default_factory=list)

    @property
    def success(self) -> bool:
        """Every run succeeded and every chosen method trained."""
        return bool(self.outcomes) and all(o.success for o in self.outcomes) and len(self.trained) == len(self.methods)


def trained_slug(source: str, method: str) -> str:
    """The registry version a method's model becomes: <source>-<method>."""
    return f"{source}-{method}"


def run_loop(instance: dg.DagsterInstance, source_slug: str, methods: list[str], seed: str, *, warehouse: str,
             log: Callable[[str], None] = print, sizes: Mapping[str, Any] | None = None,
             registry_path: Path | None = None, wait: bool = False) -> LoopResult:
    """Steps 1-4 of the module docstring (`registry_path`: the project registry, REGISTRY_PATH by default); stops
    early, with the outcomes so far, when a step fails. Each partition it runs stays claimed until the loop ends
    (launch.claim_partitions): a busy one is waited for (`wait`) or refused."""
    with new_claim(instance, wait=wait, log=log) as claim:
        return _loop(instance, source_slug, methods, seed, warehouse=warehouse, log=log, sizes=sizes,
                     project=Path(registry_path or REGISTRY_PATH), claim=claim)


def _loop(instance: dg.DagsterInstance, source_slug: str, methods: list[str], seed: str, *, warehouse: str,
          log: Callable[[str], None], sizes: Mapping[str, Any] | None, project: Path,
          claim: PartitionClaim) -> LoopResult:
    """run_loop's steps, its partitions claimed in `claim`."""
    registry = load_registry(project)
    if source_slug not in registry:
        raise SimPipelineError(f"--from {source_slug}: no such version in {project}. Fix: use one of "
                               f"{sorted(registry)}")
    for method in methods:  # before anything runs: the loop's registry would refuse the trained version after training
        clash = same_slug(trained_slug(source_slug, method), registry)
        if clash is not None:
            raise SimPipelineError(f"--from {source_slug}: the trained version '{trained_slug(source_slug, method)}' "
                                   f"and version '{clash}' of {project} are one slug once case and '-'/'_' are set "
                                   f"aside. Fix: rename '{clash}' in {project}")
    source = registry[source_slug]
    result = LoopResult(source, seed)
    sync_partitions(instance, [source.domain], registry_path=str(project))
    result.outcomes += materialize_domain(instance, source.domain, seed, [source], warehouse=warehouse, log=log,
                                          sizes=sizes, registry=str(project), claim=claim)
    if not all(o.success for o in result.outcomes):
        log(f"  {source.slug}|{seed} did not fully succeed: nothing to train from")
        return result
    result.outcomes.append(train_partition(instance, source.domain, seed, source, warehouse=warehouse, log=log,
                                           registry=str(project), claim=claim))
    if not result.outcomes[-1].success:
        return result
    table = read_table(partition_path(warehouse, source.domain, "trained_policy", policy_version=source.slug,
                                      seed=seed))
    result.methods = table[table["method"].isin(methods)].reset_index(drop=True)
    for row in result.methods.itertuples(index=False):
        if row.status != TRAINED:
            log(f"  {row.method}: not trained: {row.reason}")
    trained = result.methods[result.methods["status"] == TRAINED]
    if not len(trained):
        return result
    entries = {trained_slug(source.slug, r.method): _entry(source, r.model) for r in trained.itertuples(index=False)}
    clashing = sorted(set(entries) & set(registry))
    if clashing:
        log(f"  note: {clashing} are in {project} too; the loop's registry replaces them with the trained models")
    result.registry = write_with_versions(project, trained_dir() / LOOP_REGISTRY, entries)
    loop_registry = load_registry(result.registry)
    result.trained = {method: loop_registry[trained_slug(source.slug, method)] for method in trained["method"]}
    sync_partitions(instance, [source.domain], registry_path=str(result.registry))
    result.outcomes += materialize_domain(instance, source.domain, seed, list(result.trained.values()),
                                          warehouse=warehouse, log=log, sizes=sizes, registry=str(result.registry),
                                          claim=claim)
    return result


def _entry(source: PolicyVersion, model: str) -> dict[str, object]:
    """A registry entry for a model trained from `source`: the source's settings, the new model, the source as
    baseline (so the delta measures what training changed)."""
    entry: dict[str, object] = {
        "domain": source.domain, "model": model, "baseline": source.slug,
        "sampling": {"temperature": source.temperature, "top_p": source.top_p, "max_tokens": source.max_tokens},
        "judge_model": source.judge_model, "user_model": source.user_model}
    if source.must_not_regress:
        entry["must_not_regress"] = list(source.must_not_regress)
    if source.system_prompt:
        entry["system_prompt"] = source.system_prompt
    if source.reply_classifier:
        entry["reply_classifier"] = source.reply_classifier
    return entry
