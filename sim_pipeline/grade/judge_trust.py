"""Judge trust: how well the LLM judge agrees with gold labels, and whether that agreement can be relied on.

Each check is one function returning a `Flag` when it fails. Agreement checks read the judge and gold columns of
a grades table; the stress checks (re-judge, filler, probes: stress.py) read the stress columns when the table has
them. The report blocks downstream steps when the verdict is not 'trusted' (REFERENCE section 6).
"""

import hashlib
import json
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from sim_pipeline.defaults import (
    CI_LEVEL,
    JUDGE_GATE_BETA,
    JUDGE_TRUST_GAP_PERMUTATIONS,
    JUDGE_TRUST_GUESSING_KAPPA,
    JUDGE_TRUST_MAX_DISAGREEMENT,
    JUDGE_TRUST_MAX_FAILURE_RATE,
    JUDGE_TRUST_MAX_HALF_GAP,
    JUDGE_TRUST_MAX_LEAK_RATE,
    JUDGE_TRUST_MAX_LENGTH_GAP,
    JUDGE_TRUST_MIN_GOLD,
    JUDGE_TRUST_MIN_KAPPA,
    JUDGE_TRUST_MIN_PROBES,
    JUDGE_TRUST_PERMUTATION_SEED,
    JUDGE_TRUST_TOLERATED_DISAGREEMENT,
    JUDGE_TRUST_TOLERATED_FAILURES,
    JUDGE_TRUST_TOLERATED_LEAK,
    JUDGE_TRUST_TOOL_MIN_ROWS,
)
from sim_pipeline.errors import StatisticsError
from sim_pipeline.grade.flag import CheckResult, Flag
from sim_pipeline.grade.stress import GATE_TEST_ALPHA, STRESS_COLUMNS, check_filler, check_probes, check_rejudge
from sim_pipeline.measure.rate_bounds import (
    OVER,
    UNDECIDED,
    RateBound,
    bound_clustered,
    decisive_trials,
    effective_counts,
    lower_bound,
)
from sim_pipeline.measure.stats import wilson_interval

TRUSTED, UNTRUSTED, INCONCLUSIVE = "trusted", "untrusted", "inconclusive"
_NEEDED = ("situation_id", "judge_reward", "judge_status", "gold_reward", "reply_chars", "judge_version")
_NAN = float("nan")


@dataclass(frozen=True)
class JudgeAgreement:
    """Judge vs gold on rows with a judge verdict; 'positive' means pass. Rates are NaN when undefined."""

    n: int
    n_judge_failed: int
    agreement: float
    ci_low: float
    ci_high: float
    kappa: float
    tp: int
    fp: int
    tn: int
    fn: int
    leak_rate: float
    miss_rate: float


@dataclass(frozen=True)
class ToolAgreement:
    """The judge's agreement with gold on the gold rows whose situation needed one tool, with its Wilson bounds."""

    tool: str
    n: int
    n_effective: float  # rows shrunk by the design effect over tasks (a judge misreads a task on every sample)
    agreement: float
    wilson_low: float
    wilson_high: float
    decision: str  # BELOW_LIMIT (a flag), ABOVE_LIMIT, UNDECIDED or TOO_FEW_ROWS


BELOW_LIMIT, ABOVE_LIMIT, TOO_FEW_ROWS = "below_limit", "above_limit", "too_few_rows"


@dataclass(frozen=True)
class JudgeTrustReport:
    """Verdict on one judge over one grades table, with the checks that failed and the numbers behind them."""

    verdict: str
    flags: tuple[Flag, ...]
    metrics: dict[str, float | int | str] = field(default_factory=dict)
    needed_more_gold: int = 0
    agreement: JudgeAgreement | None = None
    notes: tuple[str, ...] = ()  # what the report could not test with power (low-power probes, stress not run)
    undecided: tuple[Flag, ...] = ()  # rate checks the gold could not place either side of their band: inconclusive
    by_tool: tuple[ToolAgreement, ...] = ()  # agreement per intended tool (agreement_by_tool)


