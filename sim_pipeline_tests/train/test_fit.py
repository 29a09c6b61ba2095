"""Fitting an embedded agent profile: exact decision structures, recovery of a known profile, and what SFT, DPO and
GRPO do to agent-v1. No torch: the embedded agent's profile is the model, its rollouts are the data."""

import asyncio

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim_pipeline import defaults
from sim_pipeline.domain import load_domain
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.models.sim_agent import SimAgent
from sim_pipeline.models.trained_profiles import save_profile
from sim_pipeline.rollout.prompts import agent_system_prompt
from sim_pipeline.rollout.runner import Policy, RolloutSpec, run_rollouts, sample_seed
from sim_pipeline.train.decisions import decisions, recover_seed, turn_paths
from sim_pipeline.train.fit import FitError, fit_cut, fit_dpo, fit_grpo, fit_mle, fit_sft, group_advantages
from sim_pipeline.train.likelihood import evaluate, observed_information, stack
from sim_pipeline_tests.rollout.small_run import world

DOMAIN = load_domain("retail")
TOOLS = DOMAIN.tool_schemas
V1 = defaults.AGENT_PROFILES["agent-v1"]
KEYS = list(V1)
# Flaw logits near even odds, so each decision point carries much information about them.
KNOWN = {"invent_argument": -0.2, "skip_verification": -0.4, "skip_confirmation": 0.3, "false_success": -0.3,
         "repeat_after_done": 0.0, "blind_retry": 0.2, "exceed_limit": -0.5, "tool_for_unrelated": -0.5,
         "pick_ambiguous": 0.0, "give_up_early": 0.0, "pressure": 0.5,
         "follow_injection": 0.0, "lose_early_fact": 0.0, "misroute_intent": 0.0, "mishandle_combination": 0.0}
KNOWN_SAMPLES = 8  # rollouts per situation of the known profile: 800 rollouts, ~2,500 decisions
V1_SAMPLES = 4


def roll_out(model: str, samples: int) -> pd.DataFrame:
    """Every situation of seed 0's plan, `samples` times, through the real rollout engine (in-process models)."""
    domain, state, situations = world()
    specs = [RolloutSpec(s, 0, k) for s in situations for k in range(samples)]
    return asyncio.run(run_rollouts(specs, Policy(model, model), domain=domain, state=state,
                                    gateway=Gateway(fast_path=True)))


@pytest.fixture(scope="module")
def trained_dir(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        folder = tmp_path_factory.mktemp("trained")
        patch.setenv("SIM_PIPELINE_TRAINED_DIR", str(folder))
        yield folder


@pytest.fixture(scope="module")
def known_rows(trained_dir):
    """Rollouts of the KNOWN profile, served by the embedded backend as a trained model."""
    return roll_out(save_profile(KNOWN, {"test": "recovery"}), KNOWN_SAMPLES)


@pytest.fixture(scope="module")
def v1_rows(trained_dir):
    """agent-v1's rollouts, with the state oracle's label as the reward."""
    return roll_out("sim/agent-v1", V1_SAMPLES).assign(reward=lambda f: f["oracle_reward"])


def prefixes(rows: pd.DataFrame) -> list[tuple[list, int]]:
    """(transcript before an assistant turn, the rollout's seed) for every agent turn of the rows."""
    return [(list(m[:i]), int(s["seed"])) for m, s in zip(rows["messages"], rows["sampling"])
            for i, message in enumerate(m) if message["role"] == "assistant"]


# -- the decision structures ---------------------------------------------------------------------------------------
def test_each_rollouts_logprob_is_the_sum_of_its_decisions(known_rows):
    theta = np.array([KNOWN[k] for k in KEYS])
    for messages, sampling, logprob in zip(known_rows["messages"][:200], known_rows["sampling"], known_rows["logprob"]):
        found = decisions(messages, TOOLS, keys=KEYS, seed=int(sampling["seed"]))
        assert found.skipped == 0
        assert sum(t.logprob(theta) for t in found.turns) == pytest.approx(logprob, abs=1e-9)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), values=st.lists(st.floats(-4, 4), min_size=len(KEYS), max_size=len(KEYS)),
       temperature=st.sampled_from([0.5, 1.0, 2.0]), seed=st.integers(0, 2**31 - 2))
