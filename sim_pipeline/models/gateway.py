"""The one model gateway: every call (policy, user, writer, judge) goes through here; HTTP models through litellm.

litellm is imported on the first call to a model it serves, never for the embedded `sim/` models, which are called
in-process by default (`fast_path`): the same rows as through litellm's `sim` provider (a test compares them),
without its import (~6 CPU-seconds and much of a run's memory) or its per-call overhead.

A model name is resolved through the registry's model configs (models/model_config.py): endpoint, key variable,
timeout, concurrency cap, pass-through parameters and logprobs mode. The gateway is the one retry layer (litellm's
client retries are off): it retries transient errors with doubling back-off, waits out a Retry-After, halves a
model's concurrency on rate limits (and recovers), stops the run after MAX_CONSECUTIVE_FAILURES failed calls of one
model in a row, stops on auth or quota errors with a message naming the environment variable, caches responses,
and records usage, cost and latency. API keys are passed to litellm per call and never logged; every error text
the gateway makes is redacted (sim_pipeline/redaction.py), including the registry's api_key_env values.
"""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sim_pipeline import defaults
from sim_pipeline.errors import ModelCallError
from sim_pipeline.models.breaker import Breaker
from sim_pipeline.models.cache import ResponseCache, request_key
from sim_pipeline.models.callable_agent import CALLABLE_PREFIX, call_agent
from sim_pipeline.models.mcp_harness import check_harness, is_mcp_agent
from sim_pipeline.models.markup import repair_message
from sim_pipeline.models.completion import Completion, ProviderError, Sampling
from sim_pipeline.models.model_config import ModelConfig, key_variable
from sim_pipeline.protocol.statuses import INVALID_RESPONSE
from sim_pipeline.redaction import name_secret_variables, redact

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@dataclass
class _Limiter:
    limit: int
    cap: int  # the most calls in flight this model may have (its max_concurrency, else the gateway's)
    in_flight: int = 0
    cond: asyncio.Condition = field(default_factory=asyncio.Condition)


def _litellm() -> Any:
    """litellm, with the embedded models registered and its per-call chatter off."""
    import litellm

    from sim_pipeline.models.sim_provider import register

    register()
    litellm.suppress_debug_info = True  # no "Provider List" / "Give Feedback" lines per failed or unpriced call
    return litellm


def _known_provider(config: ModelConfig) -> None:
    """Raise ModelCallError with the fix when litellm cannot tell which provider serves the model string: each of its
    calls would fail the same way, after the run had started."""
    provider = config.params.get("custom_llm_provider")
    try:
        _litellm().get_llm_provider(model=config.model, custom_llm_provider=provider, api_base=config.api_base)
    except Exception:  # noqa: BLE001 -- litellm's BadRequestError, or whatever an older litellm raises
        raise ModelCallError(f"model '{config.name}': litellm knows no provider for '{config.model}'. Fix: write it "
                             "as provider/model (openai/gpt-4o-mini, anthropic/claude-3-5-haiku-latest, ollama/llama3; "
                             "openai/<name> for an OpenAI-compatible server at api_base), or name a model of the "
                             "registry") from None


LOCAL_SERVER_KEY = "sk-no-key-needed"  # sent to an api_base that has no key variable (local servers ignore it)


def _reachable(config: ModelConfig) -> None:
    """Raise ModelCallError with the fix when nothing listens at the config's api_base."""
    parts = urlsplit(config.api_base or "")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=defaults.ENDPOINT_CHECK_TIMEOUT_S).close()
    except OSError as exc:
        raise ModelCallError(f"model '{config.name}': nothing answers at api_base {config.api_base} "
                             f"({exc.strerror or exc}). Fix: start the server, or correct api_base in the "
                             "registry's models: entry") from None


