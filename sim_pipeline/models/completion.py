"""What a model call takes and gives back: sampling settings, a completion, a per-request provider error."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim_pipeline.protocol.statuses import PROVIDER_ERROR
from sim_pipeline.redaction import redact


@dataclass(frozen=True)
class Sampling:
    """Sampling settings recorded on every row."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 1024
    seed: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The settings as a plain dict."""
        return {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens, "seed": self.seed}


@dataclass(frozen=True)
class Completion:
    """One model reply with what it cost."""

    message: dict[str, Any]
    logprob: float | None
    n_tokens: int
    token_logprobs: list[float] | None
    prompt_tokens: int
    cost: float
    latency_s: float
    cached: bool
    logprob_source: str | None = None
    dropped_params: tuple[str, ...] = ()  # request parameters left out because the provider does not take them
    tokens: list[str] | None = None  # the token strings of token_logprobs, where the backend gives them
    repaired: tuple[str, ...] = ()  # markup the chat format leaked and the gateway repaired (models/markup.py)


class ProviderError(Exception):
    """A model call that failed for this request only (after retries): it becomes a row's error status.

    `status` says how: `provider_error` (HTTP or connection error, timeout, an exception in a callable agent) or
    `invalid_response` (the provider answered, but not with a valid completion). Its message is redacted (no key of
    the environment) when it is made: it becomes a row's `error` text.
    """

    def __init__(self, message: str, *, status: str = PROVIDER_ERROR) -> None:
        super().__init__(redact(message))
        self.status = status
