"""Which backend made a row: per role (agent, user, writer, judge) the registry entry, the litellm model string, the
endpoint host, the settings sent and the parameters dropped, and a hash of the whole backend config.

Rows carry these records in their `backends` column (rollouts: agent, user, writer; grades and cuts: the judge too),
so two runs of one version whose `models:` entry changed under the same name are told apart by `config_sha256`.
A record never holds a key: the config's key variable is hashed by its name, the endpoint is the host alone, and the
settings text is redacted as every text the project writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pandas as pd

from sim_pipeline.models.completion import Sampling
from sim_pipeline.seeding import canonical_json

if TYPE_CHECKING:  # the delta and the summary read records without loading the gateway
    from sim_pipeline.models.gateway import Gateway

AGENT, USER, WRITER, JUDGE = "agent", "user", "writer", "judge"
FIELDS = ("role", "entry", "model", "endpoint", "params_sent", "params_dropped", "config_sha256")


def backend_record(gateway: Gateway, role: str, model: str, sampling: Sampling | None,
                   **request: Any) -> dict[str, Any]:
    """One role's record: `sampling` None when the role sent nothing for the row (params_sent is then empty)."""
    config = gateway.config(model)
    sent, dropped = gateway.sent_params(model, sampling, **request) if sampling is not None else ({}, [])
    return {"role": role, "entry": config.name if model in gateway.models else None, "model": config.model,
            "endpoint": config.host(), "params_sent": gateway.redact(canonical_json(sent)) if sampling else "",
            "params_dropped": sorted(dropped), "config_sha256": config.sha256()}


def records(value: Any) -> list[dict[str, Any]]:
    """A row's `backends` cell as plain dicts (Parquet gives numpy arrays; an old table, no column: none)."""
    if value is None or isinstance(value, float):
        return []
    return [{k: (list(v) if k == "params_dropped" and v is not None else v) for k, v in dict(r).items()}
            for r in value]


def role_of(value: Any, role: str) -> dict[str, Any] | None:
    """The record of one role in a row's `backends` cell, or None."""
    return next((r for r in records(value) if r.get("role") == role), None)


def describe(record: Mapping[str, Any]) -> str:
    """A record as a sentence names it: 'entry (model at host, config 1a2b3c4d)'."""
    where = f" at {record['endpoint']}" if record.get("endpoint") else ""
    inner = f"{record['model']}{where}, config {str(record['config_sha256'])[:8]}"
    return f"{record['entry']} ({inner})" if record.get("entry") else inner


def configs(rows: pd.DataFrame, role: str = AGENT) -> dict[str, dict[str, Any]]:
    """The distinct configs of one role among rows, by config_sha256 (in row order); none without the column."""
    if "backends" not in rows.columns:
        return {}
    found: dict[str, dict[str, Any]] = {}
    for cell in rows["backends"]:
        record = role_of(cell, role)
        if record is not None:
            found.setdefault(str(record["config_sha256"]), record)
    return found


def spans(rows: pd.DataFrame, role: str = AGENT) -> str | None:
    """'entry (model, config x) and entry (model, config y)' when rows of one version carry two or more configs of a
    role, else None."""
    found = configs(rows, role)
    return " and ".join(describe(r) for r in found.values()) if len(found) > 1 else None


def with_role(cells: Iterable[Any], record_of: Iterable[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Each row's records with one more role's appended (the judge's, at grading)."""
    return [[*records(cell), extra] for cell, extra in zip(cells, record_of, strict=True)]
