"""Fuzz the loaders (domain pack, policy registry, gold labels) with hypothesis for about a minute.

Each example starts from a valid file (the retail pack, the shipped registry with a `models:` section, two gold
labels), mutates it (a value replaced by a random or hostile one, a key dropped, added or recased, a line
duplicated or truncated, bytes that are not UTF-8, deep nesting, YAML tags and aliases, JSON Schema traps) and calls
the loader. A loader may load the result or refuse it with the project's own error (SimPipelineError); anything
else would reach the user as a traceback, and is counted as a foreign exception (the goal is 0).

The strategies are shared with sim_pipeline_tests/domains/test_fuzz_loaders.py, which runs ~100 examples per loader
in the normal test suite.
"""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from sim_pipeline.domain import DOMAINS_DIR, load_domain
from sim_pipeline.errors import SimPipelineError
from sim_pipeline.gold import load_gold
from sim_pipeline.registry import REGISTRY_PATH, load_models, load_registry

SECONDS_PER_LOADER = 20.0  # three loaders: about a minute in `make bench`
CHUNK = 40  # examples per hypothesis run; runs repeat (each with fresh randomness) until the loader's time is up
BASE_PACK = DOMAINS_DIR / "retail"

# Values a hand-written file could hold that a parser accepts and a careless loader trips on.
YAML_TRAPS = ("&a [*a]", "!!binary aGVsbG8=", "2020-13-45", "2024-05-01", '!!int "x"', "!!float abc", "{? [1]: 2}",
              "<<: *nope", "on", "~", ".inf", ".nan", "-.inf", "1" + "0" * 400, "!!set {a, b}", "!!omap [a: 1]",
              "!!python/object:os.system x", "[" * 300, "{a: " * 300, "'unterminated", "\t- tab", "*undefined",
              "!local x", "!!str", "? complex\n: key", "@reserved", "%", "---\n---", "|\n  block", "0o17", "0x1F",
              "1_000", "+1", "1e3", "null", "yes", "No", "=")
