"""Load and validate a domain pack: tools (OpenAI function schemas), policy rules, domain.yaml, gold labels."""

from __future__ import annotations

import json
import re
import dataclasses
import datetime
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import jsonschema

from sim_pipeline import defaults
from sim_pipeline.definition_files import load_json, load_yaml, read_definition
from sim_pipeline import expressions, json_schema
from sim_pipeline.errors import DomainPackError
from sim_pipeline.policy import KINDS
from sim_pipeline.protocol.environment_tools import RESERVED_TOOL_NAMES
from sim_pipeline.protocol.tool_kinds import guess_kind, name_keys, writes

_HERE = Path(__file__).parent
DOMAINS_DIR = _HERE.parent / "data" / "domains"
# What a computed value (`actions: <tool>: computes:`) may read: the call, the record it acts on and those it links to,
# every table of the world, domain.yaml's tables and the world's clock.
COMPUTE_ROOTS = ("args", "record", "linked", "records", "tables", "now")
RULE_ID_PATTERN = r"[a-z][a-z0-9_]*"  # a rule id: a value of the rule axis, and its key under domain.yaml `rules:`
_RULE_LINE = re.compile(rf"^\s*[-*]\s+\*\*(?P<id>{RULE_ID_PATTERN})\*\*\s*:\s*(?P<text>.+)$")
# What an author may have meant as a rule line, whatever its mistakes: a list item (bullet or number) whose first
# words are bold, or a bare line starting with a bold word and a colon.
_RULE_LIKE = re.compile(r"^\s*(?:(?P<marker>[-*+]|\d+[.)])\s*)?(?P<bold>\*\*|__)(?P<id>.*?)(?P=bold)(?P<rest>.*)$")


@dataclass(frozen=True)
class Tool:
    """One tool the agent may call: its OpenAI schema, its kind (declared, or guessed from its name), the entity it
    acts on and how a user asks for it, when the pack declares them."""

    name: str
    description: str
    parameters: dict[str, Any]
    schema: dict[str, Any]
    kind: str  # protocol/tool_kinds.py: read verify create update delete destructive compute transfer other
    entity: str | None = None  # declared in domain.yaml `tools:`; None: the first entity whose id it takes
    phrase: str | None = None  # what a user says to ask for it ("change my flights"); None: from its name
    declared: bool = False  # whether domain.yaml `tools:` declares its kind (False: guessed from its name)

    @property
    def required(self) -> tuple[str, ...]:
        """Names of the required arguments."""
        return tuple(self.parameters.get("required", ()))

    @property
    def writes(self) -> bool:
        """Whether a successful call changes the world."""
        return writes(self.kind)


@dataclass(frozen=True)
class Rule:
    """One policy clause: its id and text, plus optional machine-checkable structure from domain.yaml."""

    id: str
    text: str
    kind: str | None = None  # a kind of policy/ (one module each), or None (text only)
    tools: tuple[str, ...] = ()
    verify_tool: str | None = None
    argument: str | None = None
    limit: float | None = None  # argument_limit: the largest value; max_calls: the most calls per conversation
    values: tuple[Any, ...] = ()  # allowed_values: the only values allowed; forbidden_argument: values never allowed
    transfer_tool: str | None = None  # transfer_when: the hand-off tool to call instead of a request it forbids
    when: str | None = None  # expression: the CEL predicate that must hold for its tools to be called


@dataclass(frozen=True)
class FieldSpec:
    """How the world draws one entity field.

    `kind` is a domain.yaml kind; a `list` or `object` field becomes kind `schema` with its JSON Schema as the one
    value (drawn schema-true, world/values.py), a `link` field holds the id of a record of the entity in `values[0]`.
    """

    name: str
    kind: str
    values: tuple[str, ...] = ()
    low: float | None = None
    high: float | None = None
    earliest: str | None = None  # a date field's bounds: ISO dates, or relative to the world's clock (now-80y)
    latest: str | None = None


@dataclass(frozen=True)
class Entity:
    """A kind of record the tools act on, keyed by the argument that carries its id."""

    name: str
    id_argument: str
    fields: tuple[FieldSpec, ...]
    lookup_by: str | None = None
    id_pattern: str | None = None  # the shape of this entity's ids (a regex); None: digits in WorldOptions.id_range

    def links(self) -> dict[str, str]:
        """Link fields: field name -> the entity whose id it holds (order.customer_id -> customer)."""
        return {f.name: f.values[0] for f in self.fields if f.kind == "link"}


@dataclass(frozen=True)
class Action:
    """What a writing tool does: fields it sets (values or `$argument`) and states it requires."""

    tool: str
    sets: dict[str, str]
    requires: dict[str, tuple[str, ...]]
    computes: dict[str, str] = dataclasses.field(default_factory=dict)  # field -> CEL the world works it out by