def judge_agreement(judge: ArrayLike, gold: ArrayLike) -> JudgeAgreement:
    """Agreement with a Wilson interval (Wilson 1927), Cohen's kappa (Cohen 1960), confusion counts, leak/miss rates.

    `judge` is 0/1 or NaN where the judge gave no verdict (counted in n_judge_failed, left out of the rest);
    rows without a gold label (NaN gold) are ignored.
    """
    j = np.asarray(judge, dtype=float).ravel()
    g = np.asarray(gold, dtype=float).ravel()
    if j.shape != g.shape:
        raise StatisticsError(f"judge has {j.size} values but gold has {g.size}; pass aligned arrays.")
    labelled = ~np.isnan(g)
    j, g = j[labelled], g[labelled]
    for name, values in (("judge", j[~np.isnan(j)]), ("gold", g)):
        if not np.isin(values, (0.0, 1.0)).all():
            raise StatisticsError(f"{name} holds {np.unique(values)}; verdicts must be 0 (fail) or 1 (pass).")
    judged = ~np.isnan(j)
    j, g = j[judged].astype(bool), g[judged].astype(bool)
    tp, fp = int(np.sum(j & g)), int(np.sum(j & ~g))
    tn, fn = int(np.sum(~j & ~g)), int(np.sum(~j & g))
    n = tp + fp + tn + fn
    agree = (tp + tn) / n if n else _NAN
    low, high = wilson_interval(tp + tn, n, level=CI_LEVEL)
    # Chance agreement from the two marginals; kappa is undefined when both raters use one class only.
    chance = ((tp + fp) * (tp + fn) + (tn + fn) * (tn + fp)) / n**2 if n else _NAN
    kappa = (agree - chance) / (1.0 - chance) if n and chance < 1.0 else _NAN
    return JudgeAgreement(
        n=n, n_judge_failed=int(np.sum(~judged)), agreement=agree, ci_low=float(low), ci_high=float(high),
        kappa=kappa, tp=tp, fp=fp, tn=tn, fn=fn,
        leak_rate=fp / (fp + tn) if fp + tn else _NAN, miss_rate=fn / (fn + tp) if fn + tp else _NAN,
    )


