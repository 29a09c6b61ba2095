"""The one-screen summary of a domain's warehouse, led by each candidate's ship line (SHIP / DO NOT SHIP /
INCONCLUSIVE and why: measure/ship.py): coverage, pass@1 per version, judge trust, cut sizes, delta.

Every figure comes from a file whose recorded lineage is checked (lineage.py): a figure computed from inputs a later
run rewrote is marked [STALE], and the summary says why and which run rebuilds it, rather than mixing two runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from upath import UPath

from sim_pipeline import cover, lineage, warehouse
from sim_pipeline.axes import AXIS_NAMES
from sim_pipeline.cut.cuts import CUTS
from sim_pipeline.defaults import GRPO_MIN_GROUP, SEEDS
from sim_pipeline.domain import load_domain
from sim_pipeline.errors import WarehouseError
from sim_pipeline.grade.judge_trust import TRUST_FLAGS_COLUMN, TRUST_VERDICT_COLUMN, recorded_trust
from sim_pipeline.lineage import FileLineage
from sim_pipeline.measure.delta import GUARDED_REASON
from sim_pipeline.measure.passat import NOOP_FLOOR
from sim_pipeline.measure.ship import ShipDecision, TrustState, ship_decision
from sim_pipeline.models.provenance import spans
from sim_pipeline.registry import PolicyVersion
from sim_pipeline.rollout.health import Health, rollout_health
from sim_pipeline.rollout.world_fit import domain_fit, fit_problems, fit_sentence
from sim_pipeline.search.situations import stressed_counts


@dataclass(frozen=True)
class VersionSummary:
    """What one version's partition produced."""

    slug: str
    pass_at_1: tuple[float, float, float] | None  # value, ci_low, ci_high
    noop_floor: float | None  # held-out pass@1 of an agent that never calls a tool (the state oracle decides)
    judge_verdict: str
    judge_flags: tuple[str, ...]
    cut_rows: dict[str, int | None]
    rollouts: int
    health: Health
    fit: pd.DataFrame | None  # per-tool world fit (rollout/world_fit.py); None without rollouts
    inapplicable: frozenset[str] = frozenset()  # cuts that cannot exist at this size (GRPO with one sample)

    @property
    def holds_nothing(self) -> bool:
        """Whether the warehouse holds none of the partition's steps: no rollouts, grades, scores or cuts."""
        return not self.rollouts and self.pass_at_1 is None and self.judge_verdict == "not graded" and \
            all(n is None for n in self.cut_rows.values())

    @property
    def withheld(self) -> bool:
        """Whether rollout_health failed: the partition's scores, judge trust and cuts are not to be read."""
        return self.rollouts > 0 and not self.health.passed


STALE_MARK = "[STALE]"  # after a figure whose file was computed from inputs rewritten since

# What each step's file gives the summary: how the stale-lines warning names it.
FIGURES = {"covering_array": "coverage", "situations": "situations and world fit", "search": "world fit",
           "rollouts": "rollout count, coverage and world fit", "grades": "judge trust",
           "scores": "pass@1, interval and no-op floor", "delta": "delta", **{cut: "cuts" for cut in CUTS}}


def _summary_files(base: str, domain: str, seed: str, versions: list[PolicyVersion]) -> list[UPath]:
    """Every file the summary of a seed reads."""
    paths = [warehouse.partition_path(base, domain, asset, seed=seed) for asset in ("covering_array", "situations")]
    for v in versions:
        parts = {"policy_version": v.slug, "seed": seed}
        paths += [warehouse.partition_path(base, domain, asset, **parts)
                  for asset in ("rollouts", "search", "scores", "grades", *CUTS)]
        if v.baseline:
            paths.append(warehouse.partition_path(base, domain, "delta", policy_version=v.slug))
    return paths


def standing(base: str, domain: str, seed: str, versions: list[PolicyVersion]) -> dict[str, FileLineage]:
    """The lineage standing of every file the summary reads and that exists, by its path under the base."""
    check = lineage.LineageCheck(base)
    return {warehouse.relative_path(p): check.of(p) for p in _summary_files(base, domain, seed, versions)
            if p.exists()}


