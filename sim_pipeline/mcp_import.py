"""A domain pack from an MCP server: its tools, listed with the official `mcp` SDK, as `tools/*.json`, a
`domain.yaml` whose tool kinds come from the tools' annotations where present, and a `policy.md` skeleton.

Every kind the annotations do not settle is a guess, and every guess is flagged for review (a `REVIEW:` comment in
domain.yaml, a line on the terminal). A name the pack format refuses (a character outside `A-Z a-z 0-9 _ -`, more
than 64 characters, the protocol's own `message_user` / `user_action`, two names that are one once case, `-`/`_` and
camelCase are set aside) is an error naming each, unless the caller asks for the documented renames. The pack is
validated with the project's own loader before it appears, and appears whole or not at all.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sim_pipeline import defaults
from sim_pipeline.errors import DomainPackError, SimPipelineError
from sim_pipeline.protocol.environment_tools import RESERVED_TOOL_NAMES
from sim_pipeline.protocol.tool_kinds import guess_kind, name_keys, name_words

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # tool.schema.json's function/name pattern
_NAME_LIMIT = 64
_RESERVED_SUFFIX = "_tool"  # a reserved name, renamed: message_user -> message_user_tool
# What annotations say a tool may be, the kind taken when its name's verb says otherwise, and how the hints read.
_READ_ONLY = ("read", "verify", "compute", "transfer")  # readOnlyHint: true: nothing changes (the name may refine it)
_ADDITIVE = ("create", "update")  # destructiveHint: false: "only additive updates"
_DESTRUCTIVE = ("update", "delete", "destructive")  # destructiveHint: true: it may overwrite or remove
_WRITING = ("create", "update", "delete", "destructive")  # readOnlyHint: false alone
_CONFIRMED = ("update", "delete", "destructive")  # the skeleton's confirm rule covers these (a create adds only)
_NO_PRIOR_RECORD = ("create", "compute", "transfer")  # planned only on the world as drawn (entity_exists)
_UNRELATED_STATES = ("duplicate_entity", "partially_completed")  # the record states the shipped packs keep off
# `tool: unrelated` (a request no tool fits has no record to duplicate or half change)


@dataclass(frozen=True)
class ServerTool:
    """One tool as the MCP server lists it: the fields a pack is made from."""

    name: str
    description: str
    input_schema: dict[str, Any]
    title: str | None = None
    read_only: bool | None = None  # annotations.readOnlyHint
    destructive: bool | None = None  # annotations.destructiveHint
    idempotent: bool | None = None  # annotations.idempotentHint


@dataclass(frozen=True)
class ServerListing:
    """What the server said: its name and instructions, and its tools in the order it listed them."""

    source: str  # the command or URL, as the user gave it
    name: str
    instructions: str
    tools: tuple[ServerTool, ...]


@dataclass(frozen=True)
class ImportedTool:
    """A server tool as the pack holds it: its pack name, the kind it gets and why, and whether that is a guess."""

    server_name: str
    name: str
    kind: str
    declared: bool  # written under domain.yaml `tools:` (False: left to the loader's guess from the name)
    reason: str  # where the kind comes from, as the REVIEW note and the terminal say it
    guess: bool  # the annotations alone do not settle the kind


@dataclass(frozen=True)
class ImportReport:
    """What `pack from-mcp` wrote."""

    path: Path
    tools: tuple[ImportedTool, ...]
    renamed: dict[str, str]  # server name -> pack name, for every name that changed


def _hints(tool: ServerTool) -> str:
    shown = [f"{key}: {str(value).lower()}" for key, value in (("readOnlyHint", tool.read_only),
                                                                ("destructiveHint", tool.destructive),
                                                                ("idempotentHint", tool.idempotent))
             if value is not None]
    return ", ".join(shown)


def kind_for(tool: ServerTool, name: str) -> tuple[str, str, bool]:
    """The kind a server tool gets (from its annotations, refined or filled in by its name's verb), why, and whether
    it is a guess to review."""
    named = guess_kind(name)
    hints = _hints(tool)
    if not hints:
        return named, f"no annotations: kind guessed from its name ('{named}')", True
    if tool.read_only:
        allowed, fallback = _READ_ONLY, "read"
    elif tool.destructive is False:
        # Additive only: repeating an idempotent one adds nothing more (an update), otherwise each call adds a record.
        allowed, fallback = _ADDITIVE, "update" if tool.idempotent else "create"
    elif tool.destructive:
        allowed, fallback = _DESTRUCTIVE, "update"
    else:  # readOnlyHint: false (or absent, with only idempotentHint): it writes, how is the name's to say
        allowed, fallback = _WRITING, "update" if tool.idempotent is not False else "create"
    if named in allowed:  # the hints and the name's verb agree
        return named, f"{hints}; its name reads as '{named}', which they allow", False
    return fallback, f"{hints}, but its name reads as '{named}': took '{fallback}'", True


def _weak_note(name: str, description: str, parameters: dict[str, Any], kind: str) -> str:
    """kind_guesses' doubt about a kind guessed from the name (never writes; the description reads otherwise)."""
    from sim_pipeline.domain import Tool
    from sim_pipeline.kind_guesses import guess_of

    found = guess_of(Tool(name, description, parameters, {}, kind))
    return f"; {found.weak}: if it is a {found.suggest} tool, declare {{kind: {found.suggest}}}" if found.weak else ""


def _renamed(name: str) -> str:
    """A server name in the pack's alphabet: runs of other characters become `_`, at most 64 characters."""
    fixed = re.sub(r"[^A-Za-z0-9_-]+", "_", name).strip("_") or "tool"
    return fixed[:_NAME_LIMIT]


def pack_names(names: list[str]) -> tuple[dict[str, str], list[str]]:
    """Each server name's pack name (the documented renames), and why each name that changed had to.

    In name order: a character outside `A-Z a-z 0-9 _ -` (or a 65th) becomes `_` (cut); a reserved name gets
    `_tool`; a name that is another's once case, `-`/`_` and camelCase are set aside gets `_2`, `_3`..."""
    reserved = {key for name in RESERVED_TOOL_NAMES for key in name_keys(name)}
    taken: dict[str, str] = {}  # name key -> the server name holding it
    mapping, why = {}, []
    for name in sorted(names):
        new, reasons = name, []
        if not TOOL_NAME.match(name):
            new = _renamed(name)
            reasons.append(f"'{name}' has characters outside A-Z a-z 0-9 _ - or more than {_NAME_LIMIT} of them")
        if name_keys(new) & reserved:
            reasons.append(f"'{name}' is the project's own protocol tool {list(RESERVED_TOOL_NAMES)} (the agent's "
                           "message to the user, the user's answer), and would be taken for it")
            new = new[:_NAME_LIMIT - len(_RESERVED_SUFFIX)] + _RESERVED_SUFFIX
        base, count = new, 1
        while name_keys(new) & set(taken):
            count += 1
            suffix = f"_{count}"
            new = base[:_NAME_LIMIT - len(suffix)] + suffix
        if count > 1:
            other = taken[sorted(name_keys(base) & set(taken))[0]]
            reasons.append(f"'{name}' and '{other}' are one tool name once case, '-'/'_' and camelCase are set aside "
                           "(a model reads them as one; a case-insensitive disk keeps one file)")
        taken.update(dict.fromkeys(name_keys(new), name))
        mapping[name] = new
        why += reasons
    return mapping, why


def _description(tool: ServerTool, name: str) -> tuple[str, bool]:
    """The tool's description, or (flagged) its title or its name's words when the server gives none."""
    text = (tool.description or "").strip()
    if text:
        return text, False
    fallback = (tool.title or " ".join(name_words(name)) or name).strip()
    return fallback[0].upper() + fallback[1:] + ("" if fallback.endswith(".") else "."), True


def _yaml_value(value: str) -> str:
    """A text as one YAML scalar (quoted as needed, on one line)."""
    return yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10**6).strip().removesuffix("...").strip()


