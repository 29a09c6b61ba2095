"""Stable, process-independent seeds: every random draw comes from a hash of (seed, purpose, ids)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np


# One encoder for every call: json.dumps with options builds a new one each time, which was half the cost of hashing
# a seed's few parts (tens of thousands of times a run). It keeps no state between calls.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: the same value always gives the same text."""
    return _CANONICAL.encode(value)


def digest(*parts: Any) -> str:
    """Hex sha256 of the canonical JSON of the parts (Python's hash() is salted per process)."""
    return hashlib.sha256(canonical_json(parts).encode()).hexdigest()


def stable_int(*parts: Any) -> int:
    """A 64-bit integer derived from the parts."""
    return int(digest(*parts)[:16], 16)


def rng(*parts: Any) -> np.random.Generator:
    """A numpy Generator seeded by the parts."""
    return np.random.default_rng(stable_int(*parts))


def short_id(*parts: Any, length: int = 12) -> str:
    """A short hex id derived from the parts."""
    return digest(*parts)[:length]