def judge_trust_report(
    grades: pd.DataFrame,
    *,
    policy_model: str | None,
    judge_model: str | None,
    min_gold: int = JUDGE_TRUST_MIN_GOLD,
) -> JudgeTrustReport:
    """Whether the judge can be trusted on this grades table: agreement on gold-labelled rows plus stress tests.

    Verdict 'untrusted' when a rate check's bounds place it over its tolerance (at any gold count), else
    'inconclusive' with too few judged gold rows or a one-class gold set, else 'untrusted' when any check flags,
    else 'inconclusive' when a rate check's bounds straddle its band (rate_bounds.py: more gold decides it), else
    'trusted'. `judge_model` None reads the model from judge_version ("model@hash"). The
    stress checks run on the table's STRESS_COLUMNS (all rows, gold or not); without them a note says so.
    """
    missing = [col for col in _NEEDED if col not in grades.columns]
    if missing:
        raise StatisticsError(f"grades table lacks column(s) {missing}; pass the grades asset's table.")
    gold_rows = grades.loc[grades["gold_reward"].notna()]
    judge = gold_rows["judge_reward"].where(gold_rows["judge_status"] == "ok").to_numpy(dtype=float)
    gold = gold_rows["gold_reward"].to_numpy(dtype=float)
    stats = judge_agreement(judge, gold)
    judged = gold_rows.loc[~np.isnan(judge)]
    versions = sorted(gold_rows["judge_version"].dropna().unique())
    if judge_model is None and len(versions) == 1:
        judge_model = str(versions[0]).split("@")[0]
    bounded = [_bound_disagreement(judged), _bound_leak(judged), _bound_failures(gold_rows)]
    by_tool = agreement_by_tool(judged)
    checks = (
        _check_gold_count(stats.n, min_gold),
        *(_banded_flag(bound) for bound in bounded),
        _check_kappa(stats),
        _check_leak_by_tool(judged),
        _check_agreement_by_tool(by_tool),
        _check_versions(versions),
        _check_halves(judged),
        _check_length(judged),
        _check_family(policy_model, judge_model),
    )
    one_class = _check_one_class(stats)
    stress_flags, stress_metrics, notes = _stress(grades)
    flags = tuple(flag for flag, _ in (*checks, one_class) if flag is not None) + stress_flags
    flags, notes = _confounded_length(flags, notes, stress_metrics)
    n_human = int((gold_rows["gold_source"] == "human").sum()) if "gold_source" in gold_rows.columns else 0
    metrics: dict[str, float | int | str] = {
        "n_gold": len(gold_rows), "n_gold_human": n_human, "n_judged": stats.n,
        "n_judge_failed": stats.n_judge_failed, "agreement": stats.agreement, "agreement_ci_low": stats.ci_low,
        "agreement_ci_high": stats.ci_high, "kappa": stats.kappa, "leak_rate": stats.leak_rate,
        "miss_rate": stats.miss_rate, "judge_failure_rate": bounded[2].bound.rate,
    }
    for _, measured in checks:
        metrics |= measured
    metrics |= stress_metrics
    undecided = tuple(_undecided_flag(b, len(gold_rows)) for b in bounded if b.bound.decision == UNDECIDED)
    short = max(0, min_gold - stats.n)
    # A rate the bounds place over its tolerance calls a careful judge bad at most a share alpha of the time at any
    # count, so it distrusts the judge before the gold floor, which is what trust needs: a judge whose every reply
    # is unreadable never gets a judged gold row, and more gold would never make it trusted.
    if any(b.bound.decision == OVER for b in bounded):
        verdict = UNTRUSTED
        # More gold cannot undo such a rate, so asking for it would send the user labelling instead of fixing.
        flags = tuple(flag for flag in flags if flag.name != "gold_count")
        short = 0
    elif short or one_class[0]:
        verdict = INCONCLUSIVE
    else:
        verdict = UNTRUSTED if flags else INCONCLUSIVE if undecided else TRUSTED
    needed = 0 if verdict == UNTRUSTED else max(
        [short, *(b.more_rows(len(gold_rows)) for b in bounded if b.bound.decision == UNDECIDED)])
    return JudgeTrustReport(verdict, flags, metrics, needed, stats, notes, undecided if verdict != UNTRUSTED else (),
                            by_tool)


def _confounded_length(flags: tuple[Flag, ...], notes: tuple[str, ...],
                       stress: dict[str, float | str]) -> tuple[tuple[Flag, ...], tuple[str, ...]]:
    """Demote an observed length gap to a note when adding length (filler) moved no verdict (Pearl 2009, ch. 3).

    The length check compares replies that differ in more than length (a short "All done" is also a claim); the
    filler perturbation changes length alone. With enough filler verdicts and no filler flag, the gap comes from
    what the replies say, so the check that explains it (leak, agreement) is the one to act on.
    """
    length = next((f for f in flags if f.name == "length_sensitivity"), None)
    tested = int(stress.get("filler_n", 0)) >= JUDGE_TRUST_MIN_PROBES
    if length is None or not tested or any(f.name == "filler_perturbation" for f in flags):
        return flags, notes
    note = (f"agreement differs by {length.value:.2f} between short and long replies, but appending filler to "
            f"{stress['filler_n']} replies moved verdicts by a net {float(stress['filler_net_rate']):.0%} (sign test "
            f"p={float(stress['filler_sign_p']):.2f}): the gap follows what those replies say, not their length; "
            "read the disagreements.")
    return tuple(f for f in flags if f is not length), (*notes, note)