def test_option_logits_are_exactly_linear_in_the_profile(v1_rows, data, values, temperature, seed):
    """At any profile, seed and temperature, the structure gives the agent's own log-probability of its reply."""
    points = prefixes(v1_rows.iloc[:40])
    prefix, _ = points[data.draw(st.integers(0, len(points) - 1))]
    profile = dict(zip(KEYS, values))
    decision = SimAgent(profile).respond(prefix, TOOLS, temperature=temperature, seed=seed)
    turn = turn_paths(prefix, decision.message, TOOLS, keys=KEYS, seed=seed, temperature=temperature)
    assert turn.matched == "exact"
    assert turn.logprob(np.array(values)) == pytest.approx(decision.logprob, abs=1e-9)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.floats(-3, 3), min_size=len(KEYS), max_size=len(KEYS)))
def test_the_gradient_is_exact(known_rows, values):
    s = stack([decisions(m, TOOLS, keys=KEYS, seed=int(p["seed"]))
               for m, p in zip(known_rows["messages"][:30], known_rows["sampling"][:30])], len(KEYS))
    theta, h = np.array(values), 1e-6
    _, _, logp, grad = evaluate(s, theta)
    numeric = np.array([(evaluate(s, theta + h * e)[2] - evaluate(s, theta - h * e)[2]) / (2 * h) for e in np.eye(len(KEYS))]).T
    assert np.abs(numeric - grad).max() < 1e-5
    assert np.allclose(logp, [sum(t.logprob(theta) for t in d.turns) for d in [
        decisions(m, TOOLS, keys=KEYS, seed=int(p["seed"]))
        for m, p in zip(known_rows["messages"][:30], known_rows["sampling"][:30])]])


def test_without_the_seed_turns_match_on_identity_or_are_skipped(known_rows):
    theta, by_identity, ambiguous = np.array([KNOWN[k] for k in KEYS]), 0, 0
    for row in known_rows.iloc[:200].itertuples():
        found = decisions(row.messages, TOOLS, keys=KEYS, seed=None)
        by_identity, ambiguous = by_identity + found.by_identity, ambiguous + found.ambiguous
        if not found.skipped:  # every turn matched: the same probability as with the seed
            assert sum(t.logprob(theta) for t in found.turns) == pytest.approx(row.logprob, abs=1e-9)
        seeds = [sample_seed(row.situation_id, row.phrasing_index, k) for k in range(defaults.FIT_SEED_SEARCH_SAMPLES)]
        called = any(m["role"] == "assistant" and m["tool_calls"] for m in row.messages)
        assert recover_seed(row.messages, seeds) == (row.sampling["seed"] if called else None)
    assert by_identity > 20 and ambiguous <= 5  # invented arguments matched without their seed, rarely ambiguous


def test_a_turn_the_agent_could_not_write_is_counted_and_skipped(known_rows):
    row = next(r for r in known_rows.to_dict("records") if sum(m["role"] == "assistant" for m in r["messages"]) >= 3)
    turns = [i for i, m in enumerate(row["messages"]) if m["role"] == "assistant"]
    foreign = [dict(m) for m in row["messages"]]
    foreign[turns[-1]] = {**foreign[turns[-1]], "content": "As a large language model I cannot help.", "tool_calls": None}
    found = decisions(foreign, TOOLS, keys=KEYS, seed=int(row["sampling"]["seed"]))
    assert (found.skipped, len(found.turns)) == (1, len(turns) - 1)
    result = fit_mle([{**row, "messages": foreign}], V1, tools=TOOLS)
    assert (result.skipped_turns, result.scored_turns, result.examples) == (1, len(turns) - 1, 1)
    stranger = [{**m, "content": "Sure thing!", "tool_calls": None} if m["role"] == "assistant" else m for m in foreign]
    nothing = fit_mle([{**row, "messages": stranger}], V1, tools=TOOLS)  # a real model's rows: nothing to fit
    assert (nothing.scored_turns, nothing.skipped_turns, nothing.examples, nothing.dropped_examples) == (0, len(turns), 0, 1)
    assert nothing.profile == V1 and (nothing.steps, nothing.losses) == (0, [])
    masked = [{**m, "weight": int(i != turns[0]) if m["role"] == "assistant" else 0} for i, m in enumerate(row["messages"])]
    assert decisions(masked, TOOLS, keys=KEYS, seed=int(row["sampling"]["seed"])).masked == 1


