"""Model configs: the registry's `models:` section names backends; a version, judge or user refers to one by name.

A config says where a model lives and how to call it: the litellm model string, the endpoint (`api_base`), the
name of the environment variable holding its key (never the key), a timeout, a concurrency cap, parameters passed
through to the provider, and whether to ask for logprobs. A plain model string is a config with the defaults, so
`model: openai/gpt-4o-mini` keeps working.

A key lives only in the environment: an entry's api_key_env names a secret variable (its value is redacted from
everything the project writes, sim_pipeline/redaction.py), and a key written into the model string, the api_base
URL or the params (a header, a credential parameter) is refused at load.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from sim_pipeline import defaults
from sim_pipeline.errors import RegistryError
from sim_pipeline.redaction import key_shaped, name_secret_variables, secret_variable_in
from sim_pipeline.seeding import digest

LOGPROBS_MODES = ("auto", "on", "off")  # auto: only where litellm says the provider returns them
_FIELDS = {"model", "api_base", "api_key_env", "timeout_s", "max_concurrency", "params", "logprobs"}
# Request fields the gateway sets itself; a config's params may not override them.
_OWN_PARAMS = {"model", "messages", "tools", "temperature", "top_p", "max_tokens", "seed", "api_key", "api_base",
               "base_url", "timeout", "max_retries", "logprobs"}
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
# The fix every refused key gets: where a key belongs instead.
SECRET_FIX = ("Fix: put the key in an environment variable and name it in api_key_env of a models: entry (e.g. "
              "api_key_env: MY_GATEWAY_KEY); sim_pipeline sends it as the provider's key header and redacts it")
# Header names (lower case) whose value is a credential: Authorization, Azure's api-key, Anthropic's x-api-key, ...
_CREDENTIAL_HEADER = re.compile(r"auth|key|token|secret|cookie|password|credential|signature")
# Parameter names (lower case, - as _) whose value is a credential (litellm takes aws_secret_access_key, ...).
_CREDENTIAL_PARAM = re.compile(r"(^|_)(api_?key|secret(_access)?(_key)?|password|passwd|credentials?|"
                               r"authorization|cookie|(access|auth|session|bearer|id|refresh|ad)_token)$")
_HEADER_PARAMS = {"extra_headers", "headers", "default_headers"}
# The variable litellm reads a provider's key from (its documented defaults), for messages that must name it.
PROVIDER_KEY_VARIABLES = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "gemini": "GEMINI_API_KEY",
                          "mistral": "MISTRAL_API_KEY", "together_ai": "TOGETHERAI_API_KEY",
                          "groq": "GROQ_API_KEY", "deepseek": "DEEPSEEK_API_KEY", "hosted_vllm": "HOSTED_VLLM_API_KEY"}


@dataclass(frozen=True)
class ModelConfig:
    """One backend: a litellm model string and how to reach and call it."""

    name: str
    model: str
    api_base: str | None = None
    api_key_env: str | None = None
    timeout_s: float = defaults.MODEL_TIMEOUT_S
    max_concurrency: int | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    logprobs: str = "auto"

    @classmethod
    def plain(cls, model: str) -> ModelConfig:
        """A bare model string as a config with every default."""
        return cls(name=model, model=model)

    def identity(self) -> dict[str, Any]:
        """What changes an answer (the cache key's part): model, endpoint, parameters, logprobs mode."""
        return {"model": self.model, "api_base": self.api_base, "params": dict(self.params), "logprobs": self.logprobs}

    def sha256(self) -> str:
        """Hex sha256 of the whole config but its name: what a row's provenance says it was made with.

        The key variable's name is part of it (never its value); the entry's name is not, so renaming an entry
        changes no hash, while a new model string, endpoint, parameter, timeout or cap does.
        """
        return digest({"model": self.model, "api_base": self.api_base, "api_key_env": self.api_key_env,
                          "timeout_s": self.timeout_s, "max_concurrency": self.max_concurrency,
                          "params": dict(self.params), "logprobs": self.logprobs})

    def host(self) -> str | None:
        """The endpoint's host and port, for the rows' provenance (never a key or a path)."""
        if not self.api_base:
            return None
        parts = urlsplit(self.api_base)
        return parts.netloc.rsplit("@", 1)[-1] or None


def key_variable(config: ModelConfig) -> str:
    """The environment variable a config's key comes from: its api_key_env, else its provider's usual one."""
    provider = config.model.split("/", 1)[0]
    return config.api_key_env or PROVIDER_KEY_VARIABLES.get(provider) or f"{provider.upper()}_API_KEY"


def secret_problem(text: str) -> str | None:
    """Why a registry text may not be written as is (it holds a secret variable's value, or a key's look), or None."""
    variable = secret_variable_in(text)
    if variable:
        return f"holds the value of the secret environment variable {variable}"
    return "holds what looks like a key" if key_shaped(text) else None


def _refuse_in_url(where: str, api_base: Any) -> None:
    """Refuse an api_base that carries a credential: a user part (user:password@), a key parameter, a key's value."""
    if not isinstance(api_base, str):
        return
    try:
        parts = urlsplit(api_base)
        user = parts.username or parts.password
    except ValueError:  # a malformed port or bracket: the URL check after this one names it
        return
    if user:
        raise RegistryError(f"{where}/api_base: the URL holds credentials in its user part (user:password@host). "
                            f"{SECRET_FIX}, and write api_base without them, e.g. https://host/v1")
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if value and _CREDENTIAL_PARAM.search(key.lower().replace("-", "_")):
            raise RegistryError(f"{where}/api_base: the URL's query holds a credential ({key}=...). {SECRET_FIX}, "
                                "and write api_base without it")
    problem = secret_problem(api_base)
    if problem:
        raise RegistryError(f"{where}/api_base: the URL {problem}. {SECRET_FIX}, and write api_base without it")


def _refuse_in_params(where: str, value: Any, path: tuple[str, ...] = (), depth: int = 0) -> None:
    """Refuse a credential anywhere in params: a header or parameter named as one, or any text holding a key."""
    if depth > defaults.DEFINITION_MAX_DEPTH:
        return  # deeper than any file may be: the nesting check refuses it with its own message
    if isinstance(value, dict):
        for key, item in value.items():
            _refuse_in_params(where, item, (*path, str(key)), depth + 1)
        return
    if isinstance(value, list | tuple):
        for n, item in enumerate(value):
            _refuse_in_params(where, item, (*path, str(n)), depth + 1)
        return
    field_at = "/".join((f"{where}/params", *path))
    if not isinstance(value, str) or not value:
        return
    name = path[-1].lower() if path else ""
    if len(path) >= 2 and path[-2].lower() in _HEADER_PARAMS and _CREDENTIAL_HEADER.search(name):
        raise RegistryError(f"{field_at}: a credential header written into the registry. {SECRET_FIX}, and remove "
                            "the header")
    if _CREDENTIAL_PARAM.search(name.replace("-", "_")):
        raise RegistryError(f"{field_at}: a credential written into the registry. {SECRET_FIX}, and remove it "
                            "from params")
    problem = secret_problem(value)
    if problem:
        raise RegistryError(f"{field_at}: the value {problem}. {SECRET_FIX}, and remove it from params")


def model_config(where: str, name: str, spec: Any) -> ModelConfig:
    """Validate one `models:` entry; every problem names the field and the fix."""
    if isinstance(spec, str):
        spec = {"model": spec}
    if not isinstance(spec, dict):
        raise RegistryError(f"{where}: expected a mapping with at least 'model', got {type(spec).__name__}")
    if "api_key" in spec:
        raise RegistryError(f"{where}/api_key: a key does not belong in the registry. Fix: export it in the "
                            "environment and name the variable with api_key_env: MY_PROVIDER_API_KEY")
    unknown = sorted(set(spec) - _FIELDS)
    if unknown:
        raise RegistryError(f"{where}: unknown field(s) {unknown}. Fix: use only {sorted(_FIELDS)}")
    model = spec.get("model")
    if not isinstance(model, str) or not model:
        raise RegistryError(f"{where}/model: missing. Fix: add model: <litellm model string>, e.g. openai/gpt-4o-mini")
    api_base = spec.get("api_base")
    key_env = spec.get("api_key_env")
    if key_env is not None and (not isinstance(key_env, str) or not _ENV_NAME.match(key_env)):
        shown = "(what looks like a key)" if isinstance(key_env, str) and key_shaped(key_env) else repr(key_env)
        raise RegistryError(f"{where}/api_key_env: {shown} is not an environment variable name. Fix: the "
                            "variable's name in capitals, e.g. LOCAL_LLM_API_KEY (never the key itself)")
    name_secret_variables([key_env])  # its value is a secret from now on, whatever the variable is called
    problem = secret_problem(model)
    if problem:
        raise RegistryError(f"{where}/model: the model string {problem}. {SECRET_FIX}; the model string is only "
                            "the provider and the model's name, e.g. openai/gpt-4o-mini")
    _refuse_in_url(where, api_base)
    _refuse_in_params(where, spec.get("params"))
    if api_base is not None and (not isinstance(api_base, str) or urlsplit(api_base).scheme not in ("http", "https")
                                 or not urlsplit(api_base).netloc):
        raise RegistryError(f"{where}/api_base: {api_base!r} is not an http(s) URL. Fix: e.g. "
                            "http://127.0.0.1:8000/v1")
    try:
        timeout = float(spec.get("timeout_s", defaults.MODEL_TIMEOUT_S))
    except (TypeError, ValueError, OverflowError):
        timeout = math.nan
    if not math.isfinite(timeout):
        raise RegistryError(f"{where}/timeout_s: {str(spec.get('timeout_s'))[:40]!r} is not a finite number of "
                            "seconds. Fix: e.g. timeout_s: 60") from None
    cap = spec.get("max_concurrency")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int)):
        raise RegistryError(f"{where}/max_concurrency: {str(cap)[:40]!r} is not a whole number. Fix: e.g. "
                            "max_concurrency: 4") from None
    if timeout <= 0 or (cap is not None and cap < 1):
        raise RegistryError(f"{where}: timeout_s={timeout}, max_concurrency={cap}. Fix: timeout_s > 0, "
                            "max_concurrency >= 1")
    params = spec.get("params") or {}
    if not isinstance(params, dict):
        raise RegistryError(f"{where}/params: expected a mapping of request parameters. Fix: e.g. params: "
                            "{top_logprobs: 5, parallel_tool_calls: false}")
    owned = sorted(set(params) & _OWN_PARAMS)
    if owned:
        raise RegistryError(f"{where}/params: {owned} are set by sim_pipeline itself. Fix: remove them (sampling "
                            "goes under the version's sampling:, the endpoint under api_base, the key under "
                            "api_key_env, the timeout under timeout_s)")
    try:
        json.dumps(params, sort_keys=True)
    except (TypeError, ValueError, RecursionError):  # not plain data, or a structure that contains itself
        raise RegistryError(f"{where}/params: values must be plain YAML (numbers, strings, lists, mappings)") from None
    logprobs = spec.get("logprobs", "auto")
    if logprobs is True or logprobs is False:  # YAML on/off read as booleans
        logprobs = "on" if logprobs else "off"
    if logprobs not in LOGPROBS_MODES:
        raise RegistryError(f"{where}/logprobs: {logprobs!r}. Fix: use one of {list(LOGPROBS_MODES)}")
    return ModelConfig(name=name, model=model, api_base=api_base, api_key_env=key_env, timeout_s=timeout,
                       max_concurrency=cap, params=params, logprobs=logprobs)
