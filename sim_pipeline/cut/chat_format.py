"""Cut messages in the shapes trainers read: Hugging Face chat templates, and OpenAI fine-tuning lines.

Cut rows keep every message key (None where absent) and tool-call arguments as JSON strings, the OpenAI wire
format. Transformers' chat templates want `arguments` as a mapping ("Tool use" guide: the OpenAI JSON string "may
cause errors or strange model behavior" there), but a Parquet column holds one struct type: Arrow would merge every
tool's arguments into one struct and hand each call back with the other tools' keys as null (which templates then
render, and which breaks every call's schema). So the Parquet exports keep the arguments as JSON text, and
`with_decoded_arguments` turns them into mappings per row, lazily, as the loaded dataset is iterated: an
IterableDataset, because TRL's trainers refuse a `with_transform` dataset and a map-style `map` would merge the
structs again (tried with TRL 1.16: SFTTrainer with `assistant_only_loss` trains on it). OpenAI fine-tuning lines
keep the string and accept per message only the keys its chat schema declares (a tool message: role, content,
tool_call_id).
"""

import json
from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema

from sim_pipeline import json_schema
from sim_pipeline.errors import ExportError

# Keys OpenAI's fine-tuning chat format accepts on a message of each role (weight: assistant loss mask only).
OPENAI_KEYS = {
    "system": ("role", "content", "name"),
    "user": ("role", "content", "name"),
    "assistant": ("role", "content", "name", "tool_calls", "weight"),
    "tool": ("role", "content", "tool_call_id"),
}


def arguments_object(call: Mapping[str, Any]) -> dict[str, Any] | None:
    """A tool call's arguments decoded to a JSON object, or None when they are not one."""
    arguments = call["function"].get("arguments")
    if isinstance(arguments, Mapping):
        return dict(arguments)
    try:
        decoded = json.loads(arguments) if isinstance(arguments, str) else None
    except json.JSONDecodeError:
        return None
    return decoded if isinstance(decoded, dict) else None


def hf_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A chat-template message: None keys and `weight` dropped, content set, tool-call arguments as canonical JSON
    text of an object (decode with `with_decoded_arguments` after loading)."""
    out = {
        key: value
        for key, value in message.items()
        if value is not None and key not in ("weight", "tool_calls")
    }
    # A tool-call turn without text gets "" so every message has role and content: TRL tells a conversational
    # dataset by those two keys on the first message of a column, and a completion may start with a tool call.
    out.setdefault("content", "")
    calls = message.get("tool_calls")
    if calls:
        decoded = []
        for call in calls:
            arguments = arguments_object(call)
            if arguments is None:
                raise ExportError(
                    f"tool call {call.get('id')!r} has arguments that are not a JSON object "
                    f"({call['function'].get('arguments')!r}): filter the row with has_undecodable_call first"
                )
            decoded.append(
                {
                    "id": call.get("id"),
                    "type": call.get("type") or "function",
                    "function": {"name": call["function"]["name"],
                                 "arguments": json.dumps(arguments, ensure_ascii=False, sort_keys=True)},
                }
            )
        out["tool_calls"] = decoded
    return out


MESSAGE_COLUMNS = ("messages", "prompt", "chosen", "rejected", "completion")  # export columns holding chats


def _decoded(messages: Any) -> Any:
    if not isinstance(messages, list):
        return messages
    out = []
    for message in messages:
        calls = message.get("tool_calls") if isinstance(message, Mapping) else None
        if calls:
            message = {**message, "tool_calls": [
                {**call, "function": {**call["function"], "arguments": arguments_object(call)}} for call in calls]}
        out.append(message)
    return out


def decode_arguments(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """A `datasets` transform: every tool call's JSON-text arguments in the chat columns as a mapping."""
    return {key: [_decoded(v) for v in values] if key in MESSAGE_COLUMNS else values for key, values in batch.items()}


