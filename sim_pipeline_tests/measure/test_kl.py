"""Reference KL: hand-worked per-token log-ratios, the summed form, and the Monte Carlo KL of known distributions."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from sim_pipeline.errors import StatisticsError
from sim_pipeline.measure.kl import reference_kl


def test_hand_worked_token_lists() -> None:
    # Rollout a: (-1 - -1.5) + (-2 - -1) = -0.5 over 2 tokens; rollout b: -0.2 - -1.0 = 0.8 over 1 token.
    # Per token: (-0.5 + 0.8) / 3 = 0.1; per rollout: (-0.5 + 0.8) / 2 = 0.15.
    rows = pd.DataFrame({"rollout_id": ["a", "b", "c"], "token_logprobs": [[-1.0, -2.0], [-0.2], None],
                         "reference_token_logprobs": [[-1.5, -1.0], [-1.0], None]})
    kl = reference_kl(rows)
    assert kl.mean_per_token == pytest.approx(0.1)
    assert kl.mean_per_rollout == pytest.approx(0.15)
    assert (kl.n_tokens, kl.n_rollouts, kl.source) == (3, 2, "token_logprobs")


def test_summed_columns_give_the_same_answer() -> None:
    rows = pd.DataFrame({"logprob": [-3.0, -0.2, np.nan], "reference_logprob": [-2.5, -1.0, -1.0],
                         "n_tokens": [2, 1, 4]})
    kl = reference_kl(rows)
    assert kl.mean_per_token == pytest.approx(0.1) and kl.mean_per_rollout == pytest.approx(0.15)
    assert (kl.n_tokens, kl.n_rollouts, kl.source) == (3, 2, "summed")


def test_monte_carlo_matches_the_exact_kl() -> None:
    # Tokens sampled from the policy p: the mean log p/q estimates KL(p || q) (scipy.stats.entropy).
    p, q = np.array([0.6, 0.3, 0.1]), np.array([0.3, 0.3, 0.4])
    rng = np.random.default_rng(0)
    tokens = rng.choice(3, size=(2000, 20), p=p)
    rows = pd.DataFrame({"token_logprobs": list(np.log(p)[tokens]),
                         "reference_token_logprobs": list(np.log(q)[tokens])})
    per_token_sd = math.sqrt(np.sum(p * np.log(p / q) ** 2) - sps.entropy(p, q) ** 2)
    assert reference_kl(rows).mean_per_token == pytest.approx(sps.entropy(p, q), abs=5 * per_token_sd / 200)


def test_identical_models_have_zero_kl() -> None:
    rows = pd.DataFrame({"token_logprobs": [[-0.5, -1.0]], "reference_token_logprobs": [[-0.5, -1.0]]})
    assert reference_kl(rows).mean_per_token == 0.0


def test_no_usable_rows_give_nan() -> None:
    kl = reference_kl(pd.DataFrame({"token_logprobs": [[]], "reference_token_logprobs": [[]]}))
    assert math.isnan(kl.mean_per_token) and kl.n_tokens == 0


def test_missing_reference_logprobs_raise() -> None:
    with pytest.raises(StatisticsError, match="rows carry no reference logprobs"):
        reference_kl(pd.DataFrame({"logprob": [-1.0], "n_tokens": [3], "token_logprobs": [[-1.0, 0.0, 0.0]]}))


def test_mismatched_lengths_raise() -> None:
    rows = pd.DataFrame({"rollout_id": ["r7"], "token_logprobs": [[-1.0, -2.0]], "reference_token_logprobs": [[-1.0]]})
    with pytest.raises(StatisticsError, match="rollout 'r7' has 2 policy token logprobs but 1 reference"):
        reference_kl(rows)