@functools.cache
def _supported_params(model: str) -> frozenset[str] | None:
    """The request parameters litellm says a model's provider takes (None: a provider it cannot place).

    Looked up once per model string: it is the same for every call, and calls are the gateway's hot path.
    """
    litellm = _litellm()
    try:
        provider = litellm.get_llm_provider(model)[1]
        supported = litellm.get_supported_openai_params(model=model, custom_llm_provider=provider)
    except Exception:  # noqa: BLE001 -- a provider litellm cannot place: send everything, let it answer
        return None
    return frozenset(supported) if supported is not None else None


def request_params(config: ModelConfig, sampling: Sampling, tools: list[dict[str, Any]] | None,
                   tool_choice: dict[str, Any] | None, logprobs: bool,
                   response_format: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[str]]:
    """The provider parameters of one request, and those left out because the provider does not take them.

    litellm lists what each provider takes (`get_supported_openai_params`): Anthropic takes no `seed` or
    `logprobs`, Mistral no `logprobs`. Logprobs are asked for in `auto` mode only where supported, always in `on`
    mode, never in `off`; a provider litellm does not know gets every parameter.
    """
    wanted: dict[str, Any] = {"temperature": sampling.temperature, "top_p": sampling.top_p,
                              "max_tokens": sampling.max_tokens, "seed": sampling.seed, **config.params}
    if tools:
        wanted["tools"] = tools
        if tool_choice is not None:
            wanted["tool_choice"] = tool_choice
    if response_format is not None:
        wanted["response_format"] = response_format
    supported = _supported_params(config.model)
    if logprobs and (config.logprobs == "on" or config.logprobs == "auto" and
                     (supported is None or "logprobs" in supported)):
        wanted["logprobs"] = True
    if supported is None:
        return wanted, []
    dropped = sorted(k for k in wanted if k not in supported and not (k == "logprobs" and config.logprobs == "on"))
    return {k: v for k, v in wanted.items() if k not in dropped}, dropped


# What a request carries besides its settings: the conversation's own parts, left out of a row's params_sent.
_CONVERSATION_PARAMS = ("tools", "tool_choice", "response_format")


def _from_cache(entry: dict[str, Any] | None) -> Completion | None:
    """A cached completion, or None when the entry is missing or not a completion this version can read (a miss)."""
    if entry is None:
        return None
    fields = Completion.__dataclass_fields__
    try:
        return Completion(**{**{k: v for k, v in entry.items() if k in fields}, "cached": True,
                             "dropped_params": tuple(entry.get("dropped_params") or ()),
                             "repaired": tuple(entry.get("repaired") or ())})
    except TypeError:
        return None


