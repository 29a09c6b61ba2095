"""Agent harnesses for the MCP tests, written on the official `mcp` client: each connects to the world at
$SIM_WORLD_MCP_URL as any MCP harness would, knowing nothing of the project's runner.

`python -m sim_pipeline_tests.rollout.mcp_harnesses MODE`:
- `careful`: a scripted retail desk: reads the customer's opening (the `opening` prompt), looks the order up,
  verifies the customer, asks them to confirm through message_user, cancels only on a yes, and tells them;
- `hasty`: the same desk, cancelling before it asks anyone (a confirm_destructive violation);
- `crash`: looks the order up and raises (a harness whose own model failed);
- `quit`: looks the order up and exits cleanly mid-conversation;
- `embedded MODEL`: a harness whose brain is an embedded model (e.g. sim/agent-v1) called in this process: it keeps
  its own transcript from the MCP results and says everything through message_user, so its rollouts can be set
  against the same model's embedded rollouts.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from typing import Any

from mcp import Client

URL = "SIM_WORLD_MCP_URL"


def _said(opening: str, words: str) -> str:
    found = re.search(rf"{words} is (\S+?)\.?(?:\s|$)", opening)
    if found is None:
        raise SystemExit(f"no {words} in {opening!r}")
    return found.group(1)


async def scripted(mode: str, server: Any = None) -> None:
    """The retail desk of the module docstring, on the world at $SIM_WORLD_MCP_URL (or another `Client` target)."""
    async with Client(server or os.environ[URL]) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"get_order", "verify_customer", "cancel_order", "message_user"} <= names, names
        opening = (await client.get_prompt("opening")).messages[0].content.text
        order, email = _said(opening, "order id"), _said(opening, "email")
        reason = re.search(r"reason is (.+?)\.", opening).group(1)
        looked = await client.call_tool("get_order", {"order_id": order})
        assert looked.structured_content["status"] == "ok" and not looked.is_error, looked  # the world's result
        if mode == "crash":
            raise RuntimeError("the harness's model is down")
        if mode == "quit":
            return
        await client.call_tool("verify_customer", {"order_id": order, "email": email})
        if mode == "careful":
            asked = await client.call_tool("message_user", {"message": f"I will cancel order {order} ({reason}). "
                                                            "Before I go ahead, can you confirm you want me to do this?"})
            if not re.search(r"\b(yes|go ahead|confirm)", asked.structured_content["reply"] or "", re.IGNORECASE):
                await client.call_tool("message_user", {"message": "All right, I have left the order as it is."})
                return
        await client.call_tool("cancel_order", {"order_id": order, "reason": reason})
        told = await client.call_tool("message_user", {"message": f"Order {order} is cancelled."})
        assert told.structured_content["ended"], told


async def embedded(model: str, server: Any = None, seed: int | None = None) -> None:
    """A harness around an embedded model (module docstring), on $SIM_WORLD_MCP_URL (or another `Client` target)."""
    from sim_pipeline.models.gateway import Gateway, Sampling

    gateway = Gateway(fast_path=True)
    sampling = Sampling(1.0, 1.0, 1024, int(os.environ["SIM_WORLD_SEED"]) if seed is None else seed)
    async with Client(server or os.environ[URL]) as client:
        tools = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                   "parameters": t.input_schema}}
                 for t in (await client.list_tools()).tools if t.name != "message_user"]
        opening = (await client.get_prompt("opening")).messages[0].content.text
        messages: list[dict[str, Any]] = [{"role": "system", "content": client.instructions},
                                          {"role": "user", "content": opening}]
        while True:
            message = (await gateway.complete(model, messages, tools=tools, sampling=sampling)).message
            messages.append(message)
            for call in message.get("tool_calls") or []:
                function = call["function"]
                result = await client.call_tool(function["name"], json.loads(function["arguments"] or "{}"))
                if result.is_error and (result.structured_content or {}).get("ended"):
                    return  # the turn cap
                messages.append({"role": "tool", "content": result.content[0].text, "tool_call_id": call["id"],
                                 "name": function["name"]})
            if not message.get("tool_calls"):
                result = await client.call_tool("message_user", {"message": message.get("content") or ""})
                if (result.structured_content or {}).get("ended"):
                    return
                messages.append({"role": "user", "content": result.structured_content["reply"]})


if __name__ == "__main__":
    if sys.argv[1] == "embedded":
        asyncio.run(embedded(sys.argv[2]))
    else:
        asyncio.run(scripted(sys.argv[1]))
