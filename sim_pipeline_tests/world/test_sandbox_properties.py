"""Properties over random tool schemas and random arguments: `call` never raises, statuses come from the set,
and arguments the schema refuses are rejected with a message naming the field."""

import json
import string
from typing import Any

import jsonschema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim_pipeline.world.sandbox import STATUSES, Sandbox

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PATTERNS = ("^[0-9]{4,6}$", "^[A-Z]{3}-[0-9]{3}$", "^(ord|inv)_[a-f0-9]{4}$")
NAMES = ("order_id", "id", "userId", "ticket_id", "email", "name", "status", "amount", "items", "address", "query",
         "note", "count", "when", "tags", "options", "phone")
VERBS = ("get", "list", "search", "cancel", "send", "delete", "create", "add", "update", "set", "verify", "compute")
NOUNS = ("order", "orders", "user", "ticket", "message", "file", "weather", "item", "preference")


def _scalar() -> st.SearchStrategy[dict[str, Any]]:
    strings = st.fixed_dictionaries({"type": st.just("string")}, optional={
        "format": st.sampled_from(["email", "date", "date-time", "uuid", "ipv4"]),
        "minLength": st.integers(0, 3), "maxLength": st.integers(8, 20), "description": st.text(max_size=20)})
    return st.one_of(
        strings,
        st.builds(lambda p: {"type": "string", "pattern": p}, st.sampled_from(PATTERNS)),
        st.builds(lambda v: {"type": "string", "enum": v}, st.lists(st.sampled_from(["a", "b", "open", "shut"]),
                                                                    min_size=1, max_size=3, unique=True)),
        st.builds(lambda lo, span: {"type": "integer", "minimum": lo, "maximum": lo + span},
                  st.integers(-50, 50), st.integers(0, 100)),
        st.builds(lambda lo: {"type": "number", "exclusiveMinimum": lo}, st.integers(-5, 5)),
        st.just({"type": "boolean"}),
    )


