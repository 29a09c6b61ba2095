"""System prompts for the agent under test and the user simulator, each with its card."""

from __future__ import annotations

from typing import Any

from sim_pipeline import defaults
from sim_pipeline.domain import Domain
from sim_pipeline.models.cards import render_card
from sim_pipeline.protocol.user_events import USER_ACTION_TOOL
from sim_pipeline.situation import Situation


def agent_system_prompt(domain: Domain, extra: str = "") -> str:
    """The agent's system prompt: role, the policy text, and the policy card (the rules as data)."""
    rules = [{"id": r.id, "kind": r.kind, "tools": list(r.tools), "verify_tool": r.verify_tool,
              "argument": r.argument, "max": r.limit,
              **({"values": list(r.values)} if r.values else {}),
              **({"transfer_tool": r.transfer_tool} if r.transfer_tool else {}),
              **({"when": r.when} if r.when else {})} for r in domain.rules if r.kind]
    card: dict[str, Any] = {"title": domain.title, "rules": rules}
    parts = [domain.agent_role, domain.policy_text.strip(), "The checkable rules, as data:", render_card("policy", card)]
    return "\n\n".join(p for p in [*parts, extra] if p)


def user_system_prompt(situation: Situation, domain: Domain) -> str:
    """The user simulator's system prompt: how to play, how to answer (`user_action`), and the situation card."""
    intent = domain.tool(situation.intent_tool) if situation.intent_tool else None
    stance = situation.cell["stance"]
    card = {
        "goal": situation.goal, "request": situation.notes.get("request"), "facts": situation.facts,
        "opening_facts": list(situation.opening_facts), "stance": stance, "history": situation.cell["history"],
        "wrong_value": situation.notes.get("wrong_value", {}), "wants_change": bool(intent and intent.writes),
        "patience": defaults.USER_PATIENCE.get(stance, defaults.USER_PATIENCE_DEFAULT),
        # What the user approves and nothing else: the action it wants, the others it might be offered, its record.
        "wanted_action": situation.intent_tool if intent and intent.writes else None,
        "other_actions": sorted(t.name for t in domain.tools if t.writes and t.name != situation.intent_tool),
        "record": situation.entity_id,
    }
    return (
        "You are a customer talking to a support agent. Play the situation below: pursue the goal, keep to the "
        "stance, give a fact only when the agent asks for it, and never invent facts you were not given "
        "(`wrong_value` holds values you believe at first; correct them when the agent says they do not work). "
        "Answer every turn by calling the user_action tool with your message and the decision it carries: "
        f"{USER_ACTION_TOOL['function']['parameters']['properties']['decision']['description']} "
        "When the agent asks you to approve an action, say yes (`confirm`) only to `wanted_action` on your own "
        "`record`; if the question names another action (one of `other_actions`) or another record, answer `refuse` "
        "and say what you want instead. Choose `satisfied` only when the agent tells you your goal is met, and "
        "`leave` when the agent cannot or will not help, or when it has wasted more than `patience` of your turns."
        "\n\n" + render_card("situation", card)
    )
