"""What the HTML view shows, gathered from the warehouse: per version and seed, per delta, and one row per rollout.

Everything is read through the readers the text summary uses (report.py, warehouse.py: every file verified), and
every file's lineage is checked (lineage.py), so a figure computed from inputs a later run rewrote is marked stale
here exactly as `sim-pipeline report` marks it.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from sim_pipeline import warehouse
from sim_pipeline.axes import AXIS_NAMES
from sim_pipeline.defaults import (
    JUDGE_TRUST_MAX_DISAGREEMENT,
    JUDGE_TRUST_MAX_FAILURE_RATE,
    JUDGE_TRUST_MAX_FILLER_NET,
    JUDGE_TRUST_MAX_FLIP_RATE,
    JUDGE_TRUST_MAX_HALF_GAP,
    JUDGE_TRUST_MAX_LEAK_RATE,
    JUDGE_TRUST_MAX_LENGTH_GAP,
    JUDGE_TRUST_MIN_GOLD,
    JUDGE_TRUST_MIN_KAPPA,
    JUDGE_TRUST_PROBE_LIMIT,
    PASS_REWARD,
)
from sim_pipeline.grade.judge_trust import judge_trust_report
from sim_pipeline.grade.probes import PROBES
from sim_pipeline.lineage import FileLineage
from sim_pipeline.measure.delta import GUARDED_REASON
from sim_pipeline.measure.passat import pass_curve
from sim_pipeline.measure.ship import ShipDecision
from sim_pipeline.measure.slices import delta_slices
from sim_pipeline.protocol.endings import ENDINGS, meaning
from sim_pipeline.registry import PolicyVersion
from sim_pipeline.report import STALE_MARK, VersionSummary, lineage_lines, ship_decisions, standing, version_summary
from sim_pipeline.rollout.world_fit import fit_problems, fit_sentence

PASS, FAIL, NOT_GRADED = "pass", "fail", "not graded"
DISAGREES = "judge disagrees with oracle"
# The filters the transcript list offers: the row key each one reads, and its label.
FILTERS: tuple[tuple[str, str], ...] = (("version", "version"), ("seed", "seed"), ("split", "split"),
                                        ("verdict", "verdict"), ("tool", "tool"), ("rule", "rule"))


@dataclass(frozen=True)
class Threshold:
    """One judge-trust check as the view shows it: what was measured and the limit it is held to."""

    check: str
    measured: float | None
    limit: float
    holds_when: str  # "at most" or "at least"

    @property
    def within(self) -> bool | None:
        """Whether the measured value is on the good side of the limit (None when nothing was measured)."""
        if self.measured is None or not math.isfinite(self.measured):
            return None
        return self.measured <= self.limit if self.holds_when == "at most" else self.measured >= self.limit


@dataclass
class VersionView:
    """One version's partition for one seed: scores, curves, world fit, judge trust, cuts; and what is stale."""

    slug: str
    seed: str
    summary: VersionSummary
    curves: pd.DataFrame | None  # pass_curve over held-out grades
    fit_sentence: str
    fit_problems: list[str]
    trust_metrics: dict[str, Any]
    thresholds: list[Threshold]
    probes: list[dict[str, Any]]
    stale: dict[str, bool]  # per figure: scores, grades, rollouts, cuts


@dataclass
class DeltaView:
    """One candidate against its baseline: the delta table (direction, guarded), its verdict rows and slices."""

    candidate: str
    baseline: str
    table: pd.DataFrame | None  # the delta asset's rows, with `guarded`
    slices: dict[str, pd.DataFrame] = field(default_factory=dict)  # axis -> delta_slices rows of that axis
    note: str = ""  # why there is no table
    stale: bool = False
    ship: ShipDecision | None = None  # the ship line the summary leads with (measure/ship.py)

    def verdict_rows(self) -> list[tuple[str, list[str]]]:
        """(verdict, metrics) in the table's order of first appearance: what the ship line will be made of."""
        if self.table is None:
            return []
        rows: dict[str, list[str]] = {}
        for r in self.table.itertuples(index=False):
            rows.setdefault(str(r.verdict), []).append(str(r.metric) + (" (guarded)" if r.guarded else ""))
        return list(rows.items())


@dataclass
class ViewData:
    """Everything the page shows for a domain and its seeds."""

    domain: str
    seeds: list[str]
    versions: list[VersionView]
    deltas: list[DeltaView]
    transcripts: list[dict[str, Any]]
    lineage: list[str]  # the text summary's stale/unrecorded lines, as it prints them
    filter_options: dict[str, list[str]]
    # Each distinct system prompt once, by key (share_system_prompts): a transcript's system message names its key.
    system_prompts: dict[str, str] = field(default_factory=dict)


