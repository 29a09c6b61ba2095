"""The one model gateway: every call (policy, user, writer, judge) goes through litellm here.

It bounds concurrency per model, retries transient errors with doubling back-off, halves a model's concurrency on
rate limits (and recovers), stops on auth or quota errors with a message naming the environment variable, caches
responses, and records usage, cost and latency. API keys are passed to litellm per call and never logged.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim_pipeline import defaults
from sim_pipeline.errors import ModelCallError
from sim_pipeline.models.cache import ResponseCache, request_key
from sim_pipeline.models.callable_agent import CALLABLE_PREFIX, call_agent
from sim_pipeline.models.completion import Completion, ProviderError, Sampling
from sim_pipeline.protocol.statuses import INVALID_RESPONSE

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@dataclass
class _Limiter:
    limit: int
    in_flight: int = 0
    cond: asyncio.Condition = field(default_factory=asyncio.Condition)


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
    embedded models (through litellm, or in-process when `fast_path=True`); anything else goes to litellm.
    """

    def __init__(self, *, cache_path: Path | str | None = None, concurrency: int = defaults.GATEWAY_CONCURRENCY,
                 api_keys: dict[str, str] | None = None, backoff_s: float = defaults.GATEWAY_BACKOFF_SECONDS,
                 fast_path: bool = False) -> None:
        self.cache = ResponseCache(cache_path) if cache_path else None
        self.concurrency = concurrency
        self.backoff_s = backoff_s
        self.fast_path = fast_path
        self._api_keys = dict(api_keys or {})
        self._limiters: dict[tuple[str, int], _Limiter] = {}
        self.calls = 0
        self.cache_hits = 0
        self.retries = 0

    def _limiter(self, model: str) -> _Limiter:
        # asyncio primitives belong to one event loop; a gateway may serve several asyncio.run() calls in turn.
        key = (model, id(asyncio.get_running_loop()))
        if key not in self._limiters:
            self._limiters[key] = _Limiter(self.concurrency)
        return self._limiters[key]

    def redact(self, text: str) -> str:
        """Text with every known secret replaced: error messages may echo a request, keys must not reach rows."""
        secrets = [*self._api_keys.values(), *(v for k, v in os.environ.items() if k.endswith("_API_KEY") and v)]
        for secret in secrets:
            if len(secret) >= defaults.SECRET_MIN_LENGTH:
                text = text.replace(secret, "[redacted]")
        return text

    async def complete(self, model: str, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
                       sampling: Sampling = Sampling(), sample_index: int = 0, logprobs: bool = True,
                       tool_choice: dict[str, Any] | None = None) -> Completion:
        """One completion; raises ModelCallError on auth/quota errors, ProviderError after failed retries.

        `tool_choice` forces a tool (the simulated user answers through `user_action`); it is part of the request
        only for litellm backends.
        """
        key = request_key(model, messages, tools, sampling.as_dict(), sample_index)
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                self.cache_hits += 1
                return Completion(**{**hit, "cached": True})
        limiter = self._limiter(model)
        async with limiter.cond:
            await limiter.cond.wait_for(lambda: limiter.in_flight < limiter.limit)
            limiter.in_flight += 1
        try:
            completion = await self._with_retries(model, messages, tools, sampling, logprobs, limiter, tool_choice)
        finally:
            async with limiter.cond:
                limiter.in_flight -= 1
                limiter.cond.notify_all()
        self.calls += 1
        if self.cache is not None:
            self.cache.put(key, {k: v for k, v in completion.__dict__.items() if k != "cached"})
        return completion

    async def _with_retries(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                            sampling: Sampling, logprobs: bool, limiter: _Limiter,
                            tool_choice: dict[str, Any] | None = None) -> Completion:
        if model.startswith(CALLABLE_PREFIX):
            return await call_agent(model, messages, tools, sampling, redact=self.redact)
        if model.startswith("sim/"):
            from sim_pipeline.models import sim_models

            if model not in sim_models.sim_model_names() and not sim_models.latency_seconds(model):
                # Stop here: through litellm the error would come back wrapped as a retryable connection error.
                raise ModelCallError(f"model '{model}': no embedded model of that name. Fix: use one of "
                                     f"{sim_models.sim_model_names()} or a litellm model string")
            if self.fast_path:
                return await self._in_process(model, messages, tools, sampling)
        import litellm

        from sim_pipeline.models.sim_provider import register

        register()
        delay = self.backoff_s
        last: Exception | None = None
        for attempt in range(defaults.GATEWAY_TRIES):
            try:
                completion = await self._call(litellm, model, messages, tools, sampling, logprobs, tool_choice)
                if limiter.limit < self.concurrency:
                    limiter.limit += 1  # additive increase after a success: recover from a rate limit slowly
                return completion
            except (litellm.AuthenticationError, litellm.PermissionDeniedError) as exc:
                raise ModelCallError(self._auth_message(model, exc)) from None
            except litellm.RateLimitError as exc:
                if "quota" in str(exc).lower() or "insufficient" in str(exc).lower():
                    raise ModelCallError(f"model '{model}': quota exhausted at the provider. Fix: raise the quota or "
                                         "switch the model in data/policies.yaml") from None
                # Multiplicative decrease: a rate-limited provider gets fewer calls in flight until it recovers.
                limiter.limit = max(defaults.GATEWAY_MIN_CONCURRENCY, limiter.limit // 2)
                last = exc
            except (litellm.Timeout, litellm.APIConnectionError, litellm.ServiceUnavailableError,
                    litellm.InternalServerError) as exc:
                last = exc
            except (litellm.BadRequestError, litellm.NotFoundError) as exc:
                raise ProviderError(self.redact(f"{type(exc).__name__}: {str(exc)[:300]}")) from None
            except litellm.APIError as exc:
                # Any other status litellm does not map (an OpenAI-compatible 403 arrives as a bare APIError).
                if getattr(exc, "status_code", None) in (401, 403):
                    raise ModelCallError(self._auth_message(model, exc)) from None
                raise ProviderError(self.redact(f"{type(exc).__name__}: {str(exc)[:300]}")) from None
            if attempt + 1 < defaults.GATEWAY_TRIES:
                self.retries += 1
                await asyncio.sleep(delay)
                delay *= 2
        raise ProviderError(self.redact(f"{type(last).__name__} after {defaults.GATEWAY_TRIES} tries: {str(last)[:300]}"))

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

    async def _call(self, litellm: Any, model: str, messages: list[dict[str, Any]],
                    tools: list[dict[str, Any]] | None, sampling: Sampling, logprobs: bool,
                    tool_choice: dict[str, Any] | None = None) -> Completion:
        started = time.perf_counter()
        # max_retries=0: the gateway is the one retry layer (the OpenAI client would retry twice inside each try).
        kwargs: dict[str, Any] = {"temperature": sampling.temperature, "top_p": sampling.top_p,
                                  "max_tokens": sampling.max_tokens, "seed": sampling.seed, "max_retries": 0}
        if tools:
            kwargs["tools"] = tools
            if tool_choice is not None:
                kwargs["tool_choice"] = tool_choice
        if logprobs:
            kwargs["logprobs"] = True
        provider = model.split("/", 1)[0]
        if provider in self._api_keys:
            kwargs["api_key"] = self._api_keys[provider]
        response = await litellm.acompletion(model=model, messages=messages, **kwargs)
        latency = time.perf_counter() - started
        try:
            choice = response.choices[0]
            message = _message_dict(choice.message)
            token_lps = None
            if getattr(choice, "logprobs", None) is not None and getattr(choice.logprobs, "content", None):
                token_lps = [float(t.logprob) for t in choice.logprobs.content]
        except (AttributeError, IndexError, TypeError, ValueError) as exc:
            raise ProviderError(self.redact(f"{model} sent no valid completion ({type(exc).__name__}: {exc})"[:300]),
                                status=INVALID_RESPONSE) from None
        extra = getattr(choice.message, "provider_specific_fields", None) or {}
        usage = getattr(response, "usage", None)
        try:
            cost = float(litellm.completion_cost(completion_response=response) or 0.0)
        except Exception:  # noqa: BLE001 -- an unknown price: the cost is not known (NaN), not an error
            cost = float("nan")
        return Completion(
            message=message,
            logprob=float(sum(token_lps)) if token_lps is not None else None,
            n_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            token_logprobs=token_lps,
            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            cost=cost, latency_s=latency, cached=False,
            logprob_source=extra.get("logprob_source") or ("tokens" if token_lps is not None else None),
        )

    def _auth_message(self, model: str, exc: Exception) -> str:
        import litellm

        try:
            missing = litellm.validate_environment(model=model).get("missing_keys") or []
        except Exception:  # noqa: BLE001 -- only a hint for the message; an unknown provider has none
            missing = []
        env = ", ".join(missing) or f"the API key variable of provider '{model.split('/', 1)[0]}'"
        return (f"model '{model}': the provider refused the credentials ({type(exc).__name__}). "
                f"Fix: set {env} in the environment (Dagster reads it through EnvVar), then re-run")