def _stress(grades: pd.DataFrame) -> tuple[tuple[Flag, ...], dict[str, float | str], tuple[str, ...]]:
    """The stress checks' flags, metrics and notes; a note alone when the table has no stress columns."""
    if not set(STRESS_COLUMNS) <= set(grades.columns):
        return (), {}, (("perturbations and probes were not run (the grades lack their columns); grade with "
                        "stress=True to test the judge's stability and known hacks."),)
    (rejudge, rejudge_metrics), (filler, filler_metrics) = check_rejudge(grades), check_filler(grades)
    probe_flags, probe_metrics, notes = check_probes(grades)
    flags = tuple(f for f in (rejudge, filler) if f is not None) + probe_flags
    return flags, rejudge_metrics | filler_metrics | probe_metrics, notes


def report_tables(report: JudgeTrustReport) -> dict[str, pd.DataFrame]:
    """Display tables of a report: 'metrics' (metric, value), 'confusion' (judge x gold) and 'flags'."""
    metrics = pd.DataFrame(
        {"metric": ["verdict", "needed_more_gold", *report.metrics],
         "value": [report.verdict, report.needed_more_gold, *report.metrics.values()]}
    )
    a = report.agreement
    counts = [[a.tp, a.fp], [a.fn, a.tn]] if a is not None else [[0, 0], [0, 0]]
    confusion = pd.DataFrame(counts, index=pd.Index(["judge pass", "judge fail"], name="judge"),
                             columns=pd.Index(["gold pass", "gold fail"], name="gold"))
    flags = pd.DataFrame([vars(flag) for flag in report.flags], columns=["name", "value", "threshold", "sentence"])
    notes = pd.DataFrame({"note": list(report.notes)})
    by_tool = pd.DataFrame([vars(row) for row in report.by_tool],
                           columns=["tool", "n", "n_effective", "agreement", "wilson_low", "wilson_high", "decision"])
    return {"metrics": metrics, "confusion": confusion, "flags": flags, "notes": notes, "by_tool": by_tool}


def model_family(model: str) -> str:
    """A model's family: the leading letters of its name after the provider and before any version digits.

    'sim/agent-v1' -> 'agent', 'openai/gpt-4o-mini' -> 'gpt', 'anthropic/claude-3-5-sonnet' -> 'claude'.
    """
    name = model.split("@")[0].rsplit("/", 1)[-1].lower()
    match = re.match(r"[a-z]+", name)
    return match.group(0) if match else name


def stable_half(situation_id: str) -> int:
    """0 or 1 from a SHA-256 of the situation id: the same split on every machine and run."""
    return hashlib.sha256(str(situation_id).encode()).digest()[0] & 1


def _check_gold_count(n: int, min_gold: int) -> CheckResult:
    """Too few judged gold labels: agreement on them says little about the judge."""
    if n >= min_gold:
        return None, {}
    return Flag("gold_count", float(n), float(min_gold),
                f"only {n} gold rows have a judge verdict; label {min_gold - n} more held-out rollouts."), {}


def _check_one_class(stats: JudgeAgreement) -> CheckResult:
    """Gold labels of one class only: agreement cannot tell a judge from one that always says the same."""
    passes, fails = stats.tp + stats.fn, stats.tn + stats.fp
    if not stats.n or min(passes, fails) > 0:
        return None, {}
    missing = "failing" if passes else "passing"
    return Flag("gold_one_class", 0.0, 1.0,
                f"all {stats.n} judged gold rows are {'passes' if passes else 'failures'}; label {missing} rollouts "
                "too (or run a weaker policy) so the judge is tested on both."), {}


def _check_kappa(stats: JudgeAgreement) -> CheckResult:
    """Kappa under the floor: agreement beyond chance is weak (a judge that always says pass scores 0)."""
    if np.isnan(stats.kappa) or stats.kappa >= JUDGE_TRUST_MIN_KAPPA:
        return None, {}
    guessing = " - the judge is guessing" if stats.kappa < JUDGE_TRUST_GUESSING_KAPPA else ""
    return Flag("kappa", stats.kappa, JUDGE_TRUST_MIN_KAPPA,
                f"Cohen's kappa {stats.kappa:.2f}{guessing}; rewrite the rubric with pass/fail examples."), {}


