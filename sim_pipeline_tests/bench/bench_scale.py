"""Scaling out with Celery workers (issue 18): throughput of the same small backfill through 1, 2 and 4 workers,
and what one step costs through Celery compared with in-process.

The backfill: the model-calling step (`search_and_rollouts`, the search and rollouts assets) of 4 policy
partitions (versions b0..b3, seed 0), submitted at once, one orchestrator process per run, as the run queue would
launch them. The agent is an `openai/` model served over loopback HTTP by the scripted OpenAI-compatible server
(sim_pipeline_tests/scripted_server.py) in this process: each chat completion waits 50 ms
($SIM_PIPELINE_BENCH_LATENCY_MS sets another latency), then answers "ok"; the workers reach it through litellm and
the OpenAI client, as they would a vLLM server. The gateway keeps at most CALLS_IN_FLIGHT calls in flight per model
and caches nothing. (An agent that answers "ok" fails most tasks, and the judge-trust check downstream would
fail: only the rollouts are timed.)

What it shows on 2 cores (measured 2026-12-01): 6.8 rollouts/s with 1 worker, x1.75 with 2, x2.42 with 4. The
step waits on the model most of the time (1.9 agent calls of 50 ms per rollout), so more workers overlap the waits
until the two cores, shared by four orchestrators, the workers, the HTTP server and the embedded user and judge,
bind. A trivial step costs about 1.9 s more through Celery than in-process (an orchestrator process importing the
location, a worker rebuilding the job for its step). The server counts its calls: a round that made none (a
response cache answering) would be reported as an error, not as throughput.

The production pieces: deploy/dagster.yaml on a fresh PostgreSQL database, deploy/celery.yaml on RabbitMQ and Redis
(a queue of the benchmark's own), workers started and stopped by deploy/scale-up.sh / scale-down.sh. Each worker
process imports this module as its code location (`defs`). Without PostgreSQL, RabbitMQ, Redis or the [scale] extra
it returns no figures and prints why. About 4 minutes on 2 cores (RabbitMQ as the broker; 3.5 with Redis).

    python -m sim_pipeline_tests.bench scale
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
LATENCY_VARIABLE = "SIM_PIPELINE_BENCH_LATENCY_MS"  # another latency per call (default 50 ms)
LATENCY_MS = int(os.environ.get(LATENCY_VARIABLE) or 50)
MODEL = "openai/scripted-agent"  # the scripted server answers any model name
VERSIONS = [f"b{i}" for i in range(4)]
SEED = "0"
WORKER_COUNTS = (1, 2, 4)
CALLS_IN_FLIGHT = 1  # per model per step: low, so a step's 50 ms waits add up and more workers have work to overlap
OVERHEAD_REPEATS = 5
RUN_TIMEOUT_S = 180
SCRIPT_TIMEOUT_S = 120
WAREHOUSE_VARIABLE = "SIM_PIPELINE_BENCH_WAREHOUSE"
REGISTRY_VARIABLE = "SIM_PIPELINE_BENCH_REGISTRY"
NOOP_JOB = "bench_noop_job"
NOOP_IN_PROCESS_JOB = "bench_noop_in_process_job"


def _location(executor: Any = None) -> Any:
    """retail's small location with a gateway that caches nothing, plus two one-step jobs (Celery, in-process)."""
    import dagster as dg

    from sim_pipeline_tests.deploy.locations import small_definitions
    from sim_pipeline.defs.resources import replaced

    built = small_definitions(os.environ[WAREHOUSE_VARIABLE], os.environ[REGISTRY_VARIABLE], "unused")
    gateway = replaced(built.resources["gateway"], cache_dir=None, concurrency=CALLS_IN_FLIGHT)

    @dg.op
    def bench_noop() -> None:
        """A step that does nothing: what is left of its wall time is the executor's overhead."""

    @dg.job(name=NOOP_JOB)
    def noop_job() -> None:
        bench_noop()

    @dg.job(name=NOOP_IN_PROCESS_JOB, executor_def=dg.in_process_executor)
    def noop_in_process_job() -> None:
        bench_noop()

    return dg.Definitions(assets=list(built.assets or []), jobs=[*built.jobs, noop_job, noop_in_process_job],
                          resources={**built.resources, "gateway": gateway}, executor=executor)


@cache
def _celery_definitions() -> Any:
    from deploy.definitions_celery import with_celery_executor

    return with_celery_executor(_location())


