"""The scaling model docs/scaling.md shows: how many partitions, calls in flight, workers and cores a night of rollouts
needs, computed from measured figures and stated assumptions (sim_pipeline_tests/docs_figures.py writes the tables).

The formula, with R rollouts in a night of H hours, a hosted agent answering a call in L seconds:
    throughput          lam = R / (3600 H)                              rollouts/s
    agent requests          = lam x a                                   a: agent calls per rollout (measured)
    prompt tokens           = lam x p                                   p: prompt tokens per rollout (measured)
    agent calls in flight   = lam x a x L                               (Little's law)
    model-calling steps     = ceil(calls in flight / G)                 G: calls in flight per model per step
    provider ceiling        = P x G / (a x L) x 3600 H                  P: the provider's run limit in dagster.yaml
    partitions              = ceil(R / n)                               n: rollouts per partition (measured)
    step wait               = n x a x L / G                             seconds a model-calling step waits
    CPU                     = R x (c + k x h) + partitions x s x o      c: CPU per rollout, k calls per rollout of
                                                                        h gateway CPU-s each, s steps of o s each
    worker-seconds          = partitions x step wait + CPU              the waits hold a worker; the rest is work
    workers                 = ceil(worker-seconds / (3600 H))
    cores                   = CPU / (3600 H)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ROLLOUTS_A_NIGHT = 1_000_000  # the target issue 32 names
NIGHT_HOURS = 8  # a night's window for the nightly backfill
HOSTED_CALL_SECONDS = 2.0  # assumed, not measured here: a hosted agent's tool-calling turn (no hosted model runs here)


@dataclass(frozen=True)
class Inputs:
    """What the model is computed from: a run's shape (measured), the bench's costs (measured), the profile's limits."""

    rollouts_per_partition: float  # n
    agent_calls_per_rollout: float  # a
    model_calls_per_rollout: float  # k: agent, user and judge calls
    prompt_tokens_per_rollout: float  # p
    steps_per_partition: int  # s
    celery_overhead_s: float  # o: per step, Celery against in-process
    cpu_s_per_rollout: float  # c: marginal CPU of one more rollout, every step, embedded models answering
    gateway_s_per_call: float  # h: the gateway's own CPU per HTTP call (litellm and the client)
    calls_in_flight_per_step: int  # G
    provider_run_limit: int  # P
    rollouts: int = ROLLOUTS_A_NIGHT  # R
    hours: float = NIGHT_HOURS  # H
    call_seconds: float = HOSTED_CALL_SECONDS  # L


@dataclass(frozen=True)
class Estimate:
    """The model's answers, each named as docs/scaling.md names it."""

    rollouts_per_s: float
    agent_requests_per_s: float
    prompt_tokens_per_s: float
    agent_calls_in_flight: float
    model_calling_steps: int
    provider_ceiling_rollouts: float
    partitions: int
    step_wait_s: float
    cpu_hours: float
    workers: int
    cores: float


def estimate(i: Inputs) -> Estimate:
    """The night's needs from the inputs, by the formula in this module's docstring."""
    night = 3600 * i.hours
    lam = i.rollouts / night
    in_flight = lam * i.agent_calls_per_rollout * i.call_seconds
    partitions = math.ceil(i.rollouts / i.rollouts_per_partition)
    wait = i.rollouts_per_partition * i.agent_calls_per_rollout * i.call_seconds / i.calls_in_flight_per_step
    cpu = (i.rollouts * (i.cpu_s_per_rollout + i.model_calls_per_rollout * i.gateway_s_per_call)
           + partitions * i.steps_per_partition * i.celery_overhead_s)
    return Estimate(
        rollouts_per_s=lam,
        agent_requests_per_s=lam * i.agent_calls_per_rollout,
        prompt_tokens_per_s=lam * i.prompt_tokens_per_rollout,
        agent_calls_in_flight=in_flight,
        model_calling_steps=math.ceil(in_flight / i.calls_in_flight_per_step),
        provider_ceiling_rollouts=i.provider_run_limit * i.calls_in_flight_per_step
        / (i.agent_calls_per_rollout * i.call_seconds) * night,
        partitions=partitions,
        step_wait_s=wait,
        cpu_hours=cpu / 3600,
        workers=math.ceil((partitions * wait + cpu) / night),
        cores=cpu / night,
    )