@dataclass(frozen=True)
class Reference:
    """A value at a path of a record or a call that names another record (world/references.py): `owner.path ->
    target[.within]`; owner is an entity, a tool or `*`; `[]` marks every item of a list."""

    owner: str
    path: tuple[str, ...]
    target: str
    within: tuple[str, ...] = ()  # a path inside the target record the same object links to (its own list)
    text: str = ""


def parse_reference(line: str) -> Reference:
    """`owner.a[].b -> target[.c[].d]` as a Reference; ValueError says what is wrong."""
    if "->" not in line:
        raise ValueError("no '->' between the path and the entity it names")
    left, right = (part.strip() for part in line.split("->", 1))
    owner, _, path = left.partition(".")
    target, _, within = right.partition(".")
    if not owner or not path or not target:
        raise ValueError("write it as owner.path -> entity (owner: an entity, a tool or *)")
    parts = tuple(path.split("."))
    inner = tuple(within.split(".")) if within else ()
    for part in (*parts, *inner):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(?:\[\])?", part):
            raise ValueError(f"'{part}' is not a key (letters, digits and _, then [] for a list)")
    return Reference(owner, parts, target, inner, line.strip())


@dataclass(frozen=True)
class Domain:
    """A validated domain pack."""

    name: str
    title: str
    agent_role: str
    path: Path
    tools: tuple[Tool, ...]
    rules: tuple[Rule, ...]
    entities: tuple[Entity, ...]
    actions: dict[str, Action]
    facts: dict[str, tuple[str, ...]]
    constraints: tuple[dict[str, str], ...]
    stances: tuple[str, ...]
    policy_text: str
    tables: dict[str, Any] = dataclasses.field(default_factory=dict)  # lookups expression rules read (domain.yaml)
    references: tuple[Reference, ...] = ()  # values inside nested data that name records (`references:`)
    records: dict[str, tuple[dict[str, Any], ...]] = dataclasses.field(default_factory=dict)  # records/<entity>.jsonl

    def tool(self, name: str) -> Tool | None:
        """The tool called `name`, or None."""
        return next((t for t in self.tools if t.name == name), None)

    def entity_for(self, tool: Tool) -> Entity | None:
        """The entity a tool acts on: the first whose id argument it takes, else the first it can look up by."""
        return entity_of(self.entities, tool)

    @property
    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tools as the OpenAI `tools=` list."""
        return [t.schema for t in self.tools]


def entity_of(entities: tuple[Entity, ...], tool: Tool) -> Entity | None:
    """The entity a tool acts on: the one it declares, else the first whose id argument it takes, else the first it
    can look up by."""
    if tool.entity is not None:
        return next((e for e in entities if e.name == tool.entity), None)
    props = tool.parameters.get("properties", {})
    return next((e for e in entities if e.id_argument in props),
                next((e for e in entities if e.lookup_by and e.lookup_by in props), None))


def _fail(path: Path, where: str, problem: str, fix: str) -> DomainPackError:
    return DomainPackError(f"{path}: {where}: {problem}. Fix: {fix}")


@cache
def _schema(name: str) -> dict[str, Any]:
    return json.loads((_HERE / name).read_text())


def _validate(instance: Any, schema_name: str, path: Path) -> None:
    validator = jsonschema.Draft202012Validator(_schema(schema_name))
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
        raise _fail(path, f"field '{where}'", err.message, f"see sim_pipeline/{schema_name} for the format")


_IN_PLACE_ONE = ("not", "if", "then", "else")  # subschemas applied to the same value, not to a part of it
_IN_PLACE_MANY = ("allOf", "anyOf", "oneOf")


def _pointer(root: Any, ref: str) -> Any:
    """The subschema a local `$ref` ('#', '#/a/b', '#anchor') names, or None when it names nothing."""
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        anchors = [n for n in _subschemas(root) if ref[1:] in (n.get("$anchor"), n.get("$dynamicAnchor"))]
        return anchors[0] if anchors and ref[1:] else None
    node = root
    for part in ref[2:].split("/"):
        part = unquote(part).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


_DATA_KEYWORDS = ("enum", "const", "default", "examples")  # their values are data, never schemas


def _subschemas(root: Any) -> list[dict[str, Any]]:
    """Every mapping inside a schema but its data (the candidates a reference may name), root first."""
    found, stack = [], [root]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found.append(node)
            stack.extend(v for k, v in node.items() if k not in _DATA_KEYWORDS)
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _check_json_schema(path: Path, where: str, schema: Any, fix: str) -> None:
    """A JSON Schema the sandbox can validate arguments with: valid, its references local and resolvable, and no
    reference loop that would validate one value forever."""
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise _fail(path, f"field '{where}'", f"not a valid JSON Schema ({exc.message})", fix) from None
    except (OverflowError, RecursionError) as exc:  # a regex repeat too large for `re`; a schema nested too deep
        raise _fail(path, f"field '{where}'", f"not a usable JSON Schema ({exc.__class__.__name__}: {exc})",
                    fix) from None
    nodes = _subschemas(schema)
    targets: dict[int, list[Any]] = {}  # subschema -> the subschemas applied to the same value
    for node in nodes:
        if "$id" in node:
            raise _fail(path, f"field '{where}'", "'$id' re-bases the references of a tool schema",
                        "remove $id and refer to parts of the schema with '#/$defs/<name>'")
        same = [node[k] for k in _IN_PLACE_ONE if k in node]
        same += [s for k in _IN_PLACE_MANY if isinstance(node.get(k), list) for s in node[k]]
        same += list(node["dependentSchemas"].values()) if isinstance(node.get("dependentSchemas"), dict) else []
        for key in ("$ref", "$dynamicRef"):
            ref = node.get(key)
            if not isinstance(ref, str):
                continue
            target = _pointer(schema, ref) if ref.startswith("#") else None
            if not isinstance(target, (dict, bool)):
                raise _fail(path, f"field '{where}'", f"{key} {ref!r} names nothing in this schema" +
                            ("" if ref.startswith("#") else " (references to other files are never fetched)"),
                            "refer to a part of the same schema, e.g. '#/$defs/<name>'")
            same.append(target)
        targets[id(node)] = [s for s in same if isinstance(s, dict)]
    # A loop of references and in-place subschemas applies itself to the same value forever.
    state: dict[int, int] = {}
    for start in nodes:
        if state.get(id(start)):
            continue
        stack = [(start, iter(targets[id(start)]))]
        state[id(start)] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[id(node)] = 2
                stack.pop()
            elif state.get(id(child)) == 1:
                raise _fail(path, f"field '{where}'", "its references loop back to a schema they started from without "
                            "reaching into the value, so checking an argument would never end",
                            "make each $ref name a schema of a part of the value (under properties or items)")
            elif not state.get(id(child)):
                state[id(child)] = 1
                stack.append((child, iter(targets.get(id(child), []))))  # a $ref may name data
    # Every regex it holds must run on RE2 (json_schema.py): arguments are matched in linear time, never by `re`.
    problem = json_schema.pattern_problem(schema)
    if problem is not None:
        raise _fail(path, f"field '{where}/{problem.path}'", problem.problem, problem.fix)


def _load_tool(path: Path) -> Tool:
    schema = load_json(path, DomainPackError)
    _validate(schema, "tool.schema.json", path)
    fn = schema["function"]
    _check_json_schema(path, "function/parameters", fn["parameters"], "write parameters as a JSON Schema object")
    if path.stem != fn["name"]:
        raise _fail(path, "field 'function/name'", f"name '{fn['name']}' differs from the file name",
                    f"rename the file to {fn['name']}.json or the tool to '{path.stem}'")
    missing = [r for r in fn["parameters"].get("required", []) if r not in fn["parameters"].get("properties", {})]
    if missing:
        raise _fail(path, "field 'function/parameters/required'", f"{missing} not declared in properties",
                    "declare every required argument under properties")
    return Tool(fn["name"], fn["description"], fn["parameters"], schema, guess_kind(fn["name"]))


def _check_tool_names(paths: list[Path], tools: tuple[Tool, ...]) -> None:
    """Refuse a tool named as one of the protocol's own, or as another tool once case, `-`/`_` and camelCase are
    set aside: verl's tool config would list message_user twice, and a model (or a case-insensitive disk) one name."""
    reserved = {key: name for name in RESERVED_TOOL_NAMES for key in name_keys(name)}
    seen: dict[str, tuple[Path, str]] = {}
    for path, tool in zip(paths, tools):
        keys = sorted(name_keys(tool.name))
        clash = next((reserved[k] for k in keys if k in reserved), None)
        if clash is not None:
            same = "" if clash == tool.name else f" ('{clash}' once case, '-'/'_' and camelCase are set aside)"
            raise _fail(path, "field 'function/name'",
                        f"'{tool.name}' is a reserved tool name{same}: the project's own protocol uses "
                        f"{list(RESERVED_TOOL_NAMES)} (message_user: the agent's message to the simulated user, added to "
                        "every domain's tools for training; user_action: the simulated user's answer), and a domain "
                        "tool of either name would be taken for the protocol's own",
                        f"rename the tool (its file and function/name) to a name outside {list(RESERVED_TOOL_NAMES)}")
        other = next((seen[k] for k in keys if k in seen), None)
        if other is not None:
            raise _fail(path, "field 'function/name'",
                        f"'{tool.name}' and '{other[1]}' (in {other[0]}) are one tool name once case, '-'/'_' and "
                        "camelCase are set aside: a model choosing a tool reads them as one, and a case-insensitive "
                        "disk keeps one file for names that differ only in case",
                        "rename one of the two tools (its file and function/name), or merge them into one")
        seen.update(dict.fromkeys(keys, (path, tool.name)))


