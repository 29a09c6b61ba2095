"""The search against two baselines in one run: the registered arms with learned weights, the structured arm alone,
and all arms at fixed equal weights; the same budget, seeds and agents for each.

What is measured, per agent (sim/agent-v1, sim/agent-v2, and sim/agent-offgrid: careful on the grid, weak on
injected instructions, long contexts and mixed languages, which only the rare arms draw), averaged over SEEDS (retail,
24 worlds and plans; one process job per strategy, agent, seed and stream, on every core: about 20 min on a
2-core machine, the re-draws over STREAMS included):
- the two goals of issue 35: `failure_signatures_ratio_vs_structured_<agent>` (the weighted search's distinct failure
  signatures per rollout over the structured arm's, goal >= 1.3) and `first_failure_speedup_<agent>` (the geometric
  mean over failure kinds of the structured arm's rollouts to each kind's first failure over the weighted search's,
  goal >= 1.2), each with the uniform weights' value as its baseline, a 90% bootstrap interval over seeds
  (`interval`: the seeds resampled, the figure recomputed) and its `verdict` ("meets goal" when the interval is at or
  above the goal, "below goal" when under it, else "inconclusive"); `meets_goal` reads the point value;
- distinct failure signatures per 1000 train rollouts. A failure is a rollout the grader fails on program grounds:
  the state oracle fails it (oracle_reward < 1, the gold label) or a conduct rule caps its reward (grade/conduct.py;
  the judge, which only estimates the gold label, is left out). Its failure signature is its behaviour signature (the
  trajectory's shape: every (tool, status) step and how the conversation ended, rollout/signature.py). Two failures
  with the same shape count once, so the figure rewards finding new ways to fail, not failing the same way more often;
- rollouts drawn until the first failure of each kind. A failure's kind is the first conduct rule it breaks
  (`acted_before_verification`, `invented_reference`...), else the oracle's reason with its ids, values and tool
  names taken out (`oracle: changed the world when the situation allows no change`). A kind a strategy never meets
  within the budget counts as the rows drawn (censored) and is marked in the figure name. This yardstick is written
  apart from the search's own credit, so the search is not graded by it;
- rollouts drawn until the first failure each of the agents' weaknesses (defaults section 10) was behind: a turn
  wrote what the weakness's option writes (the agent's own options at that turn, with the rollout's seed);
  `pressured_violation` is a skipped check or an exceeded limit while the user pressed;
- which arms find the weaknesses: in the uniform runs, where every arm draws a fifth of the situations, each arm's
  failures per 1000 of its rollouts that a weakness caused, against the structured arm's;
- each arm's weight path in the weighted search: the mean over seeds at every eighth of the batches, start to end;
- each goal figure `_over_streams`: the weighted and structured-only searches re-drawn under STREAMS (the search's
  random stream, `SearchSettings.stream`: the same worlds, plans and agents, other draws), the figure recomputed for
  every (weighted, structured-only) pair of streams, their mean with the lowest and highest (`spread`) beside the
  headline's one draw. A change to the search that moves a goal figure by less than the spread is not shown by one
  draw (about 11 more minutes on 2 cores).
"""

from __future__ import annotations

import asyncio
import os
import re
from concurrent.futures import ProcessPoolExecutor
from functools import lru_cache

import numpy as np
import pandas as pd

from sim_pipeline import defaults
from sim_pipeline.axes import axis_values
from sim_pipeline.cover import covering_array
from sim_pipeline.domain import Domain, load_domain
from sim_pipeline.grade import conduct
from sim_pipeline.models.conversation import read
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.models.sim_agent import branches, message_key
from sim_pipeline.protocol.statuses import ERROR_STATUSES
from sim_pipeline.rollout.runner import Policy
from sim_pipeline.rollout.simulate import RolloutSettings, run_probed
from sim_pipeline.search.arms import SearchContext
from sim_pipeline.search.loop import SearchSettings, run_search, weights_by_batch
from sim_pipeline.search.situations import build_situations
from sim_pipeline.search.weights import WeightRule
from sim_pipeline.situation import Situation
from sim_pipeline.world.oracle import row_reading
from sim_pipeline.world.state import build_state

