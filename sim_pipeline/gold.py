"""Human gold labels: `gold/*.jsonl` in a domain pack, joined onto grades where they match a rollout.

One JSON object per line labels one rollout (one transcript of one situation):

    {"situation_id": "a1b2c3...", "transcript_sha256": "<hex of transcript_digest(messages)>",
     "label": 1, "labeller": "ana.silva", "source": "human", "note": "verified, then cancelled the right order"}

- `situation_id` (required): the situation the rollout played; the same transcript can be right for one goal and
  wrong for another.
- `messages` (the rollout's chat messages; system messages are ignored) or `transcript_sha256` (their
  `transcript_digest`): which transcript is labelled. The label follows the transcript, not a rollout id, so it
  still applies when a re-run reproduces the same conversation and never applies to a different one.
- `label`: 1 (pass) or 0 (fail); `labeller`: who labelled it (any name; never read for its kind).
- `source` (required): what kind of labeller made the label, declared: "human" (a person) or "program" (a model,
  a judge, a script).
- optional: `rollout_id`, `note` (kept as the gold reason).

Only a person's labels can be gold: a row declaring "program" is an error naming the file and line, and so is a
row without `source` or with another value. A judge validated against a program's labels would only be checked
against another program. The kind is what the row declares, never guessed from the labeller's name (a person may
be called Claudette or Qwen, and a model ChatGPT).

Precedence: a human label replaces the program label (the state oracle's) on every grades row it matches
(`gold_source="human"`); rows without a human label keep the program label (`gold_source="program"`). Two human
labels of one transcript that disagree are an error: adjudicate them first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from sim_pipeline.definition_files import parse_json, read_definition
from sim_pipeline.errors import DomainPackError
from sim_pipeline.seeding import digest

GOLD_DIR = "gold"
LABEL_COLUMNS = ("situation_id", "transcript_sha256", "label", "labeller", "note", "file", "line")
HUMAN, PROGRAM = "human", "program"  # the labeller kinds a row declares in `source` (gold_source's values too)
SOURCES = (HUMAN, PROGRAM)
_ALLOWED = {"situation_id", "messages", "transcript_sha256", "label", "labeller", "source", "note", "rollout_id"}


def transcript_digest(messages: list[dict[str, Any]]) -> str:
    """SHA-256 of a transcript's roles, texts, and tool calls (names and arguments), system messages left out."""
    shown = []
    for m in messages:
        if m.get("role") == "system":
            continue
        calls = [((c.get("function") or {}).get("name"), (c.get("function") or {}).get("arguments"))
                 for c in (m.get("tool_calls") if m.get("tool_calls") is not None else [])]
        shown.append((m.get("role"), m.get("content") or "", calls))
    return digest(shown)


def _fail(path: Path, line: int, problem: str, fix: str) -> DomainPackError:
    return DomainPackError(f"{path}: line {line}: {problem}. Fix: {fix}")


def _check_messages(path: Path, line: int, messages: list[Any]) -> None:
    """Messages shaped as chat messages (objects; tool_calls a list of objects with a function object), so the
    transcript digest reads what a rollout's would."""
    for i, message in enumerate(messages):
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        if not isinstance(message, dict) or not isinstance(calls, (list, type(None))) or any(
                not isinstance(c, dict) or not isinstance(c.get("function"), (dict, type(None))) for c in calls or []):
            raise _fail(path, line, f"messages[{i}] is not a chat message (an object whose tool_calls, if any, are "
                        "objects with a function object)", "copy the rollout's messages as they are stored")


def _check_source(path: Path, line: int, source: Any) -> None:
    """The row's declared labeller kind: a person's label passes; a program's, a missing or an unknown kind is refused."""
    if source == PROGRAM:
        raise _fail(path, line, f"source {PROGRAM!r}: the row declares a program-made label, and only a person's "
                    "labels can be gold (a judge checked against a program is only checked against another program)",
                    f"have a person label this rollout and set source to {HUMAN!r}")
    if source not in SOURCES:
        shown = "is missing" if source is None else f"is {source!r}"
        raise _fail(path, line, f"field 'source' {shown}: each row declares who labelled it by kind, "
                    f"{HUMAN!r} (a person) or {PROGRAM!r} (a model, a judge, a script)",
                    f'write "source": "{HUMAN}" for a label a person made (only those can be gold); the '
                    "labeller's name is never read for its kind")


