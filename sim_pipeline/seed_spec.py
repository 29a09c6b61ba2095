"""The one seed syntax every `sim-pipeline` verb takes: `0`, `0-7`, `0,3,5`, `0-2,5` (one value per flag on the
command line; the flag given twice adds up, and parse_seeds takes the values as a list).

A bad value is one short line whatever its size: `--seeds 0-99999` names the first few seeds that are not partitions
and how many there are, never the whole list.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from itertools import islice

from sim_pipeline import defaults
from sim_pipeline.errors import SimPipelineError

EXAMPLES = "e.g. 0-7, 0,3,5 or 0-2,5"  # what every seed error offers as the fix
_NUMBER = re.compile("[0-9]+")  # ASCII digits only: str.isdigit() also takes '²', which int() refuses


def _shown(text: str) -> str:
    """The value as an error quotes it: at most SEEDS_TEXT_SHOWN characters."""
    cut = defaults.SEEDS_TEXT_SHOWN
    return text if len(text) <= cut else text[:cut] + "..."


def _intervals(text: str, flag: str) -> list[tuple[int, int]]:
    """The value's items as (low, high) ranges, in the order given."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise SimPipelineError(f"{flag} '{_shown(text)}' names no seed. Fix: write seeds, {EXAMPLES}")
    intervals = []
    for item in items:
        low, dash, high = (part.strip() for part in item.partition("-"))
        if not _NUMBER.fullmatch(low) or (dash and not _NUMBER.fullmatch(high)):
            raise SimPipelineError(f"{flag} '{_shown(text)}': '{_shown(item)}' is neither a seed nor a range. "
                                   f"Fix: write {EXAMPLES}")
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise SimPipelineError(f"{flag} '{_shown(text)}': the range '{_shown(item)}' runs backwards. Fix: write "
                                   f"{last}-{first}")
        intervals.append((first, last))
    return intervals


def _merged(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Overlapping or touching ranges joined, so a seed named twice counts once."""
    merged: list[tuple[int, int]] = []
    for first, last in sorted(intervals):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged


def _outside(merged: list[tuple[int, int]], valid: set[int]) -> Iterator[int]:
    """The named seeds that are not partitions, smallest first, without listing a huge range."""
    for first, last in merged:
        number = first
        while number <= last:
            if number not in valid:
                yield number
            number += 1


def parse_seeds(value: str | Sequence[str], flag: str = "--seeds") -> list[str]:
    """The seed partitions a value names, sorted and each once; anything else is a one-line SimPipelineError.

    `value` is one string or several (`--seeds 0 1` gives two), each a comma-separated list of seeds and ranges."""
    text = value if isinstance(value, str) else ",".join(value)
    merged = _merged(_intervals(text, flag))
    valid = {int(seed): seed for seed in defaults.SEEDS}
    named = sum(last - first + 1 for first, last in merged)
    inside = [number for number in valid if any(first <= number <= last for first, last in merged)]
    if len(inside) < named:
        listed = [str(n) for n in islice(_outside(merged, set(valid)), defaults.SEEDS_NAMED_IN_ERRORS)]
        more = named - len(inside) - len(listed)
        which = ", ".join(listed) + (f" and {more:,} more" if more else "")
        verb = "is not a seed partition" if named - len(inside) == 1 else "are not seed partitions"
        raise SimPipelineError(f"{flag} '{_shown(text)}': {which} {verb}. Fix: use seeds within "
                               f"{defaults.SEEDS[0]}-{defaults.SEEDS[-1]}, {EXAMPLES}")
    return [valid[number] for number in sorted(inside)]
