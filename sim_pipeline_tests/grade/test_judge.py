"""The judge: versioning, rubric override, prompt, parsing, and failures reported as statuses through the gateway."""

import asyncio
import dataclasses
import hashlib
import json

import pytest

from sim_pipeline_tests.cards import case
from sim_pipeline import defaults
from sim_pipeline.domain import load_domain
from sim_pipeline.grade.judge import (
    DEFAULT_RUBRIC,
    JUDGE_PROMPT,
    judge_messages,
    judge_one,
    judge_seed,
    judge_version,
    parse_judgment,
    rubric_for,
)
from sim_pipeline.models.cards import find_card
from sim_pipeline.models.gateway import Gateway

CARD = case([{"role": "user", "content": "Cancel order 48213 please."}])


def test_judge_version_hashes_rubric_and_prompt():
    version = judge_version("sim/judge", DEFAULT_RUBRIC)
    expected = hashlib.sha256((DEFAULT_RUBRIC + JUDGE_PROMPT).encode()).hexdigest()[:12]
    assert version == f"sim/judge@{expected}"
    assert judge_version("sim/judge", DEFAULT_RUBRIC + " Be strict.") != version
    assert judge_version("openai/gpt-4o", DEFAULT_RUBRIC).endswith(expected)


def test_rubric_md_in_the_pack_overrides_the_default(tmp_path):
    domain = load_domain("retail")
    assert rubric_for(domain) == DEFAULT_RUBRIC
    (tmp_path / "rubric.md").write_text("Pass only polite agents.\n")
    assert rubric_for(dataclasses.replace(domain, path=tmp_path)) == "Pass only polite agents."


def test_prompt_wraps_the_rubric_in_judge_only_markers_and_carries_the_card():
    [message] = judge_messages("My rubric.", CARD)
    assert message["role"] == "user" and message["content"].count(defaults.JUDGE_ONLY_MARKER) == 2
    assert "My rubric." in message["content"]
    assert find_card([message], "case") == CARD


@pytest.mark.parametrize(("text", "status", "reward"), [
    ('{"reason": "verified then cancelled", "score": 1}', "ok", 1.0),
    ('Here you go: {"reason": "no confirmation", "score": 0} done', "ok", 0.0),
    ('{"reason": "fine", "score": 1.0}', "ok", 1.0),
    ('{"reason": "fine", "score": true}', "invalid_result", None),
    ('{"reason": "fine", "score": 2}', "invalid_result", None),
    ('{"reason": "fine"}', "invalid_result", None),
    ("I would pass this one.", "invalid_result", None),
    ("{not json}", "invalid_result", None),
    (None, "invalid_result", None),
])
def test_parse_judgment(text, status, reward):
    judgment = parse_judgment(text)
    assert (judgment.status, judgment.reward) == (status, reward)


def test_judge_seed_is_stable_and_purpose_specific():
    assert judge_seed("r1") == judge_seed("r1") and 0 <= judge_seed("r1") < 2**31
    assert judge_seed("r1") != judge_seed("r1", "judge-rejudge")


@pytest.mark.parametrize(("model", "status"), [("scripted/garbage", "invalid_result"), ("scripted/timeout", "timeout"),
                                               ("scripted/broken", "error")])
def test_bad_judges_give_a_status_never_a_score(scripted_judges, model, status):
    judgment = asyncio.run(judge_one(Gateway(backoff_s=0), model, DEFAULT_RUBRIC, CARD, seed=7))
    assert judgment.status == status and judgment.reward is None and judgment.reason


def test_judge_is_asked_at_temperature_zero(scripted_judges):
    asyncio.run(judge_one(Gateway(backoff_s=0), "scripted/garbage", DEFAULT_RUBRIC, CARD, seed=11))
    _, params = scripted_judges[-1]
    assert params["temperature"] == defaults.JUDGE_TEMPERATURE == 0.0
    assert (params["seed"], params["max_tokens"]) == (11, defaults.JUDGE_MAX_TOKENS)


def test_embedded_judge_answers_reason_before_score():
    judgment = asyncio.run(judge_one(Gateway(), "sim/judge", DEFAULT_RUBRIC, CARD, seed=1))
    assert judgment.status == "ok" and judgment.reward == 0.0  # nothing was cancelled
    assert "not confirmed" in judgment.reason
    from sim_pipeline.models.sim_models import respond
    content = respond("sim/judge", judge_messages(DEFAULT_RUBRIC, CARD), seed=1).message["content"]
    assert list(json.loads(content)) == ["reason", "score"]
