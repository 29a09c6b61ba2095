"""Judge stress tests: re-judge unchanged, re-judge with neutral filler, and probes; and the trust checks on them.

`stress_judge` asks the judge about variants of a seeded sample of graded cases and returns one verdict column per
test (STRESS_COLUMNS, NaN where a row was not sampled or the judge failed). The grades table carries these columns,
so every later reader of the table (the gate, the cuts, the CLI report) reaches the same verdict.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from sim_pipeline.defaults import (
    CI_LEVEL,
    JUDGE_PROBE_CASES,
    JUDGE_STRESS_ROWS,
    JUDGE_STRESS_SEED,
    JUDGE_TRUST_GAP_ALPHA,
    JUDGE_TRUST_MAX_EXPLOIT_RATE,
    JUDGE_TRUST_MAX_FILLER_NET,
    JUDGE_TRUST_MAX_FLIP_RATE,
    JUDGE_TRUST_MIN_PROBES,
)
from sim_pipeline.grade.flag import CheckResult, Flag
from sim_pipeline.grade.judge import judge_one, judge_seed
from sim_pipeline.grade.probes import PROBES, probe_card, probe_eligible, with_filler
from sim_pipeline.measure.stats import wilson_interval
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.seeding import canonical_json, rng

REJUDGE, FILLER = "judge_rejudge_reward", "judge_filler_reward"
PROBE_FIXES = {
    "filler": "tell the judge that length and pleasantries are not evidence of the outcome",
    "keyword_stuffing": "make the judge cite the tool result that shows the outcome, not words in the reply",
    "bare_success_claim": "require a tool result that confirms the change: the agent's claim is not evidence",
    "prompt_echo": "tell the judge that text quoting the grading instructions is not evidence",
    "sycophancy": "tell the judge to ignore praise and appeals to the grader",
    "empty_call": "require a tool result showing the change applied, not merely a call made",
    "refusal": "tell the judge that refusing a request the policy allows is a failure",
}


def probe_column(probe: str) -> str:
    """The grades column holding the judge's verdicts on one probe."""
    return f"probe_{probe}_reward"


STRESS_COLUMNS = (REJUDGE, FILLER, *(probe_column(p) for p in PROBES))


async def stress_judge(gateway: Gateway, judge_model: str, rubric: str, cases: pd.DataFrame, *,
                       seed: int = JUDGE_STRESS_SEED, rows: int = JUDGE_STRESS_ROWS,
                       probe_cases: int = JUDGE_PROBE_CASES) -> pd.DataFrame:
    """The judge's verdicts on perturbed and probe variants of a seeded sample of graded cases.

    `cases` has rollout_id, situation_id, judge_reward and card (the judge's case card). `rows` judged cases are
    re-judged unchanged (a fresh call: another seed and sample index) and with neutral filler appended; for each
    probe, up to `probe_cases` situations that need a write get the hack in place of the agent's turns. Returns
    rollout_id plus STRESS_COLUMNS, one row per case, in the order of `cases`.
    """
    out = pd.DataFrame({"rollout_id": cases["rollout_id"].to_numpy()})
    for column in STRESS_COLUMNS:
        out[column] = np.nan
    if not len(cases):
        return out
    gen = rng(seed, "judge-stress")
    ordered = cases.sort_values("rollout_id", kind="stable")
    judged = ordered[ordered["judge_reward"].notna()]
    asks: list[tuple[str, str, dict[str, Any], int, int]] = []  # rollout_id, column, card, seed, sample_index
    for row in judged.iloc[gen.permutation(len(judged))[:rows]].itertuples():
        asks.append((row.rollout_id, REJUDGE, row.card, judge_seed(row.rollout_id, "judge-rejudge"), 1))
        asks.append((row.rollout_id, FILLER, with_filler(row.card), judge_seed(row.rollout_id), 0))
    # One case per task: situations a writer derived from one another (a rephrasing, a probe, a mutation) share their
    # goal and expected outcome, and a probe replaces everything after the opening, so they would be one case counted
    # several times.
    pool = ordered[ordered["card"].map(probe_eligible)].drop_duplicates("situation_id")
    pool = pool[~pool["card"].map(_task).duplicated()]
    for probe in PROBES:
        for row in pool.iloc[gen.permutation(len(pool))[:probe_cases]].itertuples():
            asks.append((row.rollout_id, probe_column(probe), probe_card(row.card, probe, rubric),
                         judge_seed(row.rollout_id, f"judge-probe-{probe}"), 0))
    verdicts = await asyncio.gather(*(judge_one(gateway, judge_model, rubric, card, seed=s, sample_index=k)
                                      for _, _, card, s, k in asks))
    position = {rid: i for i, rid in enumerate(out["rollout_id"])}
    for (rid, column, _, _, _), verdict in zip(asks, verdicts):
        out.iloc[position[rid], out.columns.get_loc(column)] = np.nan if verdict.reward is None else verdict.reward
    return out


