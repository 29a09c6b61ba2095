"""Your own agent code as a model: `python:package.module:function` in the registry's `model` field.

The function receives the chat so far (OpenAI format), the tool schemas and the sampling settings, and returns the
next assistant message: either the message itself, `{"role": "assistant", "content": ..., "tool_calls": [...]}`,
or `{"message": {...}, "logprob": float | None, "token_logprobs": [...] | None}` when it knows its
log-probabilities. It may be a plain or an `async` function. Errors it raises become the rollout's
`provider_error` status, with the message.
"""

from __future__ import annotations

import importlib
import inspect
import time
from collections.abc import Callable
from functools import cache
from typing import Any

from sim_pipeline.errors import ModelCallError
from sim_pipeline.models.completion import Completion, ProviderError, Sampling

CALLABLE_PREFIX = "python:"


@cache
def load_agent(model: str) -> Callable[..., Any]:
    """Import the function a `python:module:function` model string names."""
    target = model.removeprefix(CALLABLE_PREFIX)
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ModelCallError(f"model '{model}': expected python:package.module:function. Fix: e.g. "
                             "'python:my_agents.support:respond'")
    try:
        function = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ModelCallError(f"model '{model}': cannot import {target} ({exc}). Fix: make the module importable "
                             "(installed, or on PYTHONPATH) and check the function name") from None
    if not callable(function):
        raise ModelCallError(f"model '{model}': {target} is not callable. Fix: point at a function")
    return function


def _message(value: Any) -> dict[str, Any]:
    message = dict(value)
    calls = message.get("tool_calls") or None
    return {"role": "assistant", "content": message.get("content"), "tool_calls": calls}


async def call_agent(model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                     sampling: Sampling, *, redact: Callable[[str], str]) -> Completion:
    """Call a user's agent function and wrap its reply as a Completion."""
    function = load_agent(model)
    started = time.perf_counter()
    try:
        reply = function([dict(m) for m in messages], list(tools or []), sampling.as_dict())
        if inspect.isawaitable(reply):
            reply = await reply
    except ModelCallError:
        raise
    except Exception as exc:  # the user's code failed on this request: a row status, not a crashed run
        raise ProviderError(redact(f"{model} raised {type(exc).__name__}: {exc}")[:300]) from exc
    if not isinstance(reply, dict):
        raise ProviderError(f"{model} returned {type(reply).__name__}, not a message dict")
    body = reply.get("message", reply)
    token_lps = reply.get("token_logprobs") if "message" in reply else None
    logprob = reply.get("logprob") if "message" in reply else None
    if logprob is None and token_lps:
        logprob = float(sum(token_lps))
    return Completion(message=_message(body), logprob=logprob, n_tokens=len(token_lps or []), token_logprobs=token_lps,
                      prompt_tokens=0, cost=0.0, latency_s=time.perf_counter() - started, cached=False,
                      logprob_source="callable" if logprob is not None else None)
