"""Real backends through real HTTP: named model configs, one retry layer, Retry-After, timeouts, the circuit breaker.

Every test points litellm at the scripted OpenAI-compatible server and counts what reaches it.
"""

import asyncio
import math
import re
import threading
import time

import pytest
import yaml

from sim_pipeline import defaults
from sim_pipeline.errors import ModelCallError, RegistryError
from sim_pipeline.models.gateway import Gateway, ProviderError, Sampling, request_params
from sim_pipeline.models.model_config import ModelConfig
from sim_pipeline.registry import load_models, load_registry
from sim_pipeline_tests.scripted_server import ScriptedServer, always, replies

MESSAGES = [{"role": "user", "content": "Where is my parcel?"}]
ANSWER = {"content": "It left the depot this morning."}


def call(gateway: Gateway, model: str, seed: int = 0):
    return asyncio.run(gateway.complete(model, MESSAGES, sampling=Sampling(seed=seed)))


def config(server: ScriptedServer, name: str = "local", **fields) -> ModelConfig:
    return ModelConfig(name=name, model="openai/scripted-agent", api_base=server.base_url, **fields)


def test_a_named_config_sends_its_endpoint_key_and_parameters(monkeypatch):
    monkeypatch.setenv("LOCAL_LLM_KEY", "sk-local-test-key-0001")
    with ScriptedServer(replies(ANSWER)) as server:
        local = config(server, api_key_env="LOCAL_LLM_KEY", params={"top_logprobs": 3, "parallel_tool_calls": False})
        reply = call(Gateway(models={"local": local}), "local")
    (request,) = server.requests
    assert reply.message["content"] == ANSWER["content"] and reply.token_logprobs
    assert server.headers[0]["authorization"] == "Bearer sk-local-test-key-0001"
    assert request["top_logprobs"] == 3 and request["parallel_tool_calls"] is False and request["logprobs"] is True


def test_an_agent_and_a_judge_on_two_endpoints_in_one_gateway(monkeypatch):
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    with ScriptedServer(replies(ANSWER)) as agent, ScriptedServer(replies({"content": '{"score": 1}'})) as judge:
        gateway = Gateway(models={"agent": config(agent, "agent"), "judge": config(judge, "judge")})
        assert call(gateway, "agent").message["content"] == ANSWER["content"]
        assert call(gateway, "judge").message["content"] == '{"score": 1}'
    assert (len(agent.requests), len(judge.requests)) == (1, 1)


def test_a_call_costs_what_litellm_prices_it_at_and_nan_without_a_price():
    """The gateway reads litellm's own price of a response rather than pricing it again: the figure completion_cost
    gives a priced model, and NaN (an unknown price, never 0.0) for a model litellm has no price for."""
    import litellm

    with ScriptedServer(replies(ANSWER, ANSWER, ANSWER)) as server:
        priced = ModelConfig(name="priced", model="openai/gpt-4o-mini", api_base=server.base_url)
        gateway = Gateway(models={"priced": priced, "local": config(server)})
        paid, unpriced = call(gateway, "priced"), call(gateway, "local")
        response = litellm.completion(model="openai/gpt-4o-mini", messages=MESSAGES, api_base=server.base_url,
                                      api_key="sk-test-not-a-real-key", max_retries=0)
    assert paid.cost == litellm.completion_cost(completion_response=response) > 0
    assert math.isnan(unpriced.cost)


def test_logprobs_off_is_never_asked_for():
    with ScriptedServer(replies(ANSWER)) as server:
        reply = call(Gateway(models={"local": config(server, logprobs="off")}), "local")
    assert "logprobs" not in server.requests[0] and reply.token_logprobs is None


def test_a_failing_call_makes_exactly_the_gateway_tries():
    with ScriptedServer(always(500)) as server:
        with pytest.raises(ProviderError, match=f"after {defaults.GATEWAY_TRIES} tries"):
            call(Gateway(backoff_s=0, models={"local": config(server)}), "local")
    assert len(server.requests) == defaults.GATEWAY_TRIES  # no client retries inside the gateway's tries


def test_retry_after_is_waited_out():
    limited = (429, {"error": {"message": "slow down", "type": "rate_limit", "code": "429"}}, {"Retry-After": "1"})
    with ScriptedServer(replies(limited, ANSWER)) as server:
        reply = call(Gateway(backoff_s=0, models={"local": config(server)}), "local")
    assert reply.message["content"] == ANSWER["content"] and len(server.requests) == 2
    assert server.times[1] - server.times[0] >= 0.95