def with_decoded_arguments(dataset: Any) -> Any:
    """A loaded export as an IterableDataset whose rows give tool-call arguments as mappings (what chat templates
    want), decoded row by row so Arrow never merges them: `with_decoded_arguments(load_dataset("parquet", ...))`;
    pass it to a TRL trainer with `max_steps` set (an iterable dataset has no length)."""
    return dataset.to_iterable_dataset().map(decode_arguments, batched=True)


def openai_message(message: Mapping[str, Any], *, weight: int | None = None) -> dict[str, Any]:
    """An OpenAI fine-tuning message: the role's declared keys, None dropped, `weight` on assistant turns."""
    role = message["role"]
    if role not in OPENAI_KEYS:
        raise ExportError(
            f"message role {role!r} has no OpenAI fine-tuning form: use one of {sorted(OPENAI_KEYS)}"
        )
    out: dict[str, Any] = {}
    for key in OPENAI_KEYS[role]:
        value = message.get(key)
        if key == "tool_calls" and value:
            value = [
                {
                    "id": c.get("id"),
                    "type": c.get("type") or "function",
                    "function": {"name": c["function"]["name"], "arguments": _arguments_string(c)},
                }
                for c in value
            ]
        if key == "weight":
            value = weight if role == "assistant" else None
        if value is not None and value != []:
            out[key] = value
    return out


def trim_to_last_assistant(messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Messages up to the last assistant turn: what follows (a user's goodbye) is not the policy's."""
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
    return list(messages[: last + 1])


def first_difference(
    chosen: Sequence[Mapping[str, Any]], rejected: Sequence[Mapping[str, Any]]
) -> int | None:
    """Index of the first message where two completions differ (ignoring call ids), None if equal."""
    for index in range(max(len(chosen), len(rejected))):
        if index >= len(chosen) or index >= len(rejected) or _key(chosen[index]) != _key(rejected[index]):
            return index
    return None


def tool_validators(tools: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A JSON Schema validator for each declared tool's parameters, by tool name."""
    validators = {}
    for tool in tools:
        function = tool["function"]
        schema = function.get("parameters") or {"type": "object"}
        # Its $schema's draft, formats not checked (as before); its patterns on RE2: the arguments are a model's.
        validators[function["name"]] = json_schema.validator(schema, formats=False,
                                                            cls=jsonschema.validators.validator_for(schema))
    return validators


def invalid_calls(message: Mapping[str, Any], validators: Mapping[str, Any]) -> list[str]:
    """Why each tool call of a message breaks its declared schema (unknown tool, bad or invalid arguments)."""
    problems = []
    for call in message.get("tool_calls") or []:
        name = call["function"]["name"]
        arguments = arguments_object(call)
        if name not in validators:
            problems.append(f"{name}: not a declared tool")
        elif arguments is None:
            problems.append(f"{name}: arguments are not a JSON object")
        else:
            problems.extend(f"{name}: {error.message}" for error in validators[name].iter_errors(arguments))
    return problems


def has_invalid_call(messages: Sequence[Mapping[str, Any]], validators: Mapping[str, Any]) -> bool:
    """Whether any assistant turn calls a tool in a way its declared schema rejects."""
    return any(m["role"] == "assistant" and invalid_calls(m, validators) for m in messages)


def has_undecodable_call(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any tool call's arguments fail to decode to a JSON object (no chat-template form exists)."""
    return any(arguments_object(c) is None for m in messages for c in m.get("tool_calls") or [])


def _arguments_string(call: Mapping[str, Any]) -> str:
    arguments = call["function"].get("arguments")
    # The wire format is a JSON string; a mapping (never produced by the cuts) is encoded canonically.
    return (
        arguments if isinstance(arguments, str) else json.dumps(arguments, sort_keys=True, ensure_ascii=False)
    )


def _key(message: Mapping[str, Any]) -> tuple:
    """What a message says, without the random call ids that differ between otherwise equal turns."""
    calls = tuple(
        (
            c["function"]["name"],
            json.dumps(arguments_object(c), sort_keys=True)
            if arguments_object(c) is not None
            else c["function"].get("arguments"),
        )
        for c in message.get("tool_calls") or []
    )
    return message["role"], message.get("content"), message.get("name"), calls
