"""Secrets are redacted by value: whatever the variable is called, once a registry names it in api_key_env."""

import asyncio
import base64
from urllib.parse import quote

import pytest
import yaml

from sim_pipeline.errors import ModelCallError, SimPipelineError
from sim_pipeline.models.completion import ProviderError
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.redaction import REDACTED, key_shaped, redact, secret_variable_in
from sim_pipeline.registry import load_models
from sim_pipeline_tests.scripted_server import ScriptedServer, error_body

SECRET = "gw-Live-7f3c9a51e2d84b6c0a1f"
NAME = "LLM_GATEWAY_CREDENTIAL"  # no name a key variable has (*_KEY, *_TOKEN, ...): only the registry says it is one


def registry_naming(tmp_path, api_base="http://127.0.0.1:9/v1"):
    path = tmp_path / "policies.yaml"
    path.write_text(yaml.safe_dump({
        "models": {"gateway": {"model": "openai/scripted-agent", "api_base": api_base, "api_key_env": NAME}},
        "policies": {"gw-v1": {"domain": "retail", "model": "gateway"}}}))
    return path


def test_a_variable_named_by_api_key_env_is_redacted_in_every_form(tmp_path, monkeypatch):
    monkeypatch.setenv(NAME, SECRET)
    load_models(registry_naming(tmp_path))
    basic = base64.b64encode(f"user:{SECRET}".encode()).decode()
    for prefix in ("", "a", "ab"):  # the three alignments base64 can put the key at
        encoded = base64.b64encode(f"{prefix}{SECRET}".encode()).decode()
        left = redact(f"Authorization: Basic {encoded}").removeprefix("Authorization: Basic ")
        # What is left of the encoded key is its first and last few bytes' characters: not the key.
        assert REDACTED in left and max(len(part) for part in left.split(REDACTED)) <= 8
    text = f"Bearer {SECRET}; url https://h/v1?k={quote(SECRET, safe='')}; Basic {basic}"
    assert SECRET not in redact(text) and quote(SECRET, safe="") not in redact(text) and REDACTED in redact(text)
    assert secret_variable_in(f"say {SECRET}") == NAME


def test_errors_are_redacted_when_they_are_made(tmp_path, monkeypatch):
    monkeypatch.setenv(NAME, SECRET)
    monkeypatch.setenv("HF_TOKEN", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345")
    load_models(registry_naming(tmp_path))
    for error in (SimPipelineError(f"key {SECRET}"), ModelCallError(f"key {SECRET}"), ProviderError(f"key {SECRET}"),
                  SimPipelineError("token hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345")):
        assert str(error) in ("key [redacted]", "token [redacted]")


def test_a_short_or_unnamed_value_is_left_alone(monkeypatch):
    monkeypatch.setenv("SOME_SETTING", SECRET)  # a variable neither named by a registry nor named like a key
    monkeypatch.setenv("TINY_API_KEY", "abc")  # too short to be a key: replacing it would garble the text
    assert redact(f"{SECRET} abc") == f"{SECRET} abc"


def test_a_gateway_error_quoting_the_key_of_an_unusually_named_variable_is_redacted(tmp_path, monkeypatch):
    """Regression: only `*_API_KEY` values were redacted, so a 400 quoting the Authorization header printed the key."""
    monkeypatch.setenv(NAME, SECRET)
    seen = []

    def echo(request):
        return 400, error_body(400, f"bad credentials {seen[0].headers[-1]['authorization']!r}")

    with ScriptedServer(echo) as server:
        seen.append(server)
        gateway = Gateway(backoff_s=0, models=load_models(registry_naming(tmp_path, server.base_url)))
        with pytest.raises(ProviderError) as error:
            asyncio.run(gateway.complete("gateway", [{"role": "user", "content": "hi"}]))
    assert server.headers[0]["authorization"] == f"Bearer {SECRET}"
    assert SECRET not in str(error.value) and "Bearer [redacted]" in str(error.value)


def test_a_key_cut_by_the_error_texts_length_limit_leaves_no_part_of_itself(tmp_path, monkeypatch):
    """Regression: the text was cut to 300 characters before the key was replaced, so a key across the cut left its
    first characters in the row."""
    monkeypatch.setenv(NAME, SECRET)
    pads = iter(range(200, 300, 4))

    def echo(request):
        return 400, error_body(400, "x" * next(pads) + f" {seen[0].headers[-1]['authorization']}")

    seen, messages = [], []
    with ScriptedServer(echo) as server:
        seen.append(server)
        models = load_models(registry_naming(tmp_path, server.base_url))
        for _ in range(25):  # a gateway each: five failures in a row would stop one (its circuit breaker)
            with pytest.raises(ProviderError) as error:
                asyncio.run(Gateway(backoff_s=0, models=models).complete("gateway", [{"role": "user", "content": "hi"}]))
            messages.append(str(error.value))
    pieces = {SECRET[i:i + 6] for i in range(len(SECRET) - 5)}
    assert not [m for m in messages if any(p in m for p in pieces)]


@pytest.mark.parametrize(("text", "shaped"), [
    ("sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8t", True), ("sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv", True),
    ("AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q", True), ("hf_AbCdEfGhIjKlMnOpQrStUvWxYz", True),
    ("sk-no-key-needed", False), ("hf_hub_download_with_retries_enabled", False), ("openai/gpt-4o-mini", False),
])
def test_key_shapes(text, shaped):
    assert key_shaped(text) is shaped