JSON_TRAPS: tuple[Any, ...] = (
    {"$ref": "#/nope"}, {"$ref": "#"}, {"$ref": "http://example.com/s.json"}, {"$ref": "#/$defs/a", "$defs": {
        "a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}, {"$id": "x", "$ref": "#"}, {"allOf": [{"$ref": "#"}]},
    {"type": "string", "pattern": "a{99999999999}"}, {"type": "string", "pattern": "(("}, {"type": "string", "format":
    "regex"}, {"type": "number", "multipleOf": 1e-308}, {"type": "array", "items": {"$ref": "#"}}, {"enum": []},
    {"type": "bogus"}, {"$dynamicRef": "#meta"}, {"$anchor": "a", "$ref": "#a"}, {"properties": 3}, {"required": 1},
    {"type": "object", "properties": {"x": {"$ref": "#/properties/x"}}}, {"properties": {"x": {"$ref": "#/$defs/d/default"}},
                                                                           "$defs": {"d": {"default": {"not": {}}}}},
    float("nan"), float("inf"), 10 ** 400, -0.0,
    "", "\x00", "\u202e", True, None, [], {}, "A" * 300)
RULE_TRAPS = ("- **Refund_Limit**: x", "- **refund_limit:** x", "1. **refund_limit**: x", "+ **refund_limit**: x",
              "- **refund_limit**:", "- **refund_limit** - x", "**Refund_Limit**: x", "- __refund_limit__: x",
              "- ****: x", "- **a**: b", "- **verify_identity**: again", "  continued", "- ** spaced **: x",
              "- **`code`**: x", "* **x_1**: y", "- **é**: x")

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
hostile = json_values | st.sampled_from(JSON_TRAPS).map(copy.deepcopy)  # traps are edited in place later


@dataclass
class Tally:
    """What one loader did with its examples."""

    examples: int = 0
    loaded: int = 0
    refused: int = 0
    foreign: list[tuple[str, str]] = field(default_factory=list)  # (exception class and where it was raised, message)

    def run(self, call: Callable[[], object]) -> None:
        """Call the loader once and count what came of it."""
        self.examples += 1
        try:
            call()
        except SimPipelineError:
            self.refused += 1
        except Exception as exc:  # noqa: BLE001 -- this is what the fuzzer is looking for
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            where = f"{exc.__class__.__name__} at {Path(frame.filename).name}:{frame.lineno} ({frame.name})"
            self.foreign.append((where, " ".join(str(exc).split())[:160]))
        else:
            self.loaded += 1


# -- mutations --------------------------------------------------------------------------------------
def _paths(doc: Any, at: tuple = ()) -> list[tuple]:
    """Every path into a document (keys and list indices), the root first."""
    out = [at]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += _paths(value, (*at, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            out += _paths(value, (*at, i))
    return out


def _parent(doc: Any, path: tuple) -> Any:
    for part in path[:-1]:
        doc = doc[part]
    return doc


@st.composite
def mutated_document(draw: st.DrawFn, base: Any) -> Any:
    """`base` with one to three structural edits: a value replaced (by a random one or another text of the file), a
    key dropped, added or recased, a value wrapped in a list or turned into text."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(doc)))
        op = draw(st.sampled_from(["replace", "replace", "swap", "swap", "delete", "insert", "recase", "wrap",
                                   "stringify"]))
        if not path:
            if op == "replace":
                doc = draw(hostile)
            continue
        parent, last = _parent(doc, path), path[-1]
        if op == "replace":
            parent[last] = draw(hostile)
        elif op == "swap":  # another text of the same file: the types hold, so the deeper cross-checks run
            texts = sorted({str(_parent(doc, p)[p[-1]]) for p in _paths(doc) if p and isinstance(_parent(doc, p)[p[-1]], str)})
            parent[last] = draw(st.sampled_from(texts or [""]))
        elif op == "delete":
            del parent[last]
        elif op == "insert" and isinstance(parent[last], dict):
            parent[last][draw(st.text(max_size=8) | st.sampled_from(["kind", "type", "$ref", "name", "Name"]))] = \
                draw(hostile)
        elif op == "recase" and isinstance(parent, dict) and isinstance(last, str):
            parent[last.upper() if draw(st.booleans()) else last.title()] = parent.pop(last)
        elif op == "wrap":
            parent[last] = [parent[last]]
        elif op == "stringify":
            parent[last] = str(parent[last])
    return doc


@st.composite
def mutated_bytes(draw: st.DrawFn, text: str, traps: tuple[str, ...]) -> bytes:
    """`text` edited as a file: truncated, a line duplicated or dropped, a trap spliced in, bytes inserted, or
    replaced by garbage or deep nesting."""
    lines = text.splitlines(keepends=True) or [""]
    op = draw(st.sampled_from(["truncate", "duplicate", "drop", "trap", "trap", "bytes", "garbage", "deep"]))
    if op == "truncate":
        return text.encode()[:draw(st.integers(0, len(text.encode())))]
    if op in ("duplicate", "drop", "trap"):
        i = draw(st.integers(0, len(lines) - 1))
        if op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "drop":
            del lines[i]
        else:
            head = lines[i].split(":", 1)[0] + ": " if ":" in lines[i] and draw(st.booleans()) else ""
            lines[i] = head + draw(st.sampled_from(traps)) + "\n"
        return "".join(lines).encode()
    if op == "bytes":
        data = text.encode()
        at = draw(st.integers(0, len(data)))
        return data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
    if op == "garbage":
        return draw(st.binary(max_size=200))
    depth = draw(st.integers(1, 3000))
    return draw(st.sampled_from(["[" * depth + "]" * depth, '{"a":' * depth + "1" + "}" * depth,
                                 "".join(f"{'  ' * i}a:\n" for i in range(min(depth, 400))),
                                 "- " * depth + "x"])).encode()


def _yaml(doc: Any) -> bytes:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).encode()


def _json(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def _edited(draw: st.DrawFn, path: Path, dump: Callable[[Any], bytes], traps: tuple[str, ...]) -> bytes:
    """A file's new bytes: its parsed document mutated and written back, or its text mutated as bytes."""
    text = path.read_text()
    if draw(st.booleans()):
        parse = json.loads if path.suffix == ".json" else yaml.safe_load
        return dump(draw(mutated_document(parse(text))))
    return draw(mutated_bytes(text, traps))


# -- the three loaders ------------------------------------------------------------------------------
@st.composite
def pack_edits(draw: st.DrawFn) -> dict[str, bytes]:
    """New contents for one to three files of the retail pack (relative path -> bytes)."""
    tools = sorted(p.name for p in (BASE_PACK / "tools").glob("*.json"))
    edits: dict[str, bytes] = {}
    for _ in range(draw(st.integers(1, 3))):
        target = draw(st.sampled_from(["domain.yaml", "domain.yaml", "tool", "tool", "policy.md", "extra"]))
        if target == "domain.yaml":
            edits[target] = _edited(draw, BASE_PACK / target, _yaml, YAML_TRAPS)
        elif target == "tool":
            name = f"tools/{draw(st.sampled_from(tools))}"
            edits[name] = _edited(draw, BASE_PACK / name, _json, tuple(json.dumps(t) for t in JSON_TRAPS))
        elif target == "policy.md":
            edits[target] = draw(mutated_bytes((BASE_PACK / target).read_text(), RULE_TRAPS))
        else:  # a new tool file: a copy of one under a new name, mutated, maybe named unlike its tool
            doc = json.loads((BASE_PACK / "tools" / draw(st.sampled_from(tools))).read_text())
            doc["function"]["name"] = "new_tool"
            name = draw(st.sampled_from(["tools/new_tool.json", "tools/new_tool.json", "tools/New_Tool.json",
                                         "tools/.json"]))
            edits[name] = _json(draw(mutated_document(doc)) if draw(st.booleans()) else doc)
    return edits


def load_edited_pack(edits: dict[str, bytes]) -> None:
    """Write the retail pack with `edits` applied to a temporary folder and load it."""
    with tempfile.TemporaryDirectory() as tmp:
        pack = Path(shutil.copytree(BASE_PACK, Path(tmp) / "retail"))
        for name, data in edits.items():
            (pack / name).write_bytes(data)
        load_domain(pack)


REGISTRY_MODELS = {"models": {
    "local-agent": {"model": "openai/qwen", "api_base": "http://127.0.0.1:8000/v1", "api_key_env": "LOCAL_KEY",
                    "timeout_s": 30, "max_concurrency": 2, "params": {"top_logprobs": 5}, "logprobs": "auto"},
    "strict-judge": "sim/judge"}}


def registry_base() -> str:
    """The shipped registry with a `models:` section and a version using it, as YAML text."""
    doc = yaml.safe_load(REGISTRY_PATH.read_text())
    doc = {**REGISTRY_MODELS, **doc}
    doc["policies"]["local-v1"] = {"domain": "retail", "model": "local-agent", "judge_model": "strict-judge",
                                   "baseline": "agent-v1", "system_prompt": "Be brief.", "judge_trust_opt_out": False}
    return yaml.safe_dump(doc, sort_keys=False)


@st.composite
def registry_files(draw: st.DrawFn) -> bytes:
    """A mutated registry file."""
    text = registry_base()
    if draw(st.booleans()):
        return _yaml(draw(mutated_document(yaml.safe_load(text))))
    return draw(mutated_bytes(text, YAML_TRAPS))


def load_registry_file(data: bytes) -> None:
    """Write a registry file and load its versions and its models."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "policies.yaml"
        path.write_bytes(data)
        load_registry(path)
        load_models(path)


GOLD_MESSAGES = [{"role": "user", "content": "Cancel order 48213."},
                 {"role": "assistant", "content": None, "tool_calls": [
                     {"id": "c1", "type": "function", "function": {"name": "cancel_order",
                                                                   "arguments": '{"order_id": "48213"}'}}]},
                 {"role": "tool", "content": '{"status": "updated"}', "tool_call_id": "c1"}]
GOLD_LABELS = [{"situation_id": "s1", "messages": GOLD_MESSAGES, "label": 1, "labeller": "ana.silva",
                "source": "human", "note": "ok"},
               {"situation_id": "s2", "transcript_sha256": "ab" * 32, "label": 0, "labeller": "ben",
                "source": "human", "rollout_id": "r1"}]


@st.composite
def gold_files(draw: st.DrawFn) -> bytes:
    """A mutated gold/*.jsonl file."""
    if draw(st.booleans()):
        labels = [draw(mutated_document(label)) if draw(st.booleans()) else label for label in GOLD_LABELS]
        return b"\n".join(_json(label) for label in labels) + b"\n"
    text = "\n".join(json.dumps(label) for label in GOLD_LABELS) + "\n"
    return draw(mutated_bytes(text, tuple(json.dumps(t) for t in JSON_TRAPS)))


def load_gold_file(data: bytes) -> None:
    """Write a gold file into a temporary pack and load its labels."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "gold").mkdir()
        (Path(tmp) / "gold" / "labels.jsonl").write_bytes(data)
        load_gold(tmp)


LOADERS: dict[str, tuple[st.SearchStrategy, Callable[[Any], None]]] = {
    "pack": (pack_edits(), load_edited_pack),
    "registry": (registry_files(), load_registry_file),
    "gold": (gold_files(), load_gold_file),
}


def fuzz(name: str, seconds: float) -> Tally:
    """Feed one loader hypothesis examples for `seconds` (in runs of CHUNK), counting what each did."""
    strategy, load = LOADERS[name]
    tally = Tally()

    @settings(max_examples=CHUNK, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def one(example: Any) -> None:
        tally.run(lambda: load(example))

    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        one()
    return tally


def figures() -> list[dict]:
    """Examples and foreign exceptions per loader (the foreign ones are printed, one line each)."""
    rows = []
    for name in LOADERS:
        started = time.perf_counter()
        tally = fuzz(name, SECONDS_PER_LOADER)
        for where, count in Counter(w for w, _ in tally.foreign).most_common():
            print(f"  {name}: {count} x {where}: {next(m for w, m in tally.foreign if w == where)}")
        rows += [{"name": f"fuzz_{name}_examples", "value": tally.examples, "unit": "examples"},
                 {"name": f"fuzz_{name}_refused", "value": tally.refused, "unit": "examples"},
                 {"name": f"fuzz_{name}_foreign_exceptions", "value": len(tally.foreign), "unit": "examples"},
                 {"name": f"fuzz_{name}_seconds", "value": round(time.perf_counter() - started, 1), "unit": "s"}]
    return rows
