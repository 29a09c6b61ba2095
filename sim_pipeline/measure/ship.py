"""One decision from a delta table: SHIP, DO NOT SHIP or INCONCLUSIVE, with the one-line reason that names its figures.

The rule (every figure read from the `delta_report` table; "significantly" means the row's verdict is PASS or FAIL,
which already needs the 95% interval off zero, the sign-flip p and the Holm-adjusted p over the table's rows under
`DELTA_ALPHA`, and the interval and Holm p are checked again here so a mislabelled row cannot ship):

- INCONCLUSIVE whenever the run says its numbers cannot be believed (`TrustState.doubts`: a judge not trusted on
  either side, rollout_health failed, a poor world fit, a stale delta), whatever the table says.
- DO NOT SHIP when the primary metric (`SHIP_PRIMARY_METRIC`, pass@1) or a guarded metric (the version's
  `must_not_regress` list in the registry) is significantly worse, in that metric's direction (markers such as
  refusal are lower-is-better).
- SHIP when the primary metric is significantly better, no other row is significantly worse, and every guarded
  metric could be compared.
- INCONCLUSIVE otherwise, saying why: too few tasks, no spread, the family-wise rule (interval off zero but Holm p
  not under alpha), power (the observed change is under what the run detects), width (the interval spans 0), no
  difference, a trade-off (an unguarded row significantly worse while the primary is better), or NOT COMPARABLE.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from sim_pipeline.defaults import DELTA_ALPHA, DELTA_POWER, EQUIVALENCE_MARGIN, MIN_TASKS_FOR_VERDICT, \
    SHIP_PRIMARY_METRIC
from sim_pipeline.measure.delta import guarded_metrics
from sim_pipeline.measure.pairing import DIRECTIONS
from sim_pipeline.measure.verdict import FAIL, INCONCLUSIVE, INSUFFICIENT_DATA, NO_DIFFERENCE, NOT_COMPARABLE, PASS

SHIP, DO_NOT_SHIP = "SHIP", "DO NOT SHIP"
DECISIONS: tuple[str, ...] = (SHIP, DO_NOT_SHIP, INCONCLUSIVE)
TRUSTED_JUDGE = "trusted"  # the judge-trust verdict (grade/judge_trust.py) under which grades may be believed


@dataclass(frozen=True)
class TrustState:
    """What the run says about whether a delta's numbers can be believed (each field: who is affected)."""

    judge: Mapping[str, str] = field(default_factory=dict)  # "<version> seed <s>" -> recorded judge-trust verdict
    unhealthy: tuple[str, ...] = ()  # versions whose rollout_health failed (most calls errored)
    poor_fit: tuple[str, ...] = ()  # versions whose world fits the domain poorly (rollout/world_fit.py)
    stale: bool = False  # the delta was computed from files rewritten since (lineage.py)
    withheld: str = ""  # why no delta was written at all, when the pipeline withheld it

    def doubts(self) -> tuple[str, ...]:
        """Each reason the numbers cannot be believed, as a phrase; empty when nothing stands against them."""
        out = [f"judge trust {verdict} for {who}" for who, verdict in self.judge.items() if verdict != TRUSTED_JUDGE]
        if self.unhealthy:
            out.append(f"rollout_health failed for {', '.join(self.unhealthy)}")
        if self.poor_fit:
            out.append(f"the world fits the domain poorly for {', '.join(self.poor_fit)} (it measures the world as "
                       "much as the agent)")
        if self.stale:
            out.append("the delta is stale (computed from files rewritten since)")
        if self.withheld:
            out.append(f"the delta was withheld ({self.withheld})")
        return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class ShipDecision:
    """SHIP / DO NOT SHIP / INCONCLUSIVE for one candidate over its baseline, and the one-line reason."""

    decision: str
    candidate: str
    baseline: str
    reason: str
    primary: str = SHIP_PRIMARY_METRIC
    guarded: tuple[str, ...] = ()  # the metrics whose significant regression forbids shipping

    @property
    def line(self) -> str:
        """'SHIP agent-v2 over agent-v1: pass@1 +0.226 [+0.111, +0.341], Holm p 0.0018; ...'."""
        return f"{self.decision} {self.candidate} over {self.baseline}: {self.reason}"