def test_a_retry_after_beyond_the_cap_fails_the_call_at_once():
    far = (429, {"error": {"message": "slow down", "type": "rate_limit", "code": "429"}},
           {"Retry-After": str(int(defaults.RETRY_AFTER_MAX_S * 10))})
    with ScriptedServer(replies(far)) as server:
        with pytest.raises(ProviderError, match="asks to wait"):
            call(Gateway(backoff_s=0, models={"local": config(server)}), "local")
    assert len(server.requests) == 1


def test_a_reply_slower_than_the_timeout_is_a_timeout():
    def slow(request):
        time.sleep(1.5)
        return ANSWER

    with ScriptedServer(slow) as server:
        started = time.monotonic()
        with pytest.raises(ProviderError, match="Timeout"):
            call(Gateway(backoff_s=0, models={"local": config(server, timeout_s=0.3)}), "local")
    assert len(server.requests) == defaults.GATEWAY_TRIES and time.monotonic() - started < 1.5 * defaults.GATEWAY_TRIES


def test_a_dead_endpoint_stops_the_run_before_the_first_request():
    with ScriptedServer(replies(ANSWER)) as server:
        dead = config(server)
    with pytest.raises(ModelCallError, match="nothing answers at api_base http://127.0.0.1:.*Fix: start the server"):
        call(Gateway(backoff_s=0, models={"local": dead}), "local")


def test_a_model_string_litellm_has_no_provider_for_stops_the_run_before_the_first_request():
    """A typo'd provider fails every call the same way: the check refuses it with the fix, and a model that names
    its provider (a prefix, or `custom_llm_provider` in its parameters) passes."""
    with ScriptedServer(replies(ANSWER)) as server:
        unknown = ModelConfig(name="typo", model="opnai/scripted-agent", api_base=server.base_url)
        with pytest.raises(ModelCallError, match=r"model 'typo': litellm knows no provider for 'opnai/scripted-agent'"
                                                 r"\. Fix: write it as provider/model"):
            call(Gateway(backoff_s=0, models={"typo": unknown}), "typo")
        bare = ModelConfig(name="bare", model="scripted-agent", api_base=server.base_url,
                           params={"custom_llm_provider": "openai"})
        Gateway(models={"bare": bare, "local": config(server)}).check_all(["bare", "local"])
    assert server.requests == []


def test_an_endpoint_that_keeps_failing_stops_the_run_after_failures_in_a_row():
    with ScriptedServer(always(503)) as server:
        gateway = Gateway(backoff_s=0, models={"local": config(server)})
        for seed in range(defaults.MAX_CONSECUTIVE_FAILURES - 1):
            with pytest.raises(ProviderError):
                call(gateway, "local", seed)
        with pytest.raises(ModelCallError) as stopped:
            call(gateway, "local", 99)
    sent = defaults.MAX_CONSECUTIVE_FAILURES * defaults.GATEWAY_TRIES
    assert len(server.requests) == sent
    assert f"{sent} requests failed in a row ({sent} HTTP 503) over {defaults.MAX_CONSECUTIVE_FAILURES} calls (each " \
        f"failed after {defaults.GATEWAY_TRIES} tries), so the circuit breaker stopped the run; {sent} requests to " \
        "it came back in all (last:" in str(stopped.value)


def _burst(gateway: Gateway, n: int) -> list:
    """`n` calls at once, as a partition's rollouts make them: every outcome, errors included."""
    async def run():
        return await asyncio.gather(*(gateway.complete("local", MESSAGES, sampling=Sampling(seed=i)) for i in range(n)),
                                    return_exceptions=True)
    return asyncio.run(run())


def _counted(error: ModelCallError) -> tuple[int, int]:
    """The requests the breaker's message says came back, and those it says were still in flight."""
    back = re.search(r"; (\d+) requests to it came back in all(?:, (\d+) more were in flight)?", str(error))
    return int(back.group(1)), int(back.group(2) or 0)


def test_a_dead_but_listening_endpoint_gets_at_most_the_streak_plus_what_is_in_flight():
    """16 calls in flight against an endpoint that answers 500: once the streak is reached no call sends another
    try, and the message counts exactly what the server received."""
    slow_500 = lambda request: (time.sleep(0.05), 500)[1]  # noqa: E731 - a failing server that takes a moment
    with ScriptedServer(slow_500) as server:
        gateway = Gateway(backoff_s=0.01, models={"local": config(server)}, concurrency=defaults.GATEWAY_CONCURRENCY)
        outcomes = _burst(gateway, 40)
        time.sleep(0.2)  # the requests in flight when it opened have all reached the server
    stops = [o for o in outcomes if isinstance(o, ModelCallError)]
    assert stops and not [o for o in outcomes if not isinstance(o, (ModelCallError, ProviderError))]
    bound = defaults.MAX_CONSECUTIVE_FAILURES * defaults.GATEWAY_TRIES + defaults.GATEWAY_CONCURRENCY
    assert len(server.requests) <= bound, (len(server.requests), bound)  # it was 18 calls x 3 tries = 54 before
    back, flying = _counted(stops[0])  # the first error raised: the run's stop message
    assert back <= len(server.requests) <= back + flying
    assert "HTTP 500" in str(stops[0]) and "circuit breaker" in str(stops[0])


