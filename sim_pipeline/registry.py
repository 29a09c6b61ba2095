"""The policy registry (data/policies.yaml): version slug -> domain, model, sampling, baseline, judge.

Loading refuses what would otherwise be read silently wrong: a key written twice (YAML keeps the last), a version
that is its own baseline or a baseline cycle (the regression guard could never fail), two slugs that are one once
case and `-`/`_` are set aside (one warehouse folder on a case-insensitive disk), a domain that is no pack under
data/domains, and a `sim/` model the embedded backend does not serve (caught here, not after the seed steps).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sim_pipeline import defaults
from sim_pipeline import domain as packs
from sim_pipeline.definition_files import load_yaml
from sim_pipeline.errors import RegistryError
from sim_pipeline.models.model_config import SECRET_FIX, ModelConfig, model_config, secret_problem
from sim_pipeline.models.sim_models import PREFIX as SIM_PREFIX
from sim_pipeline.models.sim_models import serves, sim_model_names
from sim_pipeline.models.trained_profiles import profile_path, trained_hash
from sim_pipeline.protocol.tool_kinds import folded_name
from sim_pipeline.protocol.train_methods import TRAIN_METHODS

# $SIM_PIPELINE_REGISTRY, when set, names another file: the code location, its sensors and the production run
# queue (deploy/provider_queue.py) then read the same registry.
REGISTRY_PATH = Path(os.environ.get("SIM_PIPELINE_REGISTRY") or Path(__file__).parent.parent / "data" / "policies.yaml")
_TOP = {"defaults", "models", "policies"}
_KEYS = {"domain", "model", "baseline", "sampling", "judge_model", "user_model", "must_not_regress",
         "judge_trust_opt_out", "system_prompt", "trainer", "reply_classifier"}
_TRAINER_KEYS = {"command", "methods", "timeout_s"}
_DEFAULTS = {"judge_model", "user_model", "reply_classifier"}  # what `defaults:` may set for every version
_SAMPLING = {"temperature", "top_p", "max_tokens"}
# Each a litellm string or the name of a `models:` entry (reply_classifier may also be empty: the rules read replies).
_MODEL_FIELDS = ("model", "judge_model", "user_model", "reply_classifier")

Lines = dict[tuple[str, ...], int]


@dataclass(frozen=True)
class TrainerSpec:
    """A version's `trainer:`: the command that trains a model from a cut's export (train/external.py), the methods
    it trains, and how long it may take."""

    command: tuple[str, ...]
    methods: tuple[str, ...] = ("sft",)
    timeout_s: float = defaults.TRAINER_TIMEOUT_S


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
    user_model: str = defaults.DEFAULT_USER_MODEL
    must_not_regress: tuple[str, ...] = ()
    judge_trust_opt_out: bool = False
    system_prompt: str = ""
    order: int = field(default=0, compare=False)  # position in the file: later entries are newer
    # The litellm model strings behind `model` and `judge_model` when they name a `models:` entry (judge trust
    # compares model families, which a config's name does not show).
    model_id: str = ""
    judge_model_id: str = ""
    trainer: TrainerSpec | None = None  # an external trainer for this version's cuts (train/external.py)
    reply_classifier: str = ""  # a model that reads the agent's replies for the graders ('' : protocol/replies.py)

    @property
    def agent_backend(self) -> str:
        """The agent's litellm model string (its config's `model` when `model` names one)."""
        return self.model_id or self.model

    @property
    def judge_backend(self) -> str:
        """The judge's litellm model string (its config's `model` when `judge_model` names one)."""
        return self.judge_model_id or self.judge_model

    def models_called(self, writer_model: str) -> dict[str, str]:
        """Every model a run of this version calls, by the field that names it (agent, user, judge, the search's
        writer, the reply classifier): what a run checks before its first call."""
        return {"model": self.model, "user_model": self.user_model, "judge_model": self.judge_model,
                "writer": writer_model, **({"reply_classifier": self.reply_classifier} if self.reply_classifier else {})}


def validate_slug(slug: Any, *, where: str = "policy version") -> str:
    """Return the slug if it is a safe partition key, else raise a RegistryError saying how to fix it."""
    if not isinstance(slug, str) or not re.fullmatch(defaults.SLUG_PATTERN, slug):
        raise RegistryError(f"{where} {slug!r} is not a valid slug. Fix: use only letters, digits, '.', '_' and '-' "
                            f"(pattern {defaults.SLUG_PATTERN}), e.g. 'agent-v3'")
    return slug


def _at(path: Path, lines: Lines, *keys: str) -> str:
    """Where a field is: the file, the line of its key when known, and its path in the file."""
    line = next((lines[keys[:n]] for n in range(len(keys), 0, -1) if keys[:n] in lines), None)
    return f"{path}: {f'line {line}: ' if line else ''}{'/'.join(keys)}"


def _number(where: str, sampling: dict[str, Any], key: str, default: float, *, integer: bool = False) -> float:
    value = sampling.get(key, default)
    # A boolean is an int to Python, and a 400-digit integer or .inf no usable number: none is what the field means.
    number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and (
        isinstance(value, float) or abs(value) < 2 ** 53) else math.nan
    if not math.isfinite(number) or (integer and not number.is_integer()):
        kind = "a whole number" if integer else "a finite number"
        raise RegistryError(f"{where}/sampling/{key}: {value!r} is not {kind}. Fix: temperature and top_p are "
                            "numbers, max_tokens a whole number, e.g. {temperature: 1.0, top_p: 1.0, max_tokens: 1024}")
    return int(number) if integer else number


def _text(where: str, spec: dict[str, Any], key: str, default: str, *, empty: bool = False) -> str:
    value = spec.get(key, default)
    if not isinstance(value, str) or (not value and not empty):
        raise RegistryError(f"{where}/{key}: {value!r} is not {'text' if empty else 'a model name'}. Fix: "
                            + ("write it as text" if empty else f"give a litellm model string or a models: entry, "
                               f"e.g. {key}: {default}"))
    return value


def _domain(where: str, name: Any) -> str:
    known = packs.pack_names()
    if not packs.is_domain_name(name):
        raise RegistryError(f"{where}/domain: {name!r} is not a domain name (a pack folder's name: a lowercase "
                            f"letter, then lowercase letters, digits or _; never a path). Fix: use one of {known}")
    if not (packs.DOMAINS_DIR / name / "domain.yaml").is_file():
        raise RegistryError(f"{where}/domain: no domain pack '{name}' ({packs.DOMAINS_DIR / name / 'domain.yaml'} "
                            f"does not exist). Fix: use one of {known}, or add the pack (docs/domain-packs.md)")
    return name


def _trainer(where: str, spec: Any) -> TrainerSpec | None:
    if spec is None:
        return None
    example = "trainer: {command: [python, scripts/train_sft.py], methods: [sft]}"
    if not isinstance(spec, dict):
        raise RegistryError(f"{where}/trainer: expected a mapping. Fix: e.g. {example}")
    unknown = sorted(set(spec) - _TRAINER_KEYS)
    if unknown:
        raise RegistryError(f"{where}/trainer: unknown field(s) {unknown}. Fix: use only {sorted(_TRAINER_KEYS)}")
    command = spec.get("command")
    if isinstance(command, str):
        command = [command]
    if not isinstance(command, list) or not command or not all(isinstance(c, str) and c for c in command):
        raise RegistryError(f"{where}/trainer/command: {command!r} is not a command. Fix: a list of its words, e.g. "
                            f"{example}")
    methods = spec.get("methods", ["sft"])
    if not isinstance(methods, list) or not methods or not set(methods) <= set(TRAIN_METHODS) or (
            len(set(methods)) != len(methods)):
        raise RegistryError(f"{where}/trainer/methods: {methods!r}. Fix: a list of distinct methods out of "
                            f"{list(TRAIN_METHODS)}")
    timeout = spec.get("timeout_s", defaults.TRAINER_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
        raise RegistryError(f"{where}/trainer/timeout_s: {timeout!r} is not a positive number of seconds. Fix: e.g. "
                            "timeout_s: 3600")
    return TrainerSpec(command=tuple(command), methods=tuple(methods), timeout_s=float(timeout))


def _entry(where: str, slug: str, spec: Any, base: dict[str, Any], order: int) -> PolicyVersion:
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
    temperature = _number(where, sampling, "temperature", 1.0)
    top_p = _number(where, sampling, "top_p", 1.0)
    max_tokens = int(_number(where, sampling, "max_tokens", 1024, integer=True))
    if temperature < 0 or not 0 < top_p <= 1 or max_tokens < 1:
        raise RegistryError(f"{where}/sampling: temperature={temperature}, top_p={top_p}, max_tokens={max_tokens} out of "
                            "range. Fix: temperature >= 0, 0 < top_p <= 1, max_tokens >= 1")
    baseline = spec.get("baseline")
    if baseline is not None:
        validate_slug(baseline, where=f"{where}/baseline")
    if baseline == slug:
        raise RegistryError(f"{where}/baseline: '{slug}' is its own baseline, so its regression guard compares it "
                            "with itself and can never fail. Fix: name the version it replaces, or drop baseline for "
                            "a first version")
    guarded = spec.get("must_not_regress", [])
    if not isinstance(guarded, list) or not all(isinstance(g, str) for g in guarded):
        raise RegistryError(f"{where}/must_not_regress: expected a list of metric names. Fix: e.g. [pass@1]")
    opt_out = spec.get("judge_trust_opt_out", False)
    if not isinstance(opt_out, bool):  # "no" or "false" in quotes would be true to bool()
        raise RegistryError(f"{where}/judge_trust_opt_out: {opt_out!r} is not true or false. Fix: write true or "
                            "false, unquoted")
    return PolicyVersion(
        slug=slug, domain=_domain(where, spec["domain"]), model=spec["model"], baseline=baseline,
        temperature=temperature, top_p=top_p, max_tokens=max_tokens,
        judge_model=_text(where, spec, "judge_model", base.get("judge_model", defaults.DEFAULT_JUDGE_MODEL)),
        user_model=_text(where, spec, "user_model", base.get("user_model", defaults.DEFAULT_USER_MODEL)), must_not_regress=tuple(guarded),
        judge_trust_opt_out=opt_out, system_prompt=_text(where, spec, "system_prompt", "", empty=True), order=order,
        trainer=_trainer(where, spec.get("trainer")),
        reply_classifier=_text(where, spec, "reply_classifier", base.get("reply_classifier", ""), empty=True),
    )


def _read(path: Path, lines: Lines | None = None) -> dict[str, Any]:
    if not path.is_file():
        raise RegistryError(f"{path}: file not found. Fix: create it (see docs/operations.md, 'Policy registry')")
    raw = load_yaml(path, RegistryError, lines) or {}
    if not isinstance(raw, dict):
        raise RegistryError(f"{path}: (top level): expected a mapping with 'policies', got {type(raw).__name__}. "
                            "Fix: start the file with 'policies:' and one entry per version")
    unknown = sorted(set(raw) - _TOP)
    if unknown:
        raise RegistryError(f"{path}: (top level): unknown field(s) {unknown}. Fix: use only {sorted(_TOP)}")
    return raw


def _defaults(path: Path, lines: Lines, raw: dict[str, Any]) -> dict[str, Any]:
    base = raw.get("defaults") or {}
    where = _at(path, lines, "defaults")
    if not isinstance(base, dict):
        raise RegistryError(f"{where}: expected a mapping, got {type(base).__name__}. Fix: e.g. defaults: "
                            "{judge_model: sim/judge, user_model: sim/user}")
    unknown = sorted(set(base) - _DEFAULTS)
    if unknown:
        raise RegistryError(f"{where}: unknown field(s) {unknown}. Fix: use only {sorted(_DEFAULTS)}")
    for key in sorted(base):
        _text(where, base, key, {"judge_model": defaults.DEFAULT_JUDGE_MODEL, "user_model": defaults.DEFAULT_USER_MODEL}
              .get(key, ""), empty=key == "reply_classifier")
        _no_secret(f"{where}/{key}", key, base[key])
    return base


def _no_secret(where: str, key: str, value: str) -> None:
    """Refuse a model field or system prompt that holds a key (a secret variable's value, or a key's look)."""
    problem = secret_problem(value or "")
    if problem is None:
        return
    if key == "system_prompt":
        raise RegistryError(f"{where}: the prompt {problem}; it is sent to the model and written into every rollout "
                            f"row. Fix: remove the key from the prompt (a key belongs in an environment variable "
                            "named by api_key_env of a models: entry, e.g. api_key_env: MY_GATEWAY_KEY)")
    raise RegistryError(f"{where}: the model string {problem}. {SECRET_FIX}; the model string is only the provider "
                        "and the model's name (or a models: entry's name), e.g. openai/gpt-4o-mini")


def _check_embedded(where: str, model: str) -> None:
    if model.startswith(SIM_PREFIX) and trained_hash(model) is not None and not serves(model):
        raise RegistryError(f"{where}: '{model}' is a trained profile whose file {profile_path(model)} does not exist "
                            "here. Fix: run the trained_policy step (or `sim-pipeline loop`) that fits it, or point "
                            "$SIM_PIPELINE_TRAINED_DIR at the directory holding it")
    if model.startswith(SIM_PREFIX) and not serves(model):
        raise RegistryError(f"{where}: '{model}' is no embedded model, so every call would fail after the seed steps "
                            f"ran. Fix: use one of {sim_model_names()} or sim/latency-<ms>, or a litellm model string "
                            "such as openai/gpt-4o-mini")


def _check_baselines(path: Path, lines: Lines, versions: dict[str, PolicyVersion]) -> None:
    for v in versions.values():
        if v.baseline is None:
            continue
        where = _at(path, lines, "policies", v.slug, "baseline")
        other = versions.get(v.baseline)
        if other is None:
            raise RegistryError(f"{where}: '{v.baseline}' is not registered. Fix: use one of {sorted(versions)}")
        if other.domain != v.domain:
            raise RegistryError(f"{where}: '{v.baseline}' serves domain '{other.domain}', not '{v.domain}'. "
                                "Fix: compare versions of one domain")
    for v in versions.values():
        chain = [v.slug]
        while versions[chain[-1]].baseline is not None:
            chain.append(versions[chain[-1]].baseline)
            if chain[-1] in chain[:-1]:
                cycle = chain[chain.index(chain[-1]):]
                raise RegistryError(f"{_at(path, lines, 'policies', v.slug, 'baseline')}: the baselines form a cycle "
                                    f"({' -> '.join(cycle)}), so no version in it has a fixed reference to be compared "
                                    "with. Fix: give the oldest version of the chain no baseline")


def same_slug(slug: str, registered: Iterable[str]) -> str | None:
    """The registered slug that is `slug` once case and `-`/`_` are set aside (never `slug` itself), or None."""
    return next((r for r in registered if r != slug and folded_name(r) == folded_name(slug)), None)


def _check_distinct(path: Path, lines: Lines, where: str, slug: str, first: str) -> None:
    """Refuse a slug that is an earlier one once case and `-`/`_` are set aside: the version's partition folders in
    the warehouse would be the other's on a case-insensitive disk, and the two read as one name."""
    if first == slug:
        return
    line = lines.get(("policies", first))
    raise RegistryError(f"{where}: version '{slug}' and version '{first}'{f' (line {line})' if line else ''} are one "
                        "slug once case and '-'/'_' are set aside: their warehouse folders would be one folder on a "
                        f"case-insensitive disk. Fix: rename one of the two in {path} (and any baseline naming it)")


