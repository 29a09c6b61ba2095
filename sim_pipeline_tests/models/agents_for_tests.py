"""Agent functions used by the tests as `python:` models (user agent code)."""

import json
import re


def polite_decliner(messages, tools, sampling):
    """Always declines, without tools: the simplest valid agent."""
    return {"role": "assistant", "content": f"Sorry, I cannot help with that ({len(tools)} tools available)."}


async def async_with_logprob(messages, tools, sampling):
    """An async agent that reports its own log-probability."""
    return {"message": {"content": "Sorry, I can only help with orders."}, "logprob": -1.5, "token_logprobs": [-1.5]}


def broken(messages, tools, sampling):
    """Fails like buggy user code does."""
    raise RuntimeError("boom")


def string_address_agent(messages, tools, sampling):
    """A naive agent: sends update_address's address as one string whatever its schema says, once, then apologises."""
    said = " ".join(m.get("content") or "" for m in messages if m["role"] == "user")
    ids = re.findall(r"\b[0-9]{4,6}\b", said)
    if any(m["role"] == "tool" for m in messages) or not ids:
        return {"role": "assistant", "content": "Sorry, I could not change that for you."}
    arguments = json.dumps({"order_id": ids[0], "address": "12 Harbor Lane, Portland OR"})
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "update_address", "arguments": arguments}}]}


def lookup_then_update_agent(messages, tools, sampling):
    """Finds the user's order by email with list_orders, then changes its address with the id the look-up showed."""
    said = " ".join(m.get("content") or "" for m in messages if m["role"] == "user")
    results = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
    if not results:
        email = re.search(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+", said)
        if email is None:
            return {"role": "assistant", "content": "Could you tell me the email address on your order?"}
        return _call("list_orders", {"email": email.group(0)})
    if len(results) == 1 and results[0].get("orders"):
        address = re.search(r"address is (.+?)\.(?:\s|$)", said)
        order_id = str(results[0]["orders"][0]["order_id"])
        return _call("update_address", {"order_id": order_id,
                                        "address": address.group(1) if address else "12 Harbor Lane"})
    return {"role": "assistant", "content": "Sorry, I could not change that for you."}


def _call(name, arguments):
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{name}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}
