"""The embedded agent's decisions in a transcript as functions of its profile: what fitting a profile reads.

At each assistant turn the embedded agent (sim_pipeline.models.sim_agent) picks an intent, whose logits no profile
value enters, then one of that intent's options, whose logit is a sum of profile values and constants. Evaluating the
turn once with a profile of symbolic values (`Linear`) gives every option logit exactly as const + coef . theta, so no
finite differences or linearity assumptions are needed. A path *emits* the turn when its message says what the
transcript's message says (`message_key`: tool-call ids stripped); the turn's log-probability is the log-sum over the
paths that emit it, as `SimAgent.respond` computes it.

Matching rules:
- Seed known (a rollout's `sampling["seed"]`): exact match on the message, invented argument values included.
- Seed unknown (e.g. the rejected side of a preference pair; `recover_seed` first tries to recover it from the
  transcript's tool-call ids, which are hashes of the seed): the turn is evaluated at two stand-in seeds, and a path
  matches when its message equals the transcript's on everything except the argument values that change between the
  stand-in seeds (values the option invents). Text replies never depend on the seed, so they still match exactly. The
  match is used only when every matching path emits one and the same message at both stand-in seeds (then they emit
  one message at any seed); otherwise the turn is *ambiguous* and skipped.
- A turn no path emits (a real model's reply, a hand edit) is counted as skipped and contributes nothing: it is
  never guessed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim_pipeline import defaults
from sim_pipeline.cut.pool import normalize_messages
from sim_pipeline.models.sim_agent import Branch, Option, branches, message_key
from sim_pipeline.seeding import digest, short_id

Matched = str  # how a turn was matched: "exact", "identity", "ambiguous" or "skipped"


@dataclass(frozen=True)
class Linear:
    """const + sum(coef * theta[key]): a profile value, or a sum of them and constants, as the agent adds them up."""

    const: float = 0.0
    coef: tuple[tuple[str, float], ...] = ()

    def __add__(self, other: Linear | float) -> Linear:
        if isinstance(other, Linear):
            merged = dict(self.coef)
            for key, value in other.coef:
                merged[key] = merged.get(key, 0.0) + value
            return Linear(self.const + other.const, tuple(sorted(merged.items())))
        return Linear(self.const + float(other), self.coef)

    __radd__ = __add__


def symbolic_profile(keys: Sequence[str]) -> dict[str, Linear]:
    """A profile whose value under each key is that key's parameter (keys it lacks keep the agent's defaults)."""
    return {key: Linear(0.0, ((key, 1.0),)) for key in keys}


@dataclass(frozen=True)
class TurnPaths:
    """One assistant turn's (intent, option) paths: log-probabilities as functions of theta, and which emit the turn.

    A path's log-probability is intent_logp + z - logsumexp(z over its branch), z = const + coef @ theta (the
    sampling temperature already divided in).
    """

    intent_logp: np.ndarray  # (P,) log-probability of each path's intent: no profile value enters it
    const: np.ndarray  # (P,) the option logit at theta = 0, over the temperature
    coef: np.ndarray  # (P, K) the option logit's coefficient on each profile key, over the temperature
    branch: np.ndarray  # (P,) the path's intent within the turn: options are normalised within their intent
    emits: np.ndarray  # (P,) bool: the path writes the turn's message
    matched: Matched

    def moves(self) -> np.ndarray:
        """(K,) bool: which profile keys change this turn's distribution (differ between options of one intent)."""
        spread = [np.ptp(self.coef[self.branch == b], axis=0) for b in np.unique(self.branch)]
        return np.any(np.array(spread) > 0, axis=0) if spread else np.zeros(self.coef.shape[1], dtype=bool)

    def logprob(self, theta: np.ndarray) -> float:
        """The log-probability of the turn's message under profile values theta (-inf when no path emits it)."""
        z = self.const + self.coef @ np.asarray(theta, dtype=float)
        path = np.array([self.intent_logp[p] + z[p] - np.logaddexp.reduce(z[self.branch == self.branch[p]])
                         for p in range(z.size)])
        return float(np.logaddexp.reduce(path[self.emits])) if self.emits.any() else -np.inf


@dataclass(frozen=True)
class Decisions:
    """The scored assistant turns of one transcript, and what was left out and why."""

    turns: tuple[TurnPaths, ...]  # turns some path emits (exactly, or by identity when the seed is unknown)
    skipped: int  # assistant turns no path emits, or only ambiguously: the agent could not have written them
    ambiguous: int  # of those skipped, turns whose seed-free identity matched more than one message
    masked: int  # assistant turns with loss weight 0 (the SFT cut's mask): context only, never scored
    by_identity: int  # scored turns matched on identity because the seed was unknown


def _linear(value: Linear | float, keys: Sequence[str]) -> tuple[float, np.ndarray]:
    """(const, coefficient vector over keys) of an option logit."""
    coef = np.zeros(len(keys))
    if not isinstance(value, Linear):
        return float(value), coef
    index = {key: i for i, key in enumerate(keys)}
    for key, weight in value.coef:
        coef[index[key]] += weight
    return value.const, coef


def _options(found: list[Branch]) -> list[Option]:
    return [option for branch in found for option in branch.options]