def _suggest_id(written: str) -> str:
    fixed = re.sub(r"[^a-z0-9_]+", "_", written.lower()).strip("_") or "rule_id"
    return fixed if fixed[0].isalpha() else "rule_" + fixed  # an id starts with a letter


def _not_a_rule_line(like: re.Match[str]) -> tuple[str, str]:
    """Why a line that looks like a rule is not one, and the line to write instead."""
    written, rest = like["id"].strip(), like["rest"].strip()
    colon_inside = written.endswith(":")
    written = written.rstrip(":").strip()
    text = rest[1:].strip() if rest.startswith(":") else rest.lstrip("-–— ").strip()
    fixed = _suggest_id(written)
    example = f"- **{fixed}**: {text[:40] + '...' if len(text) > 40 else text or '<what the rule says>'}"
    if not re.fullmatch(RULE_ID_PATTERN, written):
        why = " (rule ids have no capital letters)" if written != written.lower() else ""
        return (f"rule id '{written}' is not lower_snake_case{why}",
                f"write it as '**{fixed}**' (a lowercase letter, then lowercase letters, digits or _): '{example}'")
    if colon_inside:
        problem = f"rule '{written}': the ':' is inside the bold"
    elif like["bold"] == "__":
        problem = f"rule '{written}': the id is set in __ __ rather than ** **"
    elif like["marker"] not in ("-", "*"):
        problem = f"rule '{written}' is not a '- ' list item"
    elif not rest.startswith(":"):
        problem = f"rule '{written}' has no ':' after its id"
    else:
        problem = f"rule '{written}' has no text"
    return problem, f"write the line as '{example}' (a line that is not a rule must not start with a bold word)"


