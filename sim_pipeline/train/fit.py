"""Fit a new embedded agent profile to a version's cuts: SFT (maximum likelihood), DPO and GRPO.

The profile's values are the parameters: every option logit of the embedded agent is linear in them
(sim_pipeline.train.decisions), so each cut is a small, smooth problem (~11 parameters) whose loss and exact
gradient cost a millisecond (sim_pipeline.train.likelihood). Nothing here is random: the same cut and source
profile give the same profile floats. A table with no decision the embedded agent could have written (a real model's
rows) fits nothing: the result keeps the source profile with scored_turns 0 and no loss, and says what was skipped.

- SFT: rejection-sampling fine-tuning (Yuan et al. 2023) is maximum likelihood of the decisions of reward-1 rows;
  minimised by L-BFGS (Liu and Nocedal 1989) from the source profile, with an L2 pull towards it (a Gaussian prior).
- DPO (Rafailov et al. 2023): -log sigmoid(beta * ((logp(chosen) - ref) - (logp(rejected) - ref))), the source
  profile as reference, with the same pull.
- GRPO (Shao et al. 2024): group-relative advantages (reward - group mean) / (group std + eps), then fixed
  gradient-ascent steps on mean advantage x log-probability of the completion's decisions; with `clip`, PPO's
  clipped ratio (Schulman et al. 2017) to the source profile per decision.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import minimize
from scipy.special import expit

from sim_pipeline import defaults
from sim_pipeline.errors import SimPipelineError
from sim_pipeline.rollout.runner import sample_seed
from sim_pipeline.train.decisions import Decisions, decisions, recover_seed
from sim_pipeline.train.likelihood import Stack, evaluate, stack

METHODS = {"sft": "sft", "preference_pairs": "dpo", "grpo_groups": "grpo"}  # cut -> the fit that reads it


class FitError(SimPipelineError):
    """A profile cannot be fitted from the given table (no usable decision, missing columns, bad option)."""


@dataclass(frozen=True)
class FitResult:
    """A fitted profile, how it was fitted and what of the cut it used."""

    profile: dict[str, float]
    method: str  # "sft", "mle", "dpo" or "grpo"
    steps: int  # optimisation steps taken
    losses: list[float]  # the loss at the source profile, then after each step: steps + 1 values (none if nothing scored)
    examples: int  # rows (SFT, MLE), pairs (DPO) or completions (GRPO) that contributed
    skipped_turns: int  # assistant turns the embedded agent could not have written: counted, never guessed
    scored_turns: int  # assistant turns that entered the loss
    masked_turns: int = 0  # assistant turns the cut's loss mask excludes (weight 0)
    dropped_examples: int = 0  # rows, pairs or completions left without a scored turn (a pair: on either side)
    identity_turns: int = 0  # scored turns matched on identity because their seed was unknown
    ambiguous_turns: int = 0  # of the skipped turns, those whose identity matched several messages
    opportunities: dict[str, int] = field(default_factory=dict)  # scored turns each key could change: a key with none
    # is not identifiable from the cut and keeps its source value
    source: dict[str, float] = field(default_factory=dict)  # the profile the fit started from (and is pulled to)


@dataclass(frozen=True)
class _Prepared:
    """A table's transcripts as decision structures, stacked, with the counts a FitResult reports."""

    stacked: Stack
    kept: list[int]  # indices (into the input records) of the examples in the stack
    counts: dict[str, int]
    opportunities: dict[str, int]


