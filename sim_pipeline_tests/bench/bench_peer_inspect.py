"""A peer benchmark (issue 32): sim_pipeline against inspect_ai, the harness its users would pick instead.

Both sides hold the same conversations against the scripted OpenAI-compatible server
(sim_pipeline_tests/scripted_server.py) in this process, each reply after LATENCY_S: the agent looks the order up
(`get_order`), tracks it (`track_shipment`), then answers; the simulated user answers once through its
`user_action` tool and is satisfied. Three agent calls, two tool calls and one user call a conversation, at most
CONCURRENCY calls in flight per model on both sides; the servers count the requests and a side that made other
calls is an error, not a figure.

- sim_pipeline: `sim-pipeline run --situations SITUATIONS` end to end (all eight steps, the Dagster runs, the
  warehouse, the summary) with a registry naming the two scripted endpoints; the judge is the embedded `sim/judge`
  (the default; a scripted judge would add calls inspect does not make) and `judge_trust_opt_out` lets the cuts
  and scores run although a scripted agent's grades do not earn the judge's trust; `--allow-failed-checks`
  because its rollouts, all alike, give the GRPO cut no mixed group (its publish gate stops that one cut; the
  figures' note lists the tables the run wrote).
- inspect_ai: `inspect eval` of peer_inspect_task.py (tools, the same openings and system prompt, taken from the
  rollouts of the first sim_pipeline run, a user solver, a string scorer; its .eval log written as usual), in
  .venv-inspect (`make bench` builds it; INSPECT_AI_VERSION in the Makefile).

Each side is a child process: wall time, CPU time (user + system) and peak RSS come from its own rusage
(os.wait4), rounds alternate sim, inspect, ROUNDS times, and the figures are medians. The engine figure compares
model calls per second while calls flow (first to last request the servers saw, LATENCY_S 0) on
ENGINE_CONVERSATIONS conversations: sim_pipeline's rollout runner in a child process against the same inspect task.

Goals (issue 32): wall and CPU ratio (sim / inspect) <= 1.0, peak memory <= 1.5, engine calls/s ratio >= 2.0.
Without .venv-inspect it returns no figures and says why. About 10 minutes on 2 cores (three rounds).

    make bench                                    # builds .venv-inspect first
    python -m sim_pipeline_tests.bench peer_inspect
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
INSPECT_VENV = REPO / ".venv-inspect"
TASK_FILE = Path(__file__).with_name("peer_inspect_task.py")
LATENCY_S = 0.05  # a nearby model server's reply time, as bench_backends and bench_scale use
SITUATIONS = 8  # `--situations`: 56 conversations end to end (held-out samples and the search's rollouts)
CONCURRENCY = 16  # calls in flight per model on both sides (sim-pipeline's default)
ROUNDS = 3  # interleaved rounds; medians damp the noise of a shared machine
ENGINE_CONVERSATIONS = 120
VERSION = "peer-v1"
TARGET = "on its way"  # in the agent's reply: inspect's scorer checks it
PLACEHOLDER_KEY = "sk-bench-not-a-real-key"  # the OpenAI client insists on a key; the scripted server reads none


def _agent(latency: float) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The scripted agent: two lookups, then the reply (decided by how many tool results the request holds)."""
    def responder(request: dict[str, Any]) -> dict[str, Any]:
        time.sleep(latency)
        done = sum(1 for m in request["messages"] if m["role"] == "tool")
        opening = next(m["content"] for m in request["messages"] if m["role"] == "user")
        order_id = ("".join(c for c in opening if c.isdigit()) + "10000")[:5]  # the tools' pattern: 4-6 digits
        if done < 2:
            tool = ("get_order", "track_shipment")[done]
            return {"content": None, "tool_calls": [{"name": tool, "arguments": {"order_id": order_id}}]}
        return {"content": f"I looked your order up and tracked it: it is {TARGET}."}
    return responder