def _parse_policy(path: Path) -> tuple[str, list[tuple[str, str]]]:
    text = read_definition(path, DomainPackError)
    rules, current = [], None
    for number, line in enumerate(text.splitlines(), start=1):
        match = _RULE_LINE.match(line)
        like = None if match else _RULE_LIKE.match(line)
        if like and (like["marker"] or like["rest"].lstrip().startswith(":") or like["id"].rstrip().endswith(":")):
            # Read as plain text, this rule would never reach the rule axis: refuse it instead of dropping it.
            raise _fail(path, f"line {number}", *_not_a_rule_line(like))
        if match:
            current = [match["id"], match["text"].strip()]
            rules.append(current)
        elif current and line.startswith("  ") and line.strip():
            current[1] += " " + line.strip()  # a rule continues on indented lines
        else:
            current = None
    if not rules:
        raise _fail(path, "rules", "no rule found", "write each rule as a line '- **rule_id**: text'")
    ids = [r[0] for r in rules]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise _fail(path, "rules", f"duplicate rule ids {dupes}", "give every rule its own id")
    return text, [(i, t) for i, t in rules]


def _unknown(what: str, name: str, known: set[str], where: str) -> tuple[str, str]:
    """The problem and fix for a `name` not among `known`, saying so when one differs from it only in case."""
    same = sorted(k for k in known if k.lower() == name.lower())
    if same:
        return (f"no {what} in {where}, which has '{same[0]}': the two differ only in case, and names are "
                "case-sensitive", f"write '{same[0]}'")
    return f"no {what} in {where}", f"use one of {sorted(known)}"


def _check_references(path: Path, spec: dict[str, Any], tool_names: set[str], rule_ids: set[str]) -> None:
    for tool in spec.get("actions", {}):
        if tool not in tool_names:
            raise _fail(path, f"field 'actions/{tool}'", *_unknown("such tool", tool, tool_names, "tools/"))
    for rule_id, rule in spec.get("rules", {}).items():
        if rule_id not in rule_ids:
            raise _fail(path, f"field 'rules/{rule_id}'", *_unknown("rule with this id", rule_id, rule_ids, "policy.md"))
        named = [*rule.get("tools", []), *(rule[k] for k in ("tool", "verify_tool", "transfer_tool") if k in rule)]
        unknown = [t for t in named if t not in tool_names]
        if unknown:
            problem, fix = _unknown(f"tool '{unknown[0]}'", unknown[0], tool_names, "tools/")
            if "differ only in case" not in problem:
                problem, fix = f"unknown tools {unknown}", f"use tools from {sorted(tool_names)}"
            raise _fail(path, f"field 'rules/{rule_id}'", problem, fix)
        needed = KINDS[rule["kind"]].needs
        absent = [k for k in needed if k not in rule]
        if absent:
            raise _fail(path, f"field 'rules/{rule_id}'", f"kind {rule['kind']} needs {absent}", f"add {absent}")


