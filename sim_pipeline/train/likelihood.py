"""Log-likelihoods of many transcripts under a profile, and their exact gradients, as a few numpy reductions.

Every path of every scored turn is stacked into flat arrays once; evaluating a profile is then one matrix-vector
product and segment-wise log-sum-exps (`np.logaddexp.reduceat`), so a whole cut costs well under a millisecond.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sim_pipeline import defaults
from sim_pipeline.train.decisions import Decisions


@dataclass(frozen=True)
class Stack:
    """The scored turns of several transcripts (examples), flattened: paths, branches, turns."""

    const: np.ndarray  # (N,) every path's option logit at theta = 0
    coef: np.ndarray  # (N, K) its coefficients
    intent_logp: np.ndarray  # (N,) its intent's log-probability
    branch_starts: np.ndarray  # (B,) first path of each branch (intent of a turn): options normalise within it
    path_branch: np.ndarray  # (N,) the branch of each path
    emits: np.ndarray  # (N,) bool: the path writes its turn's message
    emit_starts: np.ndarray  # (T,) first emitting path of each turn, among the emitting paths
    emit_turn: np.ndarray  # (M,) the turn of each emitting path
    turn_example: np.ndarray  # (T,) the example each turn belongs to
    n_examples: int

    @property
    def n_turns(self) -> int:
        """Scored turns in the stack."""
        return int(self.turn_example.size)


def stack(examples: Sequence[Decisions], n_keys: int) -> Stack:
    """Flatten the scored turns of each example (in order) for `evaluate`."""
    turns = [(e, t) for e, d in enumerate(examples) for t in d.turns]
    if not turns:
        empty = np.zeros(0, dtype=np.int64)
        return Stack(np.zeros(0), np.zeros((0, n_keys)), np.zeros(0), empty, empty, np.zeros(0, dtype=bool), empty,
                     empty, empty, len(examples))
    # Branch ids made global (a turn's local index plus the branches before it); paths stay in turn order.
    n_branches = np.array([int(t.branch.max()) + 1 for _, t in turns])
    branch_offset = np.concatenate([[0], np.cumsum(n_branches)[:-1]])
    path_branch = np.concatenate([t.branch + b for (_, t), b in zip(turns, branch_offset)])
    branch_starts = np.searchsorted(path_branch, np.arange(int(n_branches.sum())))
    emits = np.concatenate([t.emits for _, t in turns])
    emit_counts = np.array([int(t.emits.sum()) for _, t in turns])
    return Stack(
        const=np.concatenate([t.const for _, t in turns]),
        coef=np.vstack([t.coef for _, t in turns]).reshape(-1, n_keys),
        intent_logp=np.concatenate([t.intent_logp for _, t in turns]),
        branch_starts=branch_starts,
        path_branch=path_branch,
        emits=emits,
        emit_starts=np.concatenate([[0], np.cumsum(emit_counts)[:-1]]).astype(np.int64),
        emit_turn=np.repeat(np.arange(len(turns)), emit_counts),
        turn_example=np.array([e for e, _ in turns], dtype=np.int64),
        n_examples=len(examples),
    )


def evaluate(s: Stack, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(log-probability of each turn, its gradient, of each example, its gradient) under profile values theta.

    A turn's log-probability is logsumexp over its emitting paths p of intent_logp[p] + log softmax(z)[p] within
    p's branch; its gradient is the posterior-weighted sum over those paths of coef[p] - E_branch[coef].
    """
    k = s.coef.shape[1]
    if s.n_turns == 0:
        return np.zeros(0), np.zeros((0, k)), np.zeros(s.n_examples), np.zeros((s.n_examples, k))
    z = s.const + s.coef @ theta
    option_logp = z - np.logaddexp.reduceat(z, s.branch_starts)[s.path_branch]
    path_logp = (s.intent_logp + option_logp)[s.emits]
    turn_logp = np.logaddexp.reduceat(path_logp, s.emit_starts)
    mean_coef = np.add.reduceat(np.exp(option_logp)[:, None] * s.coef, s.branch_starts)
    path_grad = (s.coef - mean_coef[s.path_branch])[s.emits]
    weight = np.exp(path_logp - turn_logp[s.emit_turn])
    turn_grad = np.add.reduceat(weight[:, None] * path_grad, s.emit_starts)
    example_logp = np.bincount(s.turn_example, weights=turn_logp, minlength=s.n_examples)
    example_grad = np.zeros((s.n_examples, k))
    np.add.at(example_grad, s.turn_example, turn_grad)
    return turn_logp, turn_grad, example_logp, example_grad


def observed_information(s: Stack, theta: np.ndarray, *, step: float = defaults.FIT_HESSIAN_STEP) -> np.ndarray:
    """(K, K) Hessian of the summed negative log-likelihood of the turns at theta (central differences of the exact
    gradient); its inverse's diagonal gives the squared standard errors of a maximum-likelihood fit (Fisher 1925)."""
    k = theta.size
    columns = [(evaluate(s, theta - step * e)[1].sum(axis=0) - evaluate(s, theta + step * e)[1].sum(axis=0)) / (2 * step)
               for e in np.eye(k)]
    hessian = np.array(columns).reshape(k, k)
    return (hessian + hessian.T) / 2