def _user(latency: float) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The scripted user: satisfied at once, through the user_action tool."""
    def responder(request: dict[str, Any]) -> dict[str, Any]:
        time.sleep(latency)
        said = {"message": "Thanks, that is all.", "decision": "satisfied"}
        return {"content": None, "tool_calls": [{"name": "user_action", "arguments": said}]}
    return responder


@dataclass(frozen=True)
class Usage:
    """What one child process cost."""

    wall_s: float
    cpu_s: float
    peak_mb: float

    def __str__(self) -> str:
        return f"{self.wall_s:.1f} s wall, {self.cpu_s:.1f} s CPU, {self.peak_mb:.0f} MB"


def _child(command: list[str], workdir: Path, env: dict[str, str]) -> Usage:
    """Run a child to its end; its own rusage (os.wait4), so interleaved rounds do not mix."""
    with open(workdir / "stdout.txt", "wb") as out, open(workdir / "stderr.txt", "wb") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(command, cwd=workdir, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = (workdir / "stderr.txt").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{command[:4]} exited {proc.returncode} in {workdir}:\n{tail}")
    return Usage(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)  # Linux: ru_maxrss in KiB


def _expect_calls(side: str, agent: Any, user: Any, conversations: int) -> None:
    """Both sides must hold the same conversations: 3 agent and 1 user request each, nothing else."""
    counts = (len(agent.requests), len(user.requests))
    if counts != (3 * conversations, conversations) or agent.misses or user.misses:
        raise RuntimeError(f"{side}: {counts} agent/user requests for {conversations} conversations "
                           f"(expected {(3 * conversations, conversations)}; misses {agent.misses + user.misses})")


def _flow_rate(agent: Any, user: Any) -> float:
    """Model calls per second between the first and the last request the two servers saw."""
    times = sorted(agent.times + user.times)
    return (len(times) - 1) / (times[-1] - times[0])


def _registry(agent_url: str, user_url: str) -> dict[str, Any]:
    models = {"peer-agent": {"model": "openai/scripted-agent", "api_base": agent_url},
              "peer-user": {"model": "openai/scripted-user", "api_base": user_url}}
    policy = {"domain": "retail", "model": "peer-agent", "user_model": "peer-user", "judge_trust_opt_out": True}
    return {"models": models, "policies": {VERSION: policy}}


def _sim_env(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    return env | {"DAGSTER_HOME": str(workdir / "dagster_home"), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                  "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}


def _sim_run(workdir: Path) -> tuple[Usage, Path, str]:
    """`sim-pipeline run` end to end in a fresh directory (no response cache, a new Dagster instance); its usage,
    its rollouts table and the tables it wrote."""
    from sim_pipeline_tests.scripted_server import ScriptedServer

    workdir.mkdir()
    with ScriptedServer(_agent(LATENCY_S)) as agent, ScriptedServer(_user(LATENCY_S)) as user:
        registry = workdir / "registry.yaml"
        registry.write_text(json.dumps(_registry(agent.base_url, user.base_url)))  # JSON is YAML
        command = [sys.executable, "-m", "sim_pipeline.cli", "run", "--registry", str(registry), "--domain",
                   "retail", "--versions", VERSION, "--situations", str(SITUATIONS), "--concurrency",
                   str(CONCURRENCY), "--warehouse", str(workdir / "warehouse"), "--allow-failed-checks"]
        usage = _child(command, workdir, _sim_env(workdir))
        rollouts = next((workdir / "warehouse" / "retail" / "rollouts").rglob("*.parquet"))
        _expect_calls("sim-pipeline run", agent, user, _conversations(rollouts))
    written = (workdir / "warehouse" / "retail").iterdir()
    tables = sorted(p.name.removesuffix(".parquet") for p in written if not p.name.startswith("."))
    return usage, rollouts, ", ".join(tables)


def _conversations(rollouts: Path) -> int:
    import pyarrow.parquet as pq

    return pq.read_metadata(rollouts).num_rows


def _dataset_from_rollouts(rollouts: Path, path: Path) -> int:
    """inspect's samples: each rollout's system prompt and opening, as sim_pipeline's agent got them."""
    import pandas as pd

    rows = pd.read_parquet(rollouts, columns=["rollout_id", "messages", "opening_message"])
    samples = [{"id": r.rollout_id, "target": TARGET,
                "input": [{"role": "system", "content": r.messages[0]["content"]},
                          {"role": "user", "content": r.opening_message}]} for r in rows.itertuples()]
    path.write_text("".join(json.dumps(s) + "\n" for s in samples))
    return len(samples)