def _check_structure(path: Path, name: str, spec: dict[str, Any], tools: tuple[Tool, ...],
                     entities: tuple[Entity, ...], synthetic: tuple[str, ...] = ()) -> None:
    """Refuse what the loader used to accept silently: every such pack ran, and its numbers meant nothing.
    `synthetic`: inferred entities whose ids the world makes up (no tool takes them: `add_note` adds a note)."""
    if name != path.parent.name:
        raise _fail(path, "field 'name'", f"'{name}' differs from the pack's folder '{path.parent.name}'",
                    f"set name: {path.parent.name} (or rename the folder to {name})")
    by_name = {t.name: t for t in tools}
    taken = {a for t in tools for a in t.parameters.get("properties", {})}
    for ent in entities:
        if ent.id_argument not in taken and ent.name not in synthetic and not (ent.lookup_by and ent.lookup_by in taken):
            raise _fail(path, f"field 'entities/{ent.name}/id_argument'",
                        f"no tool takes '{ent.id_argument}' (or looks {ent.name} up by its lookup field)",
                        f"use an argument one of the tools declares, e.g. one of {sorted(taken)[:8]}")
    for tool_name, action in spec.get("actions", {}).items():
        tool = by_name[tool_name]
        entity = entity_of(entities, tool)
        fields = {f.name for f in entity.fields} if entity else set()
        # A requirement on a field the world never draws can never be met (`sets` may add a field: a write can).
        unknown = sorted(set(action.get("requires", {})) - fields)
        if unknown:
            raise _fail(path, f"field 'actions/{tool_name}/requires'",
                        f"{unknown} {'are' if len(unknown) > 1 else 'is'} not a field of "
                        f"{entity.name if entity else 'any entity this tool acts on'}, so the action could never run",
                        f"require fields of the entity ({sorted(fields)})" if entity else
                        "declare the entity whose id or lookup field the tool takes")
        arguments = tool.parameters.get("properties", {})
        for field, value in action.get("sets", {}).items():
            if isinstance(value, str) and value.startswith("$") and value[1:] not in arguments:
                raise _fail(path, f"field 'actions/{tool_name}/sets/{field}'", f"'{value}' names no argument of "
                            f"{tool_name}", f"use $ and one of {sorted(arguments)}")
        for field, expression in action.get("computes", {}).items():
            where = f"field 'actions/{tool_name}/computes/{field}'"
            try:
                unknown = sorted(expressions.reads(expression) - set(COMPUTE_ROOTS))
            except ValueError as exc:
                raise _fail(path, where, f"not a CEL expression ({str(exc).splitlines()[0]})", "write e.g. "
                            "sum(args.flights.map(f, records.flight[f.flight_number].price)) * "
                            "double(size(args.passengers))") from None
            if unknown:
                raise _fail(path, where, f"reads {unknown}, which the world does not provide",
                            f"read only {list(COMPUTE_ROOTS)}")
    actions = _actions(spec)
    for rule_id, rule in spec.get("rules", {}).items():
        problem = KINDS[rule["kind"]].validate(_rule(rule_id, "", rule), by_name, actions)
        if problem is not None:
            where = f"field 'rules/{rule_id}/{problem.field}'" if problem.field else f"field 'rules/{rule_id}'"
            raise _fail(path, where, problem.problem, problem.fix)


def _actions(spec: dict[str, Any]) -> dict[str, Action]:
    """domain.yaml's `actions:` (what each writing tool sets, and the states it requires)."""
    return {t: Action(t, dict(a.get("sets", {})), {k: tuple(v) for k, v in a.get("requires", {}).items()},
                      dict(a.get("computes", {})))
            for t, a in spec.get("actions", {}).items()}


def _declare(path: Path, spec: dict[str, Any], tools: tuple[Tool, ...], entities: tuple[Entity, ...]) -> tuple[Tool, ...]:
    """Apply domain.yaml's `tools:` declarations (kind, entity, phrase) over the kinds guessed from names."""
    declared = spec.get("tools", {})
    names = {t.name: t for t in tools}
    ents = {e.name: e for e in entities}
    for name, decl in declared.items():
        if name not in names:
            raise _fail(path, f"field 'tools/{name}'", *_unknown("such tool", name, set(names), "tools/"))
        if "entity" in decl and decl["entity"] not in ents:
            raise _fail(path, f"field 'tools/{name}/entity'", f"no entity '{decl['entity']}'",
                        f"use one of {sorted(ents)} (declared under entities:)")
    out = []
    for tool in tools:
        decl = declared.get(tool.name, {})
        made = replace(tool, kind=decl.get("kind", tool.kind), entity=decl.get("entity"), phrase=decl.get("phrase"),
                       declared="kind" in decl)
        entity = ents.get(made.entity) if made.entity else None
        props = made.parameters.get("properties", {})
        if entity is not None and made.writes and made.kind != "create" and entity.id_argument not in props and \
                not (entity.lookup_by and entity.lookup_by in props):
            # Nothing in the call would name the record to change: every such write would be refused.
            raise _fail(path, f"field 'tools/{tool.name}/entity'", f"{tool.name} changes a {entity.name} but takes "
                        f"neither '{entity.id_argument}' nor its lookup field", f"add {entity.id_argument} to the "
                        "tool's parameters, or declare the entity it does take")
        out.append(made)
    return tuple(out)