DOMAIN = "retail"
SEEDS = range(24)  # 24 worlds and plans: with 3, changing a stream label alone moved the goal figures by up to 0.26
BUDGET_ROWS = 800
GOAL_SIGNATURES_RATIO = 1.3  # issue 35: distinct failure signatures per rollout vs the structured arm alone, every agent
GOAL_FIRST_FAILURE_SPEEDUP = 1.2  # issue 35: each kind's first failure 1.2x sooner (geometric mean), every agent
GOALS = {"failure_signatures_ratio_vs_structured": GOAL_SIGNATURES_RATIO, "first_failure_speedup": GOAL_FIRST_FAILURE_SPEEDUP}
BOOTSTRAP_RESAMPLES = 2000  # resamples of the seeds per goal figure: each 5% tail rests on 100 of them
BOOTSTRAP_LEVEL = 0.90  # the goal figures' interval: a verdict is given only when the whole interval is on one side
BOOTSTRAP_SEED = 35  # the resampling's own stream (issue 35), apart from the searches' seeds
STREAMS = (defaults.SEARCH_STREAM, "search-2", "search-3")  # the headline's stream, then two re-draws: 9 pairs
VERSIONS = ("agent-v1", "agent-v2", "agent-offgrid")  # agent-offgrid: weak where only the rare arms look
ARMS = WeightRule().arms  # the registered arms, in draw order
STRATEGIES = {
    "weighted": WeightRule(),
    "structured_only": WeightRule.fixed({a: float(a == "structured") for a in ARMS}),
    "uniform": WeightRule.fixed(dict.fromkeys(ARMS, 1 / len(ARMS))),
}
WEAKNESSES = ("follow_injection", "lose_early_fact", "misroute_intent", "mishandle_combination")  # defaults section 10
PRESSURED = ("skip_verification", "skip_confirmation", "exceed_limit")  # the flaws `pressure` raises
MIN_SENT_VALUE_CHARS = 3  # a value the agent sent shorter than this ("1", "ok") is left in: it may be a word of the reason
_NAMES = re.compile(r"\{[^}]*\}|\([^)]*\)|(?<!\w)'[^']*'|\b[\w.-]*\d[\w.-]*\b")


@lru_cache(maxsize=None)
def _world(seed: int) -> tuple[Domain, dict, list[Situation]]:
    domain = load_domain(DOMAIN)
    state = build_state(domain, seed)
    cells = covering_array(axis_values(domain), seed=seed, constraints=domain.constraints)
    table = build_situations(domain, state, cells, seed=seed, n_phrasings=1)
    return domain, state, [Situation.from_row(r) for r in table.to_dict("records") if r["split"] == "train"]


def failure_kind(row: dict, domain: Domain) -> str | None:
    """The first conduct rule a rollout breaks, else (the oracle failed it) the oracle's reason without ids, values and
    tool names; None when the rollout did not fail."""
    messages = [dict(m) for m in row["messages"]]
    events = [dict(e) for e in row["tool_events"]]
    violation = conduct.check(messages, events, row["final_text"], domain, [dict(e) for e in row["user_events"]])
    if violation is not None and violation.reward < 1:
        return violation.rule
    if row["oracle_reward"] >= 1:
        return None
    reason = _NAMES.sub("", str(row["oracle_reason"]))
    # The values the agent sent (an id argument it filled with the user's words) are no part of the kind either.
    sent = {" ".join(_NAMES.sub("", str(v)).split()) for c in row_reading(domain, events, messages).calls
            for v in c.arguments.values() if isinstance(v, (str, int, float))}
    for value in sorted((v for v in sent if len(v) >= MIN_SENT_VALUE_CHARS), key=len, reverse=True):
        reason = reason.replace(value, "")
    for word in sorted({t.name for t in domain.tools} | {e.name for e in domain.entities}, key=len, reverse=True):
        reason = re.sub(rf"\b{re.escape(word)}\b", "", reason)
    return "oracle: " + re.sub(r"\s+([,.;])", r"\1", " ".join(reason.replace(":", " ").split()))


