"""Scheduled faults: which call of the situation's tool fails, and what the failure looks like.

A fault targets one tool. Calls of that tool are counted (well-formed calls only: a rejected call never consumes a
fault, so the fault always lands on a call the service would have run); while `hits` remain, each counted call
fails with probability `rate`. `hits=None` fails every call (permission_denied, or a transient fault whose retry
the options say does not succeed).
"""

from __future__ import annotations

from typing import Any

from sim_pipeline.errors import WorldError
from sim_pipeline.seeding import canonical_json, rng
from sim_pipeline.world.options import WorldOptions
from sim_pipeline.world.setup import FAULT_STATUS, Fault

MESSAGES = {
    "timeout": "the service did not answer in time",
    "stale": "the record changed since it was cached; read it again",
    "permission_denied": "this account may not perform this operation",
    "rate_limited": "too many requests",
    "partial_write": "the service returned part of the data",
}
PARTIAL_WRITE_MESSAGE = "the write did not complete; retry to finish it"
GARBLED_WRITE = "<html>502 Bad Gateway</html>"  # what a proxy returns when the write behind it went through


def check_fault(fault: Fault | None, tools: set[str], options: WorldOptions) -> None:
    """Refuse a fault the world cannot play, naming the problem and the fix."""
    if fault is None:
        return
    if fault.mode not in options.fault_modes:
        raise WorldError(f"Fault.mode={fault.mode!r} is not a fault mode. Fix: use one of {options.fault_modes}")
    if fault.tool not in tools:
        raise WorldError(f"Fault.tool={fault.tool!r} is not a tool of this world. Fix: use one of {sorted(tools)}")
    if not 0.0 <= fault.rate <= 1.0 or (fault.hits is not None and fault.hits < 0):
        raise WorldError(f"Fault(rate={fault.rate}, hits={fault.hits}) is invalid. Fix: use a rate in [0, 1] and "
                         "hits >= 0 or None")


def fires(fault: Fault | None, tool: str, *, seed: int, nth_call: int, used: int) -> bool:
    """Whether the `nth_call` (0-based, of this tool) fails, given `used` earlier faulted calls."""
    if fault is None or fault.tool != tool or (fault.hits is not None and used >= fault.hits):
        return False
    return fault.rate >= 1.0 or float(rng(seed, "fault", tool, nth_call).random()) < fault.rate


def fault_result(mode: str, options: WorldOptions, *, data: tuple[str, Any] | None = None) -> dict[str, Any]:
    """The result of a faulted call (`data`: an (entity, payload) pair the fault still returns, e.g. stale data)."""
    status = FAULT_STATUS[mode]
    result: dict[str, Any] = {"status": status, "message": MESSAGES.get(status, status)}
    if status == "rate_limited":
        result["retry_after_seconds"] = options.retry_after_seconds
    if data is not None:
        result[data[0]] = data[1]
    return result


def garbled(answer: dict[str, Any], *, write: bool) -> dict[str, Any]:
    """A malformed reply: a proxy error page for a write, the answer's JSON cut in half for a read."""
    if write:
        return {"status": "malformed", "raw": GARBLED_WRITE}
    text = canonical_json(answer)
    return {"status": "malformed", "raw": text[: len(text) // 2]}


def partial_view(record: dict[str, Any]) -> dict[str, Any]:
    """Half of a record's fields (every other one in name order): what a truncated response carries."""
    return {k: v for i, (k, v) in enumerate(sorted(record.items())) if i % 2 == 0}
