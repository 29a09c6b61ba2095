"""The search arms' generators, each registered as an arm (search/registry.py) and each a real situation generator.

The embedded writer's registers for llm_guided are in models/sim_writer.py; the probes and mutations in
search/probes.py and search/mutations.py. `ARMS` is the registry built from the generators here and the weights table
in defaults.py: the one list of arms the weights, loop, report and docs read.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from sim_pipeline import defaults
from sim_pipeline.domain import Domain
from sim_pipeline.models.cards import render_card
from sim_pipeline.models.gateway import Gateway, ProviderError, Sampling
from sim_pipeline.search.kinds import KindLedger
from sim_pipeline.search.mutations import MUTATIONS, mutate
from sim_pipeline.models.phrasing import request_phrase
from sim_pipeline.search.probes import PROBES, RECORD_PROBES, probe
from sim_pipeline.search.registry import Arm, arm, build
from sim_pipeline.protocol.statuses import ERROR_STATUSES
from sim_pipeline.protocol.tool_kinds import name_words
from sim_pipeline.search.situations import build_situation
from sim_pipeline.seeding import canonical_json, short_id, stable_int
from sim_pipeline.situation import AXES, Situation
from sim_pipeline.world.state import State

Cell = tuple[str, ...]
WRITER_PROMPT = ("Write the first message a customer sends to a support agent, in their own words, for the situation "
                 "below. Include exactly the facts listed (they decide to share them now), keep the stance, and write "
                 "nothing else.\n\n")


def cell_of(situation: Situation) -> Cell:
    """A situation's covering-array cell as a tuple."""
    return tuple(situation.cell[a] for a in AXES)


def writer_sampling(situation_id: str) -> Sampling:
    """The writer's settings for the opening of one situation (its rows' provenance records them too)."""
    return Sampling(1.0, 1.0, 256, stable_int("writer", situation_id) % (2**31 - 1))


@dataclass
class SearchContext:
    """What the arms build situations from."""

    domain: Domain
    state: State
    seed: int
    train: list[Situation]
    gateway: Gateway | None = None
    writer_model: str = "sim/writer"
    n_phrasings: int = 1


@dataclass
class Archive:
    """What the search has seen: rows per cell, behaviour signatures overall and per cell, failures."""

    rows_per_cell: Counter = field(default_factory=Counter)
    signatures: Counter = field(default_factory=Counter)
    cell_signatures: dict[Cell, Counter] = field(default_factory=dict)
    failed: list[Situation] = field(default_factory=list)
    drawn: dict[str, Situation] = field(default_factory=dict)
    queue: list[Situation] = field(default_factory=list)
    variants: Counter = field(default_factory=Counter)
    contents: set[tuple[Any, ...]] = field(default_factory=set)  # what each drawn situation is about (`remember`)
    kinds: KindLedger = field(default_factory=KindLedger)  # the failure kinds met (search/kinds.py)
    made: int = 0

    def remember(self, situation: Situation) -> bool:
        """Note what a situation is about, and whether that is new: the record its request concerns (the same record
        under another stance or fault still asks the same thing of the world), else its cell and facts."""
        key = (situation.intent_tool, situation.entity_id) if situation.entity_id else (
            cell_of(situation), situation.intent_tool, canonical_json(situation.facts))
        new = key not in self.contents
        self.contents.add(key)
        return new

    def record(self, situations: list[Situation], rows: pd.DataFrame) -> None:
        """Add a batch's situations and rollouts."""
        for s in situations:
            self.drawn[s.situation_id] = s
        # An errored rollout shows the endpoint, not a behaviour: it fills no cell and adds no signature.
        rows = rows[~rows["status"].isin(ERROR_STATUSES)] if len(rows) else rows
        if not len(rows):
            return
        for sid, sig in rows[["situation_id", "behavior_signature"]].itertuples(index=False):
            cell = cell_of(self.drawn[sid])
            self.rows_per_cell[cell] += 1
            self.signatures[sig] += 1
            self.cell_signatures.setdefault(cell, Counter())[sig] += 1
        failed = set(rows.loc[rows["oracle_reward"] < 1, "situation_id"])
        self.failed += [self.drawn[sid] for sid in sorted(failed) if self.drawn[sid] not in self.failed]


