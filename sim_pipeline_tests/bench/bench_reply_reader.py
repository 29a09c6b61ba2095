"""A reply_classifier model on the sealed split (replies the rules were never tuned on): precision and recall per
label through the real path (gateway, litellm, HTTP, structured output), against the rules in the same run.

The model is $SIM_PIPELINE_REPLY_CLASSIFIER when set (any litellm model string, e.g. openai/gpt-4o-mini with its key
in the environment); otherwise a scripted stand-in on a local OpenAI-compatible server whose answers are the rules'
own readings, so its figures show the path loses nothing (ratio 1.0), not what a real model reads.
"""

import asyncio
import os
import time

from sim_pipeline.models.gateway import Gateway
from sim_pipeline.models.model_config import ModelConfig
from sim_pipeline.models.reply_reader import read_replies
from sim_pipeline.protocol.replies import classify_reply, read_by
from sim_pipeline_tests.models.test_reply_reader import rules_model
from sim_pipeline_tests.protocol.corpus import SEALED, load, precision_recall
from sim_pipeline_tests.scripted_server import ScriptedServer


def _measure(gateway: Gateway, model: str, name: str) -> list[dict]:
    rows = load(SEALED)
    texts = [r["text"] for r in rows]
    started = time.perf_counter()
    reading = asyncio.run(read_replies(gateway, model, texts))
    seconds = time.perf_counter() - started
    with read_by(reading.labels):
        ours = precision_recall(rows, classify_reply)
    rules = precision_recall(rows, classify_reply)
    out = []
    for label, (precision, recall, positives) in ours.items():
        for stat, value, baseline in (("precision", precision, rules[label][0]), ("recall", recall, rules[label][1])):
            out.append({"name": f"reply_reader.sealed.{label}.{stat} (model={name}, n={len(rows)}, {positives} positive)",
                        "value": value, "unit": "fraction", "baseline_name": f"rules {stat}",
                        "baseline_value": baseline, "ratio": value / baseline if baseline else float("inf")})
    out.append({"name": f"reply_reader.unread (model={name})", "value": len(reading.unread), "unit": "replies"})
    out.append({"name": f"reply_reader.throughput (model={name})", "value": len(texts) / seconds,
                "unit": "replies/s"})
    return out


def figures() -> list[dict]:
    """The figures of the named model, or of the scripted stand-in."""
    model = os.environ.get("SIM_PIPELINE_REPLY_CLASSIFIER")
    if model:
        return _measure(Gateway(), model, model)
    with ScriptedServer(rules_model) as server:
        config = ModelConfig(name="scripted", model="openai/scripted-reader", api_base=server.base_url)
        return _measure(Gateway(models={"scripted": config}), "scripted", "scripted stand-in")