def lineage_lines(found: dict[str, FileLineage], domain: str, seed: str) -> list[str]:
    """The warning that some lines are stale (each with its cause and fix), and the note that a lineage is missing."""
    groups = lineage.stale_groups(found.values(), lambda path: FIGURES[warehouse.path_parts(UPath(path))[1]])
    lines = []
    if groups:
        lines.append(f"  {'STALE':<13} the figures marked {STALE_MARK} were computed from files rewritten since (a run "
                     "killed or failed part-way): they do not belong with the others")
        for group in groups:
            lines += [f"  {'':<13} - {group.sentence()}", f"  {'':<15} fix: {group.fix(domain, seed)}"]
    missing = lineage.unrecorded(found.values())
    if missing:
        lines.append(f"  {'lineage':<13} not recorded in {len(missing)} file(s) these lines come from (written by a "
                     f"release before lineage was recorded, or by hand; e.g. {missing[0]}): whether every line comes "
                     f"from one run cannot be checked. Fix: {lineage.rerun_command(domain, seed)} records it")
    return lines


def _read(base: str, domain: str, asset: str, **parts: str) -> pd.DataFrame | None:
    path = warehouse.partition_path(base, domain, asset, **parts)
    return warehouse.read_table(path) if path.exists() else None


def coverage(base: str, domain: str, seed: str, versions: list[PolicyVersion]) -> dict[str, float] | None:
    """Pairwise training-data coverage: planned pairs seen in rollouts of any version for this seed."""
    planned = _read(base, domain, "covering_array", seed=seed)
    frames = [f for v in versions if (f := _read(base, domain, "rollouts", policy_version=v.slug, seed=seed))
              is not None]
    if planned is None or not frames:
        return None
    return cover.pairwise_coverage(planned[list(AXIS_NAMES)], pd.concat(frames)[list(AXIS_NAMES)])


def version_summary(base: str, domain: str, seed: str, version: PolicyVersion) -> VersionSummary:
    """Scores, judge trust and cut sizes of one version's partition."""
    parts = {"policy_version": version.slug, "seed": seed}
    scores = _read(base, domain, "scores", **parts)
    grades = _read(base, domain, "grades", **parts)
    rollouts = _read(base, domain, "rollouts", **parts)
    p1 = None
    floor = None
    if scores is not None and len(scores) and (scores["metric"] == "pass@1").any():
        row = scores[scores["metric"] == "pass@1"].iloc[0]
        p1 = (float(row["value"]), float(row["ci_low"]), float(row["ci_high"]))
        floors = scores.loc[scores["metric"] == NOOP_FLOOR, "value"]
        floor = float(floors.iloc[0]) if len(floors) else None
    verdict, flags = "not graded", ()
    if grades is not None and len(grades):
        verdict, flags = recorded_trust(grades, policy_model=version.agent_backend, judge_model=version.judge_backend)
    cuts = {name: (len(t) if (t := _read(base, domain, name, **parts)) is not None else None) for name in CUTS}
    health = rollout_health(rollouts if rollouts is not None else pd.DataFrame())
    fit = None
    if rollouts is not None and len(rollouts):
        # The grid's situations and those the search wrote itself: both say which write a rollout expected.
        played = [t for t in (_read(base, domain, "situations", seed=seed), _read(base, domain, "search", **parts))
                  if t is not None and len(t)]
        fit = domain_fit(load_domain(domain), rollouts, pd.concat(played, ignore_index=True) if played else
                         pd.DataFrame(columns=["situation_id", "intent_tool", "expect_write"]))
    return VersionSummary(version.slug, p1, floor, verdict, flags, cuts, health.rollouts, health, fit,
                          frozenset({"grpo_groups"}) if cuts.get("grpo_groups") == 0 and _one_sample(grades) else
                          frozenset())


def _cut_size(name: str, rows: int | None, inapplicable: bool) -> str:
    """A cut's part of the summary's cuts line: its rows, why it is empty, or that its gate wrote none."""
    if inapplicable:
        return f"{name} not applicable (one sample per prompt: a group needs {GRPO_MIN_GROUP})"
    return f"{name} {rows if rows is not None else 'not written (see its publish_gate check)'}"