def _argument_schema(tools: tuple[Tool, ...], name: str) -> dict[str, Any] | None:
    """The schema of the first tool argument (tools in name order) called `name`."""
    return next((t.parameters["properties"][name] for t in sorted(tools, key=lambda t: t.name)
                 if isinstance(t.parameters.get("properties", {}).get(name), dict)), None)


def _field(path: Path, entity: str, name: str, spec: dict[str, Any], tools: tuple[Tool, ...]) -> FieldSpec:
    """One entity field; `list`/`object` take their JSON Schema from `schema`, else from the tool argument of the same
    name (so drawn values are what the tools accept), `link` names the entity whose record id it holds."""
    where = f"field 'entities/{entity}/fields/{name}'"
    kind = spec["kind"]
    if kind == "link":
        if "entity" not in spec:
            raise _fail(path, where, "kind link without entity", "name the entity it links to, e.g. entity: customer")
        return FieldSpec(name, "link", (spec["entity"],))
    if kind in ("list", "object"):
        schema = spec.get("schema") or _argument_schema(tools, name)
        wanted = "array" if kind == "list" else "object"
        if schema is None:
            raise _fail(path, where, f"kind {kind} without a schema, and no tool argument '{name}' to take one from",
                        f"give its JSON Schema under 'schema' (type: {wanted})")
        if schema.get("type") != wanted:
            raise _fail(path, where, f"kind {kind} but its schema's type is {schema.get('type')!r}",
                        f"use a schema of type {wanted} (or kind {'object' if kind == 'list' else 'list'})")
        _check_json_schema(path, f"entities/{entity}/fields/{name}/schema", schema, "fix the schema")
        return FieldSpec(name, "schema", (json.dumps(schema, sort_keys=True),))
    if kind == "date":
        for key in ("min", "max"):
            if key in spec and day_bound(spec[key]) is None:
                raise _fail(path, f"{where[:-1]}/{key}'", f"{spec[key]!r} is not a date bound", "write an ISO date "
                            "(2026-11-01) or one relative to the world's clock: now, now-80y, now+90d (d, w, m, y)")
        earliest, latest = (day_bound(spec[k]) if k in spec else None for k in ("min", "max"))
        if earliest and latest and earliest > latest:
            raise _fail(path, f"{where[:-1]}/min'", f"{spec['min']} is after {spec['max']}", "put the earlier bound "
                        "in min")
        return FieldSpec(name, kind, tuple(spec.get("values", ())), earliest=spec.get("min"), latest=spec.get("max"))
    for key in ("min", "max"):
        if isinstance(spec.get(key), str):
            raise _fail(path, f"{where[:-1]}/{key}'", f"{spec[key]!r} is text on a {kind} field", "give a number (text "
                        "bounds are for dates)")
    return FieldSpec(name, kind, tuple(spec.get("values", ())), spec.get("min"), spec.get("max"))


_RELATIVE = re.compile(r"^now(?:([+-])(\d+)([dwmy]))?$")
_DAYS = {"d": 1, "w": 7, "m": 30, "y": 365}


def day_bound(value: Any, now: str = defaults.WORLD_NOW) -> str | None:
    """A date bound as an ISO date: itself, or resolved against the world's clock ('now-80y'); None if neither."""
    text = str(value).strip()
    clock = datetime.date.fromisoformat(now[:10])
    found = _RELATIVE.match(text)
    if found:
        sign, amount, unit = found.groups()
        days = int(amount) * _DAYS[unit] if amount else 0
        return (clock + datetime.timedelta(days=-days if sign == "-" else days)).isoformat()
    try:
        return datetime.date.fromisoformat(text).isoformat()
    except ValueError:
        return None


def _id_pattern(path: Path, entity: str, spec: dict[str, Any], tools: tuple[Tool, ...]) -> str | None:
    """The entity's id shape: declared `id_pattern`, else the id argument's `pattern` when default ids break it."""
    pattern = spec.get("id_pattern")
    argument = _argument_schema(tools, spec["id_argument"]) or {}
    if pattern is None and isinstance(argument.get("pattern"), str) and not all(
            json_schema.search(argument["pattern"], str(sample)) for sample in defaults.DEFAULT_ID_SAMPLES):
        pattern = argument["pattern"]  # the default digits would fail the tools' own schema
    if pattern is None:
        return None
    where = f"field 'entities/{entity}/id_pattern'"
    try:
        re.compile(pattern)  # only to tell a text that is no regex at all from one RE2 cannot run; never matched
    except (re.error, OverflowError) as exc:  # OverflowError: a repeat count `re` cannot hold, a{99999999999}
        raise _fail(path, where, f"not a regular expression ({exc})", "write a regex such as ^C[0-9]{4}$") from None
    problem = json_schema.pattern_problem({"pattern": pattern})  # ids are checked against it (world/infer.py)
    if problem is not None:
        raise _fail(path, where, problem.problem, problem.fix)
    return pattern


