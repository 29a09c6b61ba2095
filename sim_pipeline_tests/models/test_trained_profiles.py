"""Fitted profiles are files named by their hash, and the embedded backend serves each as sim/trained-<hash>."""

import asyncio
import json
import os
import re

import pytest

from sim_pipeline import defaults
from sim_pipeline.domain import load_domain
from sim_pipeline.errors import ModelCallError, SimPipelineError
from sim_pipeline.models import sim_models
from sim_pipeline.models.cache import request_key
from sim_pipeline.models.gateway import Gateway, Sampling
from sim_pipeline.models.trained_profiles import load_profile, model_name, profile_path, save_profile, trained_dir
from sim_pipeline.rollout.prompts import agent_system_prompt

DOMAIN = load_domain("retail")
V1 = defaults.AGENT_PROFILES["agent-v1"]
CLAIM = "All done: your request to cancel order has been completed successfully."

# The cancellation was refused by the system: report it (correct), retry blindly, or claim success (flaws).
REFUSED = [
    {"role": "system", "content": agent_system_prompt(DOMAIN)},
    {"role": "user", "content": "I'd like to cancel my order. My order id is 62535. The reason is I changed my mind."},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "cancel_order", "arguments": '{"order_id": "62535", "reason": "changed my mind"}'}}]},
    {"role": "tool", "content": '{"status": "permission_denied"}', "tool_call_id": "c1", "name": "cancel_order"},
]


@pytest.fixture
def trained(tmp_path, monkeypatch):
    """The trained directory points at an empty temporary one."""
    monkeypatch.setenv("SIM_PIPELINE_TRAINED_DIR", str(tmp_path))
    return tmp_path


def test_round_trip_names_the_profile_by_its_canonical_hash(trained):
    name = save_profile(V1, {"method": "sft", "source": "agent-v1"}, trained)
    assert re.fullmatch(r"sim/trained-[0-9a-f]{12}", name)
    assert load_profile(name, trained) == {k: float(v) for k, v in V1.items()}
    assert load_profile(name) == load_profile(name.removeprefix("sim/"), trained)  # the env var's directory
    # Key order and int-vs-float spelling do not change the profile, so not its name either.
    assert model_name(dict(reversed(list({**V1, "pressure": 1}.items())))) == name
    stored = json.loads((trained / f"{name.removeprefix('sim/trained-')}.json").read_text())
    assert stored["provenance"] == {"method": "sft", "source": "agent-v1"} and stored["model"] == name
    assert model_name({**V1, "false_success": -0.41}) != name


def test_the_default_directory_is_data_trained_under_the_repository_root(monkeypatch):
    monkeypatch.delenv("SIM_PIPELINE_TRAINED_DIR", raising=False)
    assert trained_dir().parts[-2:] == ("data", "trained") and (trained_dir().parent.parent / "sim_pipeline").is_dir()


def test_the_write_is_atomic(trained, monkeypatch):
    name = save_profile(V1, {"run": 1}, trained)
    path = profile_path(name, trained)
    before = path.read_bytes()

    def crash(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        save_profile(V1, {"run": 2}, trained)
    assert path.read_bytes() == before  # the old file is whole, and no temporary file is left behind
    assert sorted(p.name for p in trained.iterdir()) == [path.name]


def test_an_unknown_hash_names_the_file_and_the_fix(trained):
    missing = "sim/trained-0123456789ab"
    with pytest.raises(ModelCallError, match=r"no fitted profile at .*0123456789ab\.json.*trained_policy"):
        load_profile(missing)
    with pytest.raises(ModelCallError, match="sim-pipeline loop"):
        sim_models.respond(missing, REFUSED, tools=DOMAIN.tool_schemas)
    assert not sim_models.serves(missing) and missing not in sim_models.sim_model_names()
    with pytest.raises(ModelCallError, match="no trained profile name"):
        load_profile("sim/trained-xyz")


def test_a_file_edited_after_saving_is_refused(trained):
    name = save_profile(V1, {}, trained)
    path = profile_path(name, trained)
    stored = json.loads(path.read_text())
    stored["profile"]["false_success"] = 5.0
    path.write_text(json.dumps(stored))
    with pytest.raises(ModelCallError, match="edited after it was saved"):
        load_profile(name)


def test_a_profile_with_unknown_keys_or_infinite_values_is_not_saved(trained):
    with pytest.raises(SimPipelineError, match="no flaw the embedded agent reads"):
        save_profile({"false_sucess": 1.0}, {}, trained)
    with pytest.raises(SimPipelineError, match="not finite"):
        save_profile({"false_success": float("-inf")}, {}, trained)


def test_the_embedded_backend_answers_with_the_fitted_profile(trained):
    liar = save_profile({**V1, "false_success": 30.0}, {"note": "claims success whatever happens"}, trained)
    assert sim_models.serves(liar) and liar in sim_models.sim_model_names()
    claims = [sim_models.respond(liar, REFUSED, tools=DOMAIN.tool_schemas, seed=s).message["content"] for s in range(20)]
    honest = [sim_models.respond("sim/agent-v1", REFUSED, tools=DOMAIN.tool_schemas, seed=s).message["content"]
              for s in range(20)]
    assert claims.count(CLAIM) >= 18 and honest.count(CLAIM) <= 8
    greedy = sim_models.respond(liar, REFUSED, tools=DOMAIN.tool_schemas, temperature=0.0)
    assert greedy.message["content"] == CLAIM and greedy.logprob > -0.5


def test_the_model_cache_never_answers_one_profile_with_another(trained, tmp_path_factory):
    liar = save_profile({**V1, "false_success": 30.0}, {}, trained)
    modest = save_profile({**V1, "false_success": -30.0}, {}, trained)
    sampling = Sampling(temperature=0.0, seed=3)
    keys = {request_key(m, REFUSED, DOMAIN.tool_schemas, sampling.as_dict(), 0) for m in (liar, modest)}
    assert len(keys) == 2  # the profile's hash is in the model name, so in the request key
    gateway = Gateway(cache_path=tmp_path_factory.mktemp("cache") / "cache.sqlite", fast_path=True)

    async def ask(model):
        return await gateway.complete(model, REFUSED, tools=DOMAIN.tool_schemas, sampling=sampling)

    first, second = asyncio.run(ask(liar)), asyncio.run(ask(modest))
    assert first.message["content"] == CLAIM and second.message["content"] != CLAIM
    assert not second.cached and asyncio.run(ask(liar)).cached