def _interval(row: Any) -> str:
    """A delta row's interval, or 'no spread' where the tasks could not bound one (never a fallback's [-1, +1])."""
    low, high = float(row.ci_low), float(row.ci_high)
    if not (np.isfinite(low) and np.isfinite(high)) or high - low <= 0:
        return "[no spread]    "
    return f"[{low:+.3f}, {high:+.3f}]"


def _holm(row: object) -> float:
    """A delta row's Holm-adjusted p (NaN for a table written before the delta recorded it)."""
    return float(getattr(row, "p_adjusted", float("nan")))


def _one_sample(grades: pd.DataFrame | None) -> bool:
    """Whether no train prompt has the GRPO_MIN_GROUP samples a GRPO group needs (`run --samples 1`)."""
    if grades is None or not len(grades):
        return False
    train = grades[grades["split"] == "train"]
    return bool(len(train)) and int(train.groupby(["situation_id", "phrasing_index"]).size().max()) < GRPO_MIN_GROUP


def _distrusted(summary: VersionSummary, version: PolicyVersion) -> bool:
    """Whether the version's judge was graded and not trusted, with no opt-out: its cuts and delta are withheld."""
    return summary.judge_verdict not in ("trusted", "not graded") and not version.judge_trust_opt_out


def solvable_lines(situations: pd.DataFrame | None) -> list[str]:
    """How many planned situations the reference solution passes (world/reference.py), with failures named."""
    if situations is None or "solvable" not in situations:
        return []
    bad = situations[~situations["solvable"].astype(bool)]
    lines = [f"  situations    {len(situations)} planned, {len(situations) - len(bad)} solvable (a reference solution "
             "passes the oracle in the sandbox)"]
    counts = stressed_counts(situations)
    if counts:
        fewest = min(counts, key=lambda rule: (counts[rule], rule))
        lines.append(f"  {'':<13} every structured rule under stress in {counts[fewest]} to {max(counts.values())} "
                     f"situations (fewest: {fewest})")
    if len(bad):
        lines.append(f"  {'':<13} situations_solvable FAILED: the world cannot reach {len(bad)} goals; fix the pack")
        lines += [f"  {'':<13} - {r.situation_id} ({r.tool}, {r.world_state}, {r.tool_condition}): {r.reference}"
                  for r in bad.head(3).itertuples(index=False)]
    return lines


def fit_table(summaries: list[VersionSummary], stale: frozenset[str] = frozenset()) -> list[str]:
    """Per tool and version: calls, share rejected for their arguments, expected writes applied (of those tried);
    the versions in `stale` are marked."""
    shown = [s for s in summaries if s.fit is not None]
    if not shown:
        return []
    tools = list(dict.fromkeys(t for s in shown for t in s.fit["tool"]))  # type: ignore[index]
    width = max(len(t) for t in tools)
    lines = ["  world fit     per tool: calls, share that broke the schema (of them, with values the user or a tool "
             "gave), expected writes applied/expected (well-formed tries)",
             ("    " + " " * width + "".join(f"  {s.slug + (' ' + STALE_MARK if s.slug in stale else ''):<36}"
                                           for s in shown)).rstrip()]
    for tool in tools:
        cells = []
        for s in shown:
            row = s.fit[s.fit["tool"] == tool]  # type: ignore[index]
            if not len(row):
                cells.append(f"  {'-':<36}")
                continue
            r = row.iloc[0]
            cell = f"{int(r.calls):>4} calls {r.invalid_argument + r.missing_required:>6.1%} ({r.told_rejected:.0%})"
            if r.writes and r.write_expected:
                cell += f" {int(r.write_applied)}/{int(r.write_expected)} ({int(r.write_tried)})"
            cells.append(f"  {cell:<36}")
        lines.append((f"    {tool:<{width}}" + "".join(cells)).rstrip())
    return lines


def _not_run(base: str, domain: str, seed: str, slug: str) -> str:
    """A version the warehouse holds nothing of for the seed, and the command that makes it."""
    where = "" if base == "data/warehouse" else f" --warehouse {base}"
    return (f"  {slug:<13} not run for seed {seed}: the warehouse holds none of its steps (a run that stopped "
            f"writes none). Run: sim-pipeline run --domain {domain} --seed {seed} --versions {slug}{where}")