def _inspect_run(workdir: Path, dataset: Path, conversations: int, latency: float) -> tuple[Usage, float]:
    """`inspect eval` of the peer task on `dataset`; its usage and the calls/s while calls flowed."""
    from sim_pipeline_tests.scripted_server import ScriptedServer

    workdir.mkdir()
    shutil.copy(TASK_FILE, workdir / TASK_FILE.name)  # inspect takes a task file relative to its directory
    shutil.copy(dataset, workdir / "dataset.jsonl")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "INSPECT_"))}
    env |= {"OPENAI_API_KEY": PLACEHOLDER_KEY}
    with ScriptedServer(_agent(latency)) as agent, ScriptedServer(_user(latency)) as user:
        command = [str(INSPECT_VENV / "bin" / "inspect"), "eval", f"{TASK_FILE.name}@peer",
                   "--model", "openai/scripted-agent", "--model-base-url", agent.base_url,
                   "-M", "responses_api=false",  # the scripted server speaks chat completions, as vLLM does
                   "-T", "dataset=dataset.jsonl", "-T", f"user_base_url={user.base_url}",
                   "--max-connections", str(CONCURRENCY), "--max-samples", str(conversations),
                   "--display", "plain", "--log-dir", "logs"]
        usage = _child(command, workdir, env)
        _expect_calls("inspect eval", agent, user, conversations)
        return usage, _flow_rate(agent, user)


def _engine_dataset(path: Path) -> None:
    """The engine comparison's conversations: the retail plan's first situations, two samples each."""
    from sim_pipeline.rollout.prompts import agent_system_prompt

    domain, specs = _engine_specs()
    system = agent_system_prompt(domain)
    samples = [{"id": f"e{i}", "target": TARGET,
                "input": [{"role": "system", "content": system},
                          {"role": "user", "content": s.situation.phrasings[s.phrasing_index]}]}
               for i, s in enumerate(specs)]
    path.write_text("".join(json.dumps(s) + "\n" for s in samples))


def _engine_specs() -> tuple[Any, list[Any]]:
    from sim_pipeline.rollout.runner import RolloutSpec
    from sim_pipeline_tests.rollout.small_run import world

    domain, _, situations = world()
    specs = [RolloutSpec(s, 0, k) for k in range(2) for s in situations]
    return domain, specs[:ENGINE_CONVERSATIONS]


def _engine_child(agent_url: str, user_url: str) -> None:
    """In the child: sim_pipeline's rollout runner on the engine conversations through the scripted servers."""
    from sim_pipeline.models.gateway import Gateway
    from sim_pipeline.models.model_config import ModelConfig
    from sim_pipeline.rollout.runner import Policy, run_rollouts
    from sim_pipeline_tests.rollout.small_run import world

    domain, state, _ = world()
    _, specs = _engine_specs()
    models = {"peer-agent": ModelConfig(name="peer-agent", model="openai/scripted-agent", api_base=agent_url),
              "peer-user": ModelConfig(name="peer-user", model="openai/scripted-user", api_base=user_url)}
    gateway = Gateway(models=models, concurrency=CONCURRENCY, fast_path=True)
    policy = Policy(VERSION, "peer-agent", user_model="peer-user")
    asyncio.run(run_rollouts(specs, policy, domain=domain, state=state, gateway=gateway))


def _sim_engine_run(workdir: Path) -> float:
    """Calls/s while calls flow through sim_pipeline's rollout runner (a child process, LATENCY 0)."""
    from sim_pipeline_tests.scripted_server import ScriptedServer

    workdir.mkdir()
    with ScriptedServer(_agent(0.0)) as agent, ScriptedServer(_user(0.0)) as user:
        command = [sys.executable, "-m", "sim_pipeline_tests.bench.bench_peer_inspect", "engine", agent.base_url,
                   user.base_url]
        _child(command, workdir, _sim_env(workdir) | {"OPENAI_API_KEY": PLACEHOLDER_KEY})
        _expect_calls("sim engine", agent, user, ENGINE_CONVERSATIONS)
        return _flow_rate(agent, user)