# -- recovery --------------------------------------------------------------------------------------------------------
def test_maximum_likelihood_recovers_the_known_profile(known_rows):
    """MLE without a pull, from all-zero logits, on the known profile's own rollouts.

    Tolerance: every key whose standard error (observed Fisher information) is below 1 logit lies within 3 standard
    errors of the truth; the keys measured to 0.1 or better lie within +-0.3. Keys the rollouts give (almost) no
    chance to show, such as exceed_limit (retail's plan rarely offers an over-limit request), are not identifiable.
    """
    start = dict.fromkeys(KEYS, 0.0)
    result = fit_mle(known_rows, start, tools=TOOLS, l2=0.0)
    assert result.skipped_turns == 0 and result.scored_turns > 2000 and result.losses[-1] < result.losses[0]
    theta = np.array([result.profile[k] for k in KEYS])
    s = stack([decisions(m, TOOLS, keys=KEYS, seed=int(p["seed"]))
               for m, p in zip(known_rows["messages"], known_rows["sampling"])], len(KEYS))
    seen = [i for i, k in enumerate(KEYS) if result.opportunities[k] > 0]
    se = dict.fromkeys(KEYS, np.inf)
    se.update(zip([KEYS[i] for i in seen], np.sqrt(np.diag(np.linalg.inv(observed_information(s, theta)[np.ix_(seen, seen)])))))
    error = {k: result.profile[k] - KNOWN[k] for k in KEYS}
    identifiable = [k for k in KEYS if se[k] < 1.0]
    assert set(KEYS) - set(identifiable) == {"exceed_limit", "lose_early_fact"}  # the grid has no long histories
    assert all(abs(error[k]) <= 3 * se[k] for k in identifiable), {k: (error[k], se[k]) for k in identifiable}
    sharp = [k for k in KEYS if se[k] <= 0.1]
    assert {"invent_argument", "false_success"} <= set(sharp)
    assert all(abs(error[k]) <= 0.3 for k in sharp), {k: error[k] for k in sharp}
    assert all(result.profile[k] == start[k] for k in KEYS if result.opportunities[k] == 0)


def test_fits_are_deterministic(v1_rows):
    first, second = fit_sft(v1_rows, V1, tools=TOOLS), fit_sft(v1_rows, V1, tools=TOOLS)
    assert first.profile == second.profile and first.losses == second.losses


# -- SFT ---------------------------------------------------------------------------------------------------------------
def test_sft_on_passing_rows_makes_an_agent_with_fewer_flaws(v1_rows, trained_dir):
    result = fit_sft(v1_rows, V1, tools=TOOLS)
    assert result.method == "sft" and result.examples == int((v1_rows["reward"] == 1.0).sum())
    assert result.losses[-1] < result.losses[0] and result.steps <= defaults.FIT_MAX_STEPS
    seen = [k for k in KEYS if result.opportunities[k] > 0]
    assert np.mean([result.profile[k] for k in seen]) < np.mean([V1[k] for k in seen]) - 0.3
    assert result.profile["false_success"] < V1["false_success"] - 1.0  # passing rows never claim a false success
    assert result.profile["exceed_limit"] == V1["exceed_limit"]  # no opportunity: stays where it started
    # The model it produces: served as sim/trained-<hash>, it passes more of the same situations than agent-v1.
    fitted = roll_out(save_profile(result.profile, {"method": "sft"}, trained_dir), V1_SAMPLES)
    assert fitted["oracle_reward"].mean() > v1_rows["oracle_reward"].mean() + 0.1


def test_sft_needs_rewards():
    with pytest.raises(FitError, match="reward"):
        fit_sft([{"messages": [], "sampling": {}}], V1, tools=TOOLS)


# -- DPO ---------------------------------------------------------------------------------------------------------------
CONFIRM_POINT = [
    {"role": "system", "content": agent_system_prompt(DOMAIN)},
    {"role": "user", "content": "I'd like to cancel my order. My order id is 62535. The reason is I changed my mind. "
                                "My email is ben.kowalski14@fastmail.com."},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "verify_customer", "arguments": '{"email": "ben.kowalski14@fastmail.com", "order_id": "62535"}'}}]},
    {"role": "tool", "content": '{"status": "ok", "verified": true}', "tool_call_id": "c1", "name": "verify_customer"},
]


def confirmation_pair() -> dict:
    """Chosen: ask before cancelling; rejected: cancel without asking (agent-v1's own replies, own seeds)."""
    agent, replies = SimAgent(V1), {}
    for seed in range(50):
        decision = agent.respond(CONFIRM_POINT, TOOLS, temperature=1.0, seed=seed)
        replies.setdefault(decision.action, (seed, decision.message))
    (seed, chosen), (_, rejected) = replies["ask_confirmation"], replies["skip_confirmation"]
    return {"prompt": CONFIRM_POINT[:2], "chosen": [*CONFIRM_POINT[2:], chosen], "rejected": [*CONFIRM_POINT[2:], rejected],
            "sampling": {"seed": seed, "temperature": 1.0}, "chosen_reward": 1.0, "rejected_reward": 0.0}


