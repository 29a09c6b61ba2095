"""Rollout throughput (litellm path vs in-process fast path), latency-bound concurrency, runner overhead per call."""

import asyncio
import time

from sim_pipeline.models import sim_models
from sim_pipeline.models.gateway import Gateway, Sampling
from sim_pipeline_tests.rollout.small_run import run, world

LATENCY_MODEL = "sim/latency-50"
LATENCY_S = 0.05
CONCURRENCY = 64
LATENCY_CALLS = 640


def _rollouts_per_second(gateway: Gateway) -> tuple[float, int]:
    world()  # situations are built once, outside the timing
    started = time.perf_counter()
    rows = run(gateway)
    return len(rows) / (time.perf_counter() - started), len(rows)


def _latency_bound(fast_path: bool) -> float:
    gateway = Gateway(concurrency=CONCURRENCY, fast_path=fast_path)

    async def burst() -> None:
        messages = [{"role": "user", "content": "ping"}]
        await asyncio.gather(*(gateway.complete(LATENCY_MODEL, messages, sampling=Sampling(seed=i))
                               for i in range(LATENCY_CALLS)))

    asyncio.run(burst())  # warm-up: imports and registration
    started = time.perf_counter()
    asyncio.run(burst())
    return LATENCY_CALLS / (time.perf_counter() - started)


def _overhead_ms() -> tuple[float, float]:
    """Milliseconds per model call spent outside the model (runner, gateway, world, bookkeeping)."""
    model_seconds = 0.0
    original = sim_models.respond

    def timed(*args, **kwargs):
        nonlocal model_seconds
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            model_seconds += time.perf_counter() - started

    sim_models.respond = timed
    try:
        gateway = Gateway(fast_path=True)
        world()
        started = time.perf_counter()
        run(gateway)
        total = time.perf_counter() - started
    finally:
        sim_models.respond = original
    return 1000 * (total - model_seconds) / gateway.calls, 1000 * model_seconds / gateway.calls


def figures() -> list[dict]:
    """The rollout benchmarks."""
    _rollouts_per_second(Gateway(fast_path=True))  # warm-up
    litellm_rate, n = _rollouts_per_second(Gateway())
    fast_rate, _ = _rollouts_per_second(Gateway(fast_path=True))
    ideal = CONCURRENCY / LATENCY_S
    fast_latency, litellm_latency = _latency_bound(True), _latency_bound(False)
    overhead, model_ms = _overhead_ms()
    return [
        {"name": f"rollouts_per_second_litellm ({n} rollouts)", "value": litellm_rate, "unit": "rollouts/s"},
        {"name": "rollouts_per_second_fast_path", "value": fast_rate, "unit": "rollouts/s",
         "baseline_name": "rollouts_per_second_litellm", "baseline_value": litellm_rate,
         "ratio": fast_rate / litellm_rate},
        {"name": "latency_bound_calls_per_second_fast_path (50 ms, concurrency 64)", "value": fast_latency,
         "unit": "calls/s", "baseline_name": "ideal concurrency/latency", "baseline_value": ideal,
         "ratio": fast_latency / ideal},
        {"name": "latency_bound_calls_per_second_litellm (50 ms, concurrency 64)", "value": litellm_latency,
         "unit": "calls/s", "baseline_name": "ideal concurrency/latency", "baseline_value": ideal,
         "ratio": litellm_latency / ideal},
        {"name": "runner_overhead_per_call_fast_path", "value": overhead, "unit": "ms",
         "baseline_name": "embedded model time per call", "baseline_value": model_ms, "ratio": overhead / model_ms},
    ]
