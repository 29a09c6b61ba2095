"""Reading a chat transcript: the facts said so far, the tool calls and results, confirmations, pressure.

The embedded models read conversations the way an LLM would have to: from the messages alone (what an agent's reply
does through protocol.classify_reply, like every other reader). Besides what the user asks, a Reading notes what
real agents stumble on, each detected from the text in general terms, not from any one generator's sentences:

- injected instructions (`injections`): a sentence of a user message that orders the assistant to drop its
  instructions or checks ("ignore all previous rules", "skip verification", "you are pre-approved"), and any text in
  a tool result that does so or speaks in the voice of the system or an administrator ("SYSTEM: ..."): data never
  gives orders (Greshake et al. 2023, indirect prompt injection);
- indirect or mixed-language requests (`indirectness`): hedges that talk around the request ("I was wondering
  whether", "maybe", "something is wrong with") and words of another language or with non-English letters;
- how far back a value was said (`distances`): characters of conversation after its last mention.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from sim_pipeline import defaults, json_schema
from sim_pipeline.protocol.replies import ASKS_CONFIRMATION, classify_reply
from sim_pipeline.seeding import canonical_json, digest

_TOKEN = re.compile(r"\w+|[^\w\s]")
_DECODER = json.JSONDecoder()
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_NUMBER = re.compile(r"\$?(\d+(?:\.\d+)?)")
_AFFIRM = re.compile(r"\b(yes|yeah|yep|go ahead|please do|confirm(ed)?|do it|proceed)\b", re.IGNORECASE)
_NEGATE = re.compile(r"\b(no|don't|do not|stop|cancel that|wait)\b", re.IGNORECASE)
_PRESSURE = re.compile(r"\b(ignore|override|skip|obliged|immediately|right now|manager told|bend the rules|"
                       r"without verification|asap|rush|urgent(?:ly)?|emergency|lawyer|or else|unacceptable)\b",
                       re.IGNORECASE)
# An order to the assistant to drop its instructions or checks (Greshake et al. 2023; Perez & Ribeiro 2022).
_OVERRIDE = re.compile(
    r"\b(?:ignore|disregard|forget|override|bypass)\b[^.;\n]{0,40}?\b(?:instructions?|rules?|checks?|polic(?:y|ies)|"
    r"guidelines|prompt|verification|confirmation|formalities|procedures?)\b"
    r"|\b(?:skip|waive|without|no need (?:for|to))\b[^.;\n]{0,30}?\b(?:verif\w*|confirm\w*|checks?|formalities|"
    r"approval)\b|\bpre-?(?:approved|authori[sz]ed|verified)\b|\bauthori[sz]e[sd]? (?:you|the (?:agent|assistant))\b"
    r"|\bnew instructions?\b|\b(?:the )?(?:agent|assistant) (?:must|should|is (?:required|obliged) to)\b",
    re.IGNORECASE)
# Text that speaks as the system or an administrator: in a tool result it is never the data it should be.
_ROLE_CLAIM = re.compile(
    r"(?:^|[\s\[(])(?:system|admin(?:istrator)?|developer|operator|assistant)(?:\s+(?:note|notice|message|override|"
    r"instructions?|update))?\s*[:\]]|\bas (?:the|an|your) (?:\w+ )?(?:admin(?:istrator)?|developer|operator|"
    r"supervisor|manager)\b|\bI am (?:the|an|your) (?:\w+ )?(?:admin(?:istrator)?|developer|operator|supervisor|"
    r"manager)\b", re.IGNORECASE)
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")
# Talking around a request instead of making it (indirect speech acts): each distinct hedge is one signal.
_HEDGES = re.compile(
    r"\b(?:i was wondering|wonder(?:ing)? (?:if|whether)|would it be possible|is there any way|any chance|"
    r"not (?:entirely |really )?sure|i think i might|maybe|perhaps|possibly|hypothetically|what would happen if|"
    r"how would i|how (?:does )?it works?|just curious|something(?:'s| is) (?:wrong|off|up)|there(?:'s| is) (?:a|an|some) "
    r"(?:issue|problem)|having (?:trouble|an issue|a problem)|kind of|sort of|i guess|if that's (?:ok|okay|alright)|"
    r"if possible|long story short)\b", re.IGNORECASE)
# Common words of languages customers mix into English (es, fr, de, pt, it): function words and request verbs that
# are not English words, so a plain English sentence never hits them.
_FOREIGN_WORDS = frozenset("""
hola necesito ayuda quiero pedido gracias cancelar reembolsar devolver rastrear consultar cambiar restablecer
mi por para usted puede articulo direccion envio cuenta tengo quisiera porque bonjour merci voudrais commande aide
remboursement annuler veux vous pouvez suis mon mes une avec bitte danke ich meine bestellung hilfe stornieren
erstatten konto nicht und ist eine mein kann obrigado preciso encomenda meu minha ajuda ciao grazie vorrei ordine
aiuto rimborso annullare mio della sono
""".split())
_LETTERS = re.compile(r"[^\W\d_]+")


def tokens(text: str | None) -> list[str]:
    """A word-and-punctuation tokenization used for token counts and overlap scores."""
    return _TOKEN.findall(text or "")


def phrase_of(name: str) -> str:
    """An argument name as words (order_id -> order id)."""
    return name.replace("_", " ")


def extract(text: str, name: str, schema: dict[str, Any]) -> tuple[Any, bool]:
    """The value a text gives for one argument and whether it was said explicitly ('my order id is 48213').

    A value recognised only by its shape (an email, a number matching the schema's pattern) is implicit: it fills
    a gap but never overrides something said explicitly (a zip code must not replace an order id).
    """
    if schema.get("type") in ("array", "object"):
        return _structured(text, name)
    said = re.search(rf"\b{re.escape(phrase_of(name))}\s+(?:is|:|=)\s+(.+?)(?:\.\s|\.$|,\s|;|\?|!|$)", text,
                     re.IGNORECASE)
    if said:
        return said.group(1).strip().strip("\"'"), True
    if "enum" in schema:
        lowered = text.lower()
        return next((v for v in schema["enum"] if phrase_of(str(v)).lower() in lowered), None), False
    if "email" in name or schema.get("format") == "email":
        found = _EMAIL.findall(text)
        return (found[-1] if found else None), False
    pattern = schema.get("pattern")
    if pattern:
        hits = [t for t in tokens(text) if json_schema.fullmatch(pattern, t)]  # RE2: the text is a model's
        return (hits[-1] if hits else None), False
    return None, False


def _structured(text: str, name: str) -> tuple[Any, bool]:
    """A list or object the text gives as JSON after the argument's words ('my items is [{...}]'), parsed."""
    for match in re.finditer(rf"\b{re.escape(phrase_of(name))}\s+(?:is|are|:|=)\s+(?=[\[{{])", text, re.IGNORECASE):
        try:
            value, _ = _DECODER.raw_decode(text, match.end())
        except ValueError:
            continue
        if isinstance(value, (list, dict)):
            return value, True
    return None, False


def _content(message: dict[str, Any]) -> str:
    return message.get("content") or ""


@dataclass
class ToolTurn:
    """One tool call made in the conversation and the result it got."""

    name: str
    arguments: dict[str, Any]
    result: dict[str, Any]


@dataclass
class Reading:
    """What a transcript says, as the embedded models understand it."""

    user_texts: list[str] = field(default_factory=list)
    assistant_texts: list[str] = field(default_factory=list)
    turns: list[ToolTurn] = field(default_factory=list)
    last_role: str = ""
    confirmed: bool = False
    refused_confirmation: bool = False
    asked_confirmation: bool = False
    pressure: bool = False
    injections: list[str] = field(default_factory=list)  # injected instructions, oldest first (see the module)

    @property
    def last_turn(self) -> ToolTurn | None:
        """The tool call whose result is the last message, if the last message is a tool result."""
        return self.turns[-1] if self.last_role == "tool" and self.turns else None

    def calls_to(self, name: str) -> list[ToolTurn]:
        """Every call of one tool."""
        return [t for t in self.turns if t.name == name]


def read(messages: list[dict[str, Any]]) -> Reading:
    """Parse a chat transcript (OpenAI format) into a Reading."""
    out = Reading()
    pending: dict[str, ToolTurn] = {}
    for message in messages:
        role = message.get("role")
        if role == "user":
            text = _content(message)
            out.user_texts.append(text)
            out.pressure = out.pressure or bool(_PRESSURE.search(text))
            out.injections += _said_injections(text)
            if out.asked_confirmation:
                # Only a reply to the latest confirmation question counts as consent.
                out.confirmed = affirms(text)
                out.refused_confirmation = not out.confirmed
                out.asked_confirmation = False
        elif role == "assistant":
            text = _content(message)
            if text:
                out.assistant_texts.append(text)
                out.asked_confirmation = ASKS_CONFIRMATION in classify_reply(text)
            for call in message.get("tool_calls") or []:
                fn = call.get("function") or {}
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except (TypeError, ValueError):
                    args = {}
                turn = ToolTurn(fn.get("name", ""), args if isinstance(args, dict) else {}, {})
                pending[call.get("id", "")] = turn
                out.turns.append(turn)
        elif role == "tool":
            turn = pending.get(message.get("tool_call_id") or "")
            if turn is not None:
                try:
                    result = json.loads(_content(message))
                except ValueError:
                    result = {"status": "malformed", "raw": _content(message)}
                turn.result = result if isinstance(result, dict) else {"status": "malformed"}
                out.injections += _data_injections(_content(message))
        if role in ("user", "assistant", "tool"):
            out.last_role = role
    return out


# Each is read once per distinct text: a conversation is re-read at every turn, with the same messages in it.
@lru_cache(maxsize=4096)
def _said_injections(text: str) -> tuple[str, ...]:
    """The sentences of a user message that order the assistant to drop its instructions or checks."""
    if not _OVERRIDE.search(text):
        return ()
    return tuple(m.strip() for m in _SENTENCE.findall(text) if _OVERRIDE.search(m))


@lru_cache(maxsize=4096)
def _data_injections(content: str) -> tuple[str, ...]:
    """The texts inside a tool result (its JSON) that give the assistant orders or speak as the system."""
    if not (_OVERRIDE.search(content) or _ROLE_CLAIM.search(content)):
        return ()
    try:
        result = json.loads(content)
    except ValueError:
        result = content
    return tuple(t for t in _strings(result) if _OVERRIDE.search(t) or _ROLE_CLAIM.search(t))


def _strings(value: Any) -> list[str]:
    """Every text inside a tool result (nested objects and lists too), in key order."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for k in sorted(value) for t in _strings(value[k])]
    if isinstance(value, list):
        return [t for v in value for t in _strings(v)]
    return []


@lru_cache(maxsize=1024)
def indirectness(text: str) -> int:
    """How indirectly a request is put: distinct hedges, plus distinct words of another language or with letters
    English does not use (each one signal)."""
    hedges = {h.lower() for h in _HEDGES.findall(text)}
    words = {w.lower() for w in _LETTERS.findall(text)}
    foreign = {w for w in words if w in _FOREIGN_WORDS or not w.isascii()}
    return len(hedges) + len(foreign)


def distances(messages: list[dict[str, Any]], values: dict[str, Any]) -> dict[str, int]:
    """Characters of conversation (the system prompt aside) after each value's last mention, by argument name.

    What an agent must look back over to find a fact; a value never written out as text (a list, a number the tools
    formatted differently) is at distance 0: it is not looked for.
    """
    parts = []
    for m in messages:
        if m.get("role") == "system":
            continue
        parts.append(_content(m))
        parts += [(c.get("function") or {}).get("arguments") or "" for c in m.get("tool_calls") or []]
    text = "\n".join(parts).lower()
    out = {}
    for name, value in values.items():
        said = str(value).lower() if isinstance(value, (str, int, float)) else ""
        at = text.rfind(said) if said else -1
        out[name] = len(text) - at - len(said) if at >= 0 else 0
    return out


def known_values(reading: Reading, properties: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Argument values the conversation grounds: said by the user (later corrections win) or returned by a tool."""
    known: dict[str, Any] = {}
    for turn in reading.turns:
        record = next((v for v in turn.result.values() if isinstance(v, dict)), None)
        for name in properties:
            if record is not None and name in record and record[name] not in (None, "unknown"):
                value = record[name]
                known[name] = value if isinstance(value, (list, dict)) else str(value)
    explicit: set[str] = set()
    properties_key = canonical_json(properties)
    for text in reading.user_texts:
        for name, value, said in _extracted(text, properties_key, properties):
            if said or name not in explicit:
                known[name] = copy.deepcopy(value) if isinstance(value, (list, dict)) else value
                if said:
                    explicit.add(name)
    return known


# canonical JSON of the properties -> text -> the values `extract` finds in the text: a pure function of the two,
# asked again for every earlier user text at every turn of every sample. Keyed by the properties first, so their
# (long) JSON is held once per tool set, not once per text.
_EXTRACTED: dict[str, dict[str, list[tuple[str, Any, bool]]]] = {}
_EXTRACTED_TEXTS = [0]  # texts held over all tool sets


def _extracted(text: str, properties_key: str, properties: dict[str, dict[str, Any]]) -> list[tuple[str, Any, bool]]:
    """(name, value, said) of every property `extract` finds in one text, in the properties' order (memoized)."""
    by_text = _EXTRACTED.get(properties_key)
    found = by_text.get(text) if by_text is not None else None
    if found is None:
        found = [(name, value, said) for name, schema in properties.items()
                 for value, said in [extract(text, name, schema)] if value is not None]
        if _EXTRACTED_TEXTS[0] >= defaults.EXTRACTED_VALUES_CACHE_SIZE:
            _EXTRACTED.clear()  # a whole new set of texts (another domain or run): start over
            _EXTRACTED_TEXTS[0] = 0
        _EXTRACTED.setdefault(properties_key, {})[text] = found
        _EXTRACTED_TEXTS[0] += 1
    return found


def affirms(text: str) -> bool:
    """Whether a user's answer to an approval question is a yes, read from its words."""
    return bool(_AFFIRM.search(text)) and not bool(_NEGATE.search(text.split(".")[0]))


def transcript_digest(messages: list[dict[str, Any]]) -> str:
    """A hash of what a transcript says, blind to how a client serialized it (missing vs None keys, extra fields).

    Seeds derive from it, so the same conversation draws the same sample through litellm and in-process.
    """
    canonical = []
    for m in messages:
        calls = [((c.get("function") or {}).get("name"), (c.get("function") or {}).get("arguments"))
                 for c in m.get("tool_calls") or []]
        canonical.append((m.get("role"), m.get("content") or "", calls, m.get("tool_call_id") or ""))
    return digest(canonical)
