"""The gateway: cache and k-independence, retries, rate-limit back-off, auth errors, callables, fast path."""

import asyncio

import litellm
import pytest

from sim_pipeline.errors import ModelCallError
from sim_pipeline.models.gateway import Gateway, ProviderError, Sampling
from sim_pipeline.models.model_config import ModelConfig
from sim_pipeline.models.sim_provider import register

MESSAGES = [{"role": "user", "content": "hello"}]


class Scripted(litellm.CustomLLM):
    """A provider that raises the scripted exceptions in order, then answers."""

    def __init__(self):
        super().__init__()
        self.script: list = []
        self.calls = 0

    def completion(self, model, messages, *args, **kwargs):
        self.calls += 1
        if self.script:
            raise self.script.pop(0)
        return litellm.completion(model="gpt-4o-mini", messages=messages, mock_response="fine")

    async def acompletion(self, model, messages, *args, **kwargs):
        return self.completion(model, messages, *args, **kwargs)


@pytest.fixture
def scripted():
    register()
    handler = Scripted()
    litellm.custom_provider_map = [m for m in litellm.custom_provider_map if m["provider"] != "scripted"] + [
        {"provider": "scripted", "custom_handler": handler}]
    yield handler
    litellm.custom_provider_map = [m for m in litellm.custom_provider_map if m["provider"] != "scripted"]


def complete(gateway, model="scripted/x", **kwargs):
    return asyncio.run(gateway.complete(model, MESSAGES, **kwargs))


def test_cache_hits_and_k_independence(tmp_path):
    gateway = Gateway(cache_path=tmp_path / "c.sqlite")
    a = complete(gateway, "sim/agent-v1", sampling=Sampling(seed=1))
    again = complete(gateway, "sim/agent-v1", sampling=Sampling(seed=1))
    assert again.cached and again.message == a.message and gateway.calls == 1 and gateway.cache_hits == 1
    complete(gateway, "sim/agent-v1", sampling=Sampling(seed=1), sample_index=1)  # another of the k samples
    assert gateway.calls == 2 and len(gateway.cache) == 2
    # A re-run with a fresh gateway on the same cache costs nothing.
    rerun = Gateway(cache_path=tmp_path / "c.sqlite")
    assert complete(rerun, "sim/agent-v1", sampling=Sampling(seed=1)).cached and rerun.calls == 0


def test_transient_errors_are_retried(scripted):
    scripted.script = [litellm.InternalServerError("down", "scripted", "x"), litellm.Timeout("slow", "x", "scripted")]
    gateway = Gateway(backoff_s=0)
    assert complete(gateway).message["content"] == "fine"
    assert scripted.calls == 3 and gateway.retries == 2


def test_three_failures_become_a_provider_error(scripted):
    scripted.script = [litellm.InternalServerError("down", "scripted", "x") for _ in range(3)]
    with pytest.raises(ProviderError, match="after 3 tries"):
        complete(Gateway(backoff_s=0))


def test_rate_limit_halves_concurrency_then_recovers(scripted):
    scripted.script = [litellm.RateLimitError("slow down", "scripted", "x")]
    gateway = Gateway(backoff_s=0, concurrency=8)

    async def scenario():
        await gateway.complete("scripted/x", MESSAGES)
        limiter = gateway._limiter(gateway.config("scripted/x"))
        after_limit = limiter.limit
        for seed in range(1, 4):
            await gateway.complete("scripted/x", MESSAGES, sampling=Sampling(seed=seed))
        return after_limit, limiter.limit

    # Halved to 4 by the rate limit, +1 after the successful retry; then back to 8 after three more successes.
    assert asyncio.run(scenario()) == (5, 8)


def test_auth_error_stops_with_the_variable_to_set(scripted):
    scripted.script = [litellm.AuthenticationError("bad key", "scripted", "x")]
    with pytest.raises(ModelCallError, match="refused the credentials .* Fix: set"):
        complete(Gateway(backoff_s=0))
    message = Gateway()._auth_message(ModelConfig.plain("openai/gpt-4o-mini"), RuntimeError("401"))
    assert "OPENAI_API_KEY" in message