def _recorded_verdict(path: UPath, version: PolicyVersion | None) -> str:
    """The judge-trust verdict a grades file records ('not graded' for an empty one), read verified: only its verdict
    columns are decoded (a report over eight seeds reads every seed's grades for every delta)."""
    content = warehouse.read_bytes_verified(path)
    columns = [TRUST_VERDICT_COLUMN, TRUST_FLAGS_COLUMN]
    try:
        grades = pq.read_table(pa.BufferReader(content), columns=columns, page_checksum_verification=True).to_pandas()
    except (pa.ArrowException, OSError, ValueError, KeyError):  # written before the verdict was recorded, or damaged:
        grades = warehouse.read_table(path)  # the whole file, read (and refused) as every other figure is
    if not len(grades):
        return "not graded"
    return recorded_trust(grades, policy_model=version.agent_backend if version else None,
                          judge_model=version.judge_backend if version else None)[0]


def _delta_judges(base: str, domain: str, seed: str, candidate: PolicyVersion, baseline: str,
                  versions: Mapping[str, PolicyVersion], summaries: Mapping[str, VersionSummary]) -> dict[str, str]:
    """Both sides' recorded judge-trust verdicts over the seeds the delta pooled ('<version> seed <s>' -> verdict):
    the grades its lineage names (this seed's as the summary read them), or this seed's alone for a delta without one.
    A side whose rollout_health failed is left to that doubt."""
    path = warehouse.partition_path(base, domain, "delta", policy_version=candidate.slug)
    # The footer only names the inputs (as lineage.py reads it); every figure taken from them is read verified.
    recorded = warehouse.recorded_lineage(path.read_bytes()) if path.exists() else None
    sides = (candidate.slug, baseline)
    inputs = sorted({(version, s) for name in (recorded or {})
                     for version, s in [lineage.partition_of(name)] if version in sides and s is not None}
                    | {(slug, seed) for slug in sides}, key=lambda x: (sides.index(x[0]), x[1]))
    verdicts = {}
    for version, s in inputs:
        if version in summaries and s == seed:
            verdict = "not graded" if summaries[version].withheld else summaries[version].judge_verdict
        else:
            grades = warehouse.partition_path(base, domain, "grades", policy_version=version, seed=s)
            verdict = _recorded_verdict(grades, versions.get(version)) if grades.exists() else "not graded"
        if verdict != "not graded":
            verdicts[f"{version} seed {s}"] = verdict
    return verdicts


def ship_decisions(base: str, domain: str, seed: str, versions: list[PolicyVersion], *,
                   summaries: Mapping[str, VersionSummary] | None = None,
                   found: dict[str, FileLineage] | None = None) -> list[ShipDecision]:
    """The ship decision (measure/ship.py) of every version with a baseline, from its delta and the run's trust state:
    both sides' judge trust over the seeds the delta pooled, and this seed's rollout health and world fit and the
    delta's lineage. What the summary leads with, and what a viewer shows."""
    summaries = summaries if summaries is not None else {v.slug: version_summary(base, domain, seed, v)
                                                         for v in versions}
    found = standing(base, domain, seed, versions) if found is None else found
    by_slug = {v.slug: v for v in versions}
    decisions = []
    for v in versions:
        if v.baseline is None:
            continue
        sides = [slug for slug in (v.baseline, v.slug) if slug in summaries]
        path = warehouse.partition_path(base, domain, "delta", policy_version=v.slug)
        trust = TrustState(
            judge=_delta_judges(base, domain, seed, v, v.baseline, by_slug, summaries),
            unhealthy=tuple(slug for slug in sides if summaries[slug].withheld),
            poor_fit=tuple(slug for slug in sides if summaries[slug].fit is not None and
                           not summaries[slug].withheld and fit_problems(summaries[slug].fit)),
            stale=(name := warehouse.relative_path(path)) in found and found[name].stale)
        delta = _read(base, domain, "delta", policy_version=v.slug)
        decisions.append(ship_decision(delta, candidate=v.slug, baseline=v.baseline,
                                       must_not_regress=v.must_not_regress, trust=trust))
    return decisions