def pack_files(name: str, listing: ServerListing, rename: bool = False) -> tuple[dict[str, str], ImportReport]:
    """The pack's files (path relative to the pack -> text) for a server's listing, and what they hold; the same
    listing gives the same bytes."""
    if not listing.tools:
        raise SimPipelineError(f"the MCP server {listing.source} lists no tools, and a pack needs at least one. Fix: "
                               "check that it is the server you meant (and that it is configured to offer tools)")
    mapping, why = pack_names([t.name for t in listing.tools])
    if why and not rename:
        wanted = ", ".join(f"{old} -> {new}" for old, new in mapping.items() if old != new)
        raise SimPipelineError(f"MCP server {listing.source}: tool names the pack format refuses: {'; '.join(why)}. "
                               f"Fix: rename them on the server, or pass --rename to write them as {wanted} (the "
                               "renames are recorded in domain.yaml)")
    files: dict[str, str] = {}
    imported = []
    flags = []  # what else to review (made-up descriptions)
    for tool in sorted(listing.tools, key=lambda t: mapping[t.name]):
        new = mapping[tool.name]
        description, made_up = _description(tool, new)
        parameters = dict(tool.input_schema)
        schema = {"type": "function", "function": {"name": new, "description": description, "parameters": parameters}}
        files[f"tools/{new}.json"] = json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
        kind, reason, guess = kind_for(tool, new)
        if guess and not _hints(tool):
            reason += _weak_note(new, description, parameters, kind)
        if made_up:
            flags.append(f"{new}: the server gives no description; tools/{new}.json says '{description}'")
        # A kind the annotations back is declared; a guess from the name alone is left to the loader, so that every
        # `sim-pipeline run` names it too; `destructive` can only come from a name.
        declared = kind != "destructive" and (bool(_hints(tool)))
        imported.append(ImportedTool(tool.name, new, kind, declared, reason, guess))
    files["domain.yaml"] = _domain_yaml(name, listing, imported, mapping, flags)
    files["policy.md"] = _policy(listing, imported)
    renamed = {old: new for old, new in mapping.items() if old != new}
    return files, ImportReport(Path(name), tuple(imported), renamed)


