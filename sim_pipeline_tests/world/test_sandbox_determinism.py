"""Same seed and same calls give the same results byte for byte in separate processes (no salted hash())."""

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import json
    from sim_pipeline.domain import load_domain
    from sim_pipeline.search.situations import build_situation
    from sim_pipeline.world.sandbox import Sandbox
    from sim_pipeline.world.state import build_state

    out = []
    retail = load_domain("retail")
    open_world = Sandbox(retail, seed=7)
    for order_id in ("48213", "1111", "90001", "abc"):
        out.append(open_world.call("get_order", {"order_id": order_id}))
    out.append(open_world.call("list_orders", {"email": "gus.berg42@posteo.net", "status": "placed"}))
    out.append(open_world.call("cancel_order", {"order_id": "48213", "reason": "<reason>", "extra": 1, "more": 2}))
    state = build_state(retail, 7)
    cell = {"tool": "refund_order", "rule": "refund_limit", "stance": "hurried", "world_state": "duplicate_entity",
            "tool_condition": "malformed_result", "history": "fresh"}
    situation = build_situation(retail, state, cell, seed=7)
    closed = Sandbox(retail, seed=7, situation=situation, state=state)
    args = {"order_id": situation.facts["order_id"], "amount": float(situation.facts["amount"])}
    out += [closed.call("refund_order", args), closed.call("refund_order", args), closed.snapshot()]
    desk = Sandbox(load_domain("it_helpdesk"), seed=7)
    out.append(desk.call("create_ticket", {"contact_email": "ana.silva12@proton.me", "category": "network",
                                           "summary": "wifi drops"}))
    tools = [{"type": "function", "function": {"name": "send_note", "description": "Send a note.", "parameters": {
        "type": "object", "properties": {"to": {"type": "string", "format": "email"},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
        "ref": {"type": "string", "pattern": "^N-[0-9]{3}$"}}, "required": ["to"]}}}]
    free = Sandbox(tools, seed=7)
    out += [free.call("send_note", {"to": "jo.lund10@fastmail.com", "tags": ["a", "c"], "ref": "N-12"}),
            free.call("send_note", {"to": "jo.lund10@fastmail.com", "ref": "N-123"}), free.snapshot()]
    print(json.dumps(out, sort_keys=True))
''')


def _run(hash_seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
    return done.stdout


def test_results_are_identical_across_processes() -> None:
    first, second = _run("0"), _run("4242")
    assert first == second and len(first) > 1000