def _seed_free_equal(actual: dict[str, Any], first: dict[str, Any], second: dict[str, Any]) -> bool:
    """Whether `actual` says what an option's message says at two stand-in seeds, wherever those two agree."""
    calls = [m.get("tool_calls") or [] for m in (actual, first, second)]
    if actual.get("content") != first.get("content") or len({len(c) for c in calls}) != 1:
        return False
    for said, one, two in zip(*calls):
        names = {c["function"]["name"] for c in (said, one, two)}
        try:
            args = [json.loads(c["function"]["arguments"] or "{}") for c in (said, one, two)]
        except (TypeError, ValueError):
            return False
        if len(names) != 1 or not all(isinstance(a, dict) for a in args) or len({tuple(sorted(a)) for a in args}) != 1:
            return False
        if any(args[1][k] == args[2][k] and args[0][k] != args[1][k] for k in args[1]):
            return False
    return True


def _match(actual: dict[str, Any], found: list[Branch], twin: list[Branch] | None) -> tuple[np.ndarray, Matched]:
    """Which paths emit `actual`: exactly (twin None: the seed is known), else by seed-free identity."""
    target = message_key(actual)
    first = [message_key(o.message) for o in _options(found)]
    if twin is None:
        emits = np.array([key == target for key in first], dtype=bool)
        return emits, "exact" if emits.any() else "skipped"
    if [len(b.options) for b in found] != [len(b.options) for b in twin]:
        # The option set itself depends on the seed (an option offered only when its made-up arguments differ from
        # what was said before): paths cannot be paired across seeds, so the turn cannot be matched without one.
        return np.zeros(len(first), dtype=bool), "ambiguous"
    pairs = list(zip(_options(found), _options(twin), first, [message_key(o.message) for o in _options(twin)]))
    emits = np.array([key == target if key == other else _seed_free_equal(actual, one.message, two.message)
                      for one, two, key, other in pairs], dtype=bool)
    said = {(key, other) for (_, _, key, other), hit in zip(pairs, emits) if hit}
    if len(said) > 1:
        return np.zeros_like(emits), "ambiguous"
    if not said:
        return emits, "skipped"
    key, other = said.pop()
    return emits, "exact" if key == other == target else "identity"


def turn_paths(prefix: list[dict[str, Any]], actual: dict[str, Any], tools: list[dict[str, Any]], *,
               keys: Sequence[str], seed: int | None, temperature: float = 1.0) -> TurnPaths:
    """The paths of the agent's turn after `prefix` and which of them write `actual` (seed None: unknown)."""
    symbolic = symbolic_profile(keys)
    stand_in = defaults.FIT_STAND_IN_SEEDS
    found = branches(symbolic, prefix, tools, seed=stand_in[0] if seed is None else seed)
    twin = branches(symbolic, prefix, tools, seed=stand_in[1]) if seed is None else None
    emits, matched = _match({k: actual.get(k) for k in ("role", "content", "tool_calls")}, found, twin)
    scale = temperature if temperature > 0 else 1.0  # as log_probs: T <= 0 decodes greedily from the T = 1 model
    intent = np.array([b.logit for b in found], dtype=float) / scale
    intent_logp = intent - np.logaddexp.reduce(intent)
    branch = np.array([i for i, b in enumerate(found) for _ in b.options], dtype=np.int64)
    parts = [_linear(o.logit, keys) for o in _options(found)]
    const = np.array([c for c, _ in parts], dtype=float) / scale
    coef = np.array([v for _, v in parts], dtype=float).reshape(len(parts), len(keys)) / scale
    return TurnPaths(intent_logp[branch], const, coef, branch, emits, matched)


def decisions(messages: Sequence[Mapping[str, Any]], tools: list[dict[str, Any]], *, keys: Sequence[str],
              seed: int | None, temperature: float = 1.0) -> Decisions:
    """Every assistant turn of a transcript as the embedded agent's decision (seed None: unknown, see the module)."""
    weights = [m.get("weight") for m in messages]  # the SFT cut's loss mask; other tables have none
    plain = normalize_messages(messages)
    turns: list[TurnPaths] = []
    skipped = ambiguous = masked = by_identity = 0
    for i, message in enumerate(plain):
        if message["role"] != "assistant":
            continue
        if weights[i] is not None and not weights[i]:
            masked += 1
            continue
        turn = turn_paths(plain[:i], message, tools, keys=keys, seed=seed, temperature=temperature)
        if turn.matched in ("exact", "identity"):
            turns.append(turn)
            by_identity += turn.matched == "identity"
        else:
            skipped += 1
            ambiguous += turn.matched == "ambiguous"
    return Decisions(tuple(turns), skipped, ambiguous, masked, by_identity)


def recover_seed(messages: Sequence[Mapping[str, Any]], candidates: Iterable[int]) -> int | None:
    """The candidate sampling seed the embedded agent wrote this transcript with, or None.

    Its tool-call ids are hashes of (seed, transcript length, call): a candidate is the seed only when it reproduces
    one of them (a 64-bit match). None when no candidate does, or the transcript has no tool call to check (then
    every turn is seed-free text, and matching without a seed is exact).
    """
    plain = normalize_messages(messages)
    calls = []
    for i, message in enumerate(plain):
        for call in (message["tool_calls"] or []) if message["role"] == "assistant" else []:
            try:
                arguments = json.loads(call["function"]["arguments"] or "{}")
            except (TypeError, ValueError):
                continue
            calls.append((i, call["function"]["name"], arguments, call.get("id")))
    if not calls:
        return None
    for seed in candidates:
        if any(f"call_{short_id(digest(seed, i), name, args, length=16)}" == call_id
               for i, name, args, call_id in calls):
            return int(seed)
    return None
