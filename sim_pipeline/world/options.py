"""WorldOptions: every dial of the sandbox world, each defaulting to a reasoned constant in defaults.py."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sim_pipeline import defaults
from sim_pipeline.errors import WorldError


def _bad(field: str, value: object, fix: str) -> WorldError:
    return WorldError(f"WorldOptions.{field}={value!r} is invalid. Fix: {fix}")


@dataclass(frozen=True)
class WorldOptions:
    """Dials of the sandbox world; see defaults.py for the reason behind each default.

    Validated at construction: a bad dial raises `WorldError` naming the field and the fix.
    """

    records_per_entity: int = defaults.WORLD_RECORDS_PER_ENTITY
    exists_share: float = defaults.WORLD_EXISTS_SHARE
    search_hits: tuple[int, int] = defaults.WORLD_SEARCH_HITS
    id_range: tuple[int, int] = defaults.WORLD_ID_RANGE
    date_range: tuple[str, str] = defaults.WORLD_DATE_RANGE
    first_names: tuple[str, ...] = defaults.WORLD_FIRST_NAMES
    last_names: tuple[str, ...] = defaults.WORLD_LAST_NAMES
    email_domains: tuple[str, ...] = defaults.WORLD_EMAIL_DOMAINS
    streets: tuple[str, ...] = defaults.WORLD_STREETS
    phone_area_codes: tuple[str, ...] = defaults.WORLD_PHONE_AREA_CODES
    fault_modes: tuple[str, ...] = defaults.WORLD_FAULT_MODES
    fault_rate: float = defaults.WORLD_FAULT_RATE
    fault_hits: int = defaults.WORLD_FAULT_HITS
    transient_retry_succeeds: bool = defaults.WORLD_TRANSIENT_RETRY_SUCCEEDS
    retry_after_seconds: int = defaults.WORLD_RETRY_AFTER_SECONDS
    transient_faults: tuple[str, ...] = defaults.WORLD_TRANSIENT_FAULTS

    def __post_init__(self) -> None:
        if self.records_per_entity < 1:
            raise _bad("records_per_entity", self.records_per_entity, "use at least 1 record per entity")
        if not 0.0 <= self.exists_share <= 1.0:
            raise _bad("exists_share", self.exists_share, "use a share in [0, 1]")
        if not 1 <= self.search_hits[0] <= self.search_hits[1]:
            raise _bad("search_hits", self.search_hits, "use (low, high) with 1 <= low <= high")
        if not 0 <= self.id_range[0] < self.id_range[1]:
            raise _bad("id_range", self.id_range, "use a half-open range (low, high) with 0 <= low < high")
        try:
            start, end = (dt.date.fromisoformat(d) for d in self.date_range)
        except ValueError:
            raise _bad("date_range", self.date_range, "use two ISO dates, e.g. ('2022-01-01', '2026-10-31')") from None
        if start > end:
            raise _bad("date_range", self.date_range, "put the earlier date first")
        for pool in ("first_names", "last_names", "email_domains", "streets", "phone_area_codes"):
            if not getattr(self, pool):
                raise _bad(pool, getattr(self, pool), "give at least one value")
        unknown = sorted(set(self.fault_modes) - set(defaults.WORLD_FAULT_MODES))
        if unknown:
            raise _bad("fault_modes", self.fault_modes, f"drop {unknown}; the world plays {defaults.WORLD_FAULT_MODES}")
        if not set(self.transient_faults) <= set(self.fault_modes):
            raise _bad("transient_faults", self.transient_faults, f"name only fault modes {self.fault_modes}")
        if not 0.0 <= self.fault_rate <= 1.0:
            raise _bad("fault_rate", self.fault_rate, "use a probability in [0, 1]")
        if self.fault_hits < 0 or self.retry_after_seconds < 0:
            raise _bad("fault_hits/retry_after_seconds", (self.fault_hits, self.retry_after_seconds),
                       "use non-negative counts")