def cell_pairs(cell: Cell) -> set[tuple[tuple[int, str], ...]]:
    """The axis-value pairs a cell covers (what the covering array plans to cover)."""
    items = list(enumerate(cell))
    return {(a, b) for i, a in enumerate(items) for b in items[i + 1:]}


class Arms:
    """Draws situations for each arm."""

    def __init__(self, ctx: SearchContext) -> None:
        self.ctx = ctx
        self.archive = Archive(queue=list(ctx.train))
        for situation in ctx.train:
            self.archive.remember(situation)
        self.planned: list[Cell] = sorted({cell_of(s) for s in ctx.train})
        self._cells = {cell_of(s): s.cell for s in ctx.train}
        self._covered: set[tuple[tuple[int, str], ...]] = set()  # axis-value pairs of every situation drawn so far
        # The domain's write tools as words ("refund order"): what an injected line orders (search/probes.py).
        self._actions = tuple(" ".join(name_words(t.name)) for t in ctx.domain.tools if t.writes)
        reads = {t.name for t in ctx.domain.tools if t.kind == "read"}
        self._readers = [s for s in ctx.train if s.intent_tool in reads and s.setup.upserts]

    def _new_id(self, arm: str, *parts: Any) -> str:
        self.archive.made += 1
        return short_id(self.ctx.domain.name, self.ctx.seed, arm, parts, self.archive.made)

    def _variant(self, cell: Cell, source: str) -> Situation:
        """The cell drawn again with another record and facts (a new situation id).

        A draw about a record an earlier situation of the same request already used (a world with few eligible
        records) is drawn again, up to SEARCH_VARIANT_TRIES times: the judge sees the request and the record, not
        the stance, so such cases look alike to it, and its stress probes would count one slip several times.
        """
        for _ in range(defaults.SEARCH_VARIANT_TRIES):
            self.archive.variants[cell] += 1
            made = build_situation(self.ctx.domain, self.ctx.state, self._cells[cell], seed=self.ctx.seed,
                                   variant=self.archive.variants[cell], split="train",
                                   n_phrasings=self.ctx.n_phrasings, source=source)
            if self.archive.remember(made):
                break
        return made

    def _underfilled(self, gen: np.random.Generator, n: int) -> list[Cell]:
        counts = np.array([self.archive.rows_per_cell[c] for c in self.planned], dtype=float)
        order = np.lexsort((gen.random(len(self.planned)), counts))  # fewest rows first, ties seeded
        return [self.planned[i] for i in order[:n]]

    async def draw(self, arm: Arm, n: int, gen: np.random.Generator) -> list[Situation]:
        """n situations from one arm (fewer when it has nothing to offer yet)."""
        if n <= 0:
            return []
        made = await arm.generate(self, n, gen)
        for situation in made:
            self._covered |= cell_pairs(cell_of(situation))
        return made

    def _least_covered(self, gen: np.random.Generator, n: int) -> list[Cell]:
        """n of the cells with the fewest rows, one at a time, each the one with the most axis-value pairs no drawn
        situation (of any arm, this batch's included) has had, ties seeded.

        The structured arm walks the covering array in its order; the writer's cells go where the draws so far have
        not been, so the two arms together meet every pair of the plan sooner than with the writer's cells drawn at
        random among the under-filled (measured by bench_search, docs/training.md).
        """
        counts = np.array([self.archive.rows_per_cell[c] for c in self.planned], dtype=float)
        ties = gen.random(len(self.planned))
        covered, out = set(self._covered), []
        for _ in range(n):
            new = np.array([len(cell_pairs(c) - covered) for c in self.planned], dtype=float)
            taken = np.array([c in out for c in self.planned], dtype=float)
            best = int(np.lexsort((ties, -new, counts + 1e6 * taken))[0])
            out.append(self.planned[best])
            covered |= cell_pairs(self.planned[best])
        return out

    @arm("structured")
    async def structured(self, n: int, gen: np.random.Generator) -> list[Situation]:
        """The next unrendered covering-array cell, then the most under-filled cell with another record."""
        out = [self.archive.queue.pop(0) for _ in range(min(n, len(self.archive.queue)))]
        out += [self._variant(cell, "structured") for cell in self._underfilled(gen, n - len(out))]
        return out

    @arm("llm_guided")
    async def llm_guided(self, n: int, gen: np.random.Generator) -> list[Situation]:
        """The writer model writes the opening for an under-filled cell unlike those drawn, without an id it can look up."""
        out = []
        for cell in self._least_covered(gen, n):
            base = self._variant(cell, "llm_guided")
            shared = self._shared(base)
            text = await self._write(base, shared)
            out.append(dataclasses.replace(base, phrasings=(text, *base.phrasings[1:]), opening_facts=shared)
                       if text else base)
        return out

    def _shared(self, situation: Situation) -> tuple[str, ...]:
        """The facts the customer writes first: the opening's, but without the record's id when a look-up field that
        finds the record (an email) is among them, as customers without the number at hand write; the agent must
        then find the record before acting (a look-up, then the request: a two-tool chain).

        The structured arm's template openings always carry the id, so the writer covers the other case in full.
        Leaving the id out of every such opening, not half of them, found more distinct failures and found each kind
        sooner on all three agents of `make bench` search (docs/training.md).
        """
        names = tuple(k for k in situation.opening_facts if k in situation.facts)
        entity = next((e for e in self.ctx.domain.entities if e.name == situation.entity), None)
        if entity is not None and entity.lookup_by in names and entity.id_argument in names:
            return tuple(k for k in names if k != entity.id_argument)
        return names

    async def _write(self, situation: Situation, shared: tuple[str, ...]) -> str | None:
        """The writer model's opening sharing these facts (None if the writer failed: the template opening stays)."""
        if self.ctx.gateway is None or not situation.intent_tool:
            return None
        tool = self.ctx.domain.tool(situation.intent_tool)
        request, noun = request_phrase(tool.name, tool.description, tool.phrase) if tool else (None, "account")
        shown = {k: situation.facts[k] for k in shared}
        card = {"request": request, "noun": noun, "facts": shown, "stance": situation.cell["stance"],
                "history": situation.cell["history"]}
        messages = [{"role": "user", "content": WRITER_PROMPT + render_card("writer", card)}]
        try:
            reply = await self.ctx.gateway.complete(self.ctx.writer_model, messages,
                                                    sampling=writer_sampling(situation.situation_id))
        except ProviderError:
            return None
        return (reply.message.get("content") or "").strip() or None

    @arm("open_ended")
    async def open_ended(self, n: int, gen: np.random.Generator) -> list[Situation]:
        """Off-grid probes: injected instructions, long histories, other languages, garbage, two requests at once."""
        out = []
        for _ in range(n):
            kind = PROBES[self.archive.made % len(PROBES)]
            # Text injected into a record reaches the agent only through a tool that shows the record: a read.
            pool = (self._readers if kind in RECORD_PROBES else None) or self.ctx.train
            base = pool[int(gen.integers(len(pool)))]
            partner = pool[int(gen.integers(len(pool)))]
            out.append(probe(base, kind, situation_id=self._new_id("open_ended", base.situation_id, kind), gen=gen,
                             partner=partner, actions=self._actions))
        return out

    @arm("behavior_targeted")
    async def behavior_targeted(self, n: int, gen: np.random.Generator) -> list[Situation]:
        """Cells whose behaviour signatures are rarest so far, drawn again with another record."""
        seen = [c for c in self.planned if c in self.archive.cell_signatures]
        if not seen:
            return []
        # A cell's rarity: how often its rarest signature has been seen overall (1 = only ever once).
        rarity = np.array([min(self.archive.signatures[s] for s in self.archive.cell_signatures[c]) for c in seen])
        order = np.lexsort((gen.random(len(seen)), rarity))
        return [self._variant(seen[i], "behavior_targeted") for i in order[:n]]

    @arm("failure_mutation")
    async def failure_mutation(self, n: int, gen: np.random.Generator) -> list[Situation]:
        """Variations of situations that failed: truncated, stripped, contradicted, typo'd, re-drawn."""
        failed = self.archive.failed
        if not failed:
            return []
        out = []
        for _ in range(n):
            parent = failed[int(gen.integers(len(failed)))]
            kind = MUTATIONS[self.archive.made % len(MUTATIONS)]
            sibling = self._variant(cell_of(parent), "failure_mutation") if kind == "swap_entity" else None
            out.append(mutate(parent, kind, situation_id=self._new_id("failure_mutation", parent.situation_id, kind),
                              gen=gen, sibling=sibling))
        return out


ARMS: tuple[Arm, ...] = build(defaults.SEARCH_ARM_WEIGHTS)  # a misconfigured table fails here, at import