def _read(base: str, domain: str, asset: str, **parts: str) -> pd.DataFrame | None:
    path = warehouse.partition_path(base, domain, asset, **parts)
    return warehouse.read_table(path) if path.exists() else None


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def thresholds(metrics: dict[str, Any]) -> list[Threshold]:
    """The judge-trust checks with a single number against a fixed limit (REFERENCE section 6)."""
    get = metrics.get
    return [
        Threshold("gold labels judged", _finite(get("n_judged")), JUDGE_TRUST_MIN_GOLD, "at least"),
        Threshold("disagreement with gold (upper bound)", _finite(get("disagreement_high")),
                  JUDGE_TRUST_MAX_DISAGREEMENT, "at most"),
        Threshold("Cohen's kappa", _finite(get("kappa")), JUDGE_TRUST_MIN_KAPPA, "at least"),
        Threshold("leak: gold failures passed (upper bound)", _finite(get("leak_rate_high")),
                  JUDGE_TRUST_MAX_LEAK_RATE, "at most"),
        Threshold("judge errors (upper bound)", _finite(get("judge_failures_high")),
                  JUDGE_TRUST_MAX_FAILURE_RATE, "at most"),
        Threshold("agreement gap between task halves", _finite(get("half_gap")), JUDGE_TRUST_MAX_HALF_GAP,
                  "at most"),
        Threshold("agreement gap short vs long replies", _finite(get("length_gap")), JUDGE_TRUST_MAX_LENGTH_GAP,
                  "at most"),
        Threshold("re-judge flips", _finite(get("rejudge_flip_rate")), JUDGE_TRUST_MAX_FLIP_RATE, "at most"),
        Threshold("filler net flips", _finite(get("filler_net_rate")), JUDGE_TRUST_MAX_FILLER_NET, "at most"),
    ]