def ship_lines(decisions: list[ShipDecision]) -> list[str]:
    """The summary's first lines: one ship decision per (candidate, baseline) pair, and the rule in brief."""
    if not decisions:
        return []
    return [f"  {'ship':<13} {d.line}" for d in decisions] + [
        f"  {'':<13} (SHIP: {decisions[0].primary} significantly better after Holm, no metric significantly worse, "
        "judges trusted; DO NOT SHIP: it or a must_not_regress metric significantly worse)"]


def agent_configs(base: str, domain: str, slug: str) -> str | None:
    """The agent configs a version's graded rows (every seed) span when they are two or more, else None: a
    registry entry changed under one name between runs, and the delta refuses to pool them."""
    paths = [p for seed in SEEDS if (p := warehouse.partition_path(base, domain, "grades", policy_version=slug,
                                                                  seed=seed)).exists()]
    frames = []
    for path in paths:
        try:
            frame = warehouse.read_table(path)
        except WarehouseError:  # a damaged partition: its own line says so, this one only reads what it can
            continue
        if "backends" in frame.columns and len(frame):
            frames.append(frame)
    return spans(pd.concat(frames, ignore_index=True)) if frames else None


def missing_for_delta(base: str, domain: str, seed: str, slugs: tuple[str | None, str],
                      stopped: Mapping[str, Sequence[str]]) -> str:
    """What the delta lacked, naming each side's partition: no grades for the seed, and how far its run got."""
    steps = ("rollouts", "search")  # what a policy run writes before its grades, latest first
    said = []
    for slug in slugs:
        if slug in stopped:
            said.append(f"{slug}'s run for seed {seed} stopped before its rollouts (see above)")
        elif slug is not None and not _read_exists(base, domain, "grades", slug, seed):
            reached = next((step for step in steps if _read_exists(base, domain, step, slug, seed)), None)
            said.append(f"{slug} has no grades for seed {seed} (" + (f"its policy run stopped at {reached})"
                                                                     if reached else "it has no rollouts either)"))
    if said:
        return "; ".join(said)
    return (f"both versions have grades for seed {seed}, but no delta was written (its run did not succeed: "
            f"sim-pipeline run --domain {domain} --seed {seed} writes it)")


def _read_exists(base: str, domain: str, asset: str, slug: str, seed: str) -> bool:
    return warehouse.partition_path(base, domain, asset, policy_version=slug, seed=seed).exists()