@dataclass(frozen=True)
class _Banded:
    """One rate check of the calibrated gate: its bound and band, what it counts, and its advice."""

    name: str
    bound: RateBound
    tolerated: float
    limit: float
    what: str  # e.g. "disagrees with gold on"
    of: str  # e.g. "judged gold rows"
    fix: str

    def more_rows(self, rows: int) -> int:
        """Gold rows to add so a judge erring at the observed rate would be placed within the limit."""
        if not self.bound.n:  # nothing counted (no gold failures: the one-class check says so)
            return 0
        rate = min(self.bound.rate, self.limit * 0.99)  # at or over the limit, no amount of gold would trust it
        need = decisive_trials(round(rate, 4), self.limit, GATE_TEST_ALPHA, JUDGE_GATE_BETA)
        return max(0, int(np.ceil(need * rows / self.bound.n)) - rows)


def _banded(name: str, bad: np.ndarray, clusters: np.ndarray, *, tolerated: float, limit: float, what: str,
            of: str, fix: str) -> _Banded:
    bound = bound_clustered(bad, clusters, tolerated=tolerated, limit=limit, alpha=GATE_TEST_ALPHA,
                            beta=JUDGE_GATE_BETA)
    return _Banded(name, bound, tolerated, limit, what, of, fix)


def _bound_disagreement(judged: pd.DataFrame) -> _Banded:
    """How often the judge disagrees with gold, bounded over tasks (its errors repeat on a task's samples)."""
    wrong = judged["judge_reward"].to_numpy(float) != judged["gold_reward"].to_numpy(float)
    return _banded("disagreement", wrong, judged["situation_id"].to_numpy(str),
                   tolerated=JUDGE_TRUST_TOLERATED_DISAGREEMENT, limit=JUDGE_TRUST_MAX_DISAGREEMENT,
                   what="disagrees with gold on", of="judged gold rows",
                   fix="sharpen the rubric or use a stronger judge model")


def _bound_leak(judged: pd.DataFrame) -> _Banded:
    """How often the judge passes a gold failure: training would reward exactly the behaviour gold rejects."""
    failures = judged[judged["gold_reward"] == 0]
    return _banded("leak_rate", failures["judge_reward"].to_numpy(float) == 1,
                   failures["situation_id"].to_numpy(str), tolerated=JUDGE_TRUST_TOLERATED_LEAK,
                   limit=JUDGE_TRUST_MAX_LEAK_RATE, what="passes", of="gold failures",
                   fix="add those failures to the rubric as fail examples")


def _bound_failures(gold_rows: pd.DataFrame) -> _Banded:
    """Judge errors/timeouts/invalid results on gold rows: rewards there are not the judge's."""
    failed = gold_rows["judge_status"].isin(("error", "timeout", "invalid_result")).to_numpy()
    return _banded("judge_failures", failed, gold_rows["situation_id"].to_numpy(str),
                   tolerated=JUDGE_TRUST_TOLERATED_FAILURES, limit=JUDGE_TRUST_MAX_FAILURE_RATE,
                   what="failed (error, timeout, unreadable) on", of="gold rows",
                   fix="fix its output format or raise its timeout")


def _banded_flag(check: _Banded) -> CheckResult:
    """A flag when the rate is confidently over its tolerance and not confidently under its limit."""
    b = check.bound
    measured = {f"{check.name}_low": b.low, f"{check.name}_high": b.high, f"{check.name}_n_effective": b.n,
                f"{check.name}_decisive_n": b.needed}
    if b.decision != OVER:
        return None, measured
    return Flag(check.name, b.rate, check.limit, f"the judge {check.what} {b.rate:.1%} of {check.of} (bounds "
                f"{b.low:.3f}-{b.high:.3f} over {b.n:.0f} effective); {check.fix}."), measured


