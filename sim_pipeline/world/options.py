"""WorldOptions: every dial of the sandbox world, each defaulting to a reasoned constant in defaults.py."""

from __future__ import annotations

from dataclasses import dataclass

from sim_pipeline import defaults


@dataclass(frozen=True)
class WorldOptions:
    """Dials of the sandbox world; see defaults.py for the reason behind each default."""

    records_per_entity: int = defaults.WORLD_RECORDS_PER_ENTITY
    exists_share: float = defaults.WORLD_EXISTS_SHARE
    search_hits: tuple[int, int] = defaults.WORLD_SEARCH_HITS
    id_range: tuple[int, int] = defaults.WORLD_ID_RANGE
    date_range: tuple[str, str] = defaults.WORLD_DATE_RANGE
    first_names: tuple[str, ...] = defaults.WORLD_FIRST_NAMES
    last_names: tuple[str, ...] = defaults.WORLD_LAST_NAMES
    email_domains: tuple[str, ...] = defaults.WORLD_EMAIL_DOMAINS
    streets: tuple[str, ...] = defaults.WORLD_STREETS
    fault_hits: int = defaults.WORLD_FAULT_HITS
    transient_retry_succeeds: bool = defaults.WORLD_TRANSIENT_RETRY_SUCCEEDS
    retry_after_seconds: int = defaults.WORLD_RETRY_AFTER_SECONDS
    transient_faults: tuple[str, ...] = defaults.WORLD_TRANSIENT_FAULTS
