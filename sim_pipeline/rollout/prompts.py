"""System prompts for the agent under test and the user simulator, each with its card."""

from __future__ import annotations

from typing import Any

from sim_pipeline.domain import Domain
from sim_pipeline.models.cards import render_card
from sim_pipeline.models.conversation import STOP
from sim_pipeline.models.sim_user import LEFT
from sim_pipeline.situation import Situation


def agent_system_prompt(domain: Domain, extra: str = "") -> str:
    """The agent's system prompt: role, the policy text, and the policy card (the rules as data)."""
    rules = [{"id": r.id, "kind": r.kind, "tools": list(r.tools), "verify_tool": r.verify_tool,
              "argument": r.argument, "max": r.limit} for r in domain.rules if r.kind]
    card: dict[str, Any] = {"title": domain.title, "rules": rules}
    parts = [domain.agent_role, domain.policy_text.strip(), "The checkable rules, as data:", render_card("policy", card)]
    return "\n\n".join(p for p in [*parts, extra] if p)


def user_system_prompt(situation: Situation) -> str:
    """The user simulator's system prompt: how to play, and the situation card (goal, facts, stance)."""
    card = {
        "goal": situation.goal, "request": situation.notes.get("request"), "facts": situation.facts,
        "opening_facts": list(situation.opening_facts), "stance": situation.cell["stance"],
        "history": situation.cell["history"], "wrong_value": situation.notes.get("wrong_value", {}),
    }
    return (
        "You are a customer talking to a support agent. Play the situation below: pursue the goal, keep to the "
        "stance, give a fact only when the agent asks for it, and never invent facts you were not given. "
        f"When your goal is met or clearly cannot be met, end your message with {STOP}. If the agent wastes your "
        f"time, you may leave: end your message with {LEFT}.\n\n" + render_card("situation", card)
    )