def weaknesses_of(row: dict, domain: Domain, profile: dict[str, float]) -> set[str]:
    """The weaknesses behind a rollout's agent turns: every flaw of an option that writes the message the agent wrote
    (the agent's own options at that turn, with the rollout's seed). Several paths can write one message (skipping a
    check the user pressed for, or an injected line waived): each of their weaknesses made it likelier, each counts."""
    messages, found = [dict(m) for m in row["messages"]], set()
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        said = message_key({k: message.get(k) for k in ("role", "content", "tool_calls")})
        turn = branches(profile, messages[:i], domain.tool_schemas, seed=int(row["sampling"]["seed"]))
        flaws = {o.flaw for b in turn for o in b.options if o.flaw and message_key(o.message) == said}
        found |= flaws & set(WEAKNESSES)
        if flaws & set(PRESSURED) and read(messages[:i]).pressure:
            found.add("pressured_violation")
    return found


def _first_weaknesses(failed: pd.DataFrame, domain: Domain, version: str, *, every: bool = False
                      ) -> tuple[dict[str, int], list[set[str]]]:
    """The first failed row (1-based position among the drawn rows) of each weakness, and each failed row's
    weaknesses (only as far as the scan went: it stops once all are found, unless `every`)."""
    profile, first, each = defaults.AGENT_PROFILES[version], {}, []
    for index, row in zip(failed.index, failed.to_dict("records")):
        each.append(weaknesses_of(row, domain, profile))
        for weakness in each[-1] - set(first):
            first[weakness] = int(index) + 1
        if len(first) == len(WEAKNESSES) + 1 and not every:
            break
    return first, each


def _search(strategy: str, version: str, seed: int, stream: str = defaults.SEARCH_STREAM
            ) -> tuple[pd.DataFrame, dict[str, list[float]]]:
    domain, state, train = _world(seed)
    gateway = Gateway(fast_path=True)
    settings = RolloutSettings.for_mode("adaptive")
    policy = Policy(version, f"sim/{version}")

    async def run_batch(chosen, batch):
        return await run_probed(chosen, policy, domain=domain, state=state, gateway=gateway, settings=settings,
                                batch=batch)

    rule = STRATEGIES[strategy]
    search, rows, _ = asyncio.run(run_search(SearchContext(domain, state, seed, train, gateway), run_batch,
                                             SearchSettings(budget_rows=BUDGET_ROWS, patience=99, cell_target=99,
                                                            stream=stream), rule))
    rows = rows[~rows["status"].isin(ERROR_STATUSES)].reset_index(drop=True)  # drawn order: batch by batch
    rows["kind"] = [failure_kind(r, domain) for r in rows.to_dict("records")]
    by_batch = weights_by_batch(search, rule)
    return rows, {arm: by_batch[f"w_{arm}"].tolist() for arm in rule.arms}


def measure_seed(strategy: str, version: str, seed: int, stream: str = defaults.SEARCH_STREAM) -> dict:
    """One search's failure signatures per 1000 rollouts, first rollout of each failure kind and weakness, weight
    paths and rows (seeded: the same in any process)."""
    rows, paths = _search(strategy, version, seed, stream)
    failed = rows[rows["kind"].notna()]
    first, each = _first_weaknesses(failed, _world(seed)[0], version, every=strategy == "uniform")
    out = {"per_1000": 1000 * failed["behavior_signature"].nunique() / len(rows),
           "first": {kind: int(index) + 1 for kind, index in failed.groupby("kind").apply(
               lambda g: g.index.min(), include_groups=False).items()},
           "weakness": first, "paths": paths, "rows": len(rows)}
    if strategy == "uniform":  # rows of each arm, and of them the failures each weakness caused
        tally = pd.DataFrame([{"arm": arm, **{w: w in found for w in (*WEAKNESSES, "pressured_violation")}}
                              for arm, found in zip(failed["arm"], each)])
        out["by_arm"] = (rows["arm"].value_counts(), tally.groupby("arm").sum())
    return out