def _undecided_flag(check: _Banded, rows: int) -> Flag:
    """Why a rate check left the verdict inconclusive, and what would decide it."""
    b = check.bound
    more = (f"label about {check.more_rows(rows)} more gold rows (a judge at the tolerated {check.tolerated:.0%} "
            f"needs {b.needed} effective {check.of}; these count as {b.n:.0f})")
    return Flag(f"{check.name}_undecided", b.rate, check.limit,
                f"the judge {check.what} {b.rate:.1%} of {check.of}, and its bounds ({b.low:.3f}-{b.high:.3f}) "
                f"straddle the band from the tolerated {check.tolerated:.0%} to the {check.limit:.0%} limit: {more}.")


def _check_leak_by_tool(judged: pd.DataFrame) -> CheckResult:
    """Within the gold failures of one intended tool, the judge passes confidently more than the leak limit.

    A judge swayed by one tool's call (it passes any transcript with a refund in it) leaks on that tool's tasks
    only, which the overall leak rate averages away. Each tool's lower bound is taken at the test's share of the
    gate's false-refusal budget split again over the tools.
    """
    if "tool" not in judged.columns:
        return None, {}
    failures = judged[(judged["gold_reward"] == 0) & judged["tool"].notna()]
    groups = list(failures.groupby("tool", sort=True))
    worst: tuple[str, float, float, int] | None = None
    for tool, group in groups:
        bad = group["judge_reward"].to_numpy(float) == 1
        low = lower_bound(*effective_counts(bad, group["situation_id"].to_numpy(str)), GATE_TEST_ALPHA / len(groups))
        if low > JUDGE_TRUST_MAX_LEAK_RATE and (worst is None or low > worst[2]):
            worst = (str(tool), float(bad.mean()), low, bad.size)
    if worst is None:
        return None, {}
    tool, rate, low, n = worst
    return Flag("leak_by_tool", rate, JUDGE_TRUST_MAX_LEAK_RATE,
                f"the judge passes {rate:.0%} of {n} gold failures whose task needed {tool} (lower bound {low:.2f}); "
                f"it may reward a call to {tool} rather than its outcome - add such failures to the rubric."), {
        "leak_by_tool_worst": tool, "leak_by_tool_rate": rate}


def agreement_by_tool(judged: pd.DataFrame) -> tuple[ToolAgreement, ...]:
    """The judge's agreement with gold within each intended tool's judged gold rows, with Wilson bounds (Wilson 1927).

    Counts are shrunk by the design effect over tasks. Each bound is one-sided at the gate's per-test alpha split over
    the tools with at least JUDGE_TRUST_TOOL_MIN_ROWS effective rows (as leak by tool is). A tool is BELOW_LIMIT when
    its upper bound is under the agreement the gate requires (1 - its disagreement limit), ABOVE_LIMIT when its lower
    bound is over it, else UNDECIDED; with fewer rows, TOO_FEW_ROWS. Empty without a `tool` column.
    """
    if "tool" not in judged.columns:
        return ()
    rows = judged[judged["tool"].notna()]
    counted = []
    for tool, group in rows.groupby("tool", sort=True):
        wrong = group["judge_reward"].to_numpy(float) != group["gold_reward"].to_numpy(float)
        bad, n_eff = effective_counts(wrong, group["situation_id"].to_numpy(str))
        counted.append((str(tool), len(group), n_eff, n_eff - bad))
    tested = sum(n_eff >= JUDGE_TRUST_TOOL_MIN_ROWS for _, _, n_eff, _ in counted)
    level = 1.0 - 2.0 * GATE_TEST_ALPHA / max(tested, 1)  # a two-sided level whose upper tail is the one-sided alpha
    floor = 1.0 - JUDGE_TRUST_MAX_DISAGREEMENT
    out = []
    for tool, n, n_eff, agreed in counted:
        low, high = wilson_interval(min(agreed, n_eff), n_eff, level=level)
        decision = (TOO_FEW_ROWS if n_eff < JUDGE_TRUST_TOOL_MIN_ROWS else BELOW_LIMIT if high < floor
                    else ABOVE_LIMIT if low > floor else UNDECIDED)
        out.append(ToolAgreement(tool, n, float(n_eff), float(agreed / n_eff), float(low), float(high), decision))
    return tuple(out)