def _check_facts(path: Path, facts: dict[str, list[Any]], tools: tuple[Tool, ...]) -> None:
    """Every pooled fact value fits each tool argument of its name that draws from the pool (an argument with an
    `enum` draws from the enum instead): a user's value the schema refuses would make every call with it a
    rejection, and the pack would measure nothing."""
    for name, pool in facts.items():
        for tool in sorted(tools, key=lambda t: t.name):
            schema = tool.parameters.get("properties", {}).get(name)
            if not isinstance(schema, dict) or "enum" in schema:
                continue
            checker = json_schema.validator(schema)
            try:
                bad = next((v for v in pool if not checker.is_valid(v)), None)
            except OverflowError as exc:  # jsonschema's regex format check lets `re`'s OverflowError through
                raise _fail(path, f"field 'facts/{name}'", f"a value cannot be checked against argument '{name}' "
                            f"of {tool.name} ({exc})", "write pool values the tool's schema accepts") from None
            if bad is not None:
                error = jsonschema.exceptions.best_match(checker.iter_errors(bad))
                raise _fail(path, f"field 'facts/{name}'", f"value {bad!r} does not fit argument '{name}' of "
                            f"{tool.name} ({error.message})", "write pool values the tool's schema accepts, or drop "
                            "the pool and let the world draw values from the schema")


def _check_links(path: Path, entities: tuple[Entity, ...]) -> None:
    """Links name declared entities, and no two entities share an id shape (an id must say whose it is)."""
    names = {e.name for e in entities}
    for ent in entities:
        for field, target in ent.links().items():
            if target not in names:
                raise _fail(path, f"field 'entities/{ent.name}/fields/{field}/entity'", f"no entity '{target}'",
                            f"link to one of {sorted(names)}")
    shapes: dict[str, str] = {}
    for ent in entities:
        if ent.id_pattern is not None and ent.id_pattern in shapes:
            raise _fail(path, f"field 'entities/{ent.name}/id_pattern'", f"the same id pattern as entity "
                        f"'{shapes[ent.id_pattern]}'", "give each entity its own id shape (e.g. a letter prefix)")
        if ent.id_pattern is not None:
            shapes[ent.id_pattern] = ent.name


def _rule(rule_id: str, text: str, spec: dict[str, Any]) -> Rule:
    tools = tuple(spec.get("tools", ())) or ((spec["tool"],) if "tool" in spec else ())
    return Rule(rule_id, text, kind=spec.get("kind"), tools=tools, verify_tool=spec.get("verify_tool"),
                argument=spec.get("argument"), limit=spec.get("max"), values=tuple(spec.get("values", ())),
                transfer_tool=spec.get("transfer_tool"), when=spec.get("when"))


def _keys(schema: Any) -> set[str]:
    """Every property name at any depth of a JSON Schema (where a reference path may start or pass)."""
    found: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found.update(k for k in (node.get("properties") or {}) if isinstance(k, str))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _references(path: Path, spec: dict[str, Any], tools: tuple[Tool, ...],
                entities: tuple[Entity, ...]) -> tuple[Reference, ...]:
    """domain.yaml's `references:`, each checked to name an owner, a target and keys that exist."""
    out = []
    ents = {e.name: e for e in entities}
    by_tool = {t.name: t for t in tools}
    for i, line in enumerate(spec.get("references", [])):
        where = f"field 'references/{i}'"
        try:
            ref = parse_reference(str(line))
        except ValueError as exc:
            raise _fail(path, where, f"{line!r}: {exc}", "write e.g. reservation.flights[].flight_number -> flight") \
                from None
        if ref.owner != "*" and ref.owner not in ents and ref.owner not in by_tool:
            raise _fail(path, where, f"'{ref.owner}' is no entity and no tool", f"start with one of "
                        f"{sorted(ents)}, a tool name or *")
        if ref.target not in ents:
            raise _fail(path, where, f"'{ref.target}' is no entity", f"name one of {sorted(ents)}")
        owner_keys = ({f.name for f in ents[ref.owner].fields} | _keys([t.parameters for t in tools
                                                                        if entity_of(entities, t) == ents[ref.owner]])
                      if ref.owner in ents else _keys(by_tool[ref.owner].parameters) if ref.owner in by_tool
                      else {f.name for e in entities for f in e.fields} | _keys([t.parameters for t in tools]))
        owner_keys |= {k for e in entities for f in e.fields if f.kind == "schema" for k in _keys(json.loads(f.values[0]))}
        first = ref.path[0].removesuffix("[]")
        if first not in owner_keys:
            raise _fail(path, where, f"no field or argument '{first}' for '{ref.owner}'",
                        "start the path with a field of the entity or an argument of the tool")
        if ref.within and ref.within[0].removesuffix("[]") not in {f.name for f in ents[ref.target].fields}:
            raise _fail(path, where, f"'{ref.within[0]}' is not a field of {ref.target}",
                        f"name one of {sorted(f.name for f in ents[ref.target].fields)}")
        out.append(ref)
    return tuple(out)