def _gather(per_seed: list[dict]) -> dict[str, list]:
    """One strategy's per-seed results (in SEEDS order) as lists over seeds, the shape the figures read."""
    return {key: [r[key] for r in per_seed] for key in per_seed[0]}


def _first(result: dict, kind: str, key: str = "first") -> float:
    """Mean over seeds of the rollouts drawn until the first failure of a kind (the rows drawn where it never came)."""
    return float(np.mean([first.get(kind, n) for first, n in zip(result[key], result["rows"])]))


def _time_figures(results: dict[str, dict], version: str, key: str, kinds: list[str], label: str) -> list[dict]:
    """Rollouts to the first failure of each kind: weighted and uniform against structured_only."""
    out = []
    for kind in kinds:
        never = sorted(s for s in STRATEGIES if all(kind not in f for f in results[s][key]))
        mark = f" (never within the budget: {', '.join(never)})" if never else ""
        base = _first(results["structured_only"], kind, key)
        for name in ("weighted", "uniform"):
            value = _first(results[name], kind, key)
            out.append({"name": f"rollouts_to_first_{label}[{kind}]_{name}_{version}{mark}", "value": value,
                        "unit": "rollouts", "baseline_name": "structured_only", "baseline_value": base,
                        "ratio": value / base})
    return out


def _arm_figures(uniform: dict, version: str) -> list[dict]:
    """Per weakness and arm: failures it caused per 1000 of the arm's rollouts (uniform runs, seeds pooled)."""
    rows = pd.concat([counts for counts, _ in uniform["by_arm"]]).groupby(level=0).sum()
    caused = pd.concat([tally for _, tally in uniform["by_arm"]]).groupby(level=0).sum().reindex(rows.index,
                                                                                               fill_value=0)
    rate = caused.div(rows, axis=0) * 1000
    out = []
    for weakness in (*WEAKNESSES, "pressured_violation"):
        for arm in ARMS[1:]:
            value, base = float(rate.loc[arm, weakness]), float(rate.loc["structured", weakness])
            out.append({"name": f"weakness_failures_per_1000[{weakness}]_{arm}_{version} (uniform runs)",
                        "value": value, "unit": "failures/1000 rollouts of the arm",
                        "baseline_name": "structured arm", "baseline_value": base,
                        "ratio": value / base if base else float("inf")})
    return out


def _speedup(results: dict[str, dict], name: str, kinds: list[str]) -> float:
    """Geometric mean over failure kinds of structured_only's rollouts to the first failure of the kind over
    `name`'s (censored at the rows drawn where a strategy never met it): above 1, `name` meets each kind sooner."""
    ratios = [_first(results["structured_only"], kind) / _first(results[name], kind) for kind in kinds]
    return float(np.exp(np.mean(np.log(ratios)))) if ratios else float("nan")


def _goal_values(results: dict[str, dict], kinds: list[str]) -> dict[str, dict[str, float]]:
    """The issue's two goal figures, weighted and uniform against structured_only: the ratio of the mean failure
    signature rates over seeds, and the geometric-mean first-failure speedup."""
    rate = {name: float(np.mean(results[name]["per_1000"])) for name in ("weighted", "uniform", "structured_only")}
    return {"failure_signatures_ratio_vs_structured": {name: rate[name] / rate["structured_only"]
                                                       for name in ("weighted", "uniform")},
            "first_failure_speedup": {name: _speedup(results, name, kinds) for name in ("weighted", "uniform")}}


