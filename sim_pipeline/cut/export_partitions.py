"""Export a domain's cut partitions from the warehouse, re-running each cut's publish gate first.

A cut asset writes nothing when its blocking publish-gate check fails, but a partition may hold a file written
under another registry entry or judge, or by hand, so the export gates what it reads again, against the
partition's grades and the judge-trust verdict of its registry version. A refused cut is not exported (an earlier
export of it is removed); the others are. Missing partitions stop the export before any write, naming the run that
makes them; so do files computed from inputs rewritten since (lineage.py: a run killed part-way), whose rows would
be paired with another run's, and files that record no lineage unless the user allows them.
"""

import os
from dataclasses import dataclass

import pandas as pd
from upath import UPath

from sim_pipeline import defaults, lineage, warehouse
from sim_pipeline.cut.cuts import GATE_KIND
from sim_pipeline.cut.decontaminate import opening_texts
from sim_pipeline.cut.export import FORMAT_DATASETS, FORMATS, ExportedFile, export, remove_dataset
from sim_pipeline.cut.pool import HELDOUT_SPLIT
from sim_pipeline.cut.publish_gate import publish_gate
from sim_pipeline.domain import load_domain
from sim_pipeline.errors import ExportError
from sim_pipeline.grade.judge_trust import judge_trust_report
from sim_pipeline.situation import Situation
from sim_pipeline.registry import REGISTRY_PATH, PolicyVersion, load_registry, versions_for
from sim_pipeline.warehouse import partition_path, read_table

_INPUTS = ("rollouts", "grades")  # what the gate re-reads beside each cut
# What a GRPO row binds to: the grid's situations (per seed) and those the search wrote (per version and seed).
_SITUATION_INPUTS = ("situations", "search")
_SEED_ONLY = ("situations",)


@dataclass(frozen=True)
class ExportRequest:
    """What `sim-pipeline export` asks for: empty versions or seeds mean every one materialized."""

    domain: str
    format: str
    out: str = defaults.EXPORT_DIR
    warehouse: str = "data/warehouse"
    versions: tuple[str, ...] = ()
    seeds: tuple[str, ...] = ()
    registry_path: str | os.PathLike[str] = REGISTRY_PATH
    allow_unrecorded: bool = False  # export files that record no lineage (an older release's), unchecked


@dataclass(frozen=True)
class Refusal:
    """A cut partition the publish gate refused, and why."""

    policy_version: str
    seed: str
    cut: str
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class ExportReport:
    """The files an export wrote and the cut partitions it refused."""

    files: tuple[ExportedFile, ...]
    refused: tuple[Refusal, ...]
    unchecked: tuple[str, ...] = ()  # files exported without a lineage to check (allow_unrecorded)


def export_warehouse(request: ExportRequest) -> ExportReport:
    """Gate and export the cut partitions to `<out>/<domain>/<format>/policy_version=<v>/seed=<s>/`."""
    if request.format not in FORMATS:
        raise ExportError(f"unknown export format {request.format!r}: use one of {list(FORMATS)}")
    domain = load_domain(request.domain)
    cuts = tuple(FORMAT_DATASETS[request.format])
    partitions = _partitions(request, _versions(request), cuts)
    files: list[ExportedFile] = []
    refused: list[Refusal] = []
    # Every partition is read (and verified) before anything is written: a refused file leaves no partial export.
    read = [(version, seed, {name: _read(request, name, version.slug, seed) for name in (*cuts, *_inputs(cuts))})
            for version, seed in partitions]
    unchecked = _consistent(request, partitions, (*cuts, *_inputs(cuts)))
    for version, seed, tables in read:
        out_dir = os.path.join(
            request.out, request.domain, request.format, f"policy_version={version.slug}", f"seed={seed}"
        )
        passed = {}
        for cut, reasons in _gate(
            version, {c: tables[c] for c in cuts}, tables["rollouts"], tables["grades"]
        ):
            if reasons:
                refused.append(Refusal(version.slug, seed, cut, reasons))
                remove_dataset(request.format, cut, out_dir)
            else:
                passed[cut] = tables[cut]
        situations = None
        if "grpo_groups" in passed:
            made = pd.concat([tables[name] for name in _SITUATION_INPUTS], ignore_index=True)
            situations = [Situation.from_row(r) for r in made.drop_duplicates("situation_id").to_dict("records")]
        if passed:
            files += export(request.format, passed, out_dir, tools=domain.tool_schemas, domain=request.domain,
                            situations=situations)
    return ExportReport(tuple(files), tuple(refused), tuple(unchecked))