def _objects(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    def build(props: dict[str, Any], data: st.DataObject) -> dict[str, Any]:
        required = data.draw(st.lists(st.sampled_from(sorted(props)), unique=True)) if props else []
        return {"type": "object", "properties": props, "required": required,
                "additionalProperties": data.draw(st.booleans())}

    return st.one_of(
        st.builds(build, st.dictionaries(st.sampled_from(NAMES), children, max_size=4), st.data()),
        st.builds(lambda items, n: {"type": "array", "items": items, "minItems": 0, "maxItems": n}, children,
                  st.integers(1, 3)),
    )


PROPERTY = st.recursive(_scalar(), _objects, max_leaves=6)


@st.composite
def tool_sets(draw: st.DrawFn) -> list[dict[str, Any]]:
    pairs = draw(st.lists(st.tuples(st.sampled_from(VERBS), st.sampled_from(NOUNS)), min_size=1, max_size=4,
                          unique_by=lambda p: p))
    tools = []
    for verb, noun in pairs:
        name = f"{verb}_{noun}"
        props = draw(st.dictionaries(st.sampled_from(NAMES), PROPERTY, max_size=5))
        required = draw(st.lists(st.sampled_from(sorted(props)), unique=True)) if props else []
        if draw(st.booleans()):  # most real tools take the id of the record they act on
            props[noun.rstrip("s") + "_id"] = draw(st.sampled_from([
                {"type": "string", "pattern": PATTERNS[0]}, {"type": "integer", "minimum": 1, "maximum": 60},
                {"type": "string"}]))
            required = [r for r in required if r != noun.rstrip("s") + "_id"] + [noun.rstrip("s") + "_id"]
        tools.append({"type": "function", "function": {"name": name, "description": f"{name} tool", "parameters": {
            "type": "object", "properties": props, "required": required,
            "additionalProperties": draw(st.booleans())}}})
    return tools


def valid(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values the schema accepts."""
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties", {})
        required = {k: valid(props[k]) for k in schema.get("required", [])}
        optional = {k: valid(v) for k, v in props.items() if k not in required}
        return st.fixed_dictionaries(required, optional=optional)
    if kind == "array":
        return st.lists(valid(schema["items"]), min_size=schema.get("minItems", 0), max_size=schema.get("maxItems", 3))
    if kind == "integer":
        return st.integers(schema["minimum"], schema["maximum"])
    if kind == "number":
        return st.floats(min_value=schema["exclusiveMinimum"] + 0.5, max_value=1e6, allow_nan=False)
    if kind == "boolean":
        return st.booleans()
    if "pattern" in schema:
        return st.from_regex(schema["pattern"], fullmatch=True)
    by_format = {"email": st.from_regex(r"[a-z]{3,8}\.[a-z]{3,8}@[a-z]{4,8}\.(org|net)", fullmatch=True),
                 "date": st.dates().map(lambda d: d.isoformat()), "date-time": st.just("2024-05-01T10:00:00Z"),
                 "uuid": st.uuids().map(str), "ipv4": st.ip_addresses(v=4).map(str)}
    if schema.get("format") in by_format:
        return by_format[schema["format"]]
    return st.text(string.ascii_letters + " ", min_size=max(schema.get("minLength", 0), 1),
                   max_size=schema.get("maxLength", 20))


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                    max_leaves=8)


@st.composite
def calls(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[tuple[str, Any]]]:
    tools = draw(tool_sets())
    out = []
    for _ in range(draw(st.integers(1, 6))):
        fn = draw(st.sampled_from(tools))["function"]
        args = draw(st.one_of(
            valid(fn["parameters"]),  # well-formed
            st.dictionaries(st.sampled_from(NAMES) | st.text(max_size=6), JSON, max_size=4),  # anything
            st.sampled_from(["{broken", "[1]", "null", ""]),  # not an object
        ))
        out.append((draw(st.sampled_from([fn["name"], fn["name"], "no_such_tool"])), args))
    return tools, out


@SETTINGS
@given(calls(), st.integers(0, 2**31 - 1), st.booleans())
def test_call_never_raises_and_rejects_invalid_arguments_naming_the_field(
        case: tuple[list[dict[str, Any]], list[tuple[str, Any]]], seed: int, open_world: bool) -> None:
    tools, sequence = case
    sandbox = Sandbox(tools, seed=seed) if open_world else Sandbox.from_tools(tools, seed=seed)
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    for name, args in sequence:
        result = sandbox.call(name, args)
        if args in ("", None):
            args = {}  # no arguments at all (some models send "") is an empty object, as for a tool without any
        assert result["status"] in STATUSES and result.get("error") != "world_error", result
        assert json.loads(json.dumps(result, allow_nan=False)) == result
        if name not in schemas or not isinstance(args, dict) or not _is_json(args):
            assert result["status"] == "rejected"  # NaN and infinities cannot come as JSON from any model
            continue
        errors = list(jsonschema.Draft202012Validator(schemas[name], format_checker=jsonschema.FormatChecker())
                      .iter_errors(args))
        if errors:
            assert result["status"] == "rejected" and result["error"] in ("missing_required", "invalid_argument")
            for field in result["fields"]:
                assert field in result["message"]
            if result["error"] == "invalid_argument":
                names = (*args, *schemas[name].get("properties", {}), "arguments")
                # The field is an argument's name, or a path inside one (names may themselves contain '/').
                assert result["field"] in names or any(result["field"].startswith(f"{n}/") for n in names)
        else:
            assert result.get("error") != "invalid_argument"


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        return False
    return True


@SETTINGS
@given(calls(), st.integers(0, 2**31 - 1))
def test_same_seed_and_calls_give_the_same_results(case: tuple[list[dict[str, Any]], list[tuple[str, Any]]],
                                                   seed: int) -> None:
    tools, sequence = case

    def play() -> str:
        sandbox = Sandbox(tools, seed=seed)
        return json.dumps([sandbox.call(n, a) for n, a in sequence] + [sandbox.snapshot()], sort_keys=True)

    assert play() == play()
