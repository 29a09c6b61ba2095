"""A key named by any api_key_env is never written: not to Parquet, the Dagster instance, caches or the terminal.

The endpoint quotes the request's Authorization header in its 400 error, as some gateways do; the key's variable
is not named like a provider key (`*_API_KEY`), so only the registry's api_key_env says it is a secret.
"""

import base64
import itertools
from urllib.parse import quote

import yaml

from sim_pipeline import warehouse
from sim_pipeline.cli import _instance
from sim_pipeline.defs.launch import materialize_domain, sync_partitions
from sim_pipeline.registry import load_registry, versions_for
from sim_pipeline_tests.scripted_server import ScriptedServer, error_body

GATEWAY_KEY = "gw-Live-7f3c9a51e2d84b6c0a1f"  # neither a provider key's name nor its shape: only the registry knows


def _echoing(server_ref, first=None):
    """A responder answering 400 with the request's Authorization header quoted, as a careless gateway does (to the
    `first` requests only, when given: the others get a polite refusal, so the run goes on and writes error rows)."""
    count = itertools.count()

    def responder(request):
        if first is not None and next(count) >= first:
            return {"content": "Apologies, that is outside what this desk can do for you."}
        auth = server_ref[0].headers[-1].get("authorization", "")
        return 400, error_body(400, f"invalid model for credentials {auth!r}")
    return responder


def _hits(root, secret):
    """Files under root whose bytes hold the secret (plain, URL-encoded or base64)."""
    forms = {secret.encode(), quote(secret, safe="").encode(), base64.b64encode(secret.encode())}
    return sorted(str(p) for p in root.rglob("*") if p.is_file() and any(f in p.read_bytes() for f in forms))


def test_a_key_named_by_api_key_env_is_written_nowhere(tmp_path, monkeypatch, capfd):
    """One version's endpoint refuses every call (the run stops: the error reaches Dagster and the terminal), the
    other's first two calls (the run goes on: the error is in rollout rows); the key is in no file and no output."""
    monkeypatch.setenv("MY_GATEWAY_KEY", GATEWAY_KEY)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    for name in ("OPENAI_API_BASE", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # the model cache goes to data/cache under the working directory
    down, flaky = [], []
    with ScriptedServer(_echoing(down)) as refusing, ScriptedServer(_echoing(flaky, first=2)) as sometimes:
        down.append(refusing)
        flaky.append(sometimes)
        path = tmp_path / "gateway.yaml"
        entry = {"model": "openai/scripted-agent", "api_key_env": "MY_GATEWAY_KEY", "timeout_s": 10}
        path.write_text(yaml.safe_dump({
            "models": {"down-agent": {**entry, "api_base": refusing.base_url},
                       "flaky-agent": {**entry, "api_base": sometimes.base_url}},
            "defaults": {"user_model": "sim/user"},
            "policies": {"down-v1": {"domain": "retail", "model": "down-agent"},
                         "flaky-v1": {"domain": "retail", "model": "flaky-agent"}}}))
        instance = _instance()
        sync_partitions(instance, ["retail"], str(path))
        versions = versions_for(load_registry(path), "retail")
        outcomes = materialize_domain(instance, "retail", "0", versions, warehouse=str(tmp_path / "warehouse"),
                                      sizes={"max_situations": 4, "train_samples": 1, "heldout_samples": 1,
                                             "probe_samples": 0, "search_budget_rows": 0},
                                      concurrency=1, registry=str(path))
        instance.dispose()
        headers = refusing.headers + sometimes.headers
        out, err = capfd.readouterr()
    assert headers and {h["authorization"] for h in headers} == {f"Bearer {GATEWAY_KEY}"}  # the key was sent
    assert [o.success for o in outcomes if o.label.startswith("down-v1")] == [False]  # the run stopped
    assert "[redacted]" in out + err  # its failure was reported, with the key replaced
    rows = warehouse.read_table(warehouse.partition_path(tmp_path / "warehouse", "retail", "rollouts",
                                                         policy_version="flaky-v1", seed="0"))
    assert rows["error"].str.contains("[redacted]", regex=False).any()  # the refused calls' rows say why
    agent = rows["backends"].map(lambda cell: next(r for r in cell if r["role"] == "agent"))
    assert {(r["entry"], r["model"]) for r in agent} == {("flaky-agent", "openai/scripted-agent")}  # named, no key
    assert GATEWAY_KEY not in out + err
    assert _hits(tmp_path, GATEWAY_KEY) == []