def test_replies_without_a_completion_are_counted_as_sent_once_each():
    """An empty `choices` list is an invalid response: not retried, and the message says so (not "3 tries")."""
    empty = (200, {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": []})
    with ScriptedServer(replies(empty)) as server:
        gateway = Gateway(backoff_s=0, models={"local": config(server)})
        for seed in range(defaults.MAX_CONSECUTIVE_FAILURES - 1):
            with pytest.raises(ProviderError):
                call(gateway, "local", seed)
        with pytest.raises(ModelCallError) as stopped:
            call(gateway, "local", 99)
    n = defaults.MAX_CONSECUTIVE_FAILURES
    assert len(server.requests) == n
    assert f"{n} requests failed in a row ({n} invalid response (not retried)) over {n} calls (each failed after 1 " \
        f"try)" in str(stopped.value) and f"; {n} requests to it came back in all (" in str(stopped.value)


def test_a_burst_of_rate_limits_slows_the_calls_and_does_not_stop_the_run():
    """Every call rate-limited once, all at the same moment: the endpoint is up, so no breaker, every call answered."""
    seen: set[int] = set()
    lock = threading.Lock()

    def limited_once(request):
        with lock:
            first = request["seed"] not in seen
            seen.add(request["seed"])
        return (429, {"error": {"message": "slow down", "type": "rate_limit"}}, {"Retry-After": "0"}) if first else ANSWER

    with ScriptedServer(limited_once) as server:
        gateway = Gateway(backoff_s=0, models={"local": config(server)}, concurrency=defaults.GATEWAY_CONCURRENCY)
        outcomes = _burst(gateway, 2 * defaults.GATEWAY_CONCURRENCY)
    assert all(not isinstance(o, Exception) for o in outcomes), [o for o in outcomes if isinstance(o, Exception)][:1]
    assert len(server.requests) == 4 * defaults.GATEWAY_CONCURRENCY


def test_a_success_resets_the_failure_count():
    with ScriptedServer(replies(*[500] * (2 * defaults.GATEWAY_TRIES), ANSWER, *[500] * 99)) as server:
        gateway = Gateway(backoff_s=0, models={"local": config(server)})
        for seed in range(2):
            with pytest.raises(ProviderError):
                call(gateway, "local", seed)
        assert call(gateway, "local", 2).message["content"] == ANSWER["content"]
        for seed in range(3, 3 + defaults.MAX_CONSECUTIVE_FAILURES - 1):
            with pytest.raises(ProviderError):
                call(gateway, "local", seed)


def test_a_missing_key_variable_stops_before_any_request(monkeypatch):
    monkeypatch.delenv("LOCAL_LLM_KEY", raising=False)
    with ScriptedServer(replies(ANSWER)) as server:
        with pytest.raises(ModelCallError, match="LOCAL_LLM_KEY .*is not set"):
            call(Gateway(models={"local": config(server, api_key_env="LOCAL_LLM_KEY")}), "local")
    assert server.requests == []


def test_a_hosted_model_without_its_key_stops_before_any_request(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ModelCallError, match="ANTHROPIC_API_KEY is not set"):
        call(Gateway(), "anthropic/claude-3-5-sonnet-20240620")


def test_a_refused_key_names_the_variable(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    with ScriptedServer(always(401)) as server:
        with pytest.raises(ModelCallError, match="Fix: set OPENAI_API_KEY"):
            call(Gateway(models={"local": config(server)}), "local")
    assert len(server.requests) == 1


def test_the_cache_tells_endpoints_and_parameters_apart(tmp_path):
    with ScriptedServer(replies(ANSWER)) as a, ScriptedServer(replies(ANSWER)) as b:
        models = {"a": config(a, "a"), "b": config(b, "b"), "a3": config(a, "a3", params={"top_logprobs": 3})}
        gateway = Gateway(cache_path=tmp_path / "cache.sqlite", models=models)
        for name in ("a", "b", "a3", "a"):
            call(gateway, name)
    assert (len(a.requests), len(b.requests), gateway.cache_hits) == (2, 1, 1)


def registry(tmp_path, models: dict, **policy) -> str:
    path = tmp_path / "policies.yaml"
    path.write_text(yaml.safe_dump({"models": models, "policies": {
        "agent-v1": {"domain": "retail", "model": "local-agent", "judge_model": "hosted-judge", **policy}}}))
    return str(path)


def test_the_registry_names_backends_and_versions_refer_to_them(tmp_path):
    path = registry(tmp_path, {"local-agent": {"model": "openai/qwen", "api_base": "http://127.0.0.1:8000/v1",
                                               "params": {"top_logprobs": 5}, "logprobs": "on"},
                               "hosted-judge": "anthropic/claude-3-5-sonnet-20240620"})
    models, (version,) = load_models(path), load_registry(path).values()
    assert models["local-agent"].api_base == "http://127.0.0.1:8000/v1" and models["local-agent"].host() == \
        "127.0.0.1:8000"
    assert (version.model, version.agent_backend, version.judge_backend) == \
        ("local-agent", "openai/qwen", "anthropic/claude-3-5-sonnet-20240620")


@pytest.mark.parametrize(("entry", "message"), [
    ({"model": "openai/x", "api_key": "sk-123"}, "api_key: a key does not belong.*api_key_env"),
    ({"model": "openai/x", "temperture": 0.1}, "unknown field\\(s\\) \\['temperture'\\]"),
    ({"api_base": "http://127.0.0.1:8000/v1"}, "models/local-agent/model: missing"),
    ({"model": "openai/x", "api_base": "127.0.0.1:8000"}, "api_base: '127.0.0.1:8000' is not an http"),
    ({"model": "openai/x", "api_key_env": "sk-live-123"}, "api_key_env: 'sk-live-123' is not an environment variable"),
    ({"model": "openai/x", "params": {"temperature": 0.2}}, "\\['temperature'\\] are set by sim_pipeline"),
    ({"model": "openai/x", "logprobs": "sometimes"}, "logprobs: 'sometimes'. Fix: use one of"),
    ({"model": "openai/x", "timeout_s": 0}, "timeout_s=0.0"),
])
def test_a_bad_model_entry_names_the_field_and_the_fix(tmp_path, entry, message):
    path = registry(tmp_path, {"local-agent": entry})
    with pytest.raises(RegistryError, match=message):
        load_registry(path)


TOOLS = [{"type": "function", "function": {"name": "get_order", "description": "Look up an order.",
                                           "parameters": {"type": "object", "properties": {}}}}]


@pytest.mark.parametrize(("model", "dropped", "logprobs"), [
    ("openai/gpt-4o-mini", [], True),
    ("anthropic/claude-3-5-sonnet-20240620", ["seed"], False),  # Anthropic takes neither seed nor logprobs
    ("mistral/mistral-large-latest", [], False),  # Mistral takes a seed, not logprobs
    ("hosted_vllm/Qwen2.5-7B-Instruct", [], True),
])
def test_each_provider_gets_only_the_parameters_it_takes(model, dropped, logprobs):
    import litellm
    from litellm.utils import get_optional_params

    params, left_out = request_params(ModelConfig.plain(model), Sampling(seed=7), TOOLS, None, True)
    assert left_out == dropped and ("logprobs" in params) == logprobs
    name, provider, *_ = litellm.get_llm_provider(model)
    # litellm's own request transformation (no network) accepts the request as sent: no UnsupportedParamsError.
    sent = get_optional_params(model=name, custom_llm_provider=provider, **params)
    assert sent["max_tokens"] == params["max_tokens"] and sent["tools"]
    if provider in ("anthropic", "mistral"):  # what the provider does not take would have failed every call
        with pytest.raises(litellm.UnsupportedParamsError):
            get_optional_params(model=name, custom_llm_provider=provider, seed=7, logprobs=True)


def test_max_concurrency_caps_the_calls_in_flight_to_a_backend():
    import threading

    lock, state = threading.Lock(), {"now": 0, "most": 0}

    def counted(request):
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        time.sleep(0.1)
        with lock:
            state["now"] -= 1
        return ANSWER

    with ScriptedServer(counted) as server:
        gateway = Gateway(models={"local": config(server, max_concurrency=2)}, concurrency=16)

        async def burst():
            await asyncio.gather(*(gateway.complete("local", MESSAGES, sampling=Sampling(seed=i)) for i in range(8)))

        asyncio.run(burst())
    assert len(server.requests) == 8 and state["most"] == 2