def _inspect_version() -> str:
    ran = subprocess.run([str(INSPECT_VENV / "bin" / "python"), "-c",
                          "import importlib.metadata as m; print(m.version('inspect_ai'))"],
                         capture_output=True, text=True, check=True)
    return ran.stdout.strip()


def _figure(name: str, unit: str, sim: list[float], peer: list[float], baseline: str, note: str) -> dict:
    value, base = statistics.median(sim), statistics.median(peer)
    return {"name": name, "value": value, "unit": unit, "baseline_name": baseline, "baseline_value": base,
            "ratio": value / base, "note": note}


def _measure(tmp: Path) -> list[dict]:
    version = _inspect_version()
    sim: list[Usage] = []
    peer: list[Usage] = []
    sim_rate: list[float] = []
    peer_rate: list[float] = []
    dataset, engine = tmp / "dataset.jsonl", tmp / "engine.jsonl"
    _engine_dataset(engine)
    conversations = 0
    for n in range(ROUNDS):
        usage, rollouts, tables = _sim_run(tmp / f"sim{n}")
        sim.append(usage)
        if n == 0:
            conversations = _dataset_from_rollouts(rollouts, dataset)
        peer.append(_inspect_run(tmp / f"inspect{n}", dataset, conversations, LATENCY_S)[0])
        sim_rate.append(_sim_engine_run(tmp / f"sim_engine{n}"))
        peer_rate.append(_inspect_run(tmp / f"inspect_engine{n}", engine, ENGINE_CONVERSATIONS, 0.0)[1])
        print(f"bench_peer_inspect: round {n + 1}/{ROUNDS}: sim-pipeline run {sim[-1]}, inspect eval {peer[-1]}; "
              f"engine calls/s {sim_rate[-1]:.1f} vs {peer_rate[-1]:.1f}", flush=True)
    note = (f"inspect_ai {version}; {conversations} conversations (3 agent calls, 2 tool calls, 1 user call each), "
            f"{LATENCY_S * 1000:.0f} ms server, {CONCURRENCY} calls in flight per model, median of {ROUNDS} "
            f"interleaved rounds; sim-pipeline run wrote {tables}")
    engine_note = (f"inspect_ai {version}; {ENGINE_CONVERSATIONS} conversations, 0 ms server, {CONCURRENCY} calls "
                   f"in flight per model, median of {ROUNDS}")
    return [
        _figure("peer_inspect_wall_ratio (sim-pipeline run vs inspect eval, wall s)", "s",
                [u.wall_s for u in sim], [u.wall_s for u in peer], "inspect_eval_wall_seconds", note),
        _figure("peer_inspect_cpu_ratio (sim-pipeline run vs inspect eval, CPU s)", "s",
                [u.cpu_s for u in sim], [u.cpu_s for u in peer], "inspect_eval_cpu_seconds", note),
        _figure("peer_inspect_peak_memory_ratio (sim-pipeline run vs inspect eval, peak RSS)", "MB",
                [u.peak_mb for u in sim], [u.peak_mb for u in peer], "inspect_eval_peak_rss_mb", note),
        _figure("peer_inspect_engine_calls_ratio (rollout runner vs inspect eval, calls/s while calls flow)",
                "calls/s", sim_rate, peer_rate, "inspect_eval_calls_per_second", engine_note),
    ]


def absent() -> str | None:
    """Why the peer benchmark cannot run here, or None."""
    if not (INSPECT_VENV / "bin" / "inspect").exists():
        return f"no inspect_ai venv at {INSPECT_VENV} (`make bench` builds it: make .venv-inspect/.inspect)"
    return None


def figures() -> list[dict]:
    """sim_pipeline / inspect_ai wall, CPU and peak memory end to end, and the engine's calls/s, same conversations."""
    reason = absent()
    if reason:
        print(f"bench_peer_inspect: no figures: {reason}")
        return []
    with tempfile.TemporaryDirectory(prefix="bench_peer_inspect_") as tmp:
        return _measure(Path(tmp))


if __name__ == "__main__":
    if sys.argv[1:2] == ["engine"]:
        _engine_child(*sys.argv[2:4])
    else:
        sys.exit(f"usage: python -m {__spec__.name} engine AGENT_URL USER_URL (the bench's own child)")