def load_registry(path: Path | str | None = None) -> dict[str, PolicyVersion]:
    """Load and validate the registry (REGISTRY_PATH by default); every problem names the file, the field and the fix."""
    path = Path(path) if path is not None else REGISTRY_PATH
    lines: Lines = {}
    raw = _read(path, lines)
    if not isinstance(raw.get("policies"), dict) or not raw["policies"]:
        raise RegistryError(f"{path}: field 'policies' is missing or empty. Fix: add 'policies:' with one entry per version")
    models = _models(path, lines, raw)  # a broken models: entry is an error of the registry, whatever reads it
    base = _defaults(path, lines, raw)
    versions = {}
    folded: dict[str, str] = {}  # folded slug -> the slug first written so
    for order, (slug, spec) in enumerate(raw["policies"].items()):
        where = _at(path, lines, "policies", str(slug))
        validate_slug(slug, where=f"{where}: the version name")
        _check_distinct(path, lines, where, slug, folded.setdefault(folded_name(slug), slug))
        entry = _entry(where, slug, spec, base, order)
        for key in (*_MODEL_FIELDS, "system_prompt"):
            _no_secret(_at(path, lines, "policies", str(slug), key), key, getattr(entry, key))
        for key in _MODEL_FIELDS:  # a models: entry's own model was checked with the entry
            if getattr(entry, key) and getattr(entry, key) not in models:
                _check_embedded(f"{where}/{key}", getattr(entry, key))
        versions[slug] = replace(entry, model_id=_backend(models, entry.model),
                                 judge_model_id=_backend(models, entry.judge_model))
    _check_baselines(path, lines, versions)
    return versions


