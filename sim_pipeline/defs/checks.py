"""Asset checks: names, and results built from engine reports (judge trust, row schema, publish gate, regress)."""

from __future__ import annotations

import dagster as dg
import pandas as pd

from sim_pipeline import defaults
from sim_pipeline.cut.publish_gate import GateResult
from sim_pipeline.defs.metadata import split_tables, table_metadata
from sim_pipeline.grade.judge_trust import (
    JudgeTrustReport,
    flag_lines,
    judge_trust_report,
    recorded_trust,
    report_tables,
)
from sim_pipeline.measure.delta import must_not_regress_failures
from sim_pipeline.measure.ship import ShipDecision
from sim_pipeline.protocol import statuses
from sim_pipeline.registry import PolicyVersion
from sim_pipeline.rollout.health import rollout_health, tool_error_shares
from sim_pipeline.rollout.row import row_errors
from sim_pipeline.rollout.world_fit import fit_problems, fit_sentence
from sim_pipeline.warehouse import jsonable

ROW_SCHEMA = "row_schema"
ROLLOUT_HEALTH = "rollout_health"
ROLLOUT_HEALTH_DESCRIPTION = ("Blocking. The share of rollouts that errored outside the agent's conduct (provider or "
                              "HTTP errors, timeouts, invalid completions, user-model failures) is at most "
                              f"{defaults.MAX_ERROR_SHARE:.0%}; errored rollouts are never graded, and above that share "
                              "the partition's grades, cuts, scores and delta are withheld.")
SITUATIONS_SOLVABLE = "situations_solvable"
SITUATIONS_SOLVABLE_DESCRIPTION = ("Blocking. Every planned situation's reference solution (verify, confirm, the "
                                   "intended call with the user's facts, retries, then the right reply) passes the "
                                   "state oracle in the sandbox: the world can reach each goal, so scores over these "
                                   "situations measure the agent, not the world model.")
WORLD_FIT = "world_fit"
WORLD_FIT_DESCRIPTION = ("Warning, not blocking. The world models the domain's tools: no tool's calls are refused for a "
                         "value the user or a tool supplied (the world's values do not fit the schema) more often "
                         f"than {defaults.WORLD_FIT_MAX_REJECTED_SHARE:.0%} of the time, and well-formed calls for the "
                         "writes the situations expect go through at least "
                         f"{defaults.WORLD_FIT_MIN_WRITE_SHARE:.0%} of the time. "
                         "When it warns, pass@k and the delta measure the world model as much as the agent.")
# World fit's by-tool table in narrow parts, each led by the tool: the shares the verdict reads, the calls refused
# for their arguments, then the rest (a UI table wider than its pane scrolls its last columns away).
FIT_UI_GROUPS = (("calls", "told_rejected", "told_not_found", "write_tried", "write_applied", "applied", "unsupplied"),
                 ("missing_required", "invalid_argument", "placeholder_argument"))
JUDGE_TRUST = "judge_trust"
PUBLISH_GATE = "publish_gate"
MUST_NOT_REGRESS = "must_not_regress"
JUDGE_TRUST_DESCRIPTION = ("Blocking. The judge agrees with gold labels (Wilson lower bound, kappa, leak rate, held-out "
                           "halves, length sensitivity, model family) and withstands re-judging, neutral filler and "
                           "known hacks (probes) before its grades feed any cut.")


# How a rollout ended, in words (the `status` column). user_left is most rollouts of a run with a cautious agent: it is
# a normal ending, graded like any other, not an error.
STATUS_MEANINGS = {
    statuses.OK: "the conversation ended on its own terms: the user's goal reached in the world, a hand-off to a "
                 "human, or the user said it was done",
    statuses.USER_LEFT: "the simulated user ended the conversation without reaching the goal: the agent refused or "
                        "could not help and the user accepted that, or the user ran out of patience. A normal "
                        "ending, graded like any other: it passes when leaving was the right outcome (a correct "
                        "refusal), fails when the agent should have helped",
    statuses.TURN_CAP: f"stopped after {defaults.MAX_TURNS} agent turns without an ending",
    statuses.AGENT_ERROR: "the agent sent an empty reply, or its MCP harness exited before the conversation ended; "
                          "graded (the agent's own conduct)",
    statuses.PROVIDER_ERROR: "the agent's model call failed (HTTP or connection error, timeout); not graded",
    statuses.INVALID_RESPONSE: "the agent's model answered, but not with a valid completion; not graded",
    statuses.USER_ERROR: "the simulated user's model call failed or answered outside its protocol; not graded",
}


