"""A failed judge-trust check: what it measured, the threshold it crossed, and the sentence naming the fix."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Flag:
    """One failed trust check: its measured value, the threshold it crossed, and what to do about it."""

    name: str
    value: float
    threshold: float
    sentence: str


# Each check returns (flag or None, metrics it measured).
CheckResult = tuple[Flag | None, dict[str, float | str]]