def render(base: str, domain: str, seed: str, versions: list[PolicyVersion], *, seconds: float | None = None,
           made_by: Mapping[str, str] | None = None, stopped: Mapping[str, Sequence[str]] | None = None,
           found: dict[str, FileLineage] | None = None) -> str:
    """The summary as text; `made_by` names the run behind each version's grades and delta ('grades|<v>',
    'delta|<v>' -> 'run 1a2b3c4d'), printed on their lines; `stopped` gives, per version whose run this command
    stopped before its rollouts, the lines saying why and what did not run; `found` is the files' lineage standing
    (`standing`), checked here when not given."""
    made_by = made_by or {}
    stopped = stopped or {}
    found = standing(base, domain, seed, versions) if found is None else found

    def by(key: str) -> str:
        return f"  ({made_by[key]})" if key in made_by else ""

    def stale(asset: str, version: str | None = None) -> bool:
        """Whether the file of this asset (of the version and seed, or of the seed; the delta: of the version) is."""
        path = warehouse.partition_path(base, domain, asset, policy_version=version,
                                        seed=None if asset == "delta" else seed)
        name = warehouse.relative_path(path)
        return name in found and found[name].stale

    def mark(*assets: str, version: str | None = None) -> str:
        return f" {STALE_MARK}" if any(stale(a, version) for a in assets) else ""

    lines = [f"sim_pipeline: domain '{domain}', seed {seed}" + (f", {seconds:.0f} s" if seconds is not None else "")]
    summaries = {v.slug: version_summary(base, domain, seed, v) for v in versions}
    lines += ship_lines(ship_decisions(base, domain, seed, versions, summaries=summaries, found=found))
    lines += lineage_lines(found, domain, seed)
    cov = coverage(base, domain, seed, versions)
    if cov:
        stale_cov = stale("covering_array") or any(stale("rollouts", v.slug) for v in versions)
        lines.append(f"  coverage      {cov['pairs_covered']}/{cov['pairs_planned']} planned axis-value pairs rolled "
                     f"out ({cov['fraction']:.1%}; training-data coverage)" + (f" {STALE_MARK}" if stale_cov else ""))
    planned = solvable_lines(_read(base, domain, "situations", seed=seed))
    lines += [planned[0] + mark("situations"), *planned[1:]] if planned else []
    lines.append("  (pass@1: graded held-out rollouts, 95% bootstrap over tasks; no-op floor: pass@1 of an agent "
                 "that never calls a tool)")
    # World fit is computed here from the rollouts, the search and the situations: stale when any of them is.
    fit_marks = {v.slug: (mark("rollouts", "search", version=v.slug) or mark("situations")) for v in versions}
    for v in versions:
        s = summaries[v.slug]
        lines += [f"  {v.slug if not i else '':<13} {line}" for i, line in enumerate(stopped.get(v.slug, ()))]
        if s.holds_nothing:
            lines += [] if v.slug in stopped else [_not_run(base, domain, seed, v.slug)]
            continue
        errors = f"{s.health.errors} errored ({s.health.share:.1%})"
        if s.withheld:
            lines += [f"  {v.slug:<13} {s.rollouts} rollouts{mark('rollouts', version=v.slug)}, {errors}",
                      f"  {'':<13} rollout_health FAILED: {s.health.sentence()}",
                      f"  {'':<13} pass@1, judge trust, cuts and delta are withheld: {s.health.remedy()}, then re-run",
                      *[f"  {'':<13} error: {e}" for e in s.health.examples[:1]]]
            continue
        p1 = f"{s.pass_at_1[0]:.3f} [{s.pass_at_1[1]:.3f}, {s.pass_at_1[2]:.3f}]" if s.pass_at_1 else "n/a"
        if s.noop_floor is not None:
            p1 += f" (no-op floor {s.noop_floor:.3f})"
        if _distrusted(s, v):
            cuts = (f"withheld (judge trust {s.judge_verdict}: the publish gates wrote no cut)"
                    + mark("grades", version=v.slug))
        else:
            cuts = ", ".join(_cut_size(k, n, k in s.inapplicable) + (mark(k, version=v.slug) if n is not None else "")
                             for k, n in s.cut_rows.items())
        rolled = f"{s.rollouts} rollouts{mark('rollouts', version=v.slug)}, {errors}"
        fit = fit_sentence(s.fit) + fit_marks[v.slug] if s.fit is not None else "no rollouts"
        lines += [f"  {v.slug:<13} {rolled}, held-out pass@1 {p1}{mark('scores', version=v.slug)}"
                  f"{by(f'grades|{v.slug}')}",
                  f"  {'':<13} world fit: {fit}",
                  f"  {'':<13} judge trust: {s.judge_verdict}{mark('grades', version=v.slug)}"
                  + "".join(f"\n  {'':<15}- {f}" for f in s.judge_flags),
                  f"  {'':<13} cuts: {cuts}",
                  *[f"  {'':<13} configs: its rows span two agent configs, {m} (no delta pairs them)"
                    for m in [agent_configs(base, domain, v.slug)] if m]]
    lines += fit_table([summaries[v.slug] for v in versions if not summaries[v.slug].withheld],
                       frozenset(slug for slug, m in fit_marks.items() if m))
    for v in versions:
        if v.baseline is None:
            continue
        failing = [slug for slug in (v.baseline, v.slug) if slug in summaries and summaries[slug].withheld]
        if failing:
            lines.append(f"  delta {v.slug} vs {v.baseline}: withheld (rollout_health failed for {', '.join(failing)})")
            continue
        by_slug = {x.slug: x for x in versions}
        distrusted = [slug for slug in (v.baseline, v.slug)
                      if slug in summaries and slug in by_slug and _distrusted(summaries[slug], by_slug[slug])]
        if distrusted:
            lines.append(f"  delta {v.slug} vs {v.baseline}: withheld (judge trust not trusted for "
                         f"{', '.join(distrusted)}: no delta is written from untrusted grades)")
            continue
        delta = _read(base, domain, "delta", policy_version=v.slug)
        if delta is None or not len(delta):
            lines.append(f"  delta {v.slug} vs {v.baseline}: not computed: "
                         + missing_for_delta(base, domain, seed, (v.baseline, v.slug), stopped))
            continue
        lines.append(f"  delta {v.slug} vs {v.baseline} on held-out tasks (paired bootstrap 95% CI, sign-flip p, "
                     "Holm-adjusted over the rows):" + by(f"delta|{v.slug}") + mark("delta", version=v.slug))
        poor = [slug for slug in (v.baseline, v.slug) if slug in summaries and summaries[slug].fit is not None
                and fit_problems(summaries[slug].fit)]
        if poor:
            lines.append(f"    caution: the world fits this domain poorly for {', '.join(poor)} (see world fit): "
                         "the verdict measures the world model as much as the agent")
        blocked = {(r.verdict, str(getattr(r, "reason", "") or "").removeprefix(GUARDED_REASON))
                   for r in delta.itertuples(index=False) if not math.isfinite(r.delta)}
        if len(blocked) == 1 and delta["delta"].isna().all():  # the sides could not be paired: say so once
            ((verdict, reason),) = blocked
            lines.append(f"    {verdict} for every metric: {reason or 'nothing was computed'}")
            continue
        for r in delta.itertuples(index=False):
            if not math.isfinite(r.delta):  # NOT COMPARABLE, INSUFFICIENT DATA: nothing was estimated, so none shown
                lines.append(f"    {r.metric:<27} {r.before:.3f} -> {r.after:.3f}  {r.verdict}: "
                             f"{getattr(r, 'reason', '') or 'not computed'}")
                continue
            lines.append(f"    {r.metric:<27} {r.before:.3f} -> {r.after:.3f}  delta {r.delta:+.3f} "
                         f"{_interval(r)}  p={r.p_value:.4f} (Holm {_holm(r):.4f})  {r.verdict}  (n={r.n_tasks}"
                         + (f", detects ~{r.detectable:.2f}" if math.isfinite(getattr(r, "detectable", math.nan))
                            else "")
                         + (f"; {r.n_ungraded_tasks} tasks left out, all samples errored" if r.n_ungraded_tasks else "")
                         + ")")
    lines.append(f"  parquet       {Path(base) / domain}/<asset>/policy_version=<v>/seed=<s>.parquet")
    lines.append("  ui            make dev, then open http://127.0.0.1:3000 (runs, assets, checks)")
    return "\n".join(lines)