def status_words() -> str:
    """Every rollout status and its meaning, one sentence for an asset description."""
    return "; ".join(f"{k}: {v}" for k, v in STATUS_MEANINGS.items()) + "."


def rollout_metadata(rows: pd.DataFrame) -> dict[str, object]:
    """Counts a user checks first: rollouts, statuses, arms, distinct behaviours, model calls, cost."""
    if not len(rows):
        return {"rollouts": 0}
    return {
        "rollouts": len(rows), "status": dg.MetadataValue.json(rows["status"].value_counts().to_dict()),
        "status_meaning": dg.MetadataValue.md("\n".join(
            f"- **{status}** ({count}): {STATUS_MEANINGS.get(status, 'a status this version of the UI text does not know')}"
            for status, count in rows["status"].value_counts().items())),
        "arms": dg.MetadataValue.json(rows["arm"].value_counts().to_dict()),
        "behavior_signatures": int(rows["behavior_signature"].nunique()),
        "model_calls": int(rows["model_calls"].sum()), "cost_usd": float(rows["cost"].fillna(0).sum()),
        # Replies whose chat format leaked markup (HTML entities, template tokens), decoded before anything read them.
        "markup_repaired": int(rows["markup_repaired"].sum()) if "markup_repaired" in rows else 0,
        "oracle_pass_rate": round(float(labels.mean()), 4) if len(labels := rows["oracle_reward"].dropna()) else None,
        "error_share": round(rollout_health(rows).share, 4),
        # Wall-clock, so here and not in the table (whose bytes must not depend on the machine's speed).
        "latency_s": dg.MetadataValue.json({q: round(float(rows["latency_s"].quantile(v)), 4)
                                            for q, v in (("p50", 0.5), ("p95", 0.95), ("max", 1.0))}),
    }


def rollout_health_result(rows: pd.DataFrame) -> dg.AssetCheckResult:
    """The blocking rollout-health check: fails when the share of errored (ungraded) rollouts is over the maximum."""
    health = rollout_health(rows)
    return dg.AssetCheckResult(
        check_name=ROLLOUT_HEALTH, passed=health.passed, severity=dg.AssetCheckSeverity.ERROR,
        description=health.sentence(),
        metadata={"rollouts": health.rollouts, "errors": health.errors, "error_share": round(health.share, 4),
                  "max_error_share": health.max_share, "by_status": dg.MetadataValue.json(health.by_status),
                  "by_tool": table_metadata(tool_error_shares(rows)),
                  "examples": dg.MetadataValue.json(list(health.examples)),
                  **({} if health.passed else {"fix": health.remedy()})})


def situations_solvable_result(table: pd.DataFrame) -> dg.AssetCheckResult:
    """The blocking solvability check: fails when any situation's reference solution does not pass the oracle."""
    failed = table[~table["solvable"].astype(bool)] if len(table) else table
    examples = [{"situation_id": r["situation_id"], "tool": r["tool"], "world_state": r["world_state"],
                 "tool_condition": r["tool_condition"], "reason": r["reference"],
                 "calls": list(r["reference_calls"])[:4]} for r in failed.head(5).to_dict("records")]
    by_tool = failed["tool"].value_counts().to_dict() if len(failed) else {}
    return dg.AssetCheckResult(
        check_name=SITUATIONS_SOLVABLE, passed=not len(failed), severity=dg.AssetCheckSeverity.ERROR,
        description=(f"{len(failed)} of {len(table)} situations have a reference solution the oracle fails"
                     + (f", e.g. {examples[0]['situation_id']} ({examples[0]['tool']}): {examples[0]['reason']}"
                        if examples else "") if len(failed) else f"all {len(table)} situations solvable"),
        metadata={"situations": len(table), "unsolvable": len(failed),
                  "unsolvable_by_tool": dg.MetadataValue.json({str(k): int(v) for k, v in by_tool.items()}),
                  "examples": dg.MetadataValue.json(examples)})


