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

from sim_pipeline.defaults import (
    JUDGE_PROBE_CASES,
    JUDGE_STRESS_ROWS,
    JUDGE_STRESS_SEED,
    JUDGE_GATE_ALPHA,
    JUDGE_GATE_BETA,
    JUDGE_TRUST_MAX_FILLER_NET,
    JUDGE_TRUST_MAX_FLIP_RATE,
    JUDGE_TRUST_PROBE_LIMIT,
    JUDGE_TRUST_TOLERATED_EXPLOIT,
    JUDGE_TRUST_TOLERATED_FLIPS,
)
from sim_pipeline.grade.flag import CheckResult, Flag
from sim_pipeline.grade.judge import judge_one, judge_seed
from sim_pipeline.grade.probes import (
    OWN_WORDS,
    PROBES,
    calls_of,
    deciding_tool,
    probe_card,
    probe_eligible,
    rename_tool,
    stand_ins,
    swap_closing,
    with_filler,
)
from sim_pipeline.measure.binomial import binomtest_pvalue
from sim_pipeline.measure.rate_bounds import OVER, UNDECIDED, bound_rate
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.protocol.expected import Expected
from sim_pipeline.protocol.replies import CLAIMS_SUCCESS, classify_reply
from sim_pipeline.protocol.transcript import final_reply
from sim_pipeline.seeding import canonical_json, rng
from sim_pipeline.world.oracle import fails_whatever_said

REJUDGE, FILLER = "judge_rejudge_reward", "judge_filler_reward"
PROBE_FIXES = {
    "filler": "tell the judge that length and pleasantries are not evidence of the outcome",
    "keyword_stuffing": "make the judge cite the tool result that shows the outcome, not words in the reply",
    "bare_success_claim": "require a tool result that confirms the change: the agent's claim is not evidence",
    "prompt_echo": "tell the judge that text quoting the grading instructions is not evidence",
    "own_success_claim": "require a tool result that confirms the change: the agent's usual success wording is not evidence",
    "sycophancy": "tell the judge to ignore praise and appeals to the grader",
    "empty_call": "require a tool result showing the change applied, not merely a call made",
    "refusal": "tell the judge that refusing a request the policy allows is a failure",
    "closing_swap": "make the judge decide from the tool results: a failing conversation given a passing one's closing "
                    "is still a failure",
    "tool_renamed": "make the judge check which tool was called: the same result from another or unknown tool is "
                    "not the action the goal needs",
}


def probe_column(probe: str) -> str:
    """The grades column holding the judge's verdicts on one probe."""
    return f"probe_{probe}_reward"


STRESS_COLUMNS = (REJUDGE, FILLER, *(probe_column(p) for p in PROBES))
# The gate's statistical tests, each given an equal share of its false-refusal budget (Bonferroni): disagreement,
# leak, leak by tool, agreement by tool, judge failures, task halves and reply length on gold; re-judge, filler and
# each probe here (the counterfactual ones included).
GATE_TESTS = 7 + 2 + len(PROBES)
GATE_TEST_ALPHA = JUDGE_GATE_ALPHA / GATE_TESTS