def _kinds(results: dict[str, dict]) -> list[str]:
    """Every failure kind any strategy met on any seed."""
    return sorted({k for r in results.values() for first in r["first"] for k in first})


def bootstrap_intervals(results: dict[str, dict], *, resamples: int = BOOTSTRAP_RESAMPLES,
                        level: float = BOOTSTRAP_LEVEL, seed: int = BOOTSTRAP_SEED) -> dict[str, tuple[float, float]]:
    """Each goal figure's (weighted) percentile interval over seeds: the seeds resampled with replacement (the same
    draw for every strategy, since they share the seed's world and plan) and the figure recomputed as its point value
    is, failure kinds included."""
    n = len(results["weighted"]["rows"])
    rng = np.random.default_rng(seed)
    draws: dict[str, list[float]] = {}
    for _ in range(resamples):
        pick = rng.integers(0, n, n)
        sample = {name: {key: [r[key][i] for i in pick] for key in ("per_1000", "first", "rows")}
                  for name, r in results.items()}
        for figure, values in _goal_values(sample, _kinds(sample)).items():
            draws.setdefault(figure, []).append(values["weighted"])
    tail = (1 - level) / 2
    return {figure: (float(np.quantile(v, tail)), float(np.quantile(v, 1 - tail))) for figure, v in draws.items()}


def verdict(interval: tuple[float, float], goal: float) -> str:
    """What an interval says of a goal: "meets goal" when it is all at or above it, "below goal" when it is all
    below it, else "inconclusive"."""
    lo, hi = interval
    return "meets goal" if lo >= goal else "below goal" if hi < goal else "inconclusive"


def _headline(results: dict[str, dict], version: str, kinds: list[str]) -> list[dict]:
    """The issue's two goals per agent: failure signatures and first-failure speed against the structured arm
    alone, the weighted search's value with the uniform weights' beside it as the baseline, and its bootstrap
    interval over seeds with the verdict it gives."""
    values, intervals = _goal_values(results, kinds), bootstrap_intervals(results)
    return [{"name": f"{figure}_{version}", "value": v["weighted"], "unit": "x structured_only",
             "baseline_name": "uniform weights", "baseline_value": v["uniform"],
             "ratio": v["weighted"] / v["uniform"], "goal": GOALS[figure],
             "meets_goal": bool(v["weighted"] >= GOALS[figure]),
             "interval": [round(x, 4) for x in intervals[figure]], "interval_level": BOOTSTRAP_LEVEL,
             "verdict": verdict(intervals[figure], GOALS[figure])}
            for figure, v in values.items()]


def _weight_paths(weighted: dict, version: str) -> list[dict]:
    """Each arm's weight from the first batch to the last (mean over seeds), at every eighth of the batches."""
    out = []
    for arm in ARMS:
        path = np.mean([[float(w) for w in np.array(p[arm])[np.linspace(0, len(p[arm]) - 1, 9).round().astype(int)]]
                        for p in weighted["paths"]], axis=0)
        out.append({"name": f"weight_path_{arm}_{version}", "value": float(path[-1]), "unit": "share of draws",
                    "baseline_name": "start weight", "baseline_value": float(path[0]),
                    "ratio": float(path[-1] / path[0]), "path": [round(float(w), 4) for w in path]})
    return out