def _title(listing: ServerListing) -> str:
    return " ".join(listing.name.split()) or "MCP server"  # one line: it lands in YAML and a Markdown heading


def _domain_yaml(name: str, listing: ServerListing, tools: list[ImportedTool], mapping: dict[str, str],
                 flags: list[str]) -> str:
    title = _title(listing)
    lines = [f"# Imported by `sim-pipeline pack from-mcp` from the MCP server {listing.source} ({title}): its tools/list,",
             "# one tools/<name>.json per tool (its inputSchema as the parameters). Every line marked REVIEW is a guess:",
             "# check it, fix it, then delete the mark. See data/domains/README.md for the format.",
             f"name: {name}",
             f"title: {_yaml_value(title)}  # REVIEW: the server's name",
             f"agent_role: {_yaml_value(f'You are the assistant of {title}. You help users with what its tools do.')}"
             "  # REVIEW: say who the agent serves and what it may do"]
    declared = [t for t in tools if t.declared]
    left = [t for t in tools if not t.declared]
    if declared:
        lines.append("tools:  # kinds from the tools' MCP annotations (readOnlyHint, destructiveHint, idempotentHint)")
        for t in declared:
            mark = "REVIEW: " if t.guess else ""
            lines.append(f"  {_yaml_value(t.name)}: {{kind: {t.kind}}}  # {mark}{t.reason}")
    if left:
        lines.append("# Kinds the loader guesses from the name (and `sim-pipeline run` names each time); to fix one, "
                     "declare it under tools:")
        for t in left:
            mark = "REVIEW: " if t.guess else ""
            lines.append(f"#   {t.name}: {t.kind}  # {mark}{t.reason}")
    renamed = [(old, new) for old, new in mapping.items() if old != new]
    if renamed:
        lines.append("# Renamed from the server's names (the pack format refuses those), server name -> pack name:")
        lines += [f"#   {old} -> {new}" for old, new in renamed]
    lines += [f"# REVIEW: {flag}" for flag in flags]
    confirmed = [t.name for t in tools if t.kind in _CONFIRMED]
    lines += ["constraints:  # as the shipped packs plan: no fault or record state on a request no tool fits",
              *(f"  - {{tool: unrelated, tool_condition: {c}}}" for c in defaults.TOOL_CONDITIONS if c != "success"),
              *(f"  - {{tool: unrelated, world_state: {s}}}" for s in _UNRELATED_STATES)]
    fresh = [t.name for t in tools if t.kind in _NO_PRIOR_RECORD]
    if fresh:
        lines.append("  # A record being created has no prior state, and a calculator or a hand-off touches none: only "
                     "entity_exists means anything to them.")
        lines += [f"  - {{tool: {_yaml_value(n)}, world_state: {s}}}" for n in fresh for s in defaults.WORLD_STATES
                  if s != "entity_exists"]
    if confirmed:
        lines += ["rules:  # REVIEW: policy.md's confirm_changes, checked on the tools that change or remove records",
                  f"  confirm_changes: {{kind: confirm_before, tools: [{', '.join(map(_yaml_value, confirmed))}]}}"]
    return "\n".join(lines) + "\n"