def _check_agreement_by_tool(by_tool: tuple[ToolAgreement, ...]) -> CheckResult:
    """Within one intended tool's gold rows, the judge's agreement is confidently under what the gate requires.

    The overall agreement averages tools: a judge that reads one action wrongly (a refund it cannot tell from a
    cancel, a tool it ignores the name of) can pass the overall check on the strength of the others.
    """
    tested = [row for row in by_tool if row.decision != TOO_FEW_ROWS]
    if not tested:
        return None, {}
    worst = min(tested, key=lambda row: (row.wilson_high, row.tool))
    measured: dict[str, float | str] = {"agreement_by_tool_tested": float(len(tested)),
                                        "agreement_by_tool_worst": worst.tool,
                                        "agreement_by_tool_worst_high": worst.wilson_high}
    if worst.decision != BELOW_LIMIT:
        return None, measured
    floor = 1.0 - JUDGE_TRUST_MAX_DISAGREEMENT
    return Flag("agreement_by_tool", worst.agreement, floor,
                f"on the {worst.n} gold rows of situations for tool '{worst.tool}' the judge agrees with gold on "
                f"{worst.agreement:.0%} (Wilson upper bound {worst.wilson_high:.2f}, under the {floor:.0%} required); "
                "add such cases, passing and failing, to the rubric or use a stronger judge model."), measured


def _check_versions(versions: list[str]) -> CheckResult:
    """Several judge versions in one table: agreement mixes judges, so it describes none of them."""
    if len(versions) <= 1:
        return None, {}
    return Flag("judge_versions", float(len(versions)), 1.0,
                f"gold rows were judged by {len(versions)} judge versions; re-grade with one judge."), {}


def _check_halves(judged: pd.DataFrame) -> CheckResult:
    """Agreement differs between two hash-split halves of the tasks: it does not generalise across tasks.

    A gap flags only when it is also unlikely under random halves: a permutation test that moves whole tasks
    between halves, since a judge's errors cluster by task and a few tasks can open a large gap by chance.
    """
    half = judged["situation_id"].map(stable_half).to_numpy()
    hit = (judged["judge_reward"].to_numpy(float) == judged["gold_reward"].to_numpy(float))
    gap = _gap(hit[half == 0], hit[half == 1])
    if np.isnan(gap) or gap < JUDGE_TRUST_MAX_HALF_GAP:
        return None, {"half_gap": gap}
    tasks, task_of = np.unique(judged["situation_id"].to_numpy(str), return_inverse=True)
    hits = np.bincount(task_of, weights=hit, minlength=tasks.size)
    rows = np.bincount(task_of, minlength=tasks.size).astype(float)
    in_first = np.bincount(task_of, weights=(half == 0), minlength=tasks.size) > 0
    p = _permutation_p(gap, hits, rows, int(in_first.sum()))
    if p >= GATE_TEST_ALPHA:
        return None, {"half_gap": gap, "half_gap_p": p}
    return Flag("heldout_halves", gap, JUDGE_TRUST_MAX_HALF_GAP,
                f"agreement differs by {gap:.2f} between task halves (permutation p={p:.3f}); the rubric fits some "
                "tasks only - label gold for more varied tasks."), {"half_gap": gap, "half_gap_p": p}


