"""Definition files (domain packs, the policy registry, gold labels), read strictly: plain data only.

Whatever a parser would accept silently but wrongly (a repeated key keeping only its last value, an unquoted date
turned into a date object, an alias holding itself, nesting that overflows the stack, bytes that are not UTF-8)
is refused here, naming the file, the line and the fix, in the caller's error class.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from sim_pipeline import defaults
from sim_pipeline.errors import SimPipelineError

_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Refused(Exception):
    """A definition file that parses but would be read wrong; the readers turn it into the caller's error class."""

    def __init__(self, where: str, problem: str, fix: str) -> None:
        super().__init__(f"{where}: {problem}. Fix: {fix}")
        self.where, self.problem, self.fix = where, problem, fix


def _not_plain(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    raise _Refused(f"line {node.start_mark.line + 1}", f"the tag {node.tag} makes a value that is not plain data",
                   "remove the tag (write a plain list, mapping or text)")


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader for definition files: nesting bounded while composing (PyYAML recurses per level), dates
    kept as the text they were written as, binary/set/ordered-map tags refused."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        self.depth += 1
        try:
            if self.depth > defaults.DEFINITION_MAX_DEPTH:
                line = self.peek_event().start_mark.line + 1
                raise _Refused(f"line {line}", f"nested more than {defaults.DEFINITION_MAX_DEPTH} levels deep",
                               "flatten the structure")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


_StrictLoader.add_constructor("tag:yaml.org,2002:timestamp", yaml.SafeLoader.construct_yaml_str)
for _tag in ("binary", "set", "omap", "pairs"):
    _StrictLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _not_plain)


def _check_nodes(node: yaml.Node, where: tuple[str, ...], depth: int, open_nodes: dict[int, str], budget: list[int],
                 lines: dict[tuple[str, ...], int]) -> None:
    """Keys are unique text, no alias holds itself, and aliases do not expand past the size and depth bounds."""
    line = node.start_mark.line + 1
    shown = "/".join(where) or "(top level)"
    if id(node) in open_nodes:
        raise _Refused(f"line {line}", f"'{shown}' is an alias of '{open_nodes[id(node)]}', which contains it, so the "
                       "value would hold itself", "write the value out instead")
    budget[0] -= 1
    if budget[0] < 0 or depth > defaults.DEFINITION_MAX_DEPTH:
        raise _Refused(f"line {line}", f"'{shown}': aliases expand it past {defaults.DEFINITION_MAX_VALUES} values or "
                       f"{defaults.DEFINITION_MAX_DEPTH} levels", "write the values out instead of nesting aliases")
    if isinstance(node, yaml.ScalarNode):
        return
    open_nodes[id(node)] = shown
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key, value in node.value:
            if key.tag == _MERGE_TAG:  # `<<: *base`: merged keys may be overridden, that is what a merge is for
                _check_nodes(value, where, depth + 1, open_nodes, budget, lines)
                continue
            key_line = key.start_mark.line + 1
            if not isinstance(key, yaml.ScalarNode) or key.tag != _STR_TAG:
                text = key.value if isinstance(key, yaml.ScalarNode) else "(a list or mapping)"
                raise _Refused(f"line {key_line}", f"key {text!r} under '{shown}' is not text (YAML reads it as "
                               f"{key.tag.rsplit(':', 1)[-1]})", f"quote it: '{text}'")
            if key.value in seen:
                raise _Refused(f"line {key_line}", f"key '{'/'.join((*where, key.value))}' appears twice (first at "
                               f"line {seen[key.value]}); YAML would keep only the last and silently drop the first",
                               "keep one of them (a new entry needs a name of its own)")
            seen[key.value] = key_line
            lines[(*where, key.value)] = key_line
            _check_nodes(value, (*where, key.value), depth + 1, open_nodes, budget, lines)
    else:
        for i, child in enumerate(node.value):
            _check_nodes(child, (*where, str(i)), depth + 1, open_nodes, budget, lines)
    del open_nodes[id(node)]


def read_definition(path: Path, error: type[SimPipelineError]) -> str:
    """A definition file's text, or `error` naming the file when it cannot be read or is not UTF-8."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise error(f"{path}: file: cannot be read ({exc.strerror or exc}). Fix: make it a readable file") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise error(f"{path}: line {line}: byte 0x{raw[exc.start]:02x} is not UTF-8 text. Fix: save the file as "
                    "UTF-8") from None


def load_yaml(path: Path, error: type[SimPipelineError], lines: dict[tuple[str, ...], int] | None = None) -> Any:
    """A YAML definition file as plain data; `lines` (when given) gets the line of every mapping key, by key path.
    Anything the file holds that would be read wrong is `error` naming the file, the line and the fix."""
    text = read_definition(path, error)
    loader = None
    try:
        loader = _StrictLoader(text)
        node = loader.get_single_node()
        if node is None:
            return None
        _check_nodes(node, (), 0, {}, [defaults.DEFINITION_MAX_VALUES], {} if lines is None else lines)
        return loader.construct_document(node)
    except _Refused as exc:
        raise error(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise error(f"{path}: syntax: not valid YAML ({exc.__class__.__name__}: {exc}). Fix: fix the YAML "
                    "syntax") from None
    except (ValueError, OverflowError) as exc:  # an explicit tag on a value it cannot hold: !!int "x"
        raise error(f"{path}: syntax: a value cannot be read ({exc}). Fix: remove the !!tag or correct the "
                    "value") from None
    except RecursionError:
        raise error(f"{path}: syntax: nested too deeply to read. Fix: flatten the structure") from None
    finally:
        if loader is not None:
            loader.dispose()


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise ValueError(f"key(s) {repeated} appear twice in one object, and JSON keeps only the last")
    return dict(pairs)


def _depth(value: Any) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth <= defaults.DEFINITION_MAX_DEPTH:
            children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
            stack.extend((child, depth + 1) for child in children)
    return deepest


def parse_json(text: str) -> Any:
    """JSON as plain data; a repeated key or nesting past DEFINITION_MAX_DEPTH is a ValueError, like bad syntax."""
    try:
        value = json.loads(text, object_pairs_hook=_unique_object)
    except RecursionError:
        raise ValueError("nested too deeply to read") from None
    if _depth(value) > defaults.DEFINITION_MAX_DEPTH:
        raise ValueError(f"nested more than {defaults.DEFINITION_MAX_DEPTH} levels deep")
    return value


def load_json(path: Path, error: type[SimPipelineError]) -> Any:
    """A JSON definition file as plain data, or `error` naming the file, the line and the fix."""
    text = read_definition(path, error)
    try:
        return parse_json(text)
    except json.JSONDecodeError as exc:
        raise error(f"{path}: line {exc.lineno}: not valid JSON ({exc.msg}). Fix: fix the JSON syntax") from None
    except ValueError as exc:
        raise error(f"{path}: content: not valid JSON ({exc}). Fix: fix the JSON (one value per key, less "
                    "nesting)") from None
