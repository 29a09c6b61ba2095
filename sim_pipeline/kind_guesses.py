"""Which tool kinds (and, for a pack without entities, which links) a pack left to guessing, and which guesses to
distrust: no silent guesses.

A tool whose kind domain.yaml does not declare gets the kind its name's first word suggests (protocol/tool_kinds).
That guess decides whether the world lets the tool write, so a wrong one is silent and costly: a refill desk whose
`refill_prescription` is guessed `other` can never refill. Every guess is named; a guess is weak, and warned about
with the `tools:` line to add, when it is `other` (the tool never writes), or when the tool's description reads as
another kind (its first verb suggests a write where the name suggests none, or the reverse, or it describes a
hand-off to a person while the name reads as a money or access transfer).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sim_pipeline.domain import Domain, Tool
from sim_pipeline.protocol.tool_kinds import first_verb, guess_kind, writes
from sim_pipeline.world.infer import InferredDomain

_HANDOFF_TEXT = re.compile(r"\b(?:hand|hands|handoff|pass|passes|transfer|transfers|escalate|escalates)\b[^.]*?"
                           r"\bto (?:a|an|the)\s+(?:\w+\s+)?(?:human|person|agent|specialist|supervisor|pharmacist|"
                           r"colleague|representative|operator|team)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Guess:
    """A tool kind guessed from the name, and, when the guess is weak, why and the kind to declare instead."""

    tool: str
    kind: str
    weak: str | None = None  # why the guess is doubtful; None: the name's verb and the description agree
    suggest: str | None = None  # the kind to declare when it is weak


def _described_kind(tool: Tool) -> str:
    if _HANDOFF_TEXT.search(tool.description or ""):
        return "transfer"
    return guess_kind(first_verb(tool.description or ""))


def guess_of(tool: Tool) -> Guess:
    """How a tool's kind was guessed, and whether to distrust it."""
    described = _described_kind(tool)
    if tool.kind == "other":
        suggest = described if writes(described) else "update"
        return Guess(tool.name, tool.kind, "it never writes in the world, whatever the agent asks of it", suggest)
    if described == "transfer" and tool.kind != "transfer":
        return Guess(tool.name, tool.kind, "its description reads as a hand-off to a person", "transfer")
    if described != "other" and writes(described) != writes(tool.kind):
        return Guess(tool.name, tool.kind, f"its description starts like a {described} tool", described)
    return Guess(tool.name, tool.kind)


def guesses(domain: Domain) -> list[Guess]:
    """Every tool of the pack whose kind was guessed, in name order."""
    return [guess_of(t) for t in sorted(domain.tools, key=lambda t: t.name) if not t.declared]


def _shown(path: Path) -> str:
    """A path as a user types it: relative to the working directory when it lies under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def inferred_links(domain: Domain) -> list[str]:
    """The links the world inferred for a pack without `entities:` (a `<x>_id` field of another entity), as
    `entity.field -> target`."""
    if not isinstance(domain, InferredDomain):
        return []
    return [f"{e.name}.{field} -> {target}" for e in domain.entities for field, target in sorted(e.links().items())]


def guess_lines(domain: Domain) -> list[str]:
    """What `sim-pipeline run` and `policies list` print about a pack's guesses: one note naming the guessed kinds,
    one warning per weak guess with the domain.yaml line that fixes it, and one note naming the inferred links."""
    found = guesses(domain)
    where = _shown(domain.path / "domain.yaml") if domain.path else "domain.yaml"
    links = inferred_links(domain)
    lines = [f"note: {domain.name}: links inferred from field names (declare `entities:` in {where} to change "
             f"them): " + ", ".join(links)] if links else []
    if not found:
        return lines
    lines.append(f"note: {domain.name}: tool kinds guessed from their names (declare them under `tools:` in {where} "
                 f"to fix them): " + ", ".join(f"{g.tool} {g.kind}" for g in found))
    for g in found:
        if g.weak:
            lines.append(f"WARNING: {domain.name}: {g.tool} was guessed kind '{g.kind}', and {g.weak}. If it is a "
                         f"{g.suggest} tool, add to {where}:  tools: {{{g.tool}: {{kind: {g.suggest}}}}}")
    return lines
