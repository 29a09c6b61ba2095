"""A key written into a models: entry is refused at load: in a header, the api_base URL, the model string or params."""

import pytest
import yaml

from sim_pipeline.errors import RegistryError
from sim_pipeline.registry import load_registry

KEY = "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8t"  # a key's look
LIVE = "gw-Live-7f3c9a51e2d84b6c0a1f"  # no key's look: known only as the value of a variable an entry names
FIX = "Fix: put the key in an environment variable and name it in api_key_env"


def registry(tmp_path, entry, **version):
    """A registry with one version on the `gateway` entry, and an entry naming MY_GATEWAY_KEY."""
    path = tmp_path / "policies.yaml"
    path.write_text(yaml.safe_dump({
        "models": {"gateway": {"model": "openai/scripted-agent", "api_base": "http://127.0.0.1:8000/v1", **entry},
                   "named": {"model": "openai/other", "api_key_env": "MY_GATEWAY_KEY"}},
        "policies": {"gw-v1": {"domain": "retail", "model": "gateway", **version}}}))
    return path


@pytest.mark.parametrize(("entry", "message"), [
    ({"params": {"extra_headers": {"Authorization": f"Bearer {LIVE}"}}},
     "models/gateway/params/extra_headers/Authorization: a credential header written into the registry"),
    ({"params": {"extra_headers": {"api-key": "abc123"}}}, "params/extra_headers/api-key: a credential header"),
    ({"params": {"extra_headers": {"X-Trace": LIVE}}},
     "params/extra_headers/X-Trace: the value holds the value of the secret environment variable MY_GATEWAY_KEY"),
    ({"params": {"aws_secret_access_key": "abc/def"}}, "params/aws_secret_access_key: a credential written"),
    ({"params": {"metadata": {"note": KEY}}}, "params/metadata/note: the value holds what looks like a key"),
    ({"api_base": f"https://user:{LIVE}@gateway.example/v1"}, "api_base: the URL holds credentials in its user part"),
    ({"api_base": f"https://gateway.example/v1?api-key={LIVE}"}, r"api_base: the URL's query holds a credential"),
    ({"api_base": f"https://gateway.example/{KEY}/v1"}, "api_base: the URL holds what looks like a key"),
    ({"model": f"openai/{KEY}"}, "models/gateway/model: the model string holds what looks like a key"),
    ({"model": f"openai/{LIVE}"}, "model: the model string holds the value of the secret environment variable "
                                  "MY_GATEWAY_KEY"),
    ({"api_key_env": KEY}, r"api_key_env: \(what looks like a key\) is not an environment variable name"),
])
def test_a_key_in_a_models_entry_is_refused_with_the_fix(tmp_path, monkeypatch, entry, message):
    monkeypatch.setenv("MY_GATEWAY_KEY", LIVE)
    with pytest.raises(RegistryError, match=message) as error:
        load_registry(registry(tmp_path, entry))
    assert str(tmp_path / "policies.yaml") in str(error.value)
    assert LIVE not in str(error.value) and KEY not in str(error.value)  # the refusal never repeats the key
    assert FIX in str(error.value) or "api_key_env" in str(error.value)


def test_headers_and_urls_without_a_credential_load(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_GATEWAY_KEY", LIVE)
    entry = {"params": {"extra_headers": {"X-Team": "evals", "OpenAI-Organization": "org-evals"}, "top_logprobs": 5,
                        "prompt_cache_key": "desk-v1"},
             "api_base": "https://gateway.example/v1?region=eu", "api_key_env": "MY_GATEWAY_KEY"}
    versions = load_registry(registry(tmp_path, entry, system_prompt="You are the desk. Never reveal a key."))
    assert versions["gw-v1"].agent_backend == "openai/scripted-agent"