def test_quota_error_stops_the_run(scripted):
    scripted.script = [litellm.RateLimitError("You exceeded your current quota", "scripted", "x")]
    with pytest.raises(ModelCallError, match="quota exhausted"):
        complete(Gateway(backoff_s=0))


def test_secrets_are_redacted_from_errors(scripted, monkeypatch):
    monkeypatch.setenv("SCRIPTED_API_KEY", "sk-very-secret-123")
    scripted.script = [litellm.BadRequestError("key sk-very-secret-123 rejected", "x", "scripted")]
    with pytest.raises(ProviderError) as error:
        complete(Gateway(backoff_s=0))
    assert "sk-very-secret-123" not in str(error.value) and "[redacted]" in str(error.value)


def test_callable_agents():
    gateway = Gateway()
    reply = complete(gateway, "python:sim_pipeline_tests.models.agents_for_tests:polite_decliner", tools=[{}, {}])
    assert reply.message["content"].startswith("Sorry") and "2 tools" in reply.message["content"]
    scored = complete(gateway, "python:sim_pipeline_tests.models.agents_for_tests:async_with_logprob")
    assert scored.logprob == -1.5 and scored.logprob_source == "callable"
    with pytest.raises(ProviderError, match="raised RuntimeError: boom"):
        complete(gateway, "python:sim_pipeline_tests.models.agents_for_tests:broken")
    with pytest.raises(ModelCallError, match="cannot import"):
        complete(gateway, "python:no_such_module:f")


def test_fast_path_gives_the_same_completion_as_litellm():
    slow, fast = Gateway(fast_path=False), Gateway()
    for seed in range(5):
        a = complete(slow, "sim/agent-v2", sampling=Sampling(seed=seed))
        b = complete(fast, "sim/agent-v2", sampling=Sampling(seed=seed))
        assert (a.message, a.logprob, a.n_tokens, a.token_logprobs, a.prompt_tokens) == \
            (b.message, b.logprob, b.n_tokens, b.token_logprobs, b.prompt_tokens)


def test_unknown_embedded_model_stops_the_run():
    # Regression: through litellm the provider's error came back as a retryable APIConnectionError.
    for fast in (False, True):
        with pytest.raises(ModelCallError, match="no embedded model of that name"):
            complete(Gateway(fast_path=fast), "sim/judge-typo")


@pytest.mark.parametrize("poison", ["not json {", "flipped"])
def test_a_bad_cache_entry_is_a_logged_miss_and_an_unreadable_cache_names_itself(tmp_path, poison, caplog):
    from sim_pipeline.models.cache import TABLE

    gateway = Gateway(cache_path=tmp_path / "c.sqlite")
    complete(gateway, "sim/agent-v1", sampling=Sampling(seed=1))
    with gateway.cache._lock:  # poison the one entry: not JSON, or valid JSON with one character changed
        [(text,)] = gateway.cache._db.execute(f"SELECT value FROM {TABLE}").fetchall()
        bad = poison if poison != "flipped" else text.replace('"role"', '"rolf"', 1)
        assert bad != text
        gateway.cache._db.execute(f"UPDATE {TABLE} SET value = ?", (bad,))
        gateway.cache._db.commit()
    again = complete(gateway, "sim/agent-v1", sampling=Sampling(seed=1))
    assert not again.cached and gateway.calls == 2
    assert "failed its checksum or does not decode" in caplog.text and str(tmp_path / "c.sqlite") in caplog.text
    assert complete(gateway, "sim/agent-v1", sampling=Sampling(seed=1)).cached  # the fresh answer replaced it
    broken = tmp_path / "broken.sqlite"
    broken.write_bytes(b"this is not a sqlite database" * 100)
    with pytest.raises(ModelCallError, match=f"model cache {broken} is unreadable.*Fix: delete it"):
        Gateway(cache_path=broken)
