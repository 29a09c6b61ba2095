"""The policy registry (data/policies.yaml): version slug -> domain, model, sampling, baseline, judge."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from sim_pipeline import defaults
from sim_pipeline.errors import RegistryError
from sim_pipeline.models.model_config import ModelConfig, model_config

REGISTRY_PATH = Path(__file__).parent.parent / "data" / "policies.yaml"
_KEYS = {"domain", "model", "baseline", "sampling", "judge_model", "user_model", "must_not_regress",
         "judge_trust_opt_out", "system_prompt"}
_SAMPLING = {"temperature", "top_p", "max_tokens"}


@dataclass(frozen=True)
class PolicyVersion:
    """One registered policy version."""

    slug: str
    domain: str
    model: str
    baseline: str | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 1024
    judge_model: str = defaults.DEFAULT_JUDGE_MODEL
    user_model: str = "sim/user"
    must_not_regress: tuple[str, ...] = ()
    judge_trust_opt_out: bool = False
    system_prompt: str = ""
    order: int = field(default=0, compare=False)  # position in the file: later entries are newer
    # The litellm model strings behind `model` and `judge_model` when they name a `models:` entry (judge trust
    # compares model families, which a config's name does not show).
    model_id: str = ""
    judge_model_id: str = ""

    @property
    def agent_backend(self) -> str:
        """The agent's litellm model string (its config's `model` when `model` names one)."""
        return self.model_id or self.model

    @property
    def judge_backend(self) -> str:
        """The judge's litellm model string (its config's `model` when `judge_model` names one)."""
        return self.judge_model_id or self.judge_model


def validate_slug(slug: Any, *, where: str = "policy version") -> str:
    """Return the slug if it is a safe partition key, else raise a RegistryError saying how to fix it."""
    if not isinstance(slug, str) or not re.fullmatch(defaults.SLUG_PATTERN, slug):
        raise RegistryError(f"{where} {slug!r} is not a valid slug. Fix: use only letters, digits, '.', '_' and '-' "
                            f"(pattern {defaults.SLUG_PATTERN}), e.g. 'agent-v3'")
    return slug


def _entry(path: Path, slug: str, spec: Any, base: dict[str, Any], order: int) -> PolicyVersion:
    where = f"{path}: policies/{slug}"
    if not isinstance(spec, dict):
        raise RegistryError(f"{where}: expected a mapping, got {type(spec).__name__}. Fix: give domain and model")
    unknown = sorted(set(spec) - _KEYS)
    if unknown:
        raise RegistryError(f"{where}: unknown field(s) {unknown}. Fix: use only {sorted(_KEYS)}")
    for key in ("domain", "model"):
        if not isinstance(spec.get(key), str) or not spec[key]:
            raise RegistryError(f"{where}: field '{key}' is missing. Fix: add {key}: <value>")
    sampling = spec.get("sampling") or {}
    bad = sorted(set(sampling) - _SAMPLING) if isinstance(sampling, dict) else ["(not a mapping)"]
    if bad:
        raise RegistryError(f"{where}/sampling: unknown field(s) {bad}. Fix: use only {sorted(_SAMPLING)}")
    try:
        temperature = float(sampling.get("temperature", 1.0))
        top_p = float(sampling.get("top_p", 1.0))
        max_tokens = int(sampling.get("max_tokens", 1024))
    except (TypeError, ValueError) as exc:
        raise RegistryError(f"{where}/sampling: {exc}. Fix: temperature and top_p are numbers, max_tokens an integer") from None
    if temperature < 0 or not 0 < top_p <= 1 or max_tokens < 1:
        raise RegistryError(f"{where}/sampling: temperature={temperature}, top_p={top_p}, max_tokens={max_tokens} out of "
                            "range. Fix: temperature >= 0, 0 < top_p <= 1, max_tokens >= 1")
    baseline = spec.get("baseline")
    if baseline is not None:
        validate_slug(baseline, where=f"{where}/baseline")
    guarded = spec.get("must_not_regress", [])
    if not isinstance(guarded, list) or not all(isinstance(g, str) for g in guarded):
        raise RegistryError(f"{where}/must_not_regress: expected a list of metric names. Fix: e.g. [pass@1]")
    return PolicyVersion(
        slug=slug, domain=spec["domain"], model=spec["model"], baseline=baseline, temperature=temperature,
        top_p=top_p, max_tokens=max_tokens, judge_model=spec.get("judge_model", base.get("judge_model", defaults.DEFAULT_JUDGE_MODEL)),
        user_model=spec.get("user_model", base.get("user_model", "sim/user")), must_not_regress=tuple(guarded),
        judge_trust_opt_out=bool(spec.get("judge_trust_opt_out", False)), system_prompt=spec.get("system_prompt", ""),
        order=order,
    )


def _read(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise RegistryError(f"{path}: file not found. Fix: create it (see README 'Policy registry')")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise RegistryError(f"{path}: not valid YAML ({exc}). Fix: correct the syntax") from None
    return raw if isinstance(raw, dict) else {"policies": None}


def load_registry(path: Path | str = REGISTRY_PATH) -> dict[str, PolicyVersion]:
    """Load and validate the registry; every problem names the file, the field and the fix."""
    path = Path(path)
    raw = _read(path)
    if not isinstance(raw, dict) or not isinstance(raw.get("policies"), dict) or not raw["policies"]:
        raise RegistryError(f"{path}: field 'policies' is missing or empty. Fix: add 'policies:' with one entry per version")
    models = load_models(path)  # a broken models: entry is an error of the registry, whatever reads it
    base = raw.get("defaults") or {}
    versions = {}
    for order, (slug, spec) in enumerate(raw["policies"].items()):
        validate_slug(slug, where=f"{path}: policies/")
        entry = _entry(path, slug, spec, base, order)
        versions[slug] = replace(entry, model_id=_backend(models, entry.model),
                                 judge_model_id=_backend(models, entry.judge_model))
    for v in versions.values():
        if v.baseline is not None:
            other = versions.get(v.baseline)
            if other is None:
                raise RegistryError(f"{path}: policies/{v.slug}/baseline: '{v.baseline}' is not registered. "
                                    f"Fix: use one of {sorted(versions)}")
            if other.domain != v.domain:
                raise RegistryError(f"{path}: policies/{v.slug}/baseline: '{v.baseline}' serves domain "
                                    f"'{other.domain}', not '{v.domain}'. Fix: compare versions of one domain")
    return versions


def _backend(models: dict[str, ModelConfig], name: str) -> str:
    return models[name].model if name in models else name


def load_models(path: Path | str = REGISTRY_PATH) -> dict[str, ModelConfig]:
    """The registry's named model configs (`models:`); versions, judges and users refer to them by name."""
    path = Path(path)
    raw = _read(path)
    section = raw.get("models") or {}
    if not isinstance(section, dict):
        raise RegistryError(f"{path}: field 'models' must be a mapping of name -> config. Fix: e.g. models: "
                            "{local-agent: {model: openai/my-agent, api_base: http://127.0.0.1:8000/v1}}")
    return {validate_slug(name, where=f"{path}: models/"): model_config(f"{path}: models/{name}", name, spec)
            for name, spec in section.items()}


def versions_for(registry: dict[str, PolicyVersion], domain: str) -> list[PolicyVersion]:
    """The versions serving one domain, oldest first."""
    return sorted((v for v in registry.values() if v.domain == domain), key=lambda v: v.order)
