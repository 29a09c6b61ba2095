"""Agent functions used by the tests as `python:` models (user agent code)."""


def polite_decliner(messages, tools, sampling):
    """Always declines, without tools: the simplest valid agent."""
    return {"role": "assistant", "content": f"Sorry, I cannot help with that ({len(tools)} tools available)."}


async def async_with_logprob(messages, tools, sampling):
    """An async agent that reports its own log-probability."""
    return {"message": {"content": "Sorry, I can only help with orders."}, "logprob": -1.5, "token_logprobs": [-1.5]}


def broken(messages, tools, sampling):
    """Fails like buggy user code does."""
    raise RuntimeError("boom")
