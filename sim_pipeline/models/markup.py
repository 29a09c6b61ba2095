"""Markup a chat format leaked into a reply: HTML entities (`I&#39;m`, `&amp;#34;`, as a llama.cpp function-calling
format was seen to return) and a template's special tokens (`<|im_end|>`, `<|eot_id|>`, `</s>`).

Entities are decoded (repeatedly, for double encoding) and special tokens removed, before anything reads the reply:
the conversation, the reply classifier, the judge and every cut see the text the model meant. Each repair is named,
so a run can say how many replies needed one; a reply without such markup is returned unchanged.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

from sim_pipeline import defaults

HTML_ENTITIES = "html_entities"
TEMPLATE_TOKENS = "template_tokens"

_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
# Special tokens of the common chat templates (ChatML, Llama 3, Gemma, Mistral, Llama 2): never meant as text.
_SPECIAL = re.compile(r"<\|(?:im_start|im_end|im_sep|eot_id|eom_id|end_of_text|endoftext|begin_of_text|"
                      r"start_header_id|end_header_id|python_tag|end|assistant|user|system)\|>"
                      r"|</?s>|<(?:start|end)_of_turn>|\[/?INST\]")


def _decoded(text: str) -> str:
    for _ in range(defaults.MARKUP_DECODE_PASSES):
        unescaped = html.unescape(text)
        if unescaped == text:
            break
        text = unescaped
    return text


def repair_text(text: str) -> tuple[str, tuple[str, ...]]:
    """The text with leaked entities decoded and special tokens removed, and the kinds of repair made."""
    kinds: list[str] = []
    if _ENTITY.search(text):
        decoded = _decoded(text)
        if decoded != text:
            text, kinds = decoded, [HTML_ENTITIES]
    if _SPECIAL.search(text):
        text = _SPECIAL.sub("", text).strip()
        kinds.append(TEMPLATE_TOKENS)
    return text, tuple(kinds)


def _repair_values(value: Any, kinds: set[str]) -> Any:
    if isinstance(value, str):
        fixed, found = repair_text(value)
        kinds.update(found)
        return fixed
    if isinstance(value, list):
        return [_repair_values(v, kinds) for v in value]
    if isinstance(value, dict):
        return {k: _repair_values(v, kinds) for k, v in value.items()}
    return value


def repair_arguments(arguments: Any) -> tuple[Any, tuple[str, ...]]:
    """A tool call's JSON arguments with markup repaired inside its string values (or, when the text is JSON only
    once decoded, `{&quot;id&quot;: 1}`, decoded whole); anything else is returned as it came."""
    if not isinstance(arguments, str) or not (_ENTITY.search(arguments) or _SPECIAL.search(arguments)):
        return arguments, ()
    try:
        parsed = json.loads(arguments)
    except ValueError:
        decoded, kinds = repair_text(arguments)
        try:
            json.loads(decoded)
        except ValueError:
            return arguments, ()  # not JSON either way: the world rejects it as the model sent it
        return decoded, kinds
    found: set[str] = set()
    fixed = _repair_values(parsed, found)
    return (json.dumps(fixed, ensure_ascii=False), tuple(sorted(found))) if found else (arguments, ())


def repair_message(message: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """An assistant message with its content and tool-call arguments repaired, and the kinds of repair made."""
    kinds: set[str] = set()
    content = message.get("content")
    if isinstance(content, str):
        content, found = repair_text(content)
        kinds.update(found)
    calls = []
    for call in message.get("tool_calls") or []:
        arguments, found = repair_arguments(call["function"]["arguments"])
        kinds.update(found)
        calls.append({**call, "function": {**call["function"], "arguments": arguments}})
    if not kinds:
        return message, ()
    return {**message, "content": content, "tool_calls": calls or message.get("tool_calls")}, tuple(sorted(kinds))