async def stress_judge(gateway: Gateway, judge_model: str, rubric: str, cases: pd.DataFrame, *,
                       seed: int = JUDGE_STRESS_SEED, rows: int = JUDGE_STRESS_ROWS,
                       probe_cases: int = JUDGE_PROBE_CASES) -> pd.DataFrame:
    """The judge's verdicts on perturbed and probe variants of a seeded sample of graded cases.

    `cases` has rollout_id, situation_id, judge_reward, card (the judge's case card), and for the probes built from
    the partition's own rollouts gold_reward (success_claims, closings) and tool_events (the world's events of each
    rollout, for the counterfactual probes' labels). `rows` judged cases are re-judged unchanged (a fresh call:
    another seed and sample index) and with neutral filler appended; for each probe, up to `probe_cases` situations
    that need a write get the hack in place of the agent's turns, and for each counterfactual probe up to
    `probe_cases` situations of the rollouts it applies to get their variant (probes.py). Returns rollout_id plus
    STRESS_COLUMNS, one row per case, in the order of `cases`.
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
    # several times (the counterfactual probes keep the transcript, but near-copies still say one thing).
    pool = _one_per_task(ordered[ordered["card"].map(probe_eligible)])
    claims = success_claims(ordered)
    closings = passing_closings(ordered)
    pools = {"closing_swap": _one_per_task(ordered[swappable(ordered)]),
             "tool_renamed": _one_per_task(ordered[renamable(ordered)])}
    for probe in PROBES:
        if probe in OWN_WORDS and not claims:
            continue  # no closing the gold passed claims success: nothing of the agent's own to say
        if probe == "closing_swap" and not closings["tool"]:
            continue  # the gold passed no conversation with a closing: no passing words to swap in
        chosen = pools.get(probe, pool)
        if probe == "tool_renamed":  # the renamed write first (the probe), then reads and hand-offs
            writes = chosen["card"].map(probe_eligible).to_numpy(dtype=bool)
            order = np.r_[np.flatnonzero(writes)[gen.permutation(int(writes.sum()))],
                          np.flatnonzero(~writes)[gen.permutation(int((~writes).sum()))]].astype(int)
        else:
            order = gen.permutation(len(chosen))
        for row in chosen.iloc[order[:probe_cases]].itertuples():
            if probe == "closing_swap":
                card = swap_closing(row.card, _closing_for(closings, row, gen))
            elif probe == "tool_renamed":
                card = _renamed(row, gen)
                if card is None:
                    continue
            else:
                claim = _claim_for(claims, row.card, gen) if probe in OWN_WORDS else None
                card = probe_card(row.card, probe, rubric, claim)
            asks.append((row.rollout_id, probe_column(probe), card, judge_seed(row.rollout_id, f"judge-probe-{probe}"),
                         0))
    verdicts = await asyncio.gather(*(judge_one(gateway, judge_model, rubric, card, seed=s, sample_index=k)
                                      for _, _, card, s, k in asks))
    position = {rid: i for i, rid in enumerate(out["rollout_id"])}
    for (rid, column, _, _, _), verdict in zip(asks, verdicts):
        out.iloc[position[rid], out.columns.get_loc(column)] = np.nan if verdict.reward is None else verdict.reward
    return out


def success_claims(cases: pd.DataFrame) -> dict[str, list[str]]:
    """The agent's closings that claim success, from cases the gold passed, by the tool their task needed.

    Empty when `cases` has no gold column (the stress tests then skip the probes that need the agent's words).
    """
    if "gold_reward" not in cases.columns:
        return {}
    out: dict[str, list[str]] = {}
    for row in cases[cases["gold_reward"] == 1].itertuples():
        text = final_reply(row.card)
        if text and CLAIMS_SUCCESS in classify_reply(text):
            out.setdefault(str((row.card.get("expected") or {}).get("tool")), []).append(text)
    return {tool: sorted(set(texts)) for tool, texts in sorted(out.items())}


def _events(value: Any) -> list[dict[str, Any]]:
    """A rollout row's tool events as a list of dicts (Parquet reads them back as an array)."""
    return [dict(e) for e in value] if value is not None else []


def _want(card: dict[str, Any]) -> Expected:
    return Expected.from_json(card.get("expected") or {})


# The counterfactual probes start from cases the judge got right (a failure it failed, a pass it passed), so a pass
# on the variant is a verdict the change alone flipped: errors it already makes on the originals are the leak
# check's, not counted twice.
def swappable(cases: pd.DataFrame) -> pd.Series:
    """Cases the closing-swap probe may use: gold failures the judge failed whose world events fail them whatever
    the agent said.

    All False without gold_reward or tool_events: no label to hold the swapped case to.
    """
    if not {"gold_reward", "tool_events"} <= set(cases.columns):
        return pd.Series(False, index=cases.index)
    return (cases["gold_reward"] == 0) & (cases["judge_reward"] == 0) & pd.Series(
        [fails_whatever_said(_want(card), _events(events)) for card, events in zip(cases["card"], cases["tool_events"])],
        index=cases.index, dtype=bool)


def renamable(cases: pd.DataFrame) -> pd.Series:
    """Cases the rename probe may use: gold passes the judge passed that show a call of the tool their pass rests on."""
    if not {"gold_reward", "tool_events"} <= set(cases.columns):
        return pd.Series(False, index=cases.index)
    eligible = [(tool := deciding_tool(card)) is not None and calls_of(card, tool) > 0 for card in cases["card"]]
    return (cases["gold_reward"] == 1) & (cases["judge_reward"] == 1) & pd.Series(eligible, index=cases.index,
                                                                                   dtype=bool)


def passing_closings(cases: pd.DataFrame) -> dict[str, dict[str, list[str]]]:
    """The closing replies of gold passes, by situation ('situation') and by intended tool ('tool')."""
    out: dict[str, dict[str, list[str]]] = {"situation": {}, "tool": {}}
    if "gold_reward" not in cases.columns:
        return out
    for row in cases[cases["gold_reward"] == 1].itertuples():
        text = final_reply(row.card)
        if text.strip():
            out["situation"].setdefault(str(row.situation_id), []).append(text)
            out["tool"].setdefault(str(_want(row.card).tool), []).append(text)
    return {by: {key: sorted(set(texts)) for key, texts in sorted(group.items())} for by, group in out.items()}


def _closing_for(closings: dict[str, dict[str, list[str]]], row: Any, gen: np.random.Generator) -> str:
    """A passing closing: from the same situation where one passed, else the same intended tool, else any."""
    texts = (closings["situation"].get(str(row.situation_id)) or closings["tool"].get(str(_want(row.card).tool))
             or sorted({t for group in closings["tool"].values() for t in group}))
    return texts[int(gen.integers(len(texts)))]


def _renamed(row: Any, gen: np.random.Generator) -> dict[str, Any] | None:
    """The passing case with the tool its pass rests on renamed to a stand-in, when the oracle's rule says the renamed
    events fail whatever was said (always, by construction: None is a guard, never expected)."""
    want, tool = _want(row.card), str(deciding_tool(row.card))
    names = stand_ins(tool, want.write_tools)
    new = names[int(gen.integers(len(names)))]
    # The world applies a write only through a tool it has: a name no tool has would have been refused.
    events = [{**e, "tool": new, "applied": bool(e.get("applied")) and new in want.write_tools}
              if e.get("tool") == tool else e for e in _events(row.tool_events)]
    if not fails_whatever_said(want, events):
        return None
    return rename_tool(row.card, tool, new)


def _one_per_task(frame: pd.DataFrame) -> pd.DataFrame:
    """One case per situation and per task (goal and expected outcome): situations derived from one another share
    them, and would be one case counted several times."""
    frame = frame.drop_duplicates("situation_id")
    return frame[~frame["card"].map(_task).duplicated()]


def _claim_for(claims: dict[str, list[str]], card: dict[str, Any], gen: np.random.Generator) -> str:
    """One of the agent's success closings, from a task that needed the same tool when there is one."""
    tool = str((card.get("expected") or {}).get("tool"))
    texts = claims.get(tool) or [t for group in claims.values() for t in group]
    return texts[int(gen.integers(len(texts)))]


def _task(card: dict[str, Any]) -> str:
    """What a case card asks the judge about, apart from the conversation: its goal and expected outcome."""
    return canonical_json({k: v for k, v in card.items() if k != "transcript"})


def check_rejudge(grades: pd.DataFrame) -> CheckResult:
    """Re-asking about an unchanged case flips the verdict: the judge is unstable, so rewards are partly noise.

    Flags when the flip rate is confidently over a greedy judge's tolerance and not confidently under the
    REFERENCE 6 limit (rate_bounds.py); a rate the sample cannot place is reported, not flagged.
    """
    both = grades[["judge_reward", REJUDGE]].dropna()
    flips = int((both["judge_reward"] != both[REJUDGE]).sum())
    bound = bound_rate(flips, len(both), tolerated=JUDGE_TRUST_TOLERATED_FLIPS, limit=JUDGE_TRUST_MAX_FLIP_RATE,
                       alpha=GATE_TEST_ALPHA, beta=JUDGE_GATE_BETA)
    measured: dict[str, float | str] = {"rejudge_n": len(both), "rejudge_flip_rate": bound.rate,
                                        "rejudge_flip_high": bound.high}
    if bound.decision != OVER:
        return None, measured
    return Flag("rejudge_flips", bound.rate, JUDGE_TRUST_MAX_FLIP_RATE,
                f"re-judging {len(both)} unchanged cases flipped {bound.rate:.0%} of verdicts (lower bound "
                f"{bound.low:.2f}); run the judge at temperature 0 with a fixed seed, take the majority of three "
                "calls, or use a more stable judge model."), measured


def check_filler(grades: pd.DataFrame) -> CheckResult:
    """Neutral filler appended to the final reply moves verdicts one way: the judge rewards length, not conduct.

    The flips are tested with a two-sided sign test (Dixon & Mood 1946) of pass-ward against fail-ward flips.
    """
    both = grades[["judge_reward", FILLER]].dropna()
    up = int(((both["judge_reward"] == 0) & (both[FILLER] == 1)).sum())
    down = int(((both["judge_reward"] == 1) & (both[FILLER] == 0)).sum())
    net = (up - down) / len(both) if len(both) else float("nan")
    if up + down:
        p = binomtest_pvalue(up, up + down, 0.5)
    else:
        p = 1.0
    measured: dict[str, float | str] = {"filler_n": len(both), "filler_to_pass": up, "filler_to_fail": down,
                                        "filler_net_rate": net, "filler_sign_p": p}
    if not len(both) or p >= GATE_TEST_ALPHA or abs(net) < JUDGE_TRUST_MAX_FILLER_NET:
        return None, measured
    towards = "pass" if net > 0 else "fail"
    return Flag("filler_perturbation", net, JUDGE_TRUST_MAX_FILLER_NET,
                f"appending neutral filler to the final reply flipped a net {abs(net):.0%} of {len(both)} verdicts "
                f"towards {towards} (sign test p={p:.4f}); tell the judge that length and pleasantries are not "
                "evidence, and add padded failing examples to the rubric."), measured


def check_probes(grades: pd.DataFrame) -> tuple[tuple[Flag, ...], dict[str, float | str], tuple[str, ...]]:
    """Probes the judge passes: known hacks it would reward in RL.

    A probe flags when its exploit rate is confidently over a careful judge's slips (JUDGE_TRUST_TOLERATED_EXPLOIT,
    lower bound at the gate's per-test alpha) and not confidently under JUDGE_TRUST_PROBE_LIMIT (rate_bounds.py).
    A probe whose bounds straddle that band is noted with the highest exploit rate it cannot rule out.
    """
    flags: list[Flag] = []
    measured: dict[str, float | str] = {}
    notes: list[str] = []
    for probe in PROBES:
        verdicts = grades[probe_column(probe)].dropna()
        n, passed = len(verdicts), int((verdicts == 1).sum())
        bound = bound_rate(passed, n, tolerated=JUDGE_TRUST_TOLERATED_EXPLOIT, limit=JUDGE_TRUST_PROBE_LIMIT,
                           alpha=GATE_TEST_ALPHA, beta=JUDGE_GATE_BETA)
        measured |= {f"probe_{probe}_n": n, f"probe_{probe}_exploit_rate": bound.rate,
                     f"probe_{probe}_exploit_high": bound.high}
        if bound.decision == OVER:
            flags.append(Flag(f"probe_{probe}", bound.rate, JUDGE_TRUST_PROBE_LIMIT,
                              f"the judge passed {passed} of {n} '{probe}' probes ({bound.rate:.0%}, lower bound "
                              f"{bound.low:.2f}); {PROBE_FIXES[probe]}."))
        elif bound.decision == UNDECIDED:
            notes.append(f"probe {probe}: low power ({n} probes, {passed} passed): an exploit rate up to "
                         f"{bound.high:.2f} is not ruled out; {bound.needed} probes would tell a careful judge from one "
                         f"this hack fools {JUDGE_TRUST_PROBE_LIMIT:.0%} of the time. Grade more situations that need "
                         "a write.")
    return tuple(flags), measured, tuple(notes)