def world_fit_result(fit: pd.DataFrame) -> dg.AssetCheckResult:
    """The world-fit check (a warning): per-tool rejection shares and expected-write outcomes."""
    problems = fit_problems(fit)
    return dg.AssetCheckResult(
        check_name=WORLD_FIT, passed=not problems, severity=dg.AssetCheckSeverity.WARN,
        description=fit_sentence(fit), metadata={**dict(zip(("by_tool", "by_tool_arguments", "by_tool_other"),
                                                             split_tables(fit, "tool", FIT_UI_GROUPS))),
                                                 "problems": dg.MetadataValue.json([p.sentence for p in problems])})


def row_schema_result(rows: pd.DataFrame) -> dg.AssetCheckResult:
    """Every rollout row valid against rollout/row.schema.json."""
    errors = row_errors(rows.to_dict("records")) if len(rows) else []
    return dg.AssetCheckResult(check_name=ROW_SCHEMA, passed=not errors,
                               metadata={"rows": len(rows), "errors": dg.MetadataValue.json(errors)})


def grade_metadata(grades: pd.DataFrame) -> dict[str, object]:
    """Reward, conduct and judge summaries of a grades table."""
    if not len(grades):
        return {"graded": 0}
    return {
        "rows": len(grades), "graded": int(grades["graded"].sum()),
        "pass_rate": round(float((grades["reward"].dropna() >= 1).mean()), 4) if grades["graded"].any() else None,
        "judge_version": str(grades["judge_version"].iloc[0]),
        "conduct_failures": dg.MetadataValue.json(grades["conduct_rule"].dropna().value_counts().to_dict()),
        "judge_status": dg.MetadataValue.json(grades["judge_status"].value_counts().to_dict()),
    }


def trust_report(grades: pd.DataFrame, version: PolicyVersion) -> JudgeTrustReport:
    """The judge-trust report of a partition's grades."""
    return judge_trust_report(grades, policy_model=version.agent_backend, judge_model=version.judge_backend)


def recorded_verdict(grades: pd.DataFrame, version: PolicyVersion) -> str:
    """The judge-trust verdict the grades step recorded for one partition."""
    return recorded_trust(grades, policy_model=version.agent_backend, judge_model=version.judge_backend)[0]


def untrusted_seeds(grades: pd.DataFrame, version: PolicyVersion) -> list[str]:
    """The seeds of a version's grades whose recorded verdict is not trusted (none when the version opted out)."""
    if version.judge_trust_opt_out or not len(grades):
        return []
    return [str(seed) for seed, part in grades.groupby("seed", sort=True)
            if recorded_verdict(part, version) != "trusted"]


def withheld_delta_result(reasons: list[str], decision: ShipDecision | None = None) -> dg.AssetCheckResult:
    """The delta's check when its inputs' judge is not trusted: nothing was compared, so nothing may pass; the ship
    line (INCONCLUSIVE, and why) leads its metadata, as it leads a written delta's."""
    ship = {"ship": decision.line} if decision is not None else {}
    return dg.AssetCheckResult(check_name=MUST_NOT_REGRESS, passed=False, severity=dg.AssetCheckSeverity.ERROR,
                               description="withheld: " + "; ".join(reasons),
                               metadata={**ship, "withheld": dg.MetadataValue.json(reasons)})