def __getattr__(name: str) -> Any:
    """`defs`, the Celery location the orchestrators and workers load, built only when asked for."""
    if name == "defs":
        return _celery_definitions()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _orchestrate(argv: list[str]) -> int:
    """The orchestrator process: `rollouts PARTITION` runs search_and_rollouts of one partition through Celery;
    `noop N` runs the one-step job N times through Celery and N times in-process. Prints one JSON line."""
    import dagster as dg
    from dagster._core.definitions.reconstruct import ReconstructableRepository

    from sim_pipeline_tests.deploy.celery_run import partition_tags

    repository = ReconstructableRepository.for_module(__name__ if __name__ != "__main__" else
                                                      "sim_pipeline_tests.bench.bench_scale", "defs",
                                                      working_directory=str(REPO))
    with dg.DagsterInstance.get() as instance:
        if argv[0] == "rollouts":
            started = time.perf_counter()
            result = dg.execute_job(repository.get_reconstructable_job("retail_policy_job"), instance,
                                    tags=partition_tags(argv[1]),
                                    asset_selection=[dg.AssetKey(["retail", "search"]),
                                                     dg.AssetKey(["retail", "rollouts"])])
            print(json.dumps({"success": result.success, "seconds": time.perf_counter() - started}), flush=True)
            return 0 if result.success else 1
        times: dict[str, list[float]] = {NOOP_JOB: [], NOOP_IN_PROCESS_JOB: []}
        for _ in range(int(argv[1])):
            for job in times:
                started = time.perf_counter()
                result = dg.execute_job(repository.get_reconstructable_job(job), instance)
                times[job].append(time.perf_counter() - started)
                if not result.success:
                    print(json.dumps({"success": False}), flush=True)
                    return 1
        print(json.dumps({"success": True, **times}), flush=True)
        return 0


def _slow_ok(request: dict[str, Any]) -> dict[str, Any]:
    """The scripted agent: every chat completion waits LATENCY_MS, then answers "ok"."""
    time.sleep(LATENCY_MS / 1000)
    return {"content": "ok"}


def _absent() -> str | None:
    """Why the benchmark cannot run here, or None."""
    import importlib.util

    from sim_pipeline_tests.deploy.services import POSTGRES, RABBITMQ, REDIS

    missing = [m for m in ("dagster_celery", "redis", "dagster_postgres", "psycopg2")
               if importlib.util.find_spec(m) is None]
    if missing:
        return f"{', '.join(missing)} not installed (the [scale] extra)"
    for service, address in (("PostgreSQL", POSTGRES), ("RabbitMQ", RABBITMQ), ("Redis", REDIS)):
        try:
            socket.create_connection(address, timeout=3).close()
        except OSError as exc:
            return f"{service} is not reachable at {address[0]}:{address[1]} ({exc})"
    return None


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _script(name: str, *args: str) -> None:
    subprocess.run([str(REPO / "deploy" / name), *args], env=os.environ.copy(), check=True, capture_output=True,
                   text=True, timeout=SCRIPT_TIMEOUT_S)