def _policy(listing: ServerListing, tools: list[ImportedTool]) -> str:
    title = _title(listing)
    confirmed = [t.name for t in tools if t.kind in _CONFIRMED]
    lines = [f"# {title} policy", "",
             "REVIEW: a skeleton written by `sim-pipeline pack from-mcp` from the server's tool list. Replace these "
             "rules with the", "service's own (one line `- **rule_id**: text` each; data/domains/README.md).", ""]
    if listing.instructions.strip():
        lines += ["The server's instructions to its clients:", ""]
        lines += [f"> {line}".rstrip() for line in listing.instructions.strip().splitlines()]
        lines.append("")
    lines += ["## Rules",
              "- **stay_in_scope**: Help only with what the tools below do; decline anything else and say why."]
    if confirmed:
        named = [f"`{n}`" for n in confirmed]
        listed = named[0] if len(named) == 1 else ", ".join(named[:-1]) + " or " + named[-1]
        lines.append(f"- **confirm_changes**: Before calling {listed}" +
                     ", state exactly what you will do and get the user's explicit \"yes\".")
    lines += ["- **no_invented_values**: Use only values the user gave you or a tool returned; ask for anything "
              "missing rather than guessing it.",
              "- **report_failures**: If a tool fails, say so plainly; never say an action succeeded unless the tool "
              "confirmed it."]
    return "\n".join(lines) + "\n"


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside anyio's task-group wrappers, the ones that say what went wrong."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def list_server_tools(command: list[str] | None = None, url: str | None = None,
                      timeout_s: float = defaults.MCP_LIST_TIMEOUT_S) -> ServerListing:
    """Start the MCP server `command` (stdio) or reach the one at `url` (streamable HTTP) and list its tools, every
    page of them, with the official `mcp` SDK."""
    if (command is None) == (url is None) or command == []:
        raise SimPipelineError("name one MCP server: a command after `--` (stdio) or --url (streamable HTTP). Fix: "
                               "`sim-pipeline pack from-mcp --name NAME -- python server.py` or `... --url "
                               "http://127.0.0.1:8000/mcp`")
    try:
        import anyio
        from mcp import Client, StdioServerParameters
    except ImportError:
        raise SimPipelineError("importing from an MCP server needs the `mcp` package. Fix: pip install -e '.[mcp]' "
                               "(make test installs it)") from None
    source = f"at {url}" if url else "`" + " ".join(command) + "`"
    server = url if url else StdioServerParameters(command=command[0], args=command[1:])

    async def listing() -> ServerListing:
        with anyio.fail_after(timeout_s):
            async with Client(server) as client:
                tools, cursor = [], None
                for _ in range(defaults.MCP_LIST_MAX_PAGES):
                    page = await client.list_tools(cursor=cursor)
                    tools += page.tools
                    cursor = page.next_cursor
                    if cursor is None:
                        break
                else:
                    raise SimPipelineError(f"the MCP server {source} listed more than {defaults.MCP_LIST_MAX_PAGES} "
                                           "pages of tools without an end. Fix: check its tools/list pagination")
                info = client.server_info
                return ServerListing(source, (info.title or info.name) if info else "", client.instructions or "",
                                     tuple(_server_tool(t) for t in tools))

    try:
        return anyio.run(listing)
    except SimPipelineError:
        raise
    except BaseException as exc:  # noqa: BLE001 -- anyio wraps the cause in groups; the user gets its one line
        if isinstance(exc, KeyboardInterrupt):
            raise
        leaves = _leaves(exc)
        own = next((leaf for leaf in leaves if isinstance(leaf, SimPipelineError)), None)
        if own is not None:
            raise own from None
        cause = leaves[0]
        timed_out = isinstance(cause, TimeoutError)
        text = f"no answer within {timeout_s:g} s" if timed_out else f"{type(cause).__name__}: {cause}".strip()
        fix = (f"check that {url} is the server's streamable HTTP endpoint (often ending in /mcp) and that it is up"
               if url else f"check that `{' '.join(command)}` starts an MCP server on stdio (run by hand, it waits "
                           "for input); it gets the SDK's default environment (PATH, HOME, ...): pass others as "
                           "`-- env NAME=value <command>`")
        raise SimPipelineError(f"cannot list the tools of the MCP server {source} ({text}). Fix: {fix}") from None


