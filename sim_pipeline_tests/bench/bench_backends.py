"""A real backend over HTTP: the gateway's own overhead per call (wall and CPU) and the requests a rollout makes.

A scripted OpenAI-compatible server answers after 50 ms, as a nearby model server would; every figure is a ratio to
that latency or to the ideal concurrency / latency, measured in the same run.
"""

import asyncio
import os
import time

from sim_pipeline.models.gateway import Gateway, Sampling
from sim_pipeline.models.model_config import ModelConfig
from sim_pipeline.rollout.runner import Policy, RolloutSpec, run_rollouts
from sim_pipeline_tests.rollout.small_run import world
from sim_pipeline_tests.scripted_server import ScriptedServer

LATENCY_S = 0.05
SEQUENTIAL_CALLS = 40
CONCURRENT_CALLS = 320
CONCURRENCY = 16
ROLLOUTS = 24


def _slow(reply: dict):
    def responder(request: dict) -> dict:
        time.sleep(LATENCY_S)
        return reply
    return responder


def _agent(request: dict) -> dict:
    """Looks the order up once, then answers: two agent calls per conversation, plus the user's turns."""
    time.sleep(LATENCY_S)
    if not any(m["role"] == "tool" for m in request["messages"]):
        opening = next(m["content"] for m in request["messages"] if m["role"] == "user")
        digits = "".join(c for c in opening if c.isdigit())[:5] or "1234"
        return {"content": None, "tool_calls": [{"name": "get_order", "arguments": {"order_id": digits}}]}
    return {"content": "I looked it up: the order is in our system and on its way."}


def figures() -> list[dict]:
    """Gateway overhead per call over HTTP, latency-bound throughput, and requests per rollout."""
    os.environ.setdefault("OPENAI_API_KEY", "sk-bench-not-a-real-key")
    messages = [{"role": "user", "content": "Where is my parcel?"}]
    with ScriptedServer(_slow({"content": "It left the depot this morning."})) as server:
        config = ModelConfig(name="local", model="openai/scripted-agent", api_base=server.base_url)
        gateway = Gateway(models={"local": config}, concurrency=CONCURRENCY)

        async def sequential() -> None:
            for i in range(SEQUENTIAL_CALLS):
                await gateway.complete("local", messages, sampling=Sampling(seed=i))

        async def concurrent(offset: int) -> None:
            await asyncio.gather(*(gateway.complete("local", messages, sampling=Sampling(seed=offset + i))
                                   for i in range(CONCURRENT_CALLS)))

        asyncio.run(concurrent(10_000))  # warm-up: imports, the client, the connection
        started, cpu = time.perf_counter(), time.process_time()
        asyncio.run(sequential())
        per_call = (time.perf_counter() - started) / SEQUENTIAL_CALLS
        cpu_per_call = (time.process_time() - cpu) / SEQUENTIAL_CALLS
        started = time.perf_counter()
        asyncio.run(concurrent(20_000))
        throughput = CONCURRENT_CALLS / (time.perf_counter() - started)
    domain, state, situations = world()
    with ScriptedServer(_agent) as agent:
        config = ModelConfig(name="local-agent", model="openai/scripted-agent", api_base=agent.base_url)
        gateway = Gateway(models={"local-agent": config}, concurrency=CONCURRENCY, fast_path=True)
        specs = [RolloutSpec(s, 0, 0) for s in situations[:ROLLOUTS]]
        rows = asyncio.run(run_rollouts(specs, Policy("bench", "local-agent"), domain=domain, state=state,
                                        gateway=gateway))
        requests = len(agent.requests)
    overhead = per_call - LATENCY_S
    ideal = CONCURRENCY / LATENCY_S
    return [
        {"name": "http_gateway_overhead_per_call (50 ms server)", "value": 1000 * overhead, "unit": "ms",
         "baseline_name": "server latency", "baseline_value": 1000 * LATENCY_S, "ratio": overhead / LATENCY_S},
        {"name": "http_gateway_cpu_per_call (50 ms server, this process's CPU: the server's small share included)",
         "value": 1000 * cpu_per_call, "unit": "ms"},
        {"name": f"http_calls_per_second (50 ms server, concurrency {CONCURRENCY})", "value": throughput,
         "unit": "calls/s", "baseline_name": "ideal concurrency/latency", "baseline_value": ideal,
         "ratio": throughput / ideal},
        {"name": "http_agent_requests_per_rollout", "value": requests / len(rows), "unit": "requests",
         "baseline_name": "agent turns per rollout", "baseline_value": float(rows["n_turns"].mean()),
         "ratio": requests / float(rows["n_turns"].sum())},
    ]
