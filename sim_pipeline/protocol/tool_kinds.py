"""What a tool does, declared or guessed: the one place tool names are read for their verb.

A pack may declare each tool's kind in domain.yaml (`tools: {approve_refund: {kind: update}}`); a tool it does not
declare, and every tool of a bare schema list, gets the kind its name's first word suggests. The guess reads
snake_case, kebab-case and camelCase alike (`getOrder`, `get-order`, `get_order`).

Declared kinds (DECLARED_KINDS) and what the world makes of them:
- read: answers from the world's records; verify: a read that answers `verified: true|false`;
- create: makes a record; update: changes fields of one; delete: removes it;
- compute: evaluates its input and touches no record (a calculator); transfer: hands the user to a human;
- other: none of these (the world echoes the call).
Guessed names also give `destructive`: an irreversible change of a record's state that moves money or access
(cancel, refund, revoke...): an update whose default effect is the verb's past tense, and which carries the most
risk. Declaring `update` or `delete` for such a tool is always possible.
"""

from __future__ import annotations

import re

DECLARED_KINDS: tuple[str, ...] = ("read", "verify", "create", "update", "delete", "compute", "transfer", "other")
WRITE_KINDS: tuple[str, ...] = ("create", "update", "delete", "destructive")  # a successful call changes the world

READ_VERBS: tuple[str, ...] = (
    "get", "list", "search", "find", "lookup", "check", "show", "view", "read", "fetch", "query", "track",
    "describe", "count", "retrieve", "browse",
)  # a tool whose name starts with one of these only reads
VERIFY_VERBS: tuple[str, ...] = ("verify", "authenticate", "validate")  # reads that answer verified: true|false
DELETE_VERBS: tuple[str, ...] = ("delete", "remove", "purge", "erase", "destroy")  # writes that remove the record
DESTRUCTIVE_VERBS: tuple[str, ...] = (
    "cancel", "refund", "pay", "send", "transfer", "revoke", "reset", "close", "disable", "terminate", "wipe",
    "grant", "exchange", "return", "suspend", "approve", "deny", "reject", "block", "charge",
)  # irreversible or money/access-moving state changes: these need confirmation and carry high risk
CREATE_VERBS: tuple[str, ...] = ("create", "open", "add", "new", "place", "submit", "file", "register", "book",
                                 "make", "schedule")
UPDATE_VERBS: tuple[str, ...] = (
    "update", "change", "edit", "set", "modify", "rename", "move", "assign", "unlock", "enable", "activate",
    "restore", "escalate", "reassign", "upgrade", "downgrade",
)
COMPUTE_VERBS: tuple[str, ...] = ("calculate", "compute", "convert", "estimate", "evaluate", "sum", "quote")
_HANDOFF = re.compile(r"^(transfer|hand_?off|handover|escalate)_(to_)?(a_)?(human|agent|person|specialist|supervisor|"
                      r"operator|representative)")  # a hand-off to a person, not a money transfer or a status change


def name_words(name: str) -> list[str]:
    """An identifier's words, lower-cased: get_order, getOrder, get-order, GetOrderByID -> get, order, ..."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    return [w.lower() for w in re.split(r"[_\-\s]+", spaced) if w]


def snake_name(name: str) -> str:
    """An identifier as snake_case (getOrder -> get_order)."""
    return "_".join(name_words(name))


def folded_name(name: str) -> str:
    """A name as a case-insensitive disk or a reader sees it: case-folded, `-` read as `_` (Get-Order -> get_order)."""
    return name.casefold().replace("-", "_")


def name_keys(name: str) -> frozenset[str]:
    """The forms under which two tool names are one name: folded (Get_Order, get-order) and snake_case (getOrder)."""
    # Both: folding alone misses getOrder beside get_order; snake_case alone misses GetOrder beside getorder, which a
    # case-insensitive disk holds as one file.
    return frozenset({folded_name(name), snake_name(name)})


def first_verb(name: str) -> str:
    """A tool name's first word, lower-cased (snake_case, kebab-case or camelCase): get_order, getOrder -> get."""
    words = name_words(name)
    return words[0] if words else ""


def guess_kind(name: str) -> str:
    """The kind a tool's name suggests: read, verify, create, update, delete, destructive, compute, transfer, other."""
    if _HANDOFF.match(snake_name(name)):
        return "transfer"
    verb = first_verb(name)
    for kind, verbs in (("read", READ_VERBS), ("verify", VERIFY_VERBS), ("delete", DELETE_VERBS),
                        ("destructive", DESTRUCTIVE_VERBS), ("create", CREATE_VERBS), ("update", UPDATE_VERBS),
                        ("compute", COMPUTE_VERBS)):
        if verb in verbs:
            return kind
    return "other"


def writes(kind: str) -> bool:
    """Whether a successful call of a tool of this kind changes the world."""
    return kind in WRITE_KINDS


def reads(kind: str) -> bool:
    """Whether a tool of this kind answers from the world's records (verify included)."""
    return kind in ("read", "verify")
