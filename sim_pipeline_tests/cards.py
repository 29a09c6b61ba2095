"""Judge case cards built in tests: the card grade/judge.case_card writes (goal, the situation's expected outcome,
the transcript), from a few plain settings."""

import json
from typing import Any

from sim_pipeline import policy
from sim_pipeline.protocol.expected import Expected


def case(transcript: list[dict[str, Any]], *, goal: str = "cancel order 48213", intent_tool: str | None = "cancel_order",
         expect_write: bool = True, entity: str = "order", entity_id: str | None = "48213",
         id_argument: str | None = "order_id", write_tools: tuple[str, ...] | list[str] = ("cancel_order",),
         creates: bool = False, verify_tools: tuple[str, ...] | list[str] = (), confirm: bool = False,
         forbidden_by: str | None = None, handover_tool: str | None = None,
         rules: tuple[dict[str, Any], ...] = (), arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    """A case card: `verify_tools` and `confirm` add a verify_before / confirm_before rule on the intended tool;
    `arguments` are the values the user stated for the write."""
    terms = list(rules)
    if verify_tools:
        terms.append({"id": "verify_identity", "kind": "verify_before", "text": "Verify the customer first.",
                      "tools": [intent_tool], "verify_tool": list(verify_tools)[0]})
    if confirm:
        terms.append({"id": "confirm_changes", "kind": "confirm_before", "text": "Ask before changing anything.",
                      "tools": [intent_tool]})
    kind = "none" if not intent_tool else "new" if creates else "change" if intent_tool in write_tools else "read"
    want = Expected(kind=kind, write=expect_write and kind not in ("none", "read"), tool=intent_tool, entity=entity,
                    entity_id=entity_id, id_argument=id_argument, effect={}, arguments=dict(arguments or {}), reachable=True,
                    forbidden_by=forbidden_by, write_tools=tuple(write_tools), rules=tuple(terms),
                    handover_tool=handover_tool)
    return {"goal": goal, "expected": {**json.loads(want.to_json()), "rules": policy.card_rules(want)},
            "transcript": transcript}
