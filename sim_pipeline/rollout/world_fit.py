"""World fit: how well the sandbox world models a domain's tools, read from what the agent's calls got back.

A green pass@1 over a world whose values the tools refuse, or that never lets an expected write through, measures
the world model, not the agent. Per tool, from graded rollouts only (errored ones say nothing about the world):
- `calls`, and the shares rejected for their arguments: `missing_required`, `invalid_argument` and
  `placeholder_argument` (the agent's call quality: an invented or misshapen value is the agent's mistake);
- `told_rejected`: the share refused for a value the conversation supplied (said by the user or shown by a tool
  before the call, e.g. an id a look-up returned, a date the user gave): there the world's own values and the
  schemas disagree, which no agent can fix;
- `not_found`: the share answered "no such record" (ids the world never made, unlinked entities), and of them
  `ref_not_found`, the share whose value inside the arguments names nothing (a reference, world/references.py) and
  `told_not_found`, those whose value the conversation supplied (the world does not know its own records);
- `faulted`: the share that met the situation's scheduled fault (timeouts and the like: the stress, not the fit);
- for a writing tool, the rollouts whose situation expects its write (`write_expected`), those where the agent made
  a well-formed call on the user's record that the world answered from its state (`write_tried`: accepted
  arguments, the situation's record id or none, no fault) and those where it was applied (`write_applied`);
- `applied` writes of the tool, and `unsupplied`: those carrying a value that no user turn and no earlier tool result
  supplied (an invented flight number, a made-up amount the world let through).

Four shares decide the verdict: `told_rejected` or `told_not_found` above `WORLD_FIT_MAX_REJECTED_SHARE` (the world
refuses values it supplied itself), `write_applied / write_tried` below `WORLD_FIT_MIN_WRITE_SHARE` (the world turns
down well-formed calls for the very writes its situations expect), and `unsupplied / applied` above
`WORLD_FIT_MAX_UNSUPPLIED_SHARE` (the world accepts what it cannot check). The first three are read so that an
agent's own choices (inventing values, declining, asking first, giving up after a timeout, echoing placeholders,
naming the wrong record) do not count against the world; the last does count an agent's invention, on purpose: a
world that applies it had nothing to check it against (the shipped packs measure 0 to 8%, agent-v1's invented ids).
`write_applied / write_expected` is reported too, and mixes the two.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from sim_pipeline import defaults
from sim_pipeline.domain import Domain
from sim_pipeline.protocol.statuses import ERROR_STATUSES, FAULT_STATUSES

ARGUMENT_REJECTIONS = ("missing_required", "invalid_argument", "placeholder_argument")  # the call's arguments
FIT_COLUMNS = ("tool", "writes", "calls", "told_rejected", *ARGUMENT_REJECTIONS, "not_found", "ref_not_found",
               "told_not_found", "faulted", "write_expected", "write_tried", "write_applied", "applied", "unsupplied")
_SHARES = ("told_rejected", *ARGUMENT_REJECTIONS, "not_found", "ref_not_found", "told_not_found", "faulted")


@dataclass(frozen=True)
class FitProblem:
    """One tool the world fits badly, and the sentence that says how."""

    tool: str
    kind: str  # told_rejected | write_refused
    sentence: str


def _events(value: Any) -> list[Mapping[str, Any]]:
    return [dict(e) for e in value] if value is not None else []


def _answered(event: Mapping[str, Any]) -> bool:
    """Whether the world answered a call from its state: arguments accepted and no scheduled fault (a garbled reply to
    an applied write is a fault too; the caller counts it by `applied`)."""
    if event["status"] in FAULT_STATUSES:
        return False
    return not (event["status"] == "rejected" and event.get("error") in ARGUMENT_REJECTIONS)


def _supplied(event: Mapping[str, Any], messages: list[Mapping[str, Any]]) -> str:
    """What the conversation supplied before a call, lower-cased: user turns and tool results (a rejection quotes the
    agent's own bad value back, so what the world told is what it answered, not what it refused)."""
    turn = event.get("turn")
    before = messages[:turn] if isinstance(turn, int) and turn >= 0 else messages
    return " ".join(str(m.get("content") or "") for m in before if m.get("role") == "user" or (
        m.get("role") == "tool" and '"status": "rejected"' not in str(m.get("content") or ""))).lower()


def _at(arguments: Any, field: str) -> Any:
    """The value at a path such as `flights/0/flight_number` (or a top-level argument)."""
    value = arguments
    for key in field.split("/") if field else ():
        if isinstance(value, dict):
            value = value.get(key)
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            return None
    return value


def _said(value: Any, text: str) -> bool:
    """Whether a value appears in the conversation's text (long enough not to match by coincidence)."""
    if value is None or isinstance(value, bool):
        return False
    said = json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else str(value)
    if len(said.strip()) < defaults.WORLD_FIT_MIN_TOLD_LENGTH:
        return False  # too short to tell a told value from a coincidence ("1", "ok")
    numbers = {said, f"{value:g}"} if isinstance(value, (int, float)) else {said}
    return any(n.lower() in text for n in numbers)


def _told(event: Mapping[str, Any], messages: list[Mapping[str, Any]], *, whole: bool = False) -> bool:
    """Whether the value a rejection or a not_found is about came from the conversation: the user said it or a tool
    showed it before the call (so the world, not the agent, supplied a value it then refused); `whole` reads the
    field as a path into nested arguments rather than its first key."""
    field = str(event.get("field") or "")
    try:
        arguments = json.loads(event["arguments"])
    except (TypeError, ValueError):
        return False
    value = _at(arguments, field) if whole else _at(arguments, field.split("/")[0])
    return _said(value, _supplied(event, messages))


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def _unsupplied(event: Mapping[str, Any], messages: list[Mapping[str, Any]]) -> bool:
    """Whether an applied write carries a value (at any depth) that nothing in the conversation supplied."""
    try:
        arguments = json.loads(event["arguments"])
    except (TypeError, ValueError):
        return False
    text = _supplied(event, messages)
    return any(not _said(v, text) for v in _leaves(arguments)
               if v is not None and not isinstance(v, bool) and len(str(v).strip()) >= defaults.WORLD_FIT_MIN_TOLD_LENGTH)


def _share(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


def world_fit(rollouts: pd.DataFrame, situations: pd.DataFrame, write_tools: Iterable[str],
              tools: Iterable[str] = ()) -> pd.DataFrame:
    """Per tool (every tool in `tools`, and any other called): calls, rejection shares and expected-write outcomes."""
    writes = set(write_tools)
    counts: dict[str, dict[str, int]] = {}

    def row(tool: str) -> dict[str, int]:
        return counts.setdefault(tool, dict.fromkeys(FIT_COLUMNS[2:], 0))

    for tool in tools:
        row(tool)
    graded = rollouts[~rollouts["status"].isin(ERROR_STATUSES)] if len(rollouts) else rollouts
    intent = dict(zip(situations["situation_id"], situations["intent_tool"])) if len(situations) else {}
    expects = dict(zip(situations["situation_id"], situations["expect_write"])) if len(situations) else {}
    records = dict(zip(situations["situation_id"], situations["entity_id"])) if len(situations) else {}
    messages = graded["messages"] if "messages" in graded else [None] * len(graded)
    for sid, value, said in zip(graded.get("situation_id", ()), graded.get("tool_events", ()), messages):
        events = _events(value)
        for event in events:
            counts_of = row(str(event["tool"]))
            counts_of["calls"] += 1
            error = event.get("error")
            if event["status"] == "rejected" and error in ARGUMENT_REJECTIONS:
                counts_of[error] += 1
                counts_of["told_rejected"] += error == "invalid_argument" and _told(event, _events(said))
            elif event["status"] in ("not_found", *FAULT_STATUSES):
                counts_of["not_found" if event["status"] == "not_found" else "faulted"] += 1
                if event["status"] == "not_found" and event.get("field"):  # a value inside the arguments names nothing
                    counts_of["ref_not_found"] += 1
                    counts_of["told_not_found"] += _told(event, _events(said), whole=True)
            if event.get("applied") and str(event["tool"]) in writes:
                counts_of["applied"] += 1
                counts_of["unsupplied"] += _unsupplied(event, _events(said))
        wanted = intent.get(sid)
        if isinstance(wanted, str) and wanted in writes and bool(expects.get(sid)):
            counts_of = row(wanted)
            counts_of["write_expected"] += 1
            record = records.get(sid) if isinstance(records.get(sid), str) else None
            counts_of["write_tried"] += any(e["tool"] == wanted and (e["applied"] or _answered(e) and e.get(
                "entity_id") in (None, record)) for e in events)  # a create applies to a record of its own
            counts_of["write_applied"] += any(e["tool"] == wanted and e["applied"] for e in events)
    frame = pd.DataFrame([{"tool": t, "writes": t in writes, **c} for t, c in sorted(counts.items())],
                         columns=list(FIT_COLUMNS))
    for col in _SHARES:
        frame[col] = [_share(n, calls) for n, calls in zip(frame[col], frame["calls"])]
    return frame


def fit_problems(fit: pd.DataFrame, *, max_rejected: float = defaults.WORLD_FIT_MAX_REJECTED_SHARE,
                 min_write: float = defaults.WORLD_FIT_MIN_WRITE_SHARE,
                 max_unsupplied: float = defaults.WORLD_FIT_MAX_UNSUPPLIED_SHARE,
                 min_calls: int = defaults.WORLD_FIT_MIN_CALLS) -> list[FitProblem]:
    """Tools the world fits badly: calls refused (or answered not_found) for values the conversation supplied,
    well-formed expected writes turned down, or writes applied with values nobody supplied."""
    problems = []
    for r in fit.itertuples(index=False):
        if r.calls >= min_calls and r.told_rejected > max_rejected:
            problems.append(FitProblem(r.tool, "told_rejected", f"{r.tool}: {r.told_rejected:.0%} of {r.calls} calls "
                                       "refused for a value the user or a tool supplied (the world's values do not "
                                       "fit its schema)"))
        if r.calls >= min_calls and r.told_not_found > max_rejected:
            problems.append(FitProblem(r.tool, "told_not_found", f"{r.tool}: {r.told_not_found:.0%} of {r.calls} "
                                       "calls named, inside their arguments, a record the user or a tool supplied "
                                       "and the world does not have"))
        if r.writes and r.write_tried >= min_calls and r.write_applied / r.write_tried < min_write:
            problems.append(FitProblem(r.tool, "write_refused", f"{r.tool}: applied in {r.write_applied} of the "
                                       f"{r.write_tried} rollouts that expect it and made a well-formed call"))
        if r.writes and r.applied >= min_calls and r.unsupplied / r.applied > max_unsupplied:
            problems.append(FitProblem(r.tool, "unsupplied", f"{r.tool}: {r.unsupplied} of {r.applied} applied "
                                       "writes carried a value no user turn or tool result supplied (the world accepts "
                                       "what it cannot check: declare the references it names)"))
    return problems


def fit_sentence(fit: pd.DataFrame) -> str:
    """The fit in one line: 'good (...)' or 'POOR: <problems>'."""
    calls = int(fit["calls"].sum()) if len(fit) else 0
    if not calls:
        return "no tool calls"
    invalid = float(((fit["invalid_argument"] + fit["missing_required"]) * fit["calls"]).sum()) / calls
    told = float((fit["told_rejected"] * fit["calls"]).sum()) / calls
    expected, applied = int(fit["write_expected"].sum()), int(fit["write_applied"].sum())
    refs = float((fit["ref_not_found"] * fit["calls"]).sum()) / calls
    unsupplied, writes = int(fit["unsupplied"].sum()), int(fit["applied"].sum())
    detail = f"{calls} calls, {invalid:.1%} broke their tool's schema ({told:.1%} with told values)" + (
        f", {refs:.1%} named a record that does not exist inside their arguments" if refs else "") + (
        f", expected writes applied in {applied}/{expected} rollouts" if expected else "") + (
        f", {unsupplied}/{writes} applied writes carried a value nobody supplied" if writes else "")
    problems = fit_problems(fit)
    if problems:
        return f"POOR ({detail}): " + "; ".join(p.sentence for p in problems)
    return f"good ({detail})"


def domain_fit(domain: Domain, rollouts: pd.DataFrame, situations: pd.DataFrame) -> pd.DataFrame:
    """`world_fit` for a domain's tools (every tool listed, called or not)."""
    return world_fit(rollouts, situations, [t.name for t in domain.tools if t.writes], [t.name for t in domain.tools])