def _permutation_p(observed: float, hits: np.ndarray, rows: np.ndarray, first: int) -> float:
    """P(gap >= observed) when `first` of the units (with their hits and rows) are drawn at random as one group."""
    gen = np.random.default_rng(JUDGE_TRUST_PERMUTATION_SEED)
    order = np.argsort(gen.random((JUDGE_TRUST_GAP_PERMUTATIONS, hits.size)), axis=1)
    pick = np.zeros_like(order, dtype=bool)
    np.put_along_axis(pick, order[:, :first], True, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        a = (pick * hits).sum(1) / (pick * rows).sum(1)
        b = (~pick * hits).sum(1) / (~pick * rows).sum(1)
    gaps = np.abs(a - b)
    return float((np.sum(gaps >= observed - 1e-12) + 1) / (JUDGE_TRUST_GAP_PERMUTATIONS + 1))


def _check_length(judged: pd.DataFrame) -> CheckResult:
    """Within a gold label, agreement differs for short vs long replies: the judge is swayed by length.

    The largest gap flags only when a permutation test (short/long labels shuffled within the gold label) says it
    is unlikely by chance; the perturbation probes test length bias causally.
    """
    worst, worst_p = _NAN, _NAN
    for _, group in judged.groupby("gold_reward"):
        chars = group["reply_chars"].to_numpy(float)
        hit = (group["judge_reward"].to_numpy(float) == group["gold_reward"].to_numpy(float)).astype(float)
        long = chars > np.median(chars)
        gap = _gap(hit[~long], hit[long])
        if np.isnan(gap) or (not np.isnan(worst) and gap <= worst):
            continue
        worst = gap
        worst_p = _permutation_p(gap, hit, np.ones_like(hit), int((~long).sum())) \
            if gap >= JUDGE_TRUST_MAX_LENGTH_GAP else _NAN
    measured = {"length_gap": worst, "length_gap_p": worst_p}
    if np.isnan(worst) or worst < JUDGE_TRUST_MAX_LENGTH_GAP or worst_p >= GATE_TEST_ALPHA:
        return None, measured
    return Flag("length_sensitivity", worst, JUDGE_TRUST_MAX_LENGTH_GAP,
                f"agreement differs by {worst:.2f} between short and long replies (permutation p={worst_p:.3f}); "
                "tell the judge length is not quality and add long failing examples."), measured


def _check_family(policy_model: str | None, judge_model: str | None) -> CheckResult:
    """Judge from the policy's own family: LLM judges favour their own outputs (Panickssery et al. 2024)."""
    if policy_model is None or judge_model is None:
        return None, {"policy_family": "unknown", "judge_family": "unknown"}
    policy, judge = model_family(policy_model), model_family(judge_model)
    measured: dict[str, float | str] = {"policy_family": policy, "judge_family": judge}
    if policy != judge:
        return None, measured
    return Flag("judge_family", 1.0, 0.0,
                f"judge {judge_model!r} and policy {policy_model!r} are both family {judge!r}; use a judge "
                "from another family."), measured


def _gap(a: np.ndarray, b: np.ndarray) -> float:
    """Absolute difference of two agreement rates; NaN when either group is empty."""
    return abs(float(a.mean()) - float(b.mean())) if a.size and b.size else _NAN


# The grades step records its partition's verdict in these columns (the same value on every row, which Parquet
# stores once), so the cut gates, the delta and the summary read the one verdict the blocking check reported.
TRUST_VERDICT_COLUMN = "judge_trust"
TRUST_FLAGS_COLUMN = "judge_trust_flags"  # JSON list of "name: sentence"


def flag_lines(report: JudgeTrustReport) -> list[str]:
    """Each flag, then each undecided check that made the verdict inconclusive, as one 'name: sentence' line."""
    return [f"{f.name}: {f.sentence}" for f in (*report.flags, *report.undecided)]


def with_recorded_trust(grades: pd.DataFrame, report: JudgeTrustReport) -> pd.DataFrame:
    """The grades table with its partition's verdict and flags recorded on every row."""
    return grades.assign(**{TRUST_VERDICT_COLUMN: report.verdict,
                            TRUST_FLAGS_COLUMN: json.dumps(flag_lines(report))})


def recorded_trust(grades: pd.DataFrame, *, policy_model: str | None,
                   judge_model: str | None) -> tuple[str, tuple[str, ...]]:
    """The verdict and flags the grades step recorded for one partition's table; computed afresh only for a table
    written before the grades step recorded them."""
    if TRUST_VERDICT_COLUMN in grades.columns and len(grades):
        return str(grades[TRUST_VERDICT_COLUMN].iloc[0]), tuple(json.loads(grades[TRUST_FLAGS_COLUMN].iloc[0]))
    report = judge_trust_report(grades, policy_model=policy_model, judge_model=judge_model)
    return report.verdict, tuple(flag_lines(report))