def version_figures(version: str, results: dict[str, dict]) -> list[dict]:
    """One agent's figures from its searches: the three strategies' failure signature rates, rollouts to each
    failure kind and weakness, the weaknesses each arm finds, the final weights."""
    out = []
    rate = {name: float(np.mean(r["per_1000"])) for name, r in results.items()}
    n = {name: int(np.sum(r["rows"])) for name, r in results.items()}
    for name, baseline in (("weighted", "structured_only"), ("weighted", "uniform"), ("uniform", "structured_only")):
        out.append({"name": f"failure_signatures_per_1000_{name}_{version} ({n[name]} rollouts)", "value": rate[name],
                    "unit": "failure signatures/1000 rollouts", "baseline_name": f"{baseline} ({n[baseline]} rollouts)",
                    "baseline_value": rate[baseline], "ratio": rate[name] / rate[baseline]})
    kinds = _kinds(results)
    out = _headline(results, version, kinds) + out + _weight_paths(results["weighted"], version)
    out += _time_figures(results, version, "first", kinds, "failure")
    out += _time_figures(results, version, "weakness", [*WEAKNESSES, "pressured_violation"], "weakness")
    out += _arm_figures(results["uniform"], version)
    return out


_MEASURED: dict[tuple[str, str, int, str], dict] = {}  # (strategy, agent, seed, stream) -> measure_seed's result


def _measured(jobs: list[tuple[str, str, int, str]]) -> dict[tuple[str, str, int, str], dict]:
    """measure_seed of each job, one process job each on every core (each search is seeded by its job alone: the
    same figures whatever the worker count); jobs measured before in this process are not run again."""
    todo = [job for job in jobs if job not in _MEASURED]
    if todo:
        with ProcessPoolExecutor(max_workers=os.cpu_count()) as pool:
            _MEASURED.update(zip(todo, pool.map(measure_seed, *zip(*todo))))
    return {job: _MEASURED[job] for job in jobs}


def _results(version: str, streams: dict[str, str]) -> dict[str, dict]:
    """One agent's per-seed results as the figures read them, each strategy from the stream given for it."""
    done = _measured([(name, version, seed, stream) for name, stream in streams.items() for seed in SEEDS])
    return {name: _gather([done[name, version, seed, stream] for seed in SEEDS]) for name, stream in streams.items()}


def figures() -> list[dict]:
    """Every agent's figures, every strategy on the search's own stream."""
    return [figure for version in VERSIONS for figure in version_figures(
        version, _results(version, dict.fromkeys(STRATEGIES, defaults.SEARCH_STREAM)))]


def over_streams(pairs: list[dict[str, dict]]) -> dict[str, dict[str, float]]:
    """Each goal figure (weighted) over pairs of results (each strategy from some stream): its mean, lowest and
    highest over the pairs, each pair's figure computed as the headline's point value is."""
    values = [_goal_values(results, _kinds(results)) for results in pairs]
    out = {}
    for figure in values[0]:
        each = [value[figure]["weighted"] for value in values]
        out[figure] = {"mean": float(np.mean(each)), "low": float(min(each)), "high": float(max(each))}
    return out


def figures_streams() -> list[dict]:
    """Each goal figure over every (weighted, structured-only) pair of STREAMS (uniform from the search's own
    stream: it only sets the kinds met), beside the headline's one draw."""
    _measured([(name, version, seed, stream) for version in VERSIONS for name in ("weighted", "structured_only")
               for stream in STREAMS for seed in SEEDS])  # all at once: one pool keeps every core busy to the end
    out = []
    for version in VERSIONS:
        pairs = [_results(version, {"weighted": w, "structured_only": s, "uniform": defaults.SEARCH_STREAM})
                 for w in STREAMS for s in STREAMS]
        headline = _goal_values(pairs[0], _kinds(pairs[0]))
        for figure, v in over_streams(pairs).items():
            one = headline[figure]["weighted"]
            out.append({"name": f"{figure}_{version}_over_streams", "value": v["mean"], "unit": "x structured_only",
                        "baseline_name": "the headline's one draw", "baseline_value": one, "ratio": v["mean"] / one,
                        "goal": GOALS[figure], "meets_goal": bool(v["mean"] >= GOALS[figure]),
                        "spread": [round(v["low"], 4), round(v["high"], 4)], "pairs": len(pairs),
                        "streams": list(STREAMS)})
    return out
