"""The scripted OpenAI-compatible server, driven through the real litellm HTTP path and through the project's gateway."""

import asyncio
import json
import os
import urllib.error
import urllib.request

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # before litellm is imported: never fetch the price map

import litellm
import pytest

from sim_pipeline.errors import ModelCallError
from sim_pipeline.models.gateway import Gateway, Sampling
from sim_pipeline_tests.scripted_server import ScriptedServer, always, replies

MODEL = "openai/scripted-agent"
KEY = "sk-test-not-a-real-key"
MESSAGES = [{"role": "system", "content": "You are a shop assistant."}, {"role": "user", "content": "where is order A1"}]
TOOLS = [{"type": "function", "function": {
    "name": "lookup_order", "description": "Look up an order by id.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}}]
LOOKUP = {"content": None, "tool_calls": [{"name": "lookup_order", "arguments": {"order_id": "A1"}}]}


def complete(server: ScriptedServer, **kwargs):
    """litellm.completion against the server, with no retries so a failure surfaces after one request."""
    return litellm.completion(model=MODEL, messages=MESSAGES, api_base=server.base_url, api_key=KEY, num_retries=0,
                              timeout=3, **kwargs)


def test_text_reply_round_trips_with_usage_and_logprobs():
    with ScriptedServer(replies({"content": "It ships tomorrow", "logprob_per_token": -0.5})) as server:
        response = complete(server, logprobs=True)
    choice = response.choices[0]
    assert choice.message.content == "It ships tomorrow"
    assert choice.finish_reason == "stop"
    assert response.model.endswith("scripted-agent")
    assert (response.usage.prompt_tokens, response.usage.completion_tokens, response.usage.total_tokens) == (9, 3, 12)
    tokens = choice.logprobs.content
    assert [t.token for t in tokens] == ["It", " ships", " tomorrow"]
    assert [t.logprob for t in tokens] == [-0.5, -0.5, -0.5]
    assert tokens[1].bytes == list(b" ships")
    assert server.statuses == [200]


def test_no_logprobs_unless_requested():
    with ScriptedServer(replies({"content": "fine"})) as server:
        response = complete(server)
    assert getattr(response.choices[0], "logprobs", None) is None
    assert "logprobs" not in server.requests[0]


def test_tool_call_round_trips_and_the_request_is_recorded():
    with ScriptedServer(replies(LOOKUP)) as server:
        response = complete(server, tools=TOOLS, tool_choice="auto", seed=7, temperature=0.0)
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert (call.id, call.type, call.function.name) == ("call_0", "function", "lookup_order")
    assert json.loads(call.function.arguments) == {"order_id": "A1"}
    [request] = server.requests
    assert request["model"] == "scripted-agent"  # litellm strips the provider prefix
    assert request["messages"] == MESSAGES
    assert request["tools"] == TOOLS
    assert (request["tool_choice"], request["seed"], request["temperature"]) == ("auto", 7, 0.0)


def test_replies_in_order_then_repeat_the_last():
    with ScriptedServer(replies({"content": "one"}, {"content": "two"})) as server:
        contents = [complete(server).choices[0].message.content for _ in range(3)]
    assert contents == ["one", "two", "two"]
    assert len(server.requests) == 3


def test_status_500_raises_internal_server_error():
    with ScriptedServer(always(500)) as server, pytest.raises(litellm.InternalServerError):
        complete(server)
    assert server.statuses == [500]  # num_retries=0: the OpenAI SDK did not retry either


def test_status_401_raises_authentication_error():
    with ScriptedServer(always(401)) as server, pytest.raises(litellm.AuthenticationError):
        complete(server)
    assert server.statuses == [401]


def test_invalid_json_with_status_200_raises_internal_server_error():
    # litellm 1.110.2 wraps the SDK's JSON decode failure as InternalServerError (status 500), so callers retry it.
    with ScriptedServer(replies((200, "this is {not json"))) as server, pytest.raises(litellm.InternalServerError) as caught:
        complete(server)
    assert server.statuses == [200]
    assert "Expecting value" in str(caught.value)


def test_a_responder_that_raises_answers_500():
    def broken(request: dict) -> dict:
        raise KeyError("scripted bug")

    with ScriptedServer(broken) as server, pytest.raises(litellm.InternalServerError):
        complete(server)
    assert server.statuses == [500]
    assert server.errors == ["KeyError('scripted bug')"]


def test_unknown_paths_answer_404():
    with ScriptedServer(always(500)) as server:
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(server.base_url + "/models", timeout=3)
        assert caught.value.code == 404
        assert server.misses == [("GET", "/v1/models")]
        assert server.requests == []


def test_gateway_reaches_the_server_through_the_environment(monkeypatch):
    scripted = {**LOOKUP, "logprob_per_token": -0.25}
    with ScriptedServer(replies(scripted)) as server:
        monkeypatch.setenv("OPENAI_API_BASE", server.base_url)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        completion = asyncio.run(Gateway(backoff_s=0).complete(MODEL, MESSAGES, tools=TOOLS, sampling=Sampling(seed=1)))
    assert completion.message["tool_calls"] == [{"id": "call_0", "type": "function",
                                                  "function": {"name": "lookup_order", "arguments": '{"order_id": "A1"}'}}]
    # 'lookup_order {"order_id": "A1"}' is three whitespace tokens.
    assert completion.token_logprobs == [-0.25, -0.25, -0.25]
    assert completion.logprob == pytest.approx(-0.75)
    assert (completion.n_tokens, completion.prompt_tokens, completion.logprob_source) == (3, 9, "tokens")
    [request] = server.requests
    assert (request["seed"], request["logprobs"], request["tools"]) == (1, True, TOOLS)


def test_gateway_turns_a_401_into_a_model_call_error(monkeypatch):
    with ScriptedServer(always(401)) as server:
        monkeypatch.setenv("OPENAI_API_BASE", server.base_url)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        with pytest.raises(ModelCallError, match="refused the credentials"):
            asyncio.run(Gateway(backoff_s=0).complete(MODEL, MESSAGES, sampling=Sampling(seed=1)))
    assert server.statuses == [401]  # auth errors are not retried