def _consistent(request: ExportRequest, partitions: list[tuple[PolicyVersion, str]],
                assets: tuple[str, ...]) -> list[str]:
    """Refuse files computed from inputs rewritten since, and (unless allowed) files recording no lineage; return
    the ones allowed unchecked."""
    check = lineage.LineageCheck(request.warehouse)
    found = [check.of(_path(request, asset, version.slug, seed)) for version, seed in partitions for asset in assets]
    groups = lineage.stale_groups(found, lambda path: warehouse.path_parts(UPath(path))[1])
    if groups:
        lines = [f"  - {g.sentence()}\n    fix: {g.fix(request.domain, g.seed)}" for g in groups]
        raise ExportError(
            "the partitions to export mix runs: these files were computed from inputs rewritten since (a run killed "
            "or failed part-way), so their rows would be exported beside another run's:\n" + "\n".join(lines)
            + "\nNothing was exported.")
    unrecorded = lineage.unrecorded(found)
    if unrecorded and not request.allow_unrecorded:
        runs = sorted({lineage.rerun_command(request.domain, seed, version)
                       for name in unrecorded for version, seed in [lineage.partition_of(name)] if seed is not None})
        raise ExportError(
            f"lineage not recorded in {len(unrecorded)} file(s) to export (written by a release before lineage was "
            f"recorded, or by hand: {', '.join(unrecorded[:3])}{', ...' if len(unrecorded) > 3 else ''}): whether "
            "they come from one run cannot be checked. Fix: re-run to record it (" + "; ".join(runs[:3])
            + f"), or export them unchecked with {warehouse.UNVERIFIED_FLAG}")
    return unrecorded


def _versions(request: ExportRequest) -> list[PolicyVersion]:
    versions = versions_for(load_registry(request.registry_path), request.domain)
    unknown = sorted(set(request.versions) - {v.slug for v in versions})
    if unknown:
        raise ExportError(
            f"versions {unknown} do not serve domain '{request.domain}' in {request.registry_path}: "
            f"use some of {[v.slug for v in versions]}"
        )
    chosen = [v for v in versions if not request.versions or v.slug in request.versions]
    if not chosen:
        raise ExportError(
            f"no policy version serves domain '{request.domain}': add one to {request.registry_path}"
        )
    return chosen


def _partitions(
    request: ExportRequest, versions: list[PolicyVersion], cuts: tuple[str, ...]
) -> list[tuple[PolicyVersion, str]]:
    """The (version, seed) partitions to export; every input they need must exist, or nothing is exported."""
    needed = (*cuts, *_inputs(cuts))
    chosen, missing = [], []
    for version in versions:
        seeds = request.seeds or [
            s for s in defaults.SEEDS
            if any(_path(request, c, version.slug, s).exists() for c in needed if c not in _SEED_ONLY)
        ]
        if not seeds and request.versions:  # a version asked for by name must have a partition
            missing.append((version.slug, "0", [str(_path(request, cuts[0], version.slug, "0"))]))
        for seed in seeds:
            absent = [str(p) for c in needed if not (p := _path(request, c, version.slug, seed)).exists()]
            if absent:
                missing.append((version.slug, seed, absent))
            else:
                chosen.append((version, seed))
    if not chosen and not missing:
        raise ExportError(
            f"no cut partition of domain '{request.domain}' is materialized under {request.warehouse}: "
            f"run `sim-pipeline run --domain {request.domain}` first"
        )
    if missing:
        lines = [f"  {v} seed {s}: missing {', '.join(paths)}" for v, s, paths in missing]
        runs = sorted(
            {f"sim-pipeline run --domain {request.domain} --seed {s} --versions {v}" for v, s, _ in missing}
        )
        raise ExportError(
            "the cut partitions to export are not materialized under "
            f"{request.warehouse}:\n" + "\n".join(lines) + "\nRun first: " + "; ".join(runs)
        )
    return chosen


def _gate(
    version: PolicyVersion, cuts: dict[str, pd.DataFrame], rollouts: pd.DataFrame, grades: pd.DataFrame
) -> list[tuple[str, tuple[str, ...]]]:
    """Each cut with the publish gate's reasons to refuse it (none when it passes), as the asset's check."""
    heldout = rollouts[rollouts["split"] == HELDOUT_SPLIT] if len(rollouts) else rollouts
    ids = set(heldout["situation_id"]) if len(heldout) else set()
    openings = opening_texts(heldout) if len(heldout) else []
    trusted = (
        judge_trust_report(grades, policy_model=version.agent_backend, judge_model=version.judge_backend).verdict
        == "trusted"
    )
    return [
        (
            cut,
            publish_gate(
                table,
                kind=GATE_KIND[cut],
                grades=grades,
                judge_trusted=trusted,
                opt_out=version.judge_trust_opt_out,
                heldout_situation_ids=ids,
                heldout_openings=openings,
            ).reasons,
        )
        for cut, table in cuts.items()
    ]


def _inputs(cuts: tuple[str, ...]) -> tuple[str, ...]:
    """The tables an export reads beside its cuts."""
    return (*_INPUTS, *(_SITUATION_INPUTS if "grpo_groups" in cuts else ()))


def _path(request: ExportRequest, asset: str, version: str, seed: str) -> UPath:
    version_or_none = None if asset in _SEED_ONLY else version
    return partition_path(request.warehouse, request.domain, asset, policy_version=version_or_none, seed=seed)


def _read(request: ExportRequest, asset: str, version: str, seed: str) -> pd.DataFrame:
    return read_table(_path(request, asset, version, seed))
