"""The provider-limited run queue (sim_pipeline/defs/provider_queue.py): each (version, seed) run is tagged with the remote
providers its models call, whoever submits it, so the instance's tag limits cap a provider's runs across backfills."""

import dagster as dg
import pytest
import yaml
from dagster._core.remote_origin import RegisteredCodeLocationOrigin, RemoteRepositoryOrigin
from dagster._core.test_utils import create_run_for_test
from dagster._utils.tags import TagConcurrencyLimitsCounter

from sim_pipeline.defs.provider_queue import (
    PROVIDER_TAG_PREFIX,
    REGISTRY_VARIABLE,
    REMOTE_MODELS_TAG,
    VERSION_TAG,
    provider_of,
    provider_tags,
    tags_for_run,
)
from sim_pipeline.defs.partitions import partition_key, seed_by_version
from sim_pipeline.registry import load_models, load_registry
from sim_pipeline_tests.deploy.locations import DOMAIN

ASSET_JOB = "__ASSET_JOB"  # the job an asset backfill's runs belong to
OPENAI = f"{PROVIDER_TAG_PREFIX}openai"
ANTHROPIC = f"{PROVIDER_TAG_PREFIX}anthropic"
PROVIDER_REGISTRY = {
    "defaults": {"judge_model": "sim/judge", "user_model": "sim/user"},
    "models": {"claude-judge": {"model": "anthropic/claude-sonnet-4-5"},
               "local-vllm": {"model": "hosted_vllm/qwen3-8b", "api_base": "http://127.0.0.1:8000/v1"}},
    "policies": {
        "local-v1": {"domain": DOMAIN, "model": "sim/agent-v1"},
        "callable-v1": {"domain": DOMAIN, "model": "python:sim_pipeline_tests.models.agents_for_tests:broken"},
        "gpt-v1": {"domain": DOMAIN, "model": "openai/gpt-4o-mini", "baseline": "local-v1"},
        "gpt-claude-v1": {"domain": DOMAIN, "model": "openai/gpt-4o-mini", "user_model": "openai/gpt-4o-mini",
                          "judge_model": "claude-judge"},
        "vllm-v1": {"domain": DOMAIN, "model": "local-vllm"},
        "bare-v1": {"domain": DOMAIN, "model": "gpt-4o-mini"},
    },
}


@pytest.fixture
def provider_registry(tmp_path, monkeypatch):
    path = tmp_path / "providers.yaml"
    path.write_text(yaml.safe_dump(PROVIDER_REGISTRY))
    monkeypatch.setenv(REGISTRY_VARIABLE, str(path))
    return path


def run_tags(slug: str, seed: str = "0") -> dict[str, str]:
    """The tags Dagster itself gives a run of that (version, seed) partition."""
    return dict(seed_by_version(DOMAIN).get_tags_for_partition_key(str(partition_key(slug, seed))))


def test_each_remote_provider_gets_one_tag_naming_the_roles_that_call_it(provider_registry):
    registry, models = load_registry(provider_registry), load_models(provider_registry)
    assert provider_tags(registry["local-v1"], models) == {}  # embedded models: nothing to protect
    assert provider_tags(registry["callable-v1"], models) == {}  # a Python callable runs in the worker
    assert provider_tags(registry["gpt-v1"], models) == {OPENAI: "agent", REMOTE_MODELS_TAG: "openai"}
    assert provider_tags(registry["gpt-claude-v1"], models) == {
        OPENAI: "agent+user", ANTHROPIC: "judge", REMOTE_MODELS_TAG: "anthropic+openai"}
    assert provider_tags(registry["vllm-v1"], models) == {  # a `models:` entry counts as its backend's provider
        f"{PROVIDER_TAG_PREFIX}hosted_vllm": "agent", REMOTE_MODELS_TAG: "hosted_vllm"}
    assert provider_of("gpt-4o-mini", models) == "openai"  # a bare name: the provider litellm places it with


def test_only_version_partitions_are_tagged_and_an_unknown_version_is_refused(provider_registry):
    assert VERSION_TAG in run_tags("gpt-v1")  # the tag the queue reads is the one Dagster writes
    assert tags_for_run(run_tags("gpt-v1"), provider_registry)[OPENAI] == "agent"
    assert tags_for_run({"dagster/partition": "gpt-v1"}, provider_registry) == {}  # a delta calls no model
    assert tags_for_run({"dagster/partition": "0"}, provider_registry) == {}  # nor do a seed's steps
    with pytest.raises(dg.DagsterInvariantViolationError, match=f"'gone-v9'.*{REGISTRY_VARIABLE}"):
        tags_for_run(run_tags("gone-v9"), provider_registry)


def test_the_production_queue_caps_a_providers_runs_across_two_backfills(production_instance, provider_registry):
    instance = production_instance
    coordinator = instance.run_coordinator
    limits = instance.get_concurrency_config().run_queue_config.tag_concurrency_limits
    [openai_limit] = [limit["limit"] for limit in limits if limit["key"] == OPENAI]

    origin = RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("sim_pipeline"), "__repository__")

    def submit(slug: str, seed: str, backfill: str) -> dg.DagsterRun:
        """A run as the backfill daemon creates it, submitted to the instance's coordinator."""
        run = create_run_for_test(instance, job_name=ASSET_JOB, remote_job_origin=origin.get_job_origin(ASSET_JOB),
                                  tags={**run_tags(slug, seed), "dagster/backfill": backfill})
        coordinator.submit_run(dg.SubmitRunContext(run, workspace=None))
        return instance.get_run_by_id(run.run_id)

    # Two backfills of OpenAI versions, alternating, fill the provider's limit between them.
    running = [submit(("gpt-v1", "gpt-claude-v1")[i % 2], str(i % 8), f"backfill-{i % 2}") for i in range(openai_limit)]
    assert all(run.status == dg.DagsterRunStatus.QUEUED and run.tags[OPENAI] for run in running)
    waiting, local = submit("gpt-v1", "7", "backfill-1"), submit("local-v1", "0", "backfill-0")
    assert OPENAI not in local.tags and REMOTE_MODELS_TAG not in local.tags
    # Dagster's own counter, as the queue daemon builds it from these limits and the runs in progress.
    assert TagConcurrencyLimitsCounter(limits, running).is_blocked(waiting)
    assert not TagConcurrencyLimitsCounter(limits, running[:-1]).is_blocked(waiting)
    assert not TagConcurrencyLimitsCounter(limits, running).is_blocked(local)  # embedded models wait for no one