def retry_after(exc: Exception) -> float | None:
    """The seconds a rate-limited provider asks to wait (Retry-After: seconds or an HTTP date), if it says."""
    headers = getattr(exc, "headers", None) or getattr(getattr(exc, "response", None), "headers", None) or {}
    value = next((v for k, v in dict(headers).items() if str(k).lower() == "retry-after"), None)
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except (TypeError, ValueError):
        pass
    try:
        return max(0.0, parsedate_to_datetime(str(value)).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _response_cost(litellm: Any, response: Any) -> float:
    """A response's cost in USD, NaN when its price is not known (never an error).

    litellm prices every response it returns (`_hidden_params["response_cost"]`, None when no price is known) with
    the same cost calculator `completion_cost` runs: reading that figure, rather than pricing the response a second
    time, saves about a millisecond of CPU per call (for a model litellm has no price for, its search through name
    generalisations is the slow part). Checked equal, priced or not, for OpenAI models through a local server.
    """
    hidden = getattr(response, "_hidden_params", None)
    if isinstance(hidden, Mapping) and "response_cost" in hidden:  # priced (or found unpriced) by litellm already
        stamped = hidden["response_cost"]
        return float(stamped) if stamped is not None else float("nan")
    try:
        return float(litellm.completion_cost(completion_response=response) or 0.0)
    except Exception:  # noqa: BLE001 -- an unknown price: the cost is not known (NaN), not an error
        return float("nan")


def _message_dict(message: Any) -> dict[str, Any]:
    calls = getattr(message, "tool_calls", None) or []
    return {
        "role": "assistant", "content": getattr(message, "content", None),
        "tool_calls": [{"id": c.id, "type": "function",
                        "function": {"name": c.function.name, "arguments": c.function.arguments}} for c in calls] or None,
    }


class Gateway:
    """Async model calls with a cache, bounded concurrency, retries and error policy.

    Backends by model string: `python:package.module:function` calls your own agent code; `sim/...` runs the
    embedded models (in-process; through litellm's `sim` provider when `fast_path=False`); anything else goes to
    litellm.
    """

    def __init__(self, *, cache_path: Path | str | None = None, concurrency: int = defaults.GATEWAY_CONCURRENCY,
                 api_keys: dict[str, str] | None = None, backoff_s: float = defaults.GATEWAY_BACKOFF_SECONDS,
                 fast_path: bool = True, models: Mapping[str, ModelConfig] | None = None) -> None:
        self.cache = ResponseCache(cache_path) if cache_path else None
        self.concurrency = concurrency
        self.backoff_s = backoff_s
        self.fast_path = fast_path
        self.models = dict(models or {})
        self._api_keys = dict(api_keys or {})
        name_secret_variables(c.api_key_env for c in self.models.values())
        self._limiters: dict[tuple[str, int], _Limiter] = {}
        self._breakers: dict[str, Breaker] = {}  # per model name (models/breaker.py)
        self._ready: set[str] = set()  # configs checked by `check`
        self.calls = 0
        self.cache_hits = 0
        self.retries = 0

    def config(self, model: str) -> ModelConfig:
        """The config a model name refers to (a registry `models:` entry), or the plain string's defaults."""
        return self.models.get(model) or ModelConfig.plain(model)

    def sent_params(self, model: str, sampling: Sampling, *, tools: list[dict[str, Any]] | None = None,
                    tool_choice: dict[str, Any] | None = None, logprobs: bool = True,
                    response_format: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[str]]:
        """The settings a call with these arguments sends (its conversation, tools and format aside), and the
        parameters left out because the provider does not take them: what `_call` sends, by the same function."""
        config = self.config(model)
        if config.model.startswith(CALLABLE_PREFIX):
            return sampling.as_dict(), []  # your agent's function gets the sampling settings as they are
        if is_mcp_agent(config.model):  # the harness samples itself: it is given the seed (SIM_WORLD_SEED) only
            return {"seed": sampling.seed}, []
        if config.model.startswith("sim/"):  # in process or through litellm, the embedded models read these two
            return {"temperature": sampling.temperature, "seed": sampling.seed}, []
        params, dropped = request_params(config, sampling, tools, tool_choice, logprobs, response_format)
        return {k: v for k, v in params.items() if k not in _CONVERSATION_PARAMS}, dropped

    def breaker(self, config: ModelConfig) -> Breaker:
        """The circuit breaker of a model name (one per gateway, shared by every call to it)."""
        if config.name not in self._breakers:
            where = f" at {config.api_base}" if config.api_base else ""
            self._breakers[config.name] = Breaker(config.name, where, config.timeout_s)
        return self._breakers[config.name]

    def _limiter(self, config: ModelConfig) -> _Limiter:
        # asyncio primitives belong to one event loop; a gateway may serve several asyncio.run() calls in turn.
        key = (config.name, id(asyncio.get_running_loop()))
        if key not in self._limiters:
            cap = min(self.concurrency, config.max_concurrency or self.concurrency)
            self._limiters[key] = _Limiter(cap, cap)
        return self._limiters[key]

    def redact(self, text: str) -> str:
        """Text with every known secret replaced: error messages may echo a request, keys must not reach rows."""
        return redact(text, self._api_keys.values())

    async def complete(self, model: str, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
                       sampling: Sampling = Sampling(), sample_index: int = 0, logprobs: bool = True,
                       tool_choice: dict[str, Any] | None = None,
                       response_format: dict[str, Any] | None = None) -> Completion:
        """One completion; raises ModelCallError on auth/quota errors, ProviderError after failed retries.

        `tool_choice` forces a tool (the simulated user answers through `user_action`) and `response_format` asks
        for structured output (a JSON schema); both are part of the request only for litellm backends.
        """
        config = self.config(model)
        if config.name not in self._ready:
            self.check(config)
        key = None  # hashing the request (its JSON) is the cache's cost: a gateway without a cache skips it
        if self.cache is not None:
            asked = sampling.as_dict() | ({"response_format": response_format} if response_format is not None else {})
            key = request_key(config.model, messages, tools, asked, sample_index, config.identity())
            hit = _from_cache(self.cache.get(key))
            if hit is not None:
                self.cache_hits += 1
                return hit
        limiter = self._limiter(config)
        breaker = self.breaker(config)
        breaker.guard()
        number = breaker.call_started()
        async with limiter.cond:
            await limiter.cond.wait_for(lambda: limiter.in_flight < limiter.limit)
            limiter.in_flight += 1
        sent = [0]  # requests this call sent (its tries), counted by _with_retries
        try:
            breaker.guard()  # it may have opened while this call waited for a slot
            completion = await self._with_retries(config, messages, tools, sampling, logprobs, limiter, tool_choice,
                                                  response_format, sent, number)
        except ProviderError as exc:
            breaker.call_failed(number, sent[0], exc)
            raise
        finally:
            async with limiter.cond:
                limiter.in_flight -= 1
                limiter.cond.notify_all()
        breaker.call_ok(number)
        self.calls += 1
        if self.cache is not None and key is not None:
            self.cache.put(key, {k: v for k, v in completion.__dict__.items() if k != "cached"})
        return completion

    def check(self, config: ModelConfig | str) -> None:
        """Fail before spending: an unknown embedded model, a missing key or an unreachable endpoint stops the run
        with the fix (checked once per model, before its first call; a run checks all its models up front)."""
        config = self.config(config) if isinstance(config, str) else config
        model = config.model
        if model.startswith("sim/"):
            from sim_pipeline.models import sim_models

            if model not in sim_models.sim_model_names() and not sim_models.latency_seconds(model):
                raise ModelCallError(f"model '{model}': no embedded model of that name. Fix: use one of "
                                     f"{sim_models.sim_model_names()} or a litellm model string")
        elif is_mcp_agent(model):
            check_harness(model)
        elif not model.startswith(CALLABLE_PREFIX):
            _known_provider(config)
            key = self.api_key(config)  # raises when a named key variable is not set
            if config.api_base:
                _reachable(config)
            elif key is None:
                try:
                    missing = _litellm().validate_environment(model=model).get("missing_keys") or []
                except Exception:  # noqa: BLE001 -- a provider litellm cannot check: its first call will tell
                    missing = []
                if missing:
                    raise ModelCallError(f"model '{config.name}': {', '.join(missing)} is not set. Fix: export "
                                         f"{missing[0]}=<key> (or give the model a registry entry with api_key_env), "
                                         "then re-run")
        self._ready.add(config.name)

    def check_all(self, models: list[str]) -> None:
        """`check` every model a run will call (policy, user, judge, writer) before its first call, each model once
        per gateway (versions share their user, judge and writer)."""
        for model in dict.fromkeys(models):
            if self.config(model).name not in self._ready:
                self.check(model)

    async def _with_retries(self, config: ModelConfig, messages: list[dict[str, Any]],
                            tools: list[dict[str, Any]] | None, sampling: Sampling, logprobs: bool, limiter: _Limiter,
                            tool_choice: dict[str, Any] | None = None,
                            response_format: dict[str, Any] | None = None, sent: list[int] | None = None,
                            call: int = 0) -> Completion:
        model = config.model
        breaker = self.breaker(config)
        sent = sent if sent is not None else [0]
        if model.startswith(CALLABLE_PREFIX):
            return await call_agent(model, messages, tools, sampling, redact=self.redact)
        if is_mcp_agent(model):
            raise ModelCallError(f"model '{config.name}' is an MCP agent harness: it plays whole rollouts as the "
                                 "policy under test and answers no single chat request. Fix: use it as a version's "
                                 "`model` only (not as the user, judge, writer or reply classifier)")
        if model.startswith("sim/") and self.fast_path:
            return await self._in_process(model, messages, tools, sampling)
        litellm = _litellm()
        delay = self.backoff_s
        last: Exception | None = None
        for attempt in range(defaults.GATEWAY_TRIES):
            wait = delay
            request = breaker.request_started(call)  # raises once the breaker is open: no more requests to a dead model
            sent[0] += 1
            try:
                try:
                    completion = await self._call(litellm, config, messages, tools, sampling, logprobs, tool_choice,
                                                  response_format)
                except Exception as exc:
                    # A rate limit says the endpoint is up and busy: it slows the calls (below), it is no outage.
                    breaker.request_failed(request, exc, streak=not isinstance(exc, litellm.RateLimitError))
                    raise
                breaker.request_ok(request)
                if limiter.limit < limiter.cap:
                    limiter.limit += 1  # additive increase after a success: recover from a rate limit slowly
                return completion
            except (litellm.AuthenticationError, litellm.PermissionDeniedError) as exc:
                raise ModelCallError(self._auth_message(config, exc)) from None
            except litellm.RateLimitError as exc:
                if "quota" in str(exc).lower() or "insufficient" in str(exc).lower():
                    raise ModelCallError(f"model '{model}': quota exhausted at the provider. Fix: raise the quota or "
                                         "switch the model in data/policies.yaml") from None
                # Multiplicative decrease: a rate-limited provider gets fewer calls in flight until it recovers.
                limiter.limit = max(defaults.GATEWAY_MIN_CONCURRENCY, limiter.limit // 2)
                last = exc
                asked = retry_after(exc)
                if asked is not None and asked > defaults.RETRY_AFTER_MAX_S:
                    raise ProviderError(self.redact(f"RateLimitError: the provider asks to wait {asked:g} s "
                                                    f"(Retry-After), more than {defaults.RETRY_AFTER_MAX_S:g} s")) from None
                wait = max(delay, asked or 0.0)
            except (litellm.Timeout, litellm.APIConnectionError, litellm.ServiceUnavailableError,
                    litellm.InternalServerError) as exc:
                last = exc
            except (litellm.BadRequestError, litellm.NotFoundError) as exc:
                raise ProviderError(self.redact(f"{type(exc).__name__}: {exc}")[:300]) from None
            except litellm.APIError as exc:
                # Any other status litellm does not map (an OpenAI-compatible 403 arrives as a bare APIError).
                if getattr(exc, "status_code", None) in (401, 403):
                    raise ModelCallError(self._auth_message(config, exc)) from None
                raise ProviderError(self.redact(f"{type(exc).__name__}: {exc}")[:300]) from None
            except (ModelCallError, ProviderError):
                raise  # the gateway's own: already redacted, and an invalid response keeps its status
            except Exception as exc:  # noqa: BLE001 -- an error litellm does not map may quote the request (its key)
                raise ProviderError(self.redact(f"{type(exc).__name__}: {exc}")[:300]) from None
            if attempt + 1 < defaults.GATEWAY_TRIES:
                self.retries += 1
                await asyncio.sleep(wait)
                delay *= 2
        raise ProviderError(self.redact(f"{type(last).__name__} after {defaults.GATEWAY_TRIES} tries: {last}")[:300])

    async def _in_process(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                          sampling: Sampling) -> Completion:
        """The embedded models without litellm: the same reply, logprobs and token counts, less overhead."""
        from sim_pipeline.models import sim_models

        started = time.perf_counter()
        delay = sim_models.latency_seconds(model)
        if delay:
            await asyncio.sleep(delay)
        try:
            output = sim_models.respond(model, messages, tools=tools, temperature=sampling.temperature,
                                        seed=sampling.seed)
        except ModelCallError:
            raise
        except Exception as exc:  # noqa: BLE001 -- a bug in an embedded model is this rollout's error, not the run's
            raise ProviderError(f"embedded model {model} failed: {exc!r}") from exc
        token_lps = sim_models.token_logprobs(output)
        return Completion(message=dict(output.message), logprob=float(sum(token_lps)), n_tokens=output.n_tokens,
                          token_logprobs=token_lps, prompt_tokens=sim_models.prompt_tokens(messages), cost=0.0,
                          latency_s=time.perf_counter() - started, cached=False, logprob_source="decision")

    def api_key(self, config: ModelConfig) -> str | None:
        """The key for a config: its `api_key_env` variable, else the provider's key the resource was given."""
        if config.api_key_env:
            name_secret_variables([config.api_key_env])  # a config made without the registry: still a secret
            value = os.environ.get(config.api_key_env)
            if not value:
                raise ModelCallError(f"model '{config.name}': the environment variable {config.api_key_env} "
                                     f"(its api_key_env) is not set. Fix: export {config.api_key_env}=<key>, "
                                     "then re-run")
            return value
        return self._api_keys.get(config.model.split("/", 1)[0])

    async def _call(self, litellm: Any, config: ModelConfig, messages: list[dict[str, Any]],
                    tools: list[dict[str, Any]] | None, sampling: Sampling, logprobs: bool,
                    tool_choice: dict[str, Any] | None = None,
                    response_format: dict[str, Any] | None = None) -> Completion:
        started = time.perf_counter()
        model = config.model
        kwargs, dropped = request_params(config, sampling, tools, tool_choice, logprobs, response_format)
        # max_retries=0: the gateway is the one retry layer (the OpenAI client would retry twice inside each try).
        kwargs.update(max_retries=0, timeout=config.timeout_s)
        if config.api_base:
            kwargs["api_base"] = config.api_base
        # A local server (vLLM, llama.cpp, Ollama) takes any key, but the OpenAI client insists on one.
        key = self.api_key(config) or (LOCAL_SERVER_KEY if config.api_base else None)
        if key:
            kwargs["api_key"] = key
        response = await litellm.acompletion(model=model, messages=messages, **kwargs)
        latency = time.perf_counter() - started
        try:
            choice = response.choices[0]
            message, repaired = repair_message(_message_dict(choice.message))
            token_lps, tokens = None, None
            if getattr(choice, "logprobs", None) is not None and getattr(choice.logprobs, "content", None):
                token_lps = [float(t.logprob) for t in choice.logprobs.content]
                tokens = [str(t.token) for t in choice.logprobs.content]
        except (AttributeError, IndexError, TypeError, ValueError) as exc:
            raise ProviderError(self.redact(f"{model} sent no valid completion ({type(exc).__name__}: {exc})")[:300],
                                status=INVALID_RESPONSE) from None
        extra = getattr(choice.message, "provider_specific_fields", None) or {}
        usage = getattr(response, "usage", None)
        cost = _response_cost(litellm, response)
        return Completion(
            message=message,
            logprob=float(sum(token_lps)) if token_lps is not None else None,
            n_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            token_logprobs=token_lps,
            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            cost=cost, latency_s=latency, cached=False,
            logprob_source=extra.get("logprob_source") or ("tokens" if token_lps is not None else None),
            dropped_params=tuple(dropped), repaired=repaired,
            tokens=tokens if not extra.get("logprob_source") else None,  # the embedded models score decisions
        )

    def _auth_message(self, config: ModelConfig, exc: Exception) -> str:
        env = key_variable(config)
        return (f"model '{config.name}': the provider refused the credentials ({type(exc).__name__}). "
                f"Fix: set {env} in the environment (Dagster reads it through EnvVar), then re-run")