def _label(path: Path, line: int, raw: str) -> dict[str, Any]:
    try:
        item = parse_json(raw)
    except ValueError as exc:
        raise _fail(path, line, f"not valid JSON ({exc})", "write one JSON object per line") from None
    if not isinstance(item, dict):
        raise _fail(path, line, f"expected a JSON object, got {type(item).__name__}", "write one object per line")
    unknown = sorted(set(item) - _ALLOWED)
    if unknown:
        raise _fail(path, line, f"unknown field(s) {unknown}", f"use only {sorted(_ALLOWED)}")
    source, labeller = item.get("source"), item.get("labeller")
    _check_source(path, line, source)
    if not isinstance(labeller, str) or not labeller.strip():
        raise _fail(path, line, "field 'labeller' is missing", "name the person who labelled the rollout")
    label = item.get("label")
    if isinstance(label, bool) or label not in (0, 1):
        raise _fail(path, line, f"label {label!r} is not 0 or 1", "use 1 for pass and 0 for fail")
    if not isinstance(item.get("situation_id"), str) or not item["situation_id"]:
        raise _fail(path, line, "field 'situation_id' is missing", "give the situation id of the labelled rollout")
    if isinstance(item.get("messages"), list):
        _check_messages(path, line, item["messages"])
        sha = transcript_digest(item["messages"])
    elif isinstance(item.get("transcript_sha256"), str) and item["transcript_sha256"]:
        sha = item["transcript_sha256"]
    else:
        raise _fail(path, line, "no transcript: neither 'messages' nor 'transcript_sha256' is given",
                    "add the rollout's messages, or transcript_sha256 = sim_pipeline.gold.transcript_digest(messages)")
    return {"situation_id": item["situation_id"], "transcript_sha256": sha, "label": float(label),
            "labeller": labeller.strip(), "note": str(item.get("note", "")), "file": str(path), "line": line}


def load_gold(pack: Path | str) -> pd.DataFrame:
    """Every human label in a domain pack's gold/*.jsonl (LABEL_COLUMNS); an empty table when there is none."""
    rows = []
    for path in sorted((Path(pack) / GOLD_DIR).glob("*.jsonl")):
        for line, raw in enumerate(read_definition(path, DomainPackError).splitlines(), start=1):
            if raw.strip():
                rows.append(_label(path, line, raw))
    labels = pd.DataFrame(rows, columns=list(LABEL_COLUMNS))
    for (situation, _), group in labels.groupby(["situation_id", "transcript_sha256"]):
        if group["label"].nunique() > 1:
            where = ", ".join(f"{f}:{n}" for f, n in zip(group["file"], group["line"]))
            raise DomainPackError(f"{where}: conflicting human labels for one transcript of situation {situation}. "
                                  "Fix: adjudicate and keep one label")
    return labels.drop_duplicates(["situation_id", "transcript_sha256"]).reset_index(drop=True)


def apply_gold(grades: pd.DataFrame, transcripts: pd.Series, labels: pd.DataFrame) -> pd.DataFrame:
    """Grades with human labels in place of program labels where they match (gold_source='human').

    `transcripts` holds each grades row's transcript_digest, aligned with `grades`.
    """
    out = grades.copy()
    if not len(labels) or not len(out):
        return out
    keyed = labels.set_index(["situation_id", "transcript_sha256"])
    keys = pd.MultiIndex.from_arrays([out["situation_id"].to_numpy(), transcripts.to_numpy()])
    hit = keys.isin(keyed.index)
    matched = keyed.reindex(keys[hit])
    out.loc[hit, "gold_reward"] = matched["label"].to_numpy(dtype=float)
    out.loc[hit, "gold_source"] = HUMAN
    out.loc[hit, "gold_reason"] = [f"human ({who}): {note}".rstrip(": ")
                                   for who, note in zip(matched["labeller"], matched["note"])]
    return out