def judge_trust_result(report: JudgeTrustReport, version: PolicyVersion) -> dg.AssetCheckResult:
    """The blocking judge-trust check: fails unless the verdict is `trusted` (or the version opted out)."""
    tables = report_tables(report)
    passed = report.verdict == "trusted" or version.judge_trust_opt_out
    return dg.AssetCheckResult(
        check_name=JUDGE_TRUST, passed=passed, severity=dg.AssetCheckSeverity.ERROR,
        description=judge_trust_sentence(report, version),
        metadata={"verdict": report.verdict, "opt_out": version.judge_trust_opt_out,
                  "needed_more_gold": report.needed_more_gold,
                  "metrics": dg.MetadataValue.json(jsonable(report.metrics)),
                  "flags": dg.MetadataValue.json(flag_lines(report)),
                  "notes": dg.MetadataValue.json(list(report.notes)),
                  **{f"table_{k}": table_metadata(v) for k, v in tables.items()}},
    )


def judge_trust_sentence(report: JudgeTrustReport, version: PolicyVersion) -> str:
    """The judge-trust verdict and why: each flag or undecided check, one 'name: sentence' each."""
    if report.verdict == "trusted":
        return "verdict: trusted"
    why = "; ".join(flag_lines(report)) or "; ".join(report.notes) or "no check named a reason"
    opted = " (opted out in the registry, so the run goes on)" if version.judge_trust_opt_out else ""
    return f"verdict: {report.verdict}{opted}: {why}"


def publish_gate_result(gate: GateResult) -> dg.AssetCheckResult:
    """The blocking publish-gate check of a cut."""
    return dg.AssetCheckResult(check_name=PUBLISH_GATE, passed=gate.passed, severity=dg.AssetCheckSeverity.ERROR,
                               description="; ".join(gate.reasons) if not gate.passed else "published",
                               metadata={"reasons": dg.MetadataValue.json(list(gate.reasons))})


def must_not_regress_result(report: pd.DataFrame, version: PolicyVersion) -> dg.AssetCheckResult:
    """Fails when a must_not_regress metric's verdict is FAIL (the same rule as the delta's verdict)."""
    failures = must_not_regress_failures(report, version.must_not_regress) if len(report) else ()
    rows = report.set_index("metric") if len(failures) else report
    why = "; ".join(f"{m} regressed: {rows.at[m, 'before']:.3f} -> {rows.at[m, 'after']:.3f}, 95% CI "
                    f"[{rows.at[m, 'ci_low']:+.3f}, {rows.at[m, 'ci_high']:+.3f}], p={rows.at[m, 'p_value']:.4f}"
                    for m in failures)
    guarded = ", ".join(version.must_not_regress) or "none"
    return dg.AssetCheckResult(check_name=MUST_NOT_REGRESS, passed=not failures, severity=dg.AssetCheckSeverity.ERROR,
                               description=why or f"no guarded metric regressed (guarded: {guarded})",
                               metadata={"guarded": dg.MetadataValue.json(list(version.must_not_regress)),
                                         "regressed": dg.MetadataValue.json(list(failures))})


# The checks declared blocking=True: a failed one stops its step, and the run's error says which and why.
BLOCKING = frozenset({SITUATIONS_SOLVABLE, ROLLOUT_HEALTH, JUDGE_TRUST, PUBLISH_GATE, MUST_NOT_REGRESS})


def stop_if_failed(asset: dg.AssetKey, *results: dg.AssetCheckResult) -> None:
    """Raise a Failure naming each failed blocking check of `asset` and its reason (yield the results first).

    Dagster would fail the step anyway, with "1 blocking asset check failed" and a stack trace as the run's error;
    this makes the run's error the check's own sentence instead.
    """
    failed = [r for r in results if not r.passed and r.check_name in BLOCKING
              and r.severity == dg.AssetCheckSeverity.ERROR]
    if not failed:
        return
    lines = [f"blocking check {r.check_name} of {asset.to_user_string()} failed: {r.description or 'no reason given'}"
             for r in failed]
    raise dg.Failure(description="\n".join(lines),
                     metadata={"failed_checks": dg.MetadataValue.json([r.check_name for r in failed])})
