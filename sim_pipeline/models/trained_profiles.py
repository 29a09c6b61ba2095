"""Fitted agent profiles on disk, which the embedded backend serves as the model `sim/trained-<hash>`.

A profile is stored as `<dir>/<hash>.json`, hash = the first TRAINED_HASH_LENGTH hex digits of the sha256 of its
canonical JSON, so the model name pins the exact profile: the response cache keys requests by model name, and a
loaded file is checked against the hash in its name, so an answer cached for one profile is never served for another.
The directory is $SIM_PIPELINE_TRAINED_DIR, else TRAINED_PROFILES_DIR under the repository root (beside data/cache).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

from sim_pipeline import defaults
from sim_pipeline.errors import ModelCallError, SimPipelineError
from sim_pipeline.seeding import canonical_json

PREFIX = "sim/"
NAME = re.compile(rf"^(?:{re.escape(PREFIX)})?{re.escape(defaults.TRAINED_MODEL_PREFIX)}"
                  rf"([0-9a-f]{{{defaults.TRAINED_HASH_LENGTH}}})$")
KEYS = frozenset(k for profile in defaults.AGENT_PROFILES.values() for k in profile)  # what the embedded agent reads
_FIX = ("Fix: run the trained_policy step (or `sim-pipeline loop`) that fits and saves it, or point "
        "$SIM_PIPELINE_TRAINED_DIR at the directory that holds it")


def trained_dir() -> Path:
    """Where fitted profiles live: $SIM_PIPELINE_TRAINED_DIR, else data/trained under the repository root."""
    return Path(os.environ.get("SIM_PIPELINE_TRAINED_DIR") or Path(__file__).parents[2] / defaults.TRAINED_PROFILES_DIR)


def _checked(profile: dict[str, Any]) -> dict[str, float]:
    """The profile as finite floats, sorted by key; a key the agent does not read (a typo) is an error."""
    unknown = sorted(set(profile) - KEYS)
    if unknown:
        raise SimPipelineError(f"profile keys {unknown} are no flaw the embedded agent reads. Fix: use keys of "
                             f"{sorted(KEYS)}")
    values = {str(k): float(v) for k, v in sorted(profile.items())}
    bad = sorted(k for k, v in values.items() if not math.isfinite(v))
    if bad:
        raise SimPipelineError(f"profile values of {bad} are not finite. Fix: fit with an L2 pull (FIT_L2_PULL) or clip them")
    return values


def profile_hash(profile: dict[str, Any]) -> str:
    """The first TRAINED_HASH_LENGTH hex digits of sha256 of the profile's canonical JSON."""
    return hashlib.sha256(canonical_json(_checked(profile)).encode()).hexdigest()[: defaults.TRAINED_HASH_LENGTH]


def model_name(profile: dict[str, Any]) -> str:
    """The embedded model that serves this profile: sim/trained-<hash>."""
    return f"{PREFIX}{defaults.TRAINED_MODEL_PREFIX}{profile_hash(profile)}"


def trained_hash(name: str) -> str | None:
    """The profile hash a model name (with or without sim/) refers to, or None when it is no trained model."""
    match = NAME.match(name)
    return match.group(1) if match else None


def save_profile(profile: dict[str, Any], provenance: dict[str, Any], directory: Path | str | None = None) -> str:
    """Write `<directory>/<hash>.json` atomically (a reader never sees half a file); returns the model name."""
    folder = Path(directory) if directory is not None else trained_dir()
    folder.mkdir(parents=True, exist_ok=True)
    values, name = _checked(profile), model_name(profile)
    text = json.dumps({"model": name, "profile": values, "provenance": provenance}, sort_keys=True, indent=2,
                      default=str) + "\n"
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".", suffix=".json.tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, folder / f"{profile_hash(values)}.json")  # atomic on POSIX within one file system
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return name


def profile_path(name: str, directory: Path | str | None = None) -> Path:
    """The file a trained model name is served from (whether or not it exists)."""
    digest = trained_hash(name)
    if digest is None:
        raise ModelCallError(f"model '{name}' is no trained profile name. Fix: use sim/"
                             f"{defaults.TRAINED_MODEL_PREFIX}<{defaults.TRAINED_HASH_LENGTH} hex digits>, as "
                             "save_profile returns it")
    return (Path(directory) if directory is not None else trained_dir()) / f"{digest}.json"


def load_profile(name: str, directory: Path | str | None = None) -> dict[str, float]:
    """The profile a model name serves; a missing, unreadable or altered file is an error naming it and the fix."""
    path = profile_path(name, directory)
    try:
        stamp = path.stat().st_mtime_ns
    except FileNotFoundError:
        raise ModelCallError(f"model '{name}': no fitted profile at {path}. {_FIX}") from None
    return dict(_read(str(path), stamp, trained_hash(name) or ""))


@lru_cache(maxsize=64)
def _read(path: str, stamp: int, digest: str) -> tuple[tuple[str, float], ...]:
    """A profile file's values, checked against the hash its name carries (cached per file version)."""
    del stamp  # part of the cache key only: a rewritten file is read again
    try:
        profile = _checked(json.loads(Path(path).read_text(encoding="utf-8"))["profile"])
    except (ValueError, KeyError, TypeError, AttributeError, SimPipelineError) as exc:
        raise ModelCallError(f"fitted profile {path} is unreadable ({exc}). {_FIX}") from None
    if profile_hash(profile) != digest:
        raise ModelCallError(f"fitted profile {path} holds a profile whose hash is {profile_hash(profile)}, not "
                             f"{digest}: it was edited after it was saved. {_FIX}")
    return tuple(profile.items())


def trained_names(directory: Path | str | None = None) -> list[str]:
    """Every trained model a directory holds, sorted (none when it does not exist)."""
    folder = Path(directory) if directory is not None else trained_dir()
    if not folder.is_dir():
        return []
    return sorted(f"{PREFIX}{defaults.TRAINED_MODEL_PREFIX}{p.stem}" for p in folder.glob("*.json")
                  if trained_hash(f"{defaults.TRAINED_MODEL_PREFIX}{p.stem}"))