def _records(table: pd.DataFrame | Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return table.to_dict("records") if isinstance(table, pd.DataFrame) else list(table)


def _tools(row: Mapping[str, Any], tools: list[dict[str, Any]] | str | None) -> list[dict[str, Any]]:
    """The tool schemas a row was rolled out with: its own `tools` column (the SFT cut), else the ones given."""
    found = row.get("tools", tools)
    found = tools if found is None else found
    if found is None:
        raise FitError("the table has no `tools` column and no tools were given. Fix: pass tools=domain.tool_schemas "
                       "of the domain the cut was rolled out in")
    return json.loads(found) if isinstance(found, str) else list(found)


def _sampling(row: Mapping[str, Any]) -> tuple[int | None, float]:
    """(seed, temperature) of the row's agent samples."""
    sampling = row.get("sampling")
    if not isinstance(sampling, Mapping):
        return None, 1.0
    seed, temperature = sampling.get("seed"), sampling.get("temperature")
    return (None if seed is None else int(seed)), (1.0 if temperature is None else float(temperature))


def _decisions(row: Mapping[str, Any], transcript: Any, tools: list[dict[str, Any]] | str | None, keys: list[str], *,
               seed: int | None) -> Decisions:
    """A transcript of a row as decisions, at the row's temperature and the given seed (None: unknown)."""
    return decisions(transcript, _tools(row, tools), keys=keys, seed=seed, temperature=_sampling(row)[1])


def _source(source: Mapping[str, float]) -> tuple[list[str], np.ndarray]:
    if not source:
        raise FitError("the source profile is empty. Fix: start from a profile such as "
                       "defaults.AGENT_PROFILES['agent-v1']")
    keys = list(source)
    return keys, np.array([float(source[k]) for k in keys])


def _prepare(found: list[Decisions], keys: list[str], *, need_all: int = 1) -> _Prepared:
    """Stack examples with a scored turn; with need_all=2, consecutive pairs are kept only when both sides have one."""
    usable = [bool(d.turns) for d in found]
    if need_all == 2:
        usable = [usable[i - i % 2] and usable[i - i % 2 + 1] for i in range(len(found))]
    kept = [i for i, ok in enumerate(usable) if ok]
    counts = {"skipped_turns": sum(d.skipped for d in found), "masked_turns": sum(d.masked for d in found),
              "identity_turns": sum(d.by_identity for d in found), "ambiguous_turns": sum(d.ambiguous for d in found),
              "dropped_examples": (len(found) - len(kept)) // need_all}
    moves = np.zeros(len(keys), dtype=np.int64)
    for i in kept:
        for turn in found[i].turns:
            moves += turn.moves()
    prepared = _Prepared(stack([found[i] for i in kept], len(keys)), kept, counts, dict(zip(keys, map(int, moves))))
    counts["scored_turns"] = prepared.stacked.n_turns
    return prepared


def _lbfgs(loss: Any, theta0: np.ndarray, max_steps: int) -> tuple[np.ndarray, list[float]]:
    """Minimise loss(theta) -> (value, gradient) with L-BFGS for at most max_steps iterations."""
    losses = [float(loss(theta0)[0])]
    if max_steps <= 0:
        return theta0.copy(), losses

    def record(intermediate_result: Any) -> None:
        losses.append(float(intermediate_result.fun))

    result = minimize(loss, theta0, jac=True, method="L-BFGS-B", callback=record, options={"maxiter": max_steps})
    return np.asarray(result.x, dtype=float), losses


def _result(method: str, keys: list[str], theta: np.ndarray, losses: list[float], prepared: _Prepared,
            source: Mapping[str, float], examples: int) -> FitResult:
    profile = {k: float(v) for k, v in zip(keys, theta)}
    return FitResult(profile=profile, method=method, steps=max(len(losses) - 1, 0), losses=losses, examples=examples,
                     source=dict(source), opportunities=prepared.opportunities, **prepared.counts)


def fit_mle(rows: pd.DataFrame | Iterable[Mapping[str, Any]], source: Mapping[str, float], *,
            tools: list[dict[str, Any]] | str | None = None, l2: float = defaults.FIT_L2_PULL,
            max_steps: int = defaults.FIT_MAX_STEPS, method: str = "mle") -> FitResult:
    """Maximum likelihood of every scored assistant decision of the rows, pulled towards `source` by l2."""
    keys, theta0 = _source(source)
    records = _records(rows)
    found = [_decisions(r, r["messages"], tools, keys, seed=_sampling(r)[0]) for r in records]
    prepared = _prepare(found, keys)
    s, n = prepared.stacked, prepared.stacked.n_turns
    if not n:
        return _result(method, keys, theta0, [], prepared, source, 0)

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        turn_logp, turn_grad, _, _ = evaluate(s, theta)
        gap = theta - theta0
        return (float(-turn_logp.sum() + l2 * gap @ gap) / n, (-turn_grad.sum(axis=0) + 2 * l2 * gap) / n)

    theta, losses = _lbfgs(loss, theta0, max_steps)
    return _result(method, keys, theta, losses, prepared, source, len(prepared.kept))


def fit_sft(rows: pd.DataFrame | Iterable[Mapping[str, Any]], source: Mapping[str, float], *,
            tools: list[dict[str, Any]] | str | None = None, l2: float = defaults.FIT_L2_PULL,
            max_steps: int = defaults.FIT_MAX_STEPS) -> FitResult:
    """SFT: maximum likelihood of the decisions of the reward-1 rows (the SFT cut), honouring its loss mask."""
    records = _records(rows)
    if any("reward" not in r for r in records):
        raise FitError("fit_sft needs each row's reward (the SFT cut has it). Fix: pass the sft cut, or fit every "
                       "decision with fit_mle")
    passing = [r for r in records if float(r["reward"]) == defaults.PASS_REWARD]
    return fit_mle(passing, source, tools=tools, l2=l2, max_steps=max_steps, method="sft")


def _rejected_seed(pair: Mapping[str, Any], transcript: list[Mapping[str, Any]]) -> int | None:
    """The rejected side's seed, recovered from its tool-call ids among the prompt's sample seeds (else None)."""
    if pair.get("situation_id") is None or pair.get("phrasing_index") is None:
        return None
    candidates = (sample_seed(str(pair["situation_id"]), int(pair["phrasing_index"]), k)
                  for k in range(defaults.FIT_SEED_SEARCH_SAMPLES))
    return recover_seed(transcript, candidates)


def fit_dpo(pairs: pd.DataFrame | Iterable[Mapping[str, Any]], source: Mapping[str, float], *,
            tools: list[dict[str, Any]] | str | None = None, beta: float = defaults.DPO_FIT_BETA,
            l2: float = defaults.FIT_L2_PULL, max_steps: int = defaults.FIT_MAX_STEPS) -> FitResult:
    """DPO on preference pairs with the source profile as reference; each side is the prompt plus its completion."""
    if beta <= 0:
        raise FitError(f"beta must be positive, got {beta}. Fix: use defaults.DPO_FIT_BETA ({defaults.DPO_FIT_BETA})")
    keys, theta0 = _source(source)
    records = _records(pairs)
    found = []
    for pair in records:  # the pair's sampling is the chosen side's; the rejected side's seed is recovered if it can be
        chosen, rejected = [*pair["prompt"], *pair["chosen"]], [*pair["prompt"], *pair["rejected"]]
        found += [_decisions(pair, chosen, tools, keys, seed=_sampling(pair)[0]),
                  _decisions(pair, rejected, tools, keys, seed=_rejected_seed(pair, rejected))]
    prepared = _prepare(found, keys, need_all=2)
    s, n = prepared.stacked, len(prepared.kept) // 2
    if not n:
        return _result("dpo", keys, theta0, [], prepared, source, 0)
    reference = evaluate(s, theta0)[2]
    sign = np.tile([1.0, -1.0], n)  # chosen minus rejected, pair by pair

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        _, _, logp, grad = evaluate(s, theta)
        margin = beta * ((logp - reference) * sign).reshape(n, 2).sum(axis=1)
        pull = expit(-margin)  # d softplus(-m) / dm = -sigmoid(-m)
        side_grad = (grad * sign[:, None]).reshape(n, 2, -1).sum(axis=1)
        gap = theta - theta0
        value = float(np.logaddexp(0.0, -margin).sum() + l2 * gap @ gap) / n
        return value, (-(beta * pull) @ side_grad + 2 * l2 * gap) / n

    theta, losses = _lbfgs(loss, theta0, max_steps)
    return _result("dpo", keys, theta, losses, prepared, source, n)


def group_advantages(group_ids: list[Any], rewards: np.ndarray, *, eps: float = defaults.GRPO_ADVANTAGE_EPS) -> np.ndarray:
    """(reward - group mean) / (group std + eps) per row (Shao et al. 2024); exactly 0 in a group of equal rewards.

    The std is the sample std (ddof=1), as TRL's GRPOTrainer computes it; a group of one has no advantage.
    """
    out = np.zeros(len(rewards))
    ids = pd.Series(group_ids)
    for index in ids.groupby(ids, sort=False).indices.values():  # groups are independent: order is immaterial
        group = rewards[index]
        if group.size > 1 and np.ptp(group) > 0:
            out[index] = (group - group.mean()) / (group.std(ddof=1) + eps)
    return out


def fit_grpo(groups: pd.DataFrame | Iterable[Mapping[str, Any]], source: Mapping[str, float], *,
             tools: list[dict[str, Any]] | str | None = None, steps: int = defaults.GRPO_FIT_STEPS,
             learning_rate: float = defaults.GRPO_FIT_LEARNING_RATE,
             clip: float | None = defaults.GRPO_FIT_CLIP) -> FitResult:
    """GRPO on whole groups: fixed gradient-ascent steps on the group-relative policy-gradient objective.

    clip None: maximise mean_i A_i * logp(completion_i). clip eps: maximise mean_i sum_t min(r A_i, clip(r, 1 - eps,
    1 + eps) A_i) over the completion's decisions t, r = p_theta / p_source of the decision (PPO's surrogate).
    """
    if clip is not None and not 0 < clip < 1:
        raise FitError(f"clip must lie in (0, 1) or be None, got {clip}. Fix: use defaults.GRPO_FIT_CLIP")
    keys, theta0 = _source(source)
    records = _records(groups)
    if records and any(c not in records[0] for c in ("group_id", "prompt", "completion", "reward")):
        raise FitError("the GRPO table needs columns group_id, prompt, completion and reward. Fix: pass the "
                       "grpo_groups cut")
    advantages = group_advantages([r["group_id"] for r in records], np.array([float(r["reward"]) for r in records]))
    found = [_decisions(r, [*r["prompt"], *r["completion"]], tools, keys, seed=_sampling(r)[0]) for r in records]
    prepared = _prepare(found, keys)
    s, n = prepared.stacked, len(prepared.kept)
    if not n:
        return _result("grpo", keys, theta0, [], prepared, source, 0)
    advantage = advantages[prepared.kept][s.turn_example]  # each scored turn carries its completion's advantage
    reference = evaluate(s, theta0)[0]

    def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        turn_logp, turn_grad, _, _ = evaluate(s, theta)
        if clip is None:
            return float(advantage @ turn_logp) / n, advantage @ turn_grad / n
        ratio = np.exp(turn_logp - reference)
        clipped = np.clip(ratio, 1 - clip, 1 + clip)
        value = np.minimum(ratio * advantage, clipped * advantage)
        active = ratio * advantage <= clipped * advantage  # where the unclipped term is the minimum, it has a gradient
        return float(value.sum()) / n, (active * advantage * ratio) @ turn_grad / n

    theta = theta0.copy()
    value, grad = objective(theta)
    losses = [-value]
    for _ in range(steps):
        theta = theta + learning_rate * grad
        value, grad = objective(theta)
        losses.append(-value)
    return _result("grpo", keys, theta, losses, prepared, source, n)


def fit_cut(cut: str, table: pd.DataFrame | Iterable[Mapping[str, Any]], source: Mapping[str, float], *,
            tools: list[dict[str, Any]] | str | None = None) -> FitResult:
    """Fit the way a cut is meant to be trained on: sft (SFT), preference_pairs (DPO) or grpo_groups (GRPO)."""
    if cut not in METHODS:
        raise FitError(f"cut '{cut}' has no profile fit. Fix: use one of {sorted(METHODS)}")
    fit = {"sft": fit_sft, "dpo": fit_dpo, "grpo": fit_grpo}[METHODS[cut]]
    return fit(table, source, tools=tools)
