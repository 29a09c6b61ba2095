"""One run per partition at a time (sim_pipeline/defs/launch.py): a second run of a partition that is running is
refused, naming who runs it, or waits with `wait`, and pays no model call twice; other seeds run alongside; a run
the daemon launched is seen too, and the instance's queue holds a daemon run of a partition the CLI is running.

The first run's agent is a scripted HTTP endpoint that holds its first call until the test releases it, with one call
in flight (concurrency 1): while it is held, the run is mid-partition and the server's call count cannot move
unless another run calls the model."""

import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from dagster._core.test_utils import create_run_for_test
from dagster._utils.tags import TagConcurrencyLimitsCounter

from sim_pipeline import defaults
from sim_pipeline.cli import INSTANCE_CONFIG
from sim_pipeline.defs.launch import materialize_domain
from sim_pipeline.defs.partitions import partition_key, seed_by_version
from sim_pipeline.errors import SimPipelineError
from sim_pipeline.registry import load_registry

REGISTRY = {"defaults": {"judge_model": "sim/judge", "user_model": "sim/user"},
            "policies": {"agent-v1": {"domain": "retail", "model": "sim/agent-v1"},
                         "http-v1": {"domain": "retail", "model": "openai/scripted-agent"}}}
SIZES = {"max_situations": 2, "n_phrasings": 1, "train_samples": 1, "heldout_samples": 1, "probe_samples": 0}
HELD_S = 120  # a safety bound on every wait below, so a broken run fails the test instead of hanging it


class Gate:
    """A scripted agent that holds its first call until `release` is set; `first` is set when that call arrives."""

    def __init__(self) -> None:
        self.first = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()
        self._seen = 0

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self._seen += 1
            first = self._seen == 1
        if first:
            self.first.set()
            self.release.wait(HELD_S)
        return {"content": "Sorry, I'm not able to help with that request."}


@pytest.fixture
def setup(tmp_path, monkeypatch, http_agent):
    """A local instance as `sim-pipeline run` makes it (the project's dagster.yaml), the test registry, a scripted
    agent behind a Gate, and the model cache under the test's directory."""
    monkeypatch.chdir(tmp_path)  # the model cache is data/cache under the working directory, shared by both runs
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(INSTANCE_CONFIG, home / "dagster.yaml")
    registry = tmp_path / "policies.yaml"
    registry.write_text(yaml.safe_dump(REGISTRY))
    gate = Gate()
    server = http_agent(gate)
    instance = dg.DagsterInstance.from_config(str(home))
    instance.add_dynamic_partitions("retail_policy_version", list(REGISTRY["policies"]))
    yield instance, registry, gate, server
    gate.release.set()
    instance.dispose()


def launch(setup, slug: str, seed: str, **options: Any) -> list:
    """materialize_domain for one version on one seed at the test's small size, one model call in flight."""
    instance, registry, _, _ = setup
    return materialize_domain(instance, "retail", seed, [load_registry(registry)[slug]],
                              warehouse=str(Path(registry).parent / "warehouse"), sizes=SIZES, concurrency=1,
                              registry=str(registry), log=options.pop("log", lambda line: None), **options)


@contextmanager
def held_run(setup, seed: str = "0") -> Iterator[dict[str, Any]]:
    """http-v1 on the seed in a thread, yielded while its first model call is held; released and joined after."""
    gate, ended = setup[2], {}

    def target() -> None:
        try:
            ended["outcomes"] = launch(setup, "http-v1", seed)
        except BaseException as exc:  # noqa: BLE001 -- handed to the test, which asserts on it
            ended["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    try:
        assert gate.first.wait(HELD_S), ended.get("error")
        yield ended
    finally:
        gate.release.set()
        thread.join(HELD_S)


def test_a_second_run_of_a_running_partition_is_refused_naming_it_and_calls_no_model(setup):
    instance, _, _, server = setup
    with held_run(setup) as first:
        [running] = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
        before = len(server.requests)
        with pytest.raises(SimPipelineError, match="being run by another sim-pipeline process") as refused:
            launch(setup, "http-v1", "0")
        assert len(server.requests) == before == 1  # the second run called nothing
        message = str(refused.value)
        # Its seed's partition is the first of the two it holds; its run names the partition it is running.
        assert "seed 0 of domain 'retail'" in message and f"its run {running.run_id[:8]}" in message
        assert "pid " in message and "--wait" in message
        # The daemon's queue counts this in-process run: it holds a run of the same partition, not another seed's.
        limits = instance.get_concurrency_config().run_queue_config.tag_concurrency_limits
        queued = {seed: dg.DagsterRun(job_name="__ASSET_JOB", tags=seed_by_version("retail").get_tags_for_partition_key(
            str(partition_key("http-v1", seed)))) for seed in ("0", "1")}  # as a backfill submits them
        counter = TagConcurrencyLimitsCounter(limits, [running])
        assert counter.is_blocked(queued["0"]) and not counter.is_blocked(queued["1"])
    assert "error" not in first and any(o.label.startswith("http-v1|0") for o in first["outcomes"])


def test_with_wait_the_second_run_starts_when_the_first_ends_and_pays_no_model_call_again(setup):
    gate, server = setup[2], setup[3]
    waiting, second = threading.Event(), {}

    def log(line: str) -> None:
        if line.lstrip().startswith("waiting for"):
            waiting.set()

    def target() -> None:
        second["outcomes"] = launch(setup, "http-v1", "0", wait=True, log=log)

    with held_run(setup) as first:
        thread = threading.Thread(target=target)
        thread.start()
        assert waiting.wait(HELD_S)
        assert len(server.requests) == 1  # waiting, not running alongside
        gate.release.set()
    one_run = len(server.requests)
    thread.join(HELD_S)
    assert "error" not in first and second["outcomes"]
    # Every call the second run made was answered by the shared response cache: the calls total one run's.
    assert len(server.requests) == one_run > 1


def test_a_run_of_another_seed_runs_while_the_first_is_running(setup):
    instance, _, gate, _ = setup
    with held_run(setup, seed="0"):
        outcomes = launch(setup, "http-v1", "1")  # not refused, and done while seed 0's first call is still held
        assert not gate.release.is_set()
    assert any(o.label.startswith("http-v1|1") for o in outcomes)


def test_a_run_the_daemon_launched_is_refused_or_waited_for(setup, monkeypatch):
    instance = setup[0]
    tags = seed_by_version("retail").get_tags_for_partition_key(str(partition_key("agent-v1", "0")))
    daemons = create_run_for_test(instance, job_name="retail_policy_job", status=dg.DagsterRunStatus.STARTED,
                                  tags={**tags, "dagster/backfill": "abcdefgh"})
    with pytest.raises(SimPipelineError, match=f"run\\(s\\) {daemons.run_id[:8]} \\(retail_policy_job, started\\)"):
        launch(setup, "agent-v1", "0")
    monkeypatch.setattr(defaults, "PARTITION_POLL_SECONDS", 0.01)

    def log(line: str) -> None:  # the daemon's run ends while the command waits for it
        if "waiting for run(s)" in line:
            instance.report_run_failed(instance.get_run_by_id(daemons.run_id))

    outcomes = launch(setup, "agent-v1", "0", wait=True, log=log)
    assert instance.get_run_by_id(daemons.run_id).status == dg.DagsterRunStatus.FAILURE
    assert any(o.label.startswith("agent-v1|0") for o in outcomes)  # it ran (judge trust needs more rows to pass)
