"""Register the embedded models with litellm as provider `sim`, so `litellm.completion(model="sim/...")` works.

Imported only when a model is called (litellm takes seconds to import).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never fetch the price map from the internet

import litellm
from litellm.llms.custom_llm import CustomLLMError
from litellm.types.utils import (
    ChatCompletionMessageToolCall,
    ChatCompletionTokenLogprob,
    ChoiceLogprobs,
    Choices,
    Function,
    Message,
    ModelResponse,
    Usage,
)

from sim_pipeline.errors import ModelCallError
from sim_pipeline.models import sim_models
from sim_pipeline.models.conversation import tokens

_registered = False


def to_model_response(model: str, output: sim_models.SimOutput, prompt_tokens: int) -> ModelResponse:
    """An OpenAI-shaped response whose first token carries the decision's log-probability (the rest are 0)."""
    message = output.message
    tool_calls = [
        ChatCompletionMessageToolCall(id=c["id"], type="function",
                                      function=Function(name=c["function"]["name"], arguments=c["function"]["arguments"]))
        for c in message.get("tool_calls") or []
    ] or None
    text = message.get("content") or "".join(c["function"]["arguments"] for c in message.get("tool_calls") or [])
    words = tokens(text)
    content = [ChatCompletionTokenLogprob(token=words[i] if i < len(words) else "", logprob=lp, bytes=None,
                                          top_logprobs=[])
               for i, lp in enumerate(sim_models.token_logprobs(output))]
    msg = Message(content=message.get("content"), role="assistant", tool_calls=tool_calls,
                  provider_specific_fields={"logprob_source": "decision", "decision_logprob": output.logprob})
    choice = Choices(index=0, message=msg, finish_reason="tool_calls" if tool_calls else "stop",
                     logprobs=ChoiceLogprobs(content=content))
    return ModelResponse(model=model if model.startswith("sim/") else "sim/" + model, choices=[choice],
                         created=int(time.time()),
                         usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=output.n_tokens,
                                     total_tokens=prompt_tokens + output.n_tokens))


class SimProvider(litellm.CustomLLM):
    """litellm custom handler for the `sim/` models."""

    def completion(self, model: str, messages: list, *args: Any, optional_params: dict | None = None,
                   **kwargs: Any) -> ModelResponse:
        params = optional_params or (args[8] if len(args) > 8 else {})
        try:
            output = sim_models.respond(model, messages, tools=params.get("tools"),
                                        temperature=float(params.get("temperature", 1.0)),
                                        seed=int(params.get("seed", 0)))
        except ModelCallError:
            raise
        except Exception as exc:
            # A deterministic failure of an embedded model: retrying cannot help, so answer as a bad request.
            raise CustomLLMError(status_code=400, message=f"embedded model {model} failed: {exc!r}") from exc
        return to_model_response(model, output, sim_models.prompt_tokens(messages))

    async def acompletion(self, model: str, messages: list, *args: Any, optional_params: dict | None = None,
                          **kwargs: Any) -> ModelResponse:
        delay = sim_models.latency_seconds(model)
        if delay:
            await asyncio.sleep(delay)  # an injected network latency: waits without holding the event loop
        return self.completion(model, messages, *args, optional_params=optional_params, **kwargs)


def register() -> None:
    """Make litellm route sim/ models to the embedded models (idempotent)."""
    global _registered
    if _registered:
        return
    handler = SimProvider()
    litellm.custom_provider_map = [m for m in litellm.custom_provider_map if m.get("provider") != "sim"] + [
        {"provider": "sim", "custom_handler": handler}]
    free = {"input_cost_per_token": 0.0, "output_cost_per_token": 0.0, "cache_creation_input_token_cost": 0.0,
            "cache_read_input_token_cost": 0.0, "litellm_provider": "sim", "mode": "chat"}
    litellm.register_model({name: dict(free) for name in sim_models.sim_model_names()})
    _registered = True