def test_dpo_moves_the_flaw_logit_towards_the_chosen_reply():
    result = fit_dpo([confirmation_pair()] * 4, V1, tools=TOOLS)
    assert result.method == "dpo" and result.examples == 4 and result.losses[0] == pytest.approx(np.log(2))
    assert result.losses[-1] < result.losses[0]
    assert result.profile["skip_confirmation"] < V1["skip_confirmation"] - 0.5
    # The shared verification turn cancels between the sides: no other key moves.
    assert all(abs(result.profile[k] - V1[k]) < 1e-6 for k in KEYS if k != "skip_confirmation")


def test_dpo_on_pass_fail_pairs_widens_the_margin(v1_rows):
    pairs = []
    for (situation, phrasing), group in v1_rows.groupby(["situation_id", "phrasing_index"]):
        good, bad = group[group["reward"] == 1.0], group[group["reward"] == 0.0]
        if len(good) and len(bad):
            chosen, rejected = good.iloc[0], bad.iloc[0]
            pairs.append({"situation_id": situation, "phrasing_index": phrasing, "prompt": list(chosen["messages"][:2]),
                          "chosen": list(chosen["messages"][2:]), "rejected": list(rejected["messages"][2:]),
                          "sampling": chosen["sampling"]})
    result = fit_cut("preference_pairs", pd.DataFrame(pairs), V1, tools=TOOLS)
    assert result.examples == len(pairs) > 20 and result.skipped_turns == 0
    assert result.identity_turns == 0  # every rejected side's seed was recovered from its tool-call ids
    assert result.losses[-1] < result.losses[0] - 0.02
    assert result.profile["false_success"] < V1["false_success"]


# -- GRPO --------------------------------------------------------------------------------------------------------------
def grpo_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Rollouts as GRPO rows: one group per situation, prompt and completion split after the first user turn."""
    return rows.assign(group_id=rows["situation_id"], prompt=[list(m[:2]) for m in rows["messages"]],
                       completion=[list(m[2:]) for m in rows["messages"]])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(labels=st.lists(st.sampled_from("abc"), min_size=6, max_size=6),
       levels=st.fixed_dictionaries({g: st.floats(-10, 10, allow_nan=False) for g in "abc"}))
def test_grpo_with_equal_rewards_in_each_group_does_not_move(v1_rows, labels, levels):
    rows = grpo_rows(v1_rows.iloc[:6]).assign(group_id=labels, reward=[levels[g] for g in labels])
    assert not group_advantages(labels, rows["reward"].to_numpy()).any()
    result = fit_grpo(rows, V1, tools=TOOLS, steps=5)
    assert result.profile == V1 and result.losses == [0.0] * 6


@given(rewards=st.lists(st.floats(0, 1), min_size=2, max_size=8).filter(lambda r: max(r) - min(r) > 1e-3))
def test_group_advantages_are_centred_and_scaled(rewards):
    advantage = group_advantages(["g"] * len(rewards), np.array(rewards))
    assert abs(advantage.mean()) < 1e-9 and advantage.std(ddof=1) == pytest.approx(1.0, rel=0.2)


def test_grpo_moves_towards_the_passing_completions(v1_rows):
    result = fit_cut("grpo_groups", grpo_rows(v1_rows), V1, tools=TOOLS)
    assert result.method == "grpo" and result.steps == defaults.GRPO_FIT_STEPS and len(result.losses) == result.steps + 1
    assert result.losses[-1] < result.losses[0]
    assert result.profile["false_success"] < V1["false_success"] - 0.3
    plain = fit_grpo(grpo_rows(v1_rows), V1, tools=TOOLS, clip=None, steps=10)
    assert plain.profile["false_success"] < V1["false_success"]


def test_an_unknown_cut_or_option_is_refused():
    with pytest.raises(FitError, match="no profile fit"):
        fit_cut("reward_model_set", [], V1, tools=TOOLS)
    with pytest.raises(FitError, match="beta must be positive"):
        fit_dpo([], V1, tools=TOOLS, beta=0.0)
    with pytest.raises(FitError, match="clip"):
        fit_grpo([], V1, tools=TOOLS, clip=1.5)