def _orchestrators(*argvs: list[str]) -> list[dict[str, Any]]:
    """Start one orchestrator process per argv at once; their JSON lines once all have ended."""
    processes = [subprocess.Popen([sys.executable, "-m", "sim_pipeline_tests.bench.bench_scale", *argv], cwd=REPO,
                                  env=os.environ.copy(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for argv in argvs]
    deadline = time.monotonic() + RUN_TIMEOUT_S
    results = []
    try:
        for process in processes:
            stdout, stderr = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
            lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
            if process.returncode != 0 or not lines or not lines[-1]["success"]:
                raise RuntimeError(f"bench_scale orchestrator failed: {stderr[-3000:]}")
            results.append(lines[-1])
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return results


def _rows(warehouse: Path) -> int:
    """Rollouts the round wrote; a round whose rollouts errored (the endpoint failed them) measured nothing."""
    import pyarrow.parquet as pq

    from sim_pipeline.protocol.statuses import ERROR_STATUSES

    statuses = [status for v in VERSIONS for status in pq.read_table(
        warehouse / "retail" / "rollouts" / f"policy_version={v}" / f"seed={SEED}.parquet", columns=["status"])
        .column("status").to_pylist()]
    errored = [status for status in statuses if status in ERROR_STATUSES]
    if errored:
        raise RuntimeError(f"bench_scale: {len(errored)} of {len(statuses)} rollouts errored ({sorted(set(errored))})")
    return len(statuses)


def _measure(tmp: Path) -> list[dict]:
    import dagster as dg

    from sim_pipeline.defs import provider_queue
    from sim_pipeline.defs.partitions import partition_key
    from sim_pipeline_tests.deploy.services import (
        CELERY_BACKEND,
        CELERY_BROKER,
        PRODUCTION_CELERY,
        fresh_database,
        production_home,
    )
    from sim_pipeline_tests.deploy.test_definitions_celery import _forget_queue, _stop_workers

    from sim_pipeline_tests.scripted_server import ScriptedServer

    server = ScriptedServer(_slow_ok).start()
    registry = tmp / "policies.yaml"
    registry.write_text(yaml.safe_dump({
        "defaults": {"judge_model": "sim/judge", "user_model": "sim/user"},
        "models": {"scripted-agent": {"model": MODEL, "api_base": server.base_url}},
        "policies": {v: {"domain": "retail", "model": "scripted-agent"} for v in VERSIONS}}))
    queue = f"sim-pipeline-bench-{uuid.uuid4().hex[:12]}"
    config = yaml.safe_load(PRODUCTION_CELERY.read_text())
    config["execution"]["config"]["config_source"].update(task_default_queue=queue, result_expires=600)
    (tmp / "celery.yaml").write_text(yaml.safe_dump(config))
    warehouse, worker_dir = tmp / "warehouse", tmp / "workers"
    with fresh_database() as database:
        env = {**production_home(tmp / "dagster_home", database),
               "SIM_PIPELINE_CELERY_BROKER": CELERY_BROKER, "SIM_PIPELINE_CELERY_BACKEND": CELERY_BACKEND,
               "SIM_PIPELINE_CELERY_CONFIG": str(tmp / "celery.yaml"), "SIM_PIPELINE_CELERY_QUEUE": queue,
               "SIM_PIPELINE_WORKER_DIR": str(worker_dir), "SIM_PIPELINE_WORKER_STOP_TIMEOUT": "30",
               WAREHOUSE_VARIABLE: str(warehouse), REGISTRY_VARIABLE: str(registry),
               provider_queue.REGISTRY_VARIABLE: str(registry),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        with _environment(env):
            try:
                # Not timed: the axes and the seed, in this process, into the warehouse the workers write to.
                local = _location(executor=dg.in_process_executor)
                with dg.instance_for_test() as scratch:
                    for job, partition in (("retail_axes_job", None), ("retail_seed_job", SEED)):
                        assert local.resolve_job_def(job).execute_in_process(instance=scratch,
                                                                             partition_key=partition).success
                instance = dg.DagsterInstance.get()
                instance.add_dynamic_partitions("retail_policy_version", VERSIONS)
                instance.dispose()

                throughput: dict[int, tuple[float, int]] = {}
                for workers in WORKER_COUNTS:
                    _script("scale-up.sh", str(workers))  # keeps the live ones: 1, then 2, then 4
                    started, served_before = time.perf_counter(), len(server.requests)
                    _orchestrators(*[["rollouts", partition_key(v, SEED)] for v in VERSIONS])
                    throughput[workers] = (time.perf_counter() - started, _rows(warehouse))
                    if len(server.requests) == served_before:
                        raise RuntimeError(f"bench_scale: the round with {workers} workers made no HTTP call "
                                           "(something answered from a cache): its time measures nothing")
                [noop] = _orchestrators(["noop", str(OVERHEAD_REPEATS)])
                served = len(server.requests)
            finally:
                try:
                    _stop_workers(worker_dir)
                finally:
                    _forget_queue(queue)
                    server.stop()

    base_seconds, base_rows = throughput[1]
    base = base_rows / base_seconds
    label = f"{MODEL} over HTTP, {LATENCY_MS} ms per call, {CALLS_IN_FLIGHT} call in flight, 4 partitions"
    figures = [{"name": f"scale_rollouts_per_s_1_worker ({label})", "value": base, "unit": "rollouts/s"},
               {"name": "scale_http_calls_served (all worker counts)", "value": served, "unit": "calls"}]
    for workers in WORKER_COUNTS[1:]:
        seconds, rows = throughput[workers]
        figures.append({"name": f"scale_rollouts_per_s_{workers}_workers ({label})", "value": rows / seconds,
                        "unit": "rollouts/s", "baseline_name": "scale_rollouts_per_s_1_worker",
                        "baseline_value": base, "ratio": rows / seconds / base})
    celery, in_process = statistics.median(noop[NOOP_JOB]), statistics.median(noop[NOOP_IN_PROCESS_JOB])
    figures += [
        {"name": "scale_trivial_step_in_process_seconds (one-step run, median)", "value": in_process, "unit": "s"},
        {"name": "scale_trivial_step_celery_seconds (one-step run, median)", "value": celery, "unit": "s",
         "baseline_name": "scale_trivial_step_in_process_seconds", "baseline_value": in_process,
         "ratio": celery / in_process},
        {"name": "scale_celery_overhead_per_step_seconds", "value": celery - in_process, "unit": "s"},
    ]
    return figures


def figures() -> list[dict]:
    """Rollouts per second through 1, 2 and 4 Celery workers (ratios against 1) and the per-step overhead."""
    reason = _absent()
    if reason:
        print(f"bench_scale: no figures: {reason}")
        return []
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))  # deploy/ is not part of the installed package
    with tempfile.TemporaryDirectory() as tmp:
        return _measure(Path(tmp))


if __name__ == "__main__":
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    sys.exit(_orchestrate(sys.argv[1:]))
