"""Secrets are never written: the values of the variables holding keys are replaced wherever the project writes text.

The secrets are the values of every environment variable a registry's `models:` entry names (`api_key_env`, named
here when a registry is loaded or a gateway is built) and of every variable whose name says it holds a key
(`*_API_KEY`, `*_TOKEN`, ...: defaults.SECRET_VARIABLE_SUFFIXES). A value is replaced by `[redacted]` as written,
URL-encoded, and in base64 (the `Basic` Authorization form, at any alignment). The project's own errors
(`SimPipelineError`, `ProviderError`) redact their message when they are made, so a key never reaches a row, the
terminal or Dagster's event log; `redact` is the one function that does it.
"""

from __future__ import annotations

import base64
import functools
import os
import re
from collections.abc import Iterable
from urllib.parse import quote

from sim_pipeline import defaults

REDACTED = "[redacted]"
_named: set[str] = set()  # the variables the registries loaded in this process name (api_key_env), process-wide


def name_secret_variables(names: Iterable[str | None]) -> None:
    """Count these environment variables' values as secrets from now on (a registry's api_key_env names)."""
    _named.update(n for n in names if n)


def secret_variables() -> set[str]:
    """The environment variables whose values are secrets: those named by a registry, and those named like keys."""
    suffixes = defaults.SECRET_VARIABLE_SUFFIXES
    return _named | {name for name in os.environ if name.upper().endswith(suffixes)}


def secret_values(known: Iterable[str | None] = ()) -> list[str]:
    """The secret values of the environment (and the given ones) long enough to be keys, longest first."""
    values = {v for v in (*known, *(os.environ.get(n) for n in secret_variables())) if v}
    return sorted((v for v in values if len(v) >= defaults.SECRET_MIN_LENGTH), key=len, reverse=True)


@functools.lru_cache(maxsize=256)
def _forms(secret: str) -> tuple[str, ...]:
    """A secret as it may appear in text: itself, URL-encoded, and the part of its base64 that depends on it alone
    (for each of the three alignments it can have after a prefix, e.g. `user:` in a Basic header)."""
    raw = secret.encode()
    forms = [secret, quote(secret, safe="")]
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + raw).decode()
        start, end = -(-shift // 3) * 4, (shift + len(raw)) // 3 * 4  # whole 3-byte groups of the secret only
        if end - start >= defaults.SECRET_MIN_LENGTH:
            forms.append(encoded[start:end])
    return tuple(dict.fromkeys(forms))


def redact(text: str, known: Iterable[str | None] = ()) -> str:
    """Text with every secret (the environment's and the given ones) replaced by [redacted], in any of its forms."""
    if not text:
        return text
    for secret in secret_values(known):
        for form in _forms(secret):
            if form in text:
                text = text.replace(form, REDACTED)
    return text


def secret_variable_in(text: str) -> str | None:
    """The secret variable whose value the text holds (in any of its forms), or None: for a refusal naming it."""
    for name in sorted(secret_variables()):
        value = os.environ.get(name) or ""
        if len(value) >= defaults.SECRET_MIN_LENGTH and any(form in text for form in _forms(value)):
            return name
    return None


_SHAPE = re.compile(defaults.SECRET_SHAPE)


def key_shaped(text: str) -> bool:
    """Whether the text holds something shaped like a provider key (defaults.SECRET_SHAPE with a random-looking tail)."""
    for match in _SHAPE.finditer(text):
        tail = match.group()[3:]
        if any(c.isdigit() for c in tail) or (any(c.isupper() for c in tail) and any(c.islower() for c in tail)):
            return True
    return False
