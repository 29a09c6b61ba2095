"""The embedded offline models by name: one entry point used by the litellm provider and the fast path."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from sim_pipeline import defaults
from sim_pipeline.errors import ModelCallError
from sim_pipeline.models.conversation import tokens
from sim_pipeline.models.sim_agent import SimAgent
from sim_pipeline.models.sim_judge import SimJudge
from sim_pipeline.models.sim_user import SimUser
from sim_pipeline.models.sim_writer import SimWriter, writer_tokens
from sim_pipeline.models.trained_profiles import load_profile, profile_path, trained_hash, trained_names

PREFIX = "sim/"
JUDGES = {"judge": SimJudge(), "judge-lenient": SimJudge(flaw="lenient"),
          "judge-length-biased": SimJudge(flaw="length_biased"), "judge-noisy": SimJudge(flaw="noisy")}
USER = SimUser()
WRITER = SimWriter()
LATENCY = re.compile(r"^latency-(\d+)$")  # sim/latency-<ms>: answers "ok" after <ms> ms, for throughput benchmarks


@dataclass(frozen=True)
class SimOutput:
    """An embedded model's reply with the exact log-probability of its decision."""

    message: dict[str, Any]
    logprob: float
    n_tokens: int


def _fixed_names() -> list[str]:
    return [PREFIX + n for n in [*defaults.AGENT_PROFILES, "user", "writer", *JUDGES]]


def sim_model_names() -> list[str]:
    """Every embedded model, with the sim/ prefix: the fixed ones and each fitted profile saved in the trained
    directory (sim/trained-<hash>); plus the sim/latency-<ms> family."""
    return sorted([*_fixed_names(), *trained_names()])


def serves(model: str) -> bool:
    """Whether the embedded backend answers this sim/ model: one of sim_model_names(), sim/latency-<ms>, or
    sim/trained-<hash> whose profile file exists."""
    if not model.startswith(PREFIX):
        return False
    if trained_hash(model) is not None:
        return profile_path(model).is_file()
    return model in _fixed_names() or bool(LATENCY.match(model.removeprefix(PREFIX)))


def latency_seconds(model: str) -> float:
    """The injected latency of a sim/latency-<ms> model (0 for every other model)."""
    match = LATENCY.match(model.removeprefix(PREFIX))
    return int(match.group(1)) / 1000 if match else 0.0


def token_logprobs(output: SimOutput) -> list[float]:
    """Per-token log-probabilities: the decision's on the first token, 0 on the rest (rendering is deterministic)."""
    return [output.logprob] + [0.0] * (output.n_tokens - 1)


def prompt_tokens(messages: list[dict[str, Any]]) -> int:
    """Prompt size in the embedded models' tokenization."""
    return sum(_token_count(m.get("content") or "") for m in messages)


@lru_cache(maxsize=defaults.TOKEN_COUNT_CACHE_SIZE)
def _token_count(text: str) -> int:
    # A prompt is mostly the texts of the calls before it: each is counted once.
    return len(tokens(text))


def respond(model: str, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
            temperature: float = 1.0, seed: int = 0) -> SimOutput:
    """Run one embedded model (name with or without the sim/ prefix) on a conversation."""
    name = model.removeprefix(PREFIX)
    if name in defaults.AGENT_PROFILES or trained_hash(name) is not None:
        # A fitted profile's name pins it (the file is checked against the hash), so cached answers stay its own.
        profile = defaults.AGENT_PROFILES[name] if name in defaults.AGENT_PROFILES else load_profile(name)
        decision = SimAgent(profile).respond(messages, tools or [], temperature=temperature, seed=seed)
        return SimOutput(decision.message, decision.logprob, decision.n_tokens)
    if name == "user":
        reply = USER.respond(messages, temperature=temperature, seed=seed)
        return SimOutput(reply.message, reply.logprob, reply.n_tokens)
    if name == "writer":
        text, logprob = WRITER.respond(messages, temperature=temperature, seed=seed)
        return SimOutput({"role": "assistant", "content": text, "tool_calls": None}, logprob, writer_tokens(text))
    if LATENCY.match(name):
        return SimOutput({"role": "assistant", "content": "ok", "tool_calls": None}, 0.0, 1)
    if name in JUDGES:
        message = JUDGES[name].respond(messages, seed=seed)
        return SimOutput(message, 0.0, len(tokens(message["content"])))
    raise ModelCallError(f"model '{model}': no embedded model of that name. Fix: use one of {sim_model_names()} "
                         "or a litellm model string such as 'openai/gpt-4o-mini'")