def _backend(models: dict[str, ModelConfig], name: str) -> str:
    return models[name].model if name in models else name


def _models(path: Path, lines: Lines, raw: dict[str, Any]) -> dict[str, ModelConfig]:
    section = raw.get("models") or {}
    if not isinstance(section, dict):
        raise RegistryError(f"{_at(path, lines, 'models')}: must be a mapping of name -> config. Fix: e.g. models: "
                            "{local-agent: {model: openai/my-agent, api_base: http://127.0.0.1:8000/v1}}")
    out = {}
    for name, spec in section.items():
        where = _at(path, lines, "models", str(name))
        validate_slug(name, where=f"{where}: the model name")
        try:
            config = model_config(where, name, spec)
        except (ArithmeticError, ValueError) as exc:  # float() of a 400-digit timeout, json.dumps of a looped value
            raise RegistryError(f"{where}: a value cannot be used ({exc.__class__.__name__}: {exc}). Fix: write "
                                "plain numbers and text (timeout_s and max_concurrency of a usual size)") from None
        _check_embedded(_at(path, lines, "models", str(name), "model"), config.model)
        out[name] = config
    return out


def load_models(path: Path | str | None = None) -> dict[str, ModelConfig]:
    """The registry's named model configs (`models:`); versions, judges and users refer to them by name."""
    path = Path(path) if path is not None else REGISTRY_PATH
    lines: Lines = {}
    return _models(path, lines, _read(path, lines))