def probe_rows(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """Per known hack: probes asked, share the judge passed, the highest share not ruled out, the limit."""
    return [{"probe": p, "n": int(metrics.get(f"probe_{p}_n", 0) or 0),
             "exploit_rate": _finite(metrics.get(f"probe_{p}_exploit_rate")),
             "exploit_high": _finite(metrics.get(f"probe_{p}_exploit_high")), "limit": JUDGE_TRUST_PROBE_LIMIT}
            for p in PROBES if f"probe_{p}_n" in metrics]


def _is_stale(found: dict[str, FileLineage], base: str, domain: str, asset: str, *, version: str | None = None,
              seed: str | None = None) -> bool:
    name = warehouse.relative_path(warehouse.partition_path(base, domain, asset, policy_version=version, seed=seed))
    return name in found and found[name].stale


def version_view(base: str, domain: str, seed: str, version: PolicyVersion,
                 found: dict[str, FileLineage]) -> VersionView:
    """One version's partition as the view shows it."""
    summary = version_summary(base, domain, seed, version)
    grades = _read(base, domain, "grades", policy_version=version.slug, seed=seed)
    curves, metrics = None, {}
    if grades is not None and len(grades):
        heldout = grades[(grades["split"] == "heldout") & grades["graded"].astype(bool)]
        if len(heldout):
            curves = pass_curve(heldout)
        metrics = judge_trust_report(grades, policy_model=version.agent_backend,
                                     judge_model=version.judge_backend).metrics
    stale = {asset: _is_stale(found, base, domain, asset, version=version.slug, seed=seed)
             for asset in ("rollouts", "grades", "scores", "search")}
    stale["cuts"] = any(_is_stale(found, base, domain, cut, version=version.slug, seed=seed)
                        for cut in summary.cut_rows)
    stale["fit"] = stale["rollouts"] or stale["search"] or _is_stale(found, base, domain, "situations", seed=seed)
    fit = summary.fit
    return VersionView(version.slug, seed, summary, curves,
                       fit_sentence(fit) if fit is not None else "no rollouts",
                       [p.sentence for p in fit_problems(fit)] if fit is not None else [],
                       metrics, thresholds(metrics), probe_rows(metrics), stale)


def _grades_of(base: str, domain: str, slug: str, seeds: list[str]) -> pd.DataFrame:
    frames = [g for s in seeds if (g := _read(base, domain, "grades", policy_version=slug, seed=s)) is not None]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def delta_view(base: str, domain: str, seeds: list[str], version: PolicyVersion,
               found: dict[str, FileLineage]) -> DeltaView:
    """The delta of a version against its baseline, and pass@1 by axis value on the shared held-out tasks."""
    assert version.baseline is not None
    view = DeltaView(version.slug, version.baseline, None,
                     stale=_is_stale(found, base, domain, "delta", version=version.slug))
    table = _read(base, domain, "delta", policy_version=version.slug)
    if table is None or not len(table):
        view.note = "not computed (no delta file: a baseline without grades, or withheld by a failed check)"
        return view
    table = table.copy()
    table["guarded"] = table["reason"].fillna("").str.startswith(GUARDED_REASON)
    view.table = table
    before, after = _grades_of(base, domain, version.baseline, seeds), _grades_of(base, domain, version.slug, seeds)
    if len(before) and len(after):
        slices = delta_slices(before, after, baseline_version=version.baseline, candidate_version=version.slug)
        view.slices = {axis: slices[slices["axis"] == axis].reset_index(drop=True) for axis in AXIS_NAMES
                       if (slices["axis"] == axis).any()}
    return view


def _json(text: Any) -> Any:
    """A JSON text parsed (for display), or the text itself when it is not JSON."""
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def _plain(value: Any) -> Any:
    """NaN and numpy values made plain Python (None for a missing value)."""
    value = warehouse.jsonable(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return None if value is pd.NA else value


def _messages(messages: Any) -> list[dict[str, Any]]:
    shown = []
    for m in messages if messages is not None else []:
        calls = [{"id": c.get("id"), "name": (c.get("function") or {}).get("name"),
                  "arguments": (c.get("function") or {}).get("arguments")} for c in (m.get("tool_calls") or [])]
        shown.append({"role": m.get("role"), "content": m.get("content"), "tool_calls": calls,
                      "name": m.get("name"), "tool_call_id": m.get("tool_call_id")})
    return shown


def _situations(base: str, domain: str, seed: str, versions: list[PolicyVersion]) -> pd.DataFrame:
    """The grid's situations and those each version's search wrote itself (they are not in `situations`)."""
    frames = [t for t in (_read(base, domain, "situations", seed=seed),
                          *(_read(base, domain, "search", policy_version=v.slug, seed=seed) for v in versions))
              if t is not None and len(t)]
    if not frames:
        return pd.DataFrame(columns=["situation_id"])
    return pd.concat(frames, ignore_index=True).drop_duplicates("situation_id").set_index("situation_id")


def _verdict(grade: Any) -> str:
    if grade is None or not bool(grade.get("graded")) or _finite(grade.get("reward")) is None:
        return NOT_GRADED
    return PASS if float(grade["reward"]) >= PASS_REWARD else FAIL


def transcripts(base: str, domain: str, seed: str, versions: list[PolicyVersion]) -> list[dict[str, Any]]:
    """One row per rollout of the seed: its situation, conversation, tool events, user decisions and grades."""
    situations = _situations(base, domain, seed, versions)
    rows = []
    for v in versions:
        rollouts = _read(base, domain, "rollouts", policy_version=v.slug, seed=seed)
        if rollouts is None:
            continue
        grades = _read(base, domain, "grades", policy_version=v.slug, seed=seed)
        by_id = {} if grades is None else {r["rollout_id"]: r for r in grades.to_dict("records")}
        for r in rollouts.to_dict("records"):
            situation = situations.loc[r["situation_id"]].to_dict() if r["situation_id"] in situations.index else {}
            facts = _json(situation.get("facts")) or {}
            told = set(situation.get("opening_facts") if situation.get("opening_facts") is not None else [])
            grade = by_id.get(r["rollout_id"])
            verdict = _verdict(grade)
            judge_ok = grade is not None and grade.get("judge_status") == "ok" and \
                _finite(grade.get("judge_reward")) is not None
            oracle = _finite(r.get("oracle_reward"))
            disagrees = bool(judge_ok and oracle is not None and
                             (float(grade["judge_reward"]) >= PASS_REWARD) != (oracle >= PASS_REWARD))
            rows.append({
                "id": r["rollout_id"], "version": v.slug, "seed": str(seed), "split": r["split"],
                "situation_id": r["situation_id"], "verdict": verdict, "disagrees": disagrees,
                **{axis: r.get(axis) for axis in AXIS_NAMES},
                "goal": situation.get("goal"), "source": situation.get("source"),
                "hidden_facts": {k: val for k, val in facts.items() if k not in told} if isinstance(facts, dict)
                else {}, "told_facts": {k: val for k, val in facts.items() if k in told}
                if isinstance(facts, dict) else {},
                "setup": _json(situation.get("setup")),
                "status": r.get("status"), "finish_reason": r.get("finish_reason"), "error": _plain(r.get("error")),
                "messages": _messages(r.get("messages")),
                "tool_events": [_plain(dict(e)) for e in (r.get("tool_events") or [])],
                "tools_called": sorted({e["tool"] for e in (r.get("tool_events") or [])}),
                "user_events": [_plain(dict(e)) for e in (r.get("user_events") or [])],
                "oracle_reward": oracle, "oracle_reason": _plain(r.get("oracle_reason")),
                "grade": None if grade is None else {k: _plain(grade.get(k)) for k in (
                    "reward", "conduct_rule", "conduct_reward", "conduct_evidence", "judge_reward", "judge_status",
                    "judge_reason", "judge_version", "gold_reward", "gold_source", "gold_reason")},
            })
    return rows


def prompt_key(text: str) -> str:
    """A system prompt's key: a hash of its text (16 hex digits: a collision among a page's few prompts is
    negligible), the same in every build, so a page's bytes do not depend on the order rows are read."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def share_system_prompts(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Move each system message's text into one store, leaving its key (`prompt`) and length (`chars`) in place.

    Every rollout of a version repeats the same agent prompt (~2.7 kB for retail, over 1,000 rollouts a run), so the
    page keeps each distinct text once and shows it when a transcript's system message is opened."""
    store: dict[str, str] = {}
    for row in rows:
        for message in row["messages"]:
            if message["role"] == "system" and message.get("prompt") is None:
                text = message["content"] or ""
                key = prompt_key(text)
                store.setdefault(key, text)
                message.update(prompt=key, chars=len(text), content=None)
    return store


def prompt_uses(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Per system prompt key, how many transcripts open with it."""
    uses: dict[str, int] = {}
    for row in rows:
        for key in {m["prompt"] for m in row["messages"] if m.get("prompt")}:
            uses[key] = uses.get(key, 0) + 1
    return uses


def ending_rows(rows: list[dict[str, Any]], versions: list[str]) -> list[dict[str, Any]]:
    """How the conversations ended: per finish reason (the protocol's order, then any other the rows hold), its
    statuses, meaning (protocol/endings.py) and count per version; reasons no row holds are kept (the legend)."""
    found: dict[str, dict[str, int]] = {}
    for r in rows:
        per_version = found.setdefault(str(r.get("finish_reason")), {})
        per_version[r["version"]] = per_version.get(r["version"], 0) + 1
    known = [e.finish_reason for e in ENDINGS]
    statuses = {e.finish_reason: e.statuses for e in ENDINGS}
    return [{"finish_reason": reason, "statuses": list(statuses.get(reason, ())), "meaning": meaning(reason),
             "counts": [found.get(reason, {}).get(v, 0) for v in versions]}
            for reason in [*known, *sorted(set(found) - set(known))]]


def filter_options(rows: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Per filter, the values the rows hold (sorted), which the page offers."""
    return {key: sorted({str(r[key]) for r in rows if r.get(key) is not None}) for key, _ in FILTERS}


def assemble(base: str, domain: str, seeds: list[str], versions: list[PolicyVersion]) -> ViewData:
    """Everything the view shows for a domain, its seeds and versions (files verified, lineage checked)."""
    found: dict[str, FileLineage] = {}
    lines: list[str] = []
    for seed in seeds:
        seed_found = standing(base, domain, seed, versions)
        found |= seed_found
        lines += [line.strip() for line in lineage_lines(seed_found, domain, seed)]
    views = [version_view(base, domain, seed, v, found) for seed in seeds for v in versions]
    deltas = [delta_view(base, domain, seeds, v, found) for v in versions if v.baseline is not None]
    # The summary's decision, with its trust state read as the summary reads it (of the first seed shown).
    decisions = {d.candidate: d for d in ship_decisions(base, domain, seeds[0], versions)} if seeds else {}
    for view in deltas:
        view.ship = decisions.get(view.candidate)
    rows = [row for seed in seeds for row in transcripts(base, domain, seed, versions)]
    prompts = share_system_prompts(rows)
    return ViewData(domain, list(seeds), views, deltas, rows, list(dict.fromkeys(lines)), filter_options(rows),
                    prompts)


def counts(rows: list[dict[str, Any]], **match: Any) -> int:
    """How many rows hold every given value (what a set of filters shows)."""
    return sum(all(str(r.get(k)) == str(v) if not isinstance(v, bool) else r.get(k) is v
                   for k, v in match.items()) for r in rows)


__all__ = ["DISAGREES", "FILTERS", "STALE_MARK", "DeltaView", "ViewData", "VersionView", "assemble", "counts",
           "ending_rows", "filter_options", "prompt_key", "prompt_uses", "share_system_prompts"]