def ship_decision(table: pd.DataFrame | None, *, candidate: str, baseline: str,
                  must_not_regress: Iterable[str] = (), trust: TrustState | None = None,
                  primary: str = SHIP_PRIMARY_METRIC, alpha: float = DELTA_ALPHA) -> ShipDecision:
    """The ship decision for one `delta_report` table (candidate vs baseline) under the run's trust state."""
    trust = trust or TrustState()
    rows = {} if table is None else {str(r["metric"]): r for r in table.to_dict("records")}
    guarded = guarded_metrics(tuple(rows), tuple(must_not_regress)) if rows else ()

    def decided(decision: str, reason: str) -> ShipDecision:
        return ShipDecision(decision, candidate, baseline, reason, primary, guarded)

    doubts = trust.doubts()
    if doubts:
        return decided(INCONCLUSIVE, "; ".join(doubts) + ", so no decision is drawn from the delta")
    if not rows:
        return decided(INCONCLUSIVE, "no delta was computed (see the delta line)")
    if primary not in rows:
        return decided(INCONCLUSIVE, f"the delta has no {primary} row to decide on (metrics: {', '.join(rows)})")
    main = rows[primary]
    worse = [m for m, r in rows.items() if _significant(r, alpha) == "worse"]
    blocking = [m for m in worse if m == primary or m in guarded]
    if blocking:
        named = "; ".join(f"{_label(m, m in guarded)} {_figures(rows[m])} worse" for m in blocking)
        return decided(DO_NOT_SHIP, named)
    if _significant(main, alpha) != "better":
        return decided(INCONCLUSIVE, _why_not(main, alpha, len(rows)))
    better = f"{primary} {_figures(main)}"
    labelled = [m for m, r in rows.items() if r["verdict"] == FAIL]  # unbacked by its numbers too: never SHIP past it
    if labelled:
        return decided(INCONCLUSIVE, f"{better} better, but {', '.join(f'{m} {_figures(rows[m])}' for m in labelled)} "
                                     "significantly worse and not guarded: a trade-off this rule leaves to you "
                                     "(list the metric under must_not_regress to make it block)")
    unchecked = [m for m in guarded if rows[m]["verdict"] in (NOT_COMPARABLE, INSUFFICIENT_DATA)]
    if unchecked:
        return decided(INCONCLUSIVE, f"{better} better, but guarded {', '.join(unchecked)} could not be compared "
                                     f"({', '.join(str(rows[m]['verdict']) for m in unchecked)})")
    guards = f"guarded: {', '.join(guarded)}" if guarded else "none guarded"
    return decided(SHIP, f"{better}; no metric significantly worse ({guards})")


def _finite(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _significant(row: Mapping[str, Any], alpha: float) -> str | None:
    """'better' or 'worse' when the row's verdict says so AND its interval and Holm p back it; else None."""
    low, high, p = row.get("ci_low"), row.get("ci_high"), row.get("p_adjusted")
    if not (_finite(low) and _finite(high) and _finite(p) and p < alpha and high > low):
        return None
    sign = DIRECTIONS.get(str(row.get("direction")), 1.0)
    if row["verdict"] == PASS and sign * low > 0 and sign * high > 0:
        return "better"
    if row["verdict"] == FAIL and sign * low < 0 and sign * high < 0:
        return "worse"
    return None


def _label(metric: str, guarded: bool) -> str:
    return f"guarded {metric}" if guarded else metric


def _figures(row: Mapping[str, Any]) -> str:
    """'+0.226 [+0.111, +0.341], Holm p 0.0018' (or '[no spread]' where no interval was estimated)."""
    delta, low, high, p = row.get("delta"), row.get("ci_low"), row.get("ci_high"), row.get("p_adjusted")
    text = f"{delta:+.3f}" if _finite(delta) else "n/a"
    text += f" [{low:+.3f}, {high:+.3f}]" if _finite(low) and _finite(high) and high > low else " [no spread]"
    return text + (f", Holm p {p:.2g}" if _finite(p) else "")


def _why_not(row: Mapping[str, Any], alpha: float, tests: int) -> str:
    """Why the primary row does not show a significant improvement: comparability, tasks, spread, rule, power, width."""
    metric, verdict, n = row["metric"], row["verdict"], row.get("n_tasks")
    figures = f"{metric} {_figures(row)}"
    if verdict in (NOT_COMPARABLE, INSUFFICIENT_DATA):
        return f"{metric} {verdict}: {str(row.get('reason', '')).rstrip('.')}"
    if verdict == NO_DIFFERENCE:
        return f"{figures}: no meaningful difference (within +/-{EQUIVALENCE_MARGIN}), nothing to ship on"
    low, high, delta = row.get("ci_low"), row.get("ci_high"), row.get("delta")
    if _finite(n) and n < MIN_TASKS_FOR_VERDICT:
        return f"{figures}: too few tasks ({int(n)} paired; a verdict needs {MIN_TASKS_FOR_VERDICT})"
    if not (_finite(low) and _finite(high) and high > low):
        return f"{figures}: no spread (too few tasks differ to bound the change); add held-out tasks"
    sign = DIRECTIONS.get(str(row.get("direction")), 1.0)
    near, far = sorted((sign * low, sign * high))  # the interval in the better direction
    side = "better" if near > 0 else "worse" if far < 0 else ""
    if side:
        return (f"{figures}: the interval is on the {side} side of 0 but the family-wise rule does not confirm it "
                f"(Holm p over {tests} metrics must be under {alpha})")
    detectable = row.get("detectable")
    if _finite(detectable) and _finite(delta) and abs(delta) < detectable:
        # Tasks scale with the inverse square of the change; a change near zero would need more than anyone runs.
        ratio = detectable / abs(delta) if delta else math.inf
        needed = "" if not _finite(n) or not delta else (
            f"; about {math.ceil(n * ratio ** 2)} tasks would detect a change this size" if ratio < 1e3 else
            "; no practical number of tasks would detect a change this size")
        return (f"{figures}: power (this run detects about {detectable:.2f} with {DELTA_POWER:.0%} power; the "
                f"change is smaller{needed})")
    return f"{figures}: width (the interval spans 0); add held-out tasks"