def write_with_versions(source: Path | str, out: Path | str, entries: dict[str, dict[str, Any]]) -> Path:
    """A copy of the registry at `source` with `entries` added (or replacing same-named versions), written
    atomically to `out` and validated as any registry is; returns `out`."""
    import yaml

    raw = _read(Path(source))
    registered = [str(s) for s in raw.get("policies") or {}]
    for slug in entries:  # named here, against the source file: the copy below is a temporary one
        clash = same_slug(slug, registered)
        if clash is not None:
            raise RegistryError(f"{source}: the new version '{slug}' and version '{clash}' are one slug once case and "
                                "'-'/'_' are set aside: their warehouse folders would be one folder on a "
                                f"case-insensitive disk. Fix: rename '{clash}' in {source}")
    raw = {**raw, "policies": {**(raw.get("policies") or {}), **entries}}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    temporary.write_text("# Written by sim-pipeline loop: " + str(source) + " plus the versions it trained.\n"
                         + yaml.safe_dump(raw, sort_keys=False))
    try:
        load_registry(temporary)
    except RegistryError:
        temporary.unlink()
        raise
    os.replace(temporary, out)
    return out


def versions_for(registry: dict[str, PolicyVersion], domain: str) -> list[PolicyVersion]:
    """The versions serving one domain, oldest first."""
    return sorted((v for v in registry.values() if v.domain == domain), key=lambda v: v.order)