def is_domain_name(name: Any) -> bool:
    """Whether `name` can name a pack: domain.schema.json's name pattern (a lowercase letter, then lowercase letters,
    digits or _), so never a path."""
    pattern = _schema("domain.schema.json")["properties"]["name"]["pattern"]
    return isinstance(name, str) and re.fullmatch(pattern, name) is not None


def pack_names() -> list[str]:
    """Every pack folder under DOMAINS_DIR (a folder with a domain.yaml), whether it loads or not."""
    if not DOMAINS_DIR.is_dir():
        return []
    return sorted(p.name for p in DOMAINS_DIR.iterdir() if (p / "domain.yaml").is_file())


def load_domain(name_or_path: str | Path) -> Domain:
    """Load a domain pack by name (under data/domains/) or by directory path, validating every file."""
    path = Path(name_or_path)
    if not path.is_dir():
        path = DOMAINS_DIR / str(name_or_path)
    if not path.is_dir():
        raise DomainPackError(f"domain '{name_or_path}': no directory {path}. Fix: use one of {pack_names()} "
                              "or a path to a domain pack directory")
    spec_path = path / "domain.yaml"
    if not spec_path.is_file():
        raise _fail(spec_path, "file", "missing", "create domain.yaml (see data/domains/README.md)")
    spec = load_yaml(spec_path, DomainPackError)
    _validate(spec, "domain.schema.json", spec_path)
    tool_files = sorted((path / "tools").glob("*.json"))
    if not tool_files:
        raise _fail(path / "tools", "directory", "no tool schema (*.json) found", "add one OpenAI function schema per tool")
    tools = tuple(_load_tool(p) for p in tool_files)
    _check_tool_names(tool_files, tools)
    policy_path = path / "policy.md"
    if not policy_path.is_file():
        raise _fail(policy_path, "file", "missing", "write the policy as '- **rule_id**: text' lines")
    policy_text, parsed_rules = _parse_policy(policy_path)
    if len(parsed_rules) > defaults.MAX_RULES:
        raise _fail(policy_path, "rules", f"{len(parsed_rules)} rules, more than {defaults.MAX_RULES}",
                    "merge rules or split the domain; the rule axis would be too large to cover")
    tool_names = {t.name for t in tools}
    _check_references(spec_path, spec, tool_names, {r[0] for r in parsed_rules})
    structure = spec.get("rules", {})
    rules = tuple(_rule(rid, text, structure.get(rid, {})) for rid, text in parsed_rules)
    inferred = None
    if "entities" not in spec:
        # A pack of tools and a policy only: the world infers its entities from the schemas, as for bare tools. The
        # import is here because world/ builds on this module (a pack without entities is the one case that needs it).
        from sim_pipeline.world.infer import infer_domain

        # Declared kinds bind as guessed ones would: a tool declared create acts on its name's noun, not on the
        # record whose id it takes.
        kinds = {tool: decl["kind"] for tool, decl in spec.get("tools", {}).items() if "kind" in decl}
        inferred = infer_domain([t.schema for t in tools], name=spec["name"], kinds=kinds)
    entities = inferred.entities if inferred is not None else tuple(
        Entity(name, e["id_argument"], tuple(_field(spec_path, name, f, s, tools) for f, s in e["fields"].items()),
               e.get("lookup_by"), _id_pattern(spec_path, name, e, tools))
        for name, e in spec["entities"].items()
    )
    _check_links(spec_path, entities)
    for ent in entities:
        for fs in ent.fields:
            if fs.kind == "enum" and not fs.values:
                raise _fail(spec_path, f"field 'entities/{ent.name}/fields/{fs.name}'", "kind enum without values",
                            "list the values under 'values'")
        if ent.lookup_by and ent.lookup_by not in {f.name for f in ent.fields}:
            raise _fail(spec_path, f"field 'entities/{ent.name}/lookup_by'", f"'{ent.lookup_by}' is not a field",
                        "name one of the entity's fields")
    tools = _declare(spec_path, spec, tools, entities)
    _check_facts(spec_path, spec.get("facts", {}), tools)
    _check_structure(spec_path, spec["name"], spec, tools, entities, inferred.synthetic if inferred else ())
    actions = _actions(spec)
    fields = dict(
        name=spec["name"], title=spec["title"], agent_role=spec["agent_role"], path=path, tools=tools,
        rules=rules, entities=entities, actions=actions,
        facts={k: tuple(v) for k, v in spec.get("facts", {}).items()},
        constraints=tuple(spec.get("constraints", ())),
        stances=tuple(spec.get("stances", defaults.STANCES)), policy_text=policy_text,
        tables=dict(spec.get("tables", {})),
        references=_references(spec_path, spec, tools, entities),
    )
    made = replace(inferred, **fields) if inferred is not None else Domain(**fields)
    from sim_pipeline.pack_records import load_records  # it reads the loaded pack: imported where it is used

    shipped = load_records(path, made)
    return replace(made, records=shipped) if shipped else made
