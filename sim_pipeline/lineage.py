"""Whether the warehouse files a reader combines were computed from one another as they now stand.

Every file the IO manager writes records in its Parquet footer the sha256 of each input its step read
(`warehouse.LINEAGE_KEY`). A run cut short (killed, or stopped by a failing step) leaves the files it rewrote beside
files computed from their earlier content: those recorded hashes no longer match, so a reader can name the stale
figures and the run that rebuilds them instead of printing two runs' numbers side by side.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import pyarrow as pa
from upath import UPath

from sim_pipeline import warehouse
from sim_pipeline.errors import WarehouseError


@dataclass(frozen=True)
class Change:
    """An input whose content is no longer what a file computed from it recorded."""

    input: str  # its path under the warehouse base
    how: str  # "rewritten", "removed", or "written" (it was absent when the file was computed)


@dataclass(frozen=True)
class FileLineage:
    """One file's standing: the changed inputs at or above it, and the files at or above it recording no lineage."""

    path: str  # under the warehouse base
    causes: tuple[Change, ...] = ()
    unrecorded: tuple[str, ...] = ()

    @property
    def stale(self) -> bool:
        """Whether something it was computed from (directly or through another file) has changed since."""
        return bool(self.causes)


def partition_of(path: str) -> tuple[str | None, str | None]:
    """(policy_version, seed) of a warehouse file; None for a dimension it does not have."""
    parts = warehouse.path_parts(UPath(path))[2]
    return parts.get("policy_version"), parts.get("seed")


def _whose(version: str | None, seed: str | None) -> str:
    """'agent-v2 seed 0', 'seed 0', 'agent-v2'."""
    return " ".join(x for x in (version, f"seed {seed}" if seed is not None else None) if x)


def _listed(items: list[str] | tuple[str, ...]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _changes(causes: Iterable[Change]) -> str:
    """'from rollouts and search of agent-v2 seed 0 that have since been rewritten', one phrase per partition."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for change in causes:
        asset = warehouse.path_parts(UPath(change.input))[1]
        grouped.setdefault((change.how, _whose(*partition_of(change.input))), []).append(asset)
    phrases = []
    for (how, whose), assets in grouped.items():
        named = _listed(assets) + (f" of {whose}" if whose else "")
        phrases.append(f"before {named} were written" if how == "written" else
                       f"from {named} that have since been {how}")
    return " and ".join(phrases)


class LineageCheck:
    """Follows recorded lineages up from the files a reader uses; each file is read and hashed once."""

    def __init__(self, base: str) -> None:
        self.base = base
        self._files: dict[str, tuple[str, warehouse.Lineage | None] | None] = {}
        self._checked: dict[str, FileLineage] = {}

    def _file(self, name: str) -> tuple[str, warehouse.Lineage | None] | None:
        """(sha256, recorded lineage) of a file by its path under the base; None when it does not exist."""
        if name not in self._files:
            path = UPath(self.base) / name
            content = path.read_bytes() if path.exists() else None
            try:
                found = None if content is None else (hashlib.sha256(content).hexdigest(),
                                                      warehouse.recorded_lineage(content))
            except (pa.ArrowException, OSError, ValueError) as exc:
                raise WarehouseError(f"{path}: its footer cannot be read ({exc}). "
                                     f"{warehouse.rematerialize_hint(path)}") from None
            self._files[name] = found
        return self._files[name]

    def of(self, path: UPath | str) -> FileLineage:
        """The standing of one warehouse file (a path in the warehouse, or under its base)."""
        name = warehouse.relative_path(path)
        if name in self._checked:
            return self._checked[name]
        self._checked[name] = FileLineage(name)  # what a cycle would see; writes never make one
        found = self._file(name)
        if found is None:
            return self._checked[name]
        if found[1] is None:
            self._checked[name] = FileLineage(name, unrecorded=(name,))
            return self._checked[name]
        causes: list[Change] = []
        unrecorded: list[str] = []
        for source, recorded in sorted(found[1].items()):
            now = self._file(source)
            current = now[0] if now is not None else None
            if current != recorded:
                how = "removed" if current is None else "written" if recorded is None else "rewritten"
                causes.append(Change(source, how))
            elif current is not None:  # unchanged: still stale if what it was computed from has changed
                above = self.of(source)
                causes += above.causes
                unrecorded += above.unrecorded
        self._checked[name] = FileLineage(name, tuple(dict.fromkeys(causes)), tuple(dict.fromkeys(unrecorded)))
        return self._checked[name]


def rerun_command(domain: str, seed: str, version: str | None = None) -> str:
    """The run that rebuilds a seed's files (for one version, or all of them) from what the warehouse now holds."""
    return f"sim-pipeline run --domain {domain} --seed {seed}" + (f" --versions {version}" if version else "")


@dataclass(frozen=True)
class StaleGroup:
    """The stale files of one partition, said once: what is stale, why, and the run that fixes it."""

    version: str | None
    seed: str | None
    what: tuple[str, ...]  # the figures or tables, as the reader names them
    causes: tuple[Change, ...]

    def sentence(self) -> str:
        """'pass@1 and judge trust for agent-v2 seed 0: computed from rollouts of agent-v2 seed 0 that have since
        been rewritten'."""
        return f"{_listed(self.what)} for {_whose(self.version, self.seed)}: computed {_changes(self.causes)}"

    def fix(self, domain: str, seed: str | None = None) -> str:
        """The command that rebuilds them; `seed` for a file of every seed (the delta) whose causes name none."""
        seeds = [s for c in self.causes if (s := partition_of(c.input)[1]) is not None]
        return rerun_command(domain, self.seed or (seeds[0] if seeds else seed or "0"), self.version)


def stale_groups(files: Iterable[FileLineage], name: Callable[[str], str]) -> list[StaleGroup]:
    """The stale files among `files`, grouped by partition (version and seed), each named by `name(path)`."""
    groups: dict[tuple[str | None, str | None], tuple[list[str], list[Change]]] = {}
    for f in files:
        if f.stale:
            what, causes = groups.setdefault(partition_of(f.path), ([], []))
            what.append(name(f.path))
            causes += f.causes
    return [StaleGroup(version, seed, tuple(dict.fromkeys(what)), tuple(dict.fromkeys(causes)))
            for (version, seed), (what, causes) in groups.items()]


def unrecorded(files: Iterable[FileLineage]) -> list[str]:
    """The files, at or above those given, that record no lineage (an older release wrote them, or a hand)."""
    return sorted({name for f in files for name in f.unrecorded})