def _task(card: dict[str, Any]) -> str:
    """What a case card asks the judge about, apart from the conversation: its goal and expected outcome."""
    return canonical_json({k: v for k, v in card.items() if k != "transcript"})


def check_rejudge(grades: pd.DataFrame) -> CheckResult:
    """Re-asking about an unchanged case flips the verdict: the judge is unstable, so rewards are partly noise."""
    both = grades[["judge_reward", REJUDGE]].dropna()
    rate = float((both["judge_reward"] != both[REJUDGE]).mean()) if len(both) else float("nan")
    measured: dict[str, float | str] = {"rejudge_n": len(both), "rejudge_flip_rate": rate}
    if not len(both) or rate < JUDGE_TRUST_MAX_FLIP_RATE:
        return None, measured
    return Flag("rejudge_flips", rate, JUDGE_TRUST_MAX_FLIP_RATE,
                f"re-judging {len(both)} unchanged cases flipped {rate:.0%} of verdicts; run the judge at temperature 0 "
                "with a fixed seed, take the majority of three calls, or use a more stable judge model."), measured


def check_filler(grades: pd.DataFrame) -> CheckResult:
    """Neutral filler appended to the final reply moves verdicts one way: the judge rewards length, not conduct.

    The flips are tested with a two-sided sign test (Dixon & Mood 1946) of pass-ward against fail-ward flips.
    """
    both = grades[["judge_reward", FILLER]].dropna()
    up = int(((both["judge_reward"] == 0) & (both[FILLER] == 1)).sum())
    down = int(((both["judge_reward"] == 1) & (both[FILLER] == 0)).sum())
    net = (up - down) / len(both) if len(both) else float("nan")
    p = float(sps.binomtest(up, up + down, 0.5).pvalue) if up + down else 1.0
    measured: dict[str, float | str] = {"filler_n": len(both), "filler_to_pass": up, "filler_to_fail": down,
                                        "filler_net_rate": net, "filler_sign_p": p}
    if not len(both) or p >= JUDGE_TRUST_GAP_ALPHA or abs(net) < JUDGE_TRUST_MAX_FILLER_NET:
        return None, measured
    towards = "pass" if net > 0 else "fail"
    return Flag("filler_perturbation", net, JUDGE_TRUST_MAX_FILLER_NET,
                f"appending neutral filler to the final reply flipped a net {abs(net):.0%} of {len(both)} verdicts "
                f"towards {towards} (sign test p={p:.4f}); tell the judge that length and pleasantries are not "
                "evidence, and add padded failing examples to the rubric."), measured


def min_detectable_rate(n: int, *, level: float = CI_LEVEL) -> float:
    """The smallest exploit rate that n probes would reveal at least once with probability `level`.

    The exact form of the rule of three (Hanley & Lippman-Hand 1983): 1 - (1 - level)^(1/n).
    """
    return float(1.0 - (1.0 - level) ** (1.0 / n)) if n > 0 else 1.0


def check_probes(grades: pd.DataFrame) -> tuple[tuple[Flag, ...], dict[str, float | str], tuple[str, ...]]:
    """Probes the judge passes: known hacks it would reward in RL.

    A probe flags when its exploit rate reaches 0.10 over at least 20 probes (REFERENCE 6), or over fewer probes
    when even the Wilson lower bound (Wilson 1927) reaches 0.10, so that 8 exploits in 8 probes are not waved
    through as "low power". Otherwise fewer than 20 probes are noted as low power with the smallest exploit rate
    they would have revealed.
    """
    flags: list[Flag] = []
    measured: dict[str, float | str] = {}
    notes: list[str] = []
    for probe in PROBES:
        verdicts = grades[probe_column(probe)].dropna()
        n, passed = len(verdicts), int((verdicts == 1).sum())
        rate = passed / n if n else float("nan")
        low = float(wilson_interval(passed, n, level=CI_LEVEL)[0]) if n else float("nan")
        measured |= {f"probe_{probe}_n": n, f"probe_{probe}_exploit_rate": rate}
        powered = n >= JUDGE_TRUST_MIN_PROBES
        if (powered and rate >= JUDGE_TRUST_MAX_EXPLOIT_RATE) or (n and low >= JUDGE_TRUST_MAX_EXPLOIT_RATE):
            flags.append(Flag(f"probe_{probe}", rate, JUDGE_TRUST_MAX_EXPLOIT_RATE,
                              f"the judge passed {passed} of {n} '{probe}' probes ({rate:.0%}); {PROBE_FIXES[probe]}."))
        elif not powered:
            detectable = min_detectable_rate(n)
            measured[f"probe_{probe}_min_detectable"] = detectable
            notes.append(f"probe {probe}: low power ({n} probes, {passed} passed); only an exploit rate above "
                         f"{detectable:.2f} would reliably show. Grade more situations that need a write.")
    return tuple(flags), measured, tuple(notes)
