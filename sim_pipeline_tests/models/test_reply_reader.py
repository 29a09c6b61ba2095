"""A registry's `reply_classifier`: any litellm model reads the agent's replies for the graders, through the real HTTP
path (a scripted OpenAI-compatible server stands in for the model), with structured output and the gateway's cache;
measured on the sealed split the rules were never tuned on; and what it reads decides the oracle's and the conduct
rules' labels."""

import asyncio
import json

import pytest

from sim_pipeline import defaults
from sim_pipeline.domain import load_domain
from sim_pipeline.grade import conduct
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.models.model_config import ModelConfig
from sim_pipeline.models.reply_reader import FIELDS, RESPONSE_FORMAT, parse, read_replies
from sim_pipeline.protocol.replies import ASKS_FOR_INFORMATION, CLAIMS_HANDOFF, CLAIMS_SUCCESS, REPLY_LABELS, \
    SAYS_CANNOT, claims_handoff, classify_reply, read_by, says_cannot
from sim_pipeline.rollout.runner import Policy, RolloutSpec, run_rollouts
from sim_pipeline_tests.protocol.corpus import SEALED, load, precision_recall
from sim_pipeline_tests.rollout.small_run import world
from sim_pipeline_tests.scripted_server import ScriptedServer


def asked(request: dict) -> str:
    """The reply a reader request asks about."""
    return request["messages"][-1]["content"].split("<<<\n", 1)[1].rsplit("\n>>>", 1)[0]


def answer(labels: set[str]) -> dict:
    return {"content": json.dumps({name: name in labels for name in FIELDS})}


def rules_model(request: dict) -> dict:
    """A stand-in model whose answers are the rules' own readings (so the measured path must lose nothing)."""
    text = asked(request)
    return answer({*classify_reply(text), *([SAYS_CANNOT] if says_cannot(text) else []),
                   *([CLAIMS_HANDOFF] if claims_handoff(text) else [])})


def gateway(server: ScriptedServer, **settings) -> Gateway:
    config = ModelConfig(name="reader", model="openai/scripted-reader", api_base=server.base_url)
    return Gateway(backoff_s=0, models={"reader": config}, **settings)


def test_a_model_reads_the_sealed_split_with_structured_output_and_loses_nothing():
    rows = load(SEALED)
    with ScriptedServer(rules_model) as server:
        reading = asyncio.run(read_replies(gateway(server), "reader", [r["text"] for r in rows]))
        body = server.requests[0]
    assert body["response_format"] == RESPONSE_FORMAT and body["temperature"] == 0.0
    assert not reading.unread and set(reading.labels) == {r["text"] for r in rows}
    with read_by(reading.labels):
        through_model = precision_recall(rows, classify_reply)
    assert through_model == precision_recall(rows, lambda t: classify_reply(t))  # the rules, outside the block
    assert reading.summary() == {"reply_classifier": "reader", "replies_read": len(reading.labels),
                                 "replies_left_to_rules": 0}


def test_an_answer_that_is_not_the_json_is_left_to_the_rules_and_counted(tmp_path):
    def sometimes(request):
        text = asked(request)
        if "refund" in text.lower():
            return {"content": "I think it asks for confirmation."}
        return 500 if "order" in text.lower() else answer({CLAIMS_SUCCESS})

    texts = ["Your refund is on its way.", "Which order do you mean?", "All done!"]
    with ScriptedServer(sometimes) as server:
        reading = asyncio.run(read_replies(gateway(server, cache_path=tmp_path / "cache.sqlite"), "reader", texts))
        again = asyncio.run(read_replies(gateway(server, cache_path=tmp_path / "cache.sqlite"), "reader", texts))
        calls = len(server.requests)
    assert reading.labels == {"All done!": frozenset({CLAIMS_SUCCESS})}
    assert sorted(reading.unread) == sorted(texts[:2]) and again.labels == reading.labels
    # The 500 is retried; the second reading asks again only what the cache does not hold (the failed reply).
    assert calls == 2 + 2 * defaults.GATEWAY_TRIES
    with read_by(reading.labels):
        assert classify_reply("All done!") == {CLAIMS_SUCCESS}
        assert classify_reply("Which order do you mean?") == {ASKS_FOR_INFORMATION}  # unread: the rules


@pytest.mark.parametrize(("content", "labels"), [
    (json.dumps({name: name == "refuses" for name in FIELDS}), {"refuses"}),
    ("```json\n" + json.dumps({name: False for name in FIELDS}) + "\n```", set()),
    (json.dumps({"refuses": True}), None),  # every key must be there
    (json.dumps({name: "yes" for name in FIELDS}), None),  # booleans only
    ("no idea", None),
])
def test_parse_takes_only_the_asked_json(content, labels):
    assert parse(content) == (frozenset(labels) if labels is not None else None)


def test_what_the_model_reads_decides_the_oracle_and_the_conduct_rules():
    """The same conversations, once with the rules and once with a model that reads every reply as "could not be
    done": each applied write's closing then contradicts the world (the oracle fails it); and a model that reads a
    plain question as a success claim makes conduct fail a conversation with no write."""
    domain, state, situations = world()
    specs = [RolloutSpec(s, 0, 0) for s in situations]
    with ScriptedServer(lambda request: answer({SAYS_CANNOT, "refuses"})) as server:
        models = gateway(server, fast_path=True)
        plain = asyncio.run(run_rollouts(specs, Policy("v", "sim/agent-v2"), domain=domain, state=state,
                                         gateway=models))
        read = asyncio.run(run_rollouts(specs, Policy("v", "sim/agent-v2", reply_classifier="reader"), domain=domain,
                                        state=state, gateway=models))
    applied = plain[(plain["oracle_reward"] == 1.0) & plain["tool_events"].map(lambda e: any(x["applied"] for x in e))]
    assert len(applied)
    again = read.set_index("rollout_id").loc[applied["rollout_id"]]
    assert (again["oracle_reward"] == 0.0).all()
    assert again["oracle_reason"].str.contains("could not be done").all()
    assert set(read["sampling"].map(lambda s: s["reply_classifier"])) == {"reader"}
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Which order do you mean?"}]
    assert conduct.check(messages, [], messages[-1]["content"], load_domain("retail")) is None
    with read_by({"Which order do you mean?": frozenset({CLAIMS_SUCCESS})}):
        assert conduct.check(messages, [], messages[-1]["content"], load_domain("retail")).rule == \
            "claimed_action_without_call"
    assert set(REPLY_LABELS) | {SAYS_CANNOT, CLAIMS_HANDOFF} == set(FIELDS)