def _server_tool(tool: Any) -> ServerTool:
    """An `mcp` Tool as the fields a pack is made from."""
    hints = tool.annotations
    return ServerTool(tool.name, tool.description or "", dict(tool.input_schema), tool.title or
                      (hints.title if hints else None),
                      hints.read_only_hint if hints else None, hints.destructive_hint if hints else None,
                      hints.idempotent_hint if hints else None)


def write_pack(name: str, files: dict[str, str], out: Path, force: bool = False) -> Path:
    """Write the pack to `out/name`, validated by the project's loader first: it appears whole or not at all, and
    an existing one is replaced only with `force`."""
    from sim_pipeline.domain import is_domain_name, load_domain

    if not is_domain_name(name):
        raise SimPipelineError(f"--name {name!r} cannot name a pack. Fix: use a lowercase letter, then lowercase "
                               "letters, digits or _ (e.g. my_service)")
    target = out / name
    if (target.exists() or target.is_symlink()) and not force:
        raise SimPipelineError(f"{target} exists. Fix: pass --force to replace it, or choose another --name")
    if target.exists() and not target.is_dir():
        raise SimPipelineError(f"{target} exists and is not a directory. Fix: move it away, or choose another --name")
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.from-mcp-", dir=out))  # beside it: the rename stays atomic
    try:
        pack = staging / name
        for relative, text in files.items():
            path = pack / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        try:
            load_domain(pack)
        except DomainPackError as exc:
            raise SimPipelineError(f"the pack made from the server's tools does not load, so nothing was written: "
                                   f"{str(exc).replace(str(pack), name)}") from None
        if target.exists():
            os.rename(target, staging / "replaced")
        os.rename(pack, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def import_pack(name: str, command: list[str] | None = None, url: str | None = None, out: Path | None = None,
                force: bool = False, rename: bool = False) -> ImportReport:
    """List an MCP server's tools and write them as the pack `out/name` (default data/domains/name)."""
    from sim_pipeline.domain import DOMAINS_DIR, is_domain_name

    if not is_domain_name(name):  # before the server is started
        raise SimPipelineError(f"--name {name!r} cannot name a pack. Fix: use a lowercase letter, then lowercase "
                               "letters, digits or _ (e.g. my_service)")
    base = Path(out) if out is not None else DOMAINS_DIR
    if (base / name).exists() and not force:
        raise SimPipelineError(f"{base / name} exists. Fix: pass --force to replace it, or choose another --name")
    listing = list_server_tools(command, url)
    files, report = pack_files(name, listing, rename=rename)
    path = write_pack(name, files, base, force=force)
    return ImportReport(path, report.tools, report.renamed)