def loop_lines(base: str, source: PolicyVersion, trained: Mapping[str, PolicyVersion], methods: pd.DataFrame,
               registry: Path | None) -> list[str]:
    """The loop's own block: each method's trained model, its fit, and its held-out pass@1 delta against the source."""
    lines = [f"  loop          {source.slug}'s cuts -> one version per method, measured against {source.slug} on the "
             "held-out tasks (no cut holds them)"]
    if not len(methods):
        return [*lines, "    nothing trained (see the runs above)"]
    lines.append(f"    {'method':<6} {'version':<18} {'model':<26} {'examples':>8}  {'loss first -> last':<19} "
                 "held-out pass@1 delta [95% CI]  verdict")
    for r in methods.itertuples(index=False):
        version = trained.get(r.method)
        if version is None:
            lines.append(f"    {r.method:<6} not trained: {r.reason}")
            continue
        delta = _read(base, source.domain, "delta", policy_version=version.slug)
        row = delta[delta["metric"] == "pass@1"] if delta is not None and len(delta) else None
        measured = (f"{row.iloc[0]['delta']:+.3f} [{row.iloc[0]['ci_low']:+.3f}, {row.iloc[0]['ci_high']:+.3f}]  "
                    f"{row.iloc[0]['verdict']}") if row is not None and len(row) else "not measured (see above)"
        loss = f"{r.loss_first:.3f} -> {r.loss_last:.3f}" if pd.notna(r.loss_first) else "(external trainer)"
        lines.append(f"    {r.method:<6} {version.slug:<18} {r.model:<26} {int(r.examples):>8}  {loss:<19} {measured}")
    if registry is not None:
        lines.append(f"    registry {registry}: to keep a version, copy its entry into data/policies.yaml")
    return lines
