"""verl trains on live sandbox episodes: its own dataset loader, tool agent loop and reward loading run the export.

Everything verl-side is verl 0.9's own code, configured by composing its `ppo_trainer` config with the overrides the
README's recipe gives: `RLHFDataset` loads `grpo.parquet` with the tools of `tool_config.yaml` rendered into every
prompt; the registered `tool_agent` loop plays episodes, calling `SandboxTool` for each tool call the policy makes;
`get_custom_reward_fn` loads `compute_score` from its file, and it is called as verl's naive reward manager calls it
(the row's extra_info merged with the episode's tool fields). Only the policy is scripted: the LLM server's
generations are written here (in our own words, not the embedded agent's), tokenized by a byte-level BPE trained in
the test under a Hermes-style template, so no model, GPU or download is needed. Requires the [verl] extra in a
venv of its own (`make test-verl`; its transformers pin conflicts with [train]).
"""

import asyncio
import json
import os
from pathlib import Path

import pytest

if os.environ.get("SIM_PIPELINE_VERL_TESTS") == "required":  # CI: a missing extra is a failure, never a skip
    import verl
else:
    verl = pytest.importorskip("verl", reason="the [verl] extra is not installed: run `make test-verl`")

import datasets
import hydra
from hydra import compose, initialize_config_dir
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry
from verl.tools.tool_registry import load_all_tools
from verl.trainer.ppo.reward import get_custom_reward_fn
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

from sim_pipeline.cut.export import export_verl
from sim_pipeline.cut.lengths import tokenizer_counter, verl_file_lengths
from sim_pipeline.errors import SimPipelineError
from sim_pipeline.rollout import verl_tools
from sim_pipeline.rollout.environment import environment_class
from sim_pipeline.situation import Situation
from sim_pipeline_tests.cut import partition
from sim_pipeline_tests.scripted_server import ScriptedServer

SPECIAL = ["[PAD]", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
# A Hermes-style template (Qwen's layout): tools in the system turn, calls in <tool_call>, results as user turns.
TEMPLATE = """{%- if tools %}<|im_start|>system
{% if messages[0].role == "system" %}{{ messages[0].content }}{% endif %}

# Tools
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools><|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == "system" %}{%- if not tools %}<|im_start|>system
{{ message.content }}<|im_end|>
{% endif %}
{%- elif message.role == "assistant" %}<|im_start|>assistant
{{ message.content or "" }}{%- for call in message.tool_calls or [] %}
<tool_call>
{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments if call.function.arguments is string \
else call.function.arguments | tojson }}}
</tool_call>{%- endfor %}<|im_end|>
{% elif message.role == "tool" %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""
PROMPT_MARGIN = 1.25  # the stats count parts as JSON; a template's markers fit in a quarter more (README recipe)
datasets.disable_progress_bars()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """`export --format verl` of the real retail partition: grpo.parquet and tool_config.yaml."""
    (grpo,) = export_verl(partition.cuts("grpo_groups"), tmp_path_factory.mktemp("verl"), domain="retail",
                          tools=partition.TOOLS, situations=partition.situations())
    return grpo


@pytest.fixture(scope="module")
def tokenizer(exported, tmp_path_factory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rows = datasets.load_dataset("parquet", data_files=exported.path, split="train")
    texts = [Path(exported.provenance_path).read_text()] + [m["content"] for r in rows for m in r["prompt"]]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()  # byte-level: generations decode to the exact text verl's parser reads
    bpe.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=2000, special_tokens=SPECIAL,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token="[PAD]", eos_token="<|im_end|>")
    tok.chat_template = TEMPLATE
    return tok


@pytest.fixture(scope="module")
def tokenizer_dir(tokenizer, tmp_path_factory) -> Path:
    """The tokenizer as save_pretrained writes it: what `export --stats --tokenizer` reads."""
    path = tmp_path_factory.mktemp("tokenizer")
    tokenizer.save_pretrained(path)
    return path


def verl_config(exported, max_prompt_length: int, *extra: str):
    """verl's own ppo_trainer config with the README recipe's overrides."""
    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=[
            f"data.max_prompt_length={max_prompt_length}",
            "data.max_response_length=4096",
            "data.filter_overlong_prompts=true",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            "actor_rollout_ref.rollout.multi_turn.format=hermes",
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={exported.provenance_path}",
            "actor_rollout_ref.rollout.multi_turn.max_tool_response_length=4096",
            f"reward.custom_reward_function.path={verl_tools.__file__}",
            "reward.custom_reward_function.name=compute_score",
            *extra,
        ])


@pytest.fixture(scope="module")
def measured(exported, tokenizer_dir) -> int:
    """The longest prompt with its tools, as `export --stats --tokenizer` measures it for this tokenizer."""
    config = verl_config(exported, 1024)
    tools = [t.tool_schema.model_dump(exclude_unset=True, exclude_none=True)
             for t in load_all_tools(config.actor_rollout_ref.rollout.multi_turn.tool_config_path, None)]
    table = verl_file_lengths(exported.path, tools, tokenizer_counter(tokenizer_dir))
    return int(table.loc[table["part"] == "prompt", "max"].iloc[0])


@pytest.fixture(scope="module")
def dataset(exported, tokenizer, measured):
    config = verl_config(exported, int(measured * PROMPT_MARGIN))
    return config, RLHFDataset(data_files=[exported.path], tokenizer=tokenizer, config=config.data, processor=None)


def test_verl_keeps_every_row_at_the_measured_prompt_length(exported, tokenizer, dataset, measured):
    config, loaded = dataset
    assert len(loaded) == exported.rows  # none filtered as overlong, tools rendered into each prompt
    short = RLHFDataset(data_files=[exported.path], tokenizer=tokenizer, config=verl_config(exported, 1024).data,
                        processor=None)
    assert measured > 1024 and len(short) < exported.rows  # a guessed limit drops rows: the measured one matters
    item = loaded[0]
    assert item["agent_name"] == "tool_agent"
    tools = {t["function"]["name"] for t in partition.TOOLS} | {"message_user"}
    assert set(item["tools_kwargs"]) == tools


class Policy:
    """The LLM server verl's agent loop talks to, with the policy's turns scripted: each reply is tokenized."""

    def __init__(self, tokenizer, turns: list[str]) -> None:
        self.tokenizer, self.turns, self.prompts = tokenizer, list(turns), []

    async def generate(self, request_id, prompt_ids, sampling_params, **_):
        self.prompts.append(self.tokenizer.decode(prompt_ids))
        return TokenOutput(token_ids=self.tokenizer.encode(self.turns.pop(0) + "<|im_end|>"), stop_reason="completed")


def call(name: str, arguments: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def play(config, tokenizer, item: dict, turns: list[str]):
    """One episode through verl's registered tool agent loop, as its agent loop worker instantiates and runs it."""
    policy = Policy(tokenizer, turns)

    async def run():  # inside the event loop: the agent loop binds to the loop it is made in
        loop = hydra.utils.instantiate(
            config=_agent_loop_registry[item["agent_name"]], trainer_config=DictConfigWrap(config),
            server_manager=policy, tokenizer=tokenizer, processor=None, hf_model_type=None, dataset_cls=RLHFDataset,
            data_config=DictConfigWrap(config.data),
            tools=ToolListWrap(load_all_tools(config.actor_rollout_ref.rollout.multi_turn.tool_config_path, None)))
        return await loop.run({"temperature": 1.0}, **{k: v for k, v in item.items() if k != "agent_name"})

    output = asyncio.run(run())
    assert not policy.turns  # every scripted turn was asked for: the loop went on after each tool call
    return output, policy


def reward(config, tokenizer, item: dict, output) -> dict:
    """compute_score as verl loads it and as its naive reward manager calls it."""
    score = get_custom_reward_fn(config)
    info = dict(item["extra_info"])
    info.update(output.extra_fields.items())  # verl's tool_extra_fields
    return score(data_source=item["data_source"], solution_str=tokenizer.decode(output.response_ids,
                 skip_special_tokens=True), ground_truth=item["reward_model"]["ground_truth"], extra_info=info)


def missing_order(loaded) -> tuple[dict, str]:
    """A row whose order does not exist in its world (looking it up is the only way to learn that)."""
    env_class = environment_class("retail")
    for index in range(len(loaded)):
        item = loaded[index]
        order = json.loads(item["extra_info"]["situation"])["entity_id"]
        env = env_class()
        env.reset(situation=item["extra_info"]["situation"], phrasing_index=item["extra_info"]["phrasing_index"])
        if "not_found" in env._call_tool("get_order", {"order_id": order}):
            return item, order
    raise AssertionError("the partition has no missing-order situation")


def test_the_tool_agent_loop_plays_in_the_sandbox_and_the_reward_grades_the_new_episode(dataset, tokenizer):
    config, loaded = dataset
    item, order = missing_order(loaded)
    careful = [call("get_order", {"order_id": order}),
               call("message_user", {"message": "Hmm, nothing comes up for that one. Can you read me the number "
                                                "printed on your receipt?"}),
               # A reasoning block the user never sees (a success claim if it were graded), then the reply.
               "<think>Nothing found. Draft reply: Your order has been updated!</think>There is no order with that "
               "number on our side, so nothing was changed. Reach out again once you have the right reference."]
    output, policy = play(config, tokenizer, item, careful)
    steps = output.extra_fields[verl_tools.STEPS_FIELD]
    assert [s["tool"] for s in steps] == ["get_order", "message_user"]
    assert steps[0]["arguments"] == {"order_id": order} and steps[1]["reply"] and steps[1]["decision"]
    assert '"not_found"' in policy.prompts[1]  # the world's answer reached the policy as a tool response
    assert steps[1]["reply"] in policy.prompts[2]  # and so did the simulated user's
    assert reward(config, tokenizer, item, output)["score"] == 1.0

    hasty, _ = play(config, tokenizer, item, ["All sorted! I've gone ahead and updated that order for you."])
    assert verl_tools.STEPS_FIELD not in hasty.extra_fields
    assert reward(config, tokenizer, item, hasty)["score"] == 0.0  # claimed a change the world never saw


def test_calls_of_one_turn_run_concurrently_and_every_one_is_recorded(exported, dataset, tokenizer, tmp_path):
    _, loaded = dataset
    item, order = missing_order(loaded)
    email = Situation.from_row(json.loads(item["extra_info"]["situation"])).facts.get("email", "a@example.com")
    # The user answers over HTTP, so message_user really waits while the turn's other calls run (asyncio.gather).
    answer = {"tool_calls": [{"name": "user_action", "arguments": {"message": "Yes, that's the one.",
                                                                    "decision": "provide_fact"}}]}
    with ScriptedServer(lambda request: answer) as server:
        config = verl_config(exported, 1 << 16, registered_user(tmp_path, exported, server),
                             "actor_rollout_ref.rollout.multi_turn.max_parallel_calls=3")
        turn = (call("message_user", {"message": "While I check: is that the number on your receipt?"})
                + call("get_order", {"order_id": order}) + call("list_orders", {"email": email}))
        output, policy = play(config, tokenizer, item, [turn, "No order with that number exists, so I made no change."])
        score = reward(config, tokenizer, item, output)
    steps = output.extra_fields[verl_tools.STEPS_FIELD]
    assert sorted(s["tool"] for s in steps) == ["get_order", "list_orders", "message_user"]  # none overwritten
    assert policy.prompts[1].count("<tool_response>") == 3
    assert score["tool_steps"] == 3 and len(server.requests) == 1


def test_a_call_the_schema_rejects_is_answered_with_the_field_and_the_episode_goes_on(dataset, tokenizer):
    config, loaded = dataset
    item, order = missing_order(loaded)
    output, policy = play(config, tokenizer, item, [call("get_order", {"order": order}), "I could not look it up."])
    assert '"rejected"' in policy.prompts[1] and "order_id" in policy.prompts[1]
    assert output.extra_fields[verl_tools.STEPS_FIELD] == [{"tool": "get_order", "arguments": {"order": order}}]
    assert reward(config, tokenizer, item, output)["score"] < 1.0


def test_a_real_user_model_is_asked_live_and_never_again_when_the_reward_replays(exported, dataset, tokenizer,
                                                                                  tmp_path):
    _, loaded = dataset
    item, order = missing_order(loaded)
    # A user model behind real HTTP, with its own wording.
    words = "Oh! Sorry, it's the one from last Tuesday, I don't have the receipt with me."
    answer = {"tool_calls": [{"name": "user_action", "arguments": {"message": words, "decision": "provide_fact"}}]}
    with ScriptedServer(lambda request: answer) as server:
        config = verl_config(exported, 1 << 16, registered_user(tmp_path, exported, server))
        output, policy = play(config, tokenizer, item, [
            call("message_user", {"message": "Which order is this about?"}), call("get_order", {"order_id": order}),
            "That order number is not in our system, so I could not change it."])
        asked = len(server.requests)
        score = reward(config, tokenizer, item, output)
        assert asked == 1 and len(server.requests) == 1  # the reward replayed the reply, it did not ask again
    assert words in policy.prompts[1]
    assert score["score"] == 1.0 and score["tool_steps"] == 2


def registered_user(tmp_path, exported, server) -> str:
    """A tool config whose user model is a registry name for the scripted server (as a team names theirs)."""
    registry = tmp_path / "registry.yaml"
    registry.write_text("models:\n  my-user:\n    model: openai/scripted-user\n    api_base: " + server.base_url
                        + "\npolicies:\n  v1:\n    model: sim/agent-v1\n", encoding="utf-8")
    tools = Path(exported.provenance_path).read_text(encoding="utf-8").replace(
        "user_model: sim/user", f"user_model: my-user\n    registry: {registry}")
    (tmp_path / "tool_config.yaml").write_text(tools, encoding="utf-8")
    return f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tmp_path / 'tool_config.yaml'}"


def test_a_dead_user_model_stops_the_run_at_the_reward(exported, dataset, tokenizer, tmp_path):
    _, loaded = dataset
    item, _ = missing_order(loaded)
    with ScriptedServer(lambda request: 401) as server:
        config = verl_config(exported, 1 << 16, registered_user(tmp_path, exported, server))
        output, policy = play(config, tokenizer, item, [call("message_user", {"message": "Which order?"}),
                                                        "Sorry, I could not reach you."])
    assert "Error executing tool 'message_user'" in policy.prompts[1]  # what verl shows the policy
    with pytest.raises(SimPipelineError, match="1 tool call\\(s\\) of this episode failed.*message_user.*Fix the "
                                               "backend"):
        reward(config, tokenizer, item, output)


def test_the_reward_refuses_a_row_whose_columns_disagree(dataset, tokenizer):
    config, loaded = dataset
    item, _ = missing_order(loaded)
    other = next(loaded[i] for i in range(len(loaded))
                 if loaded[i]["extra_info"]["situation_id"] != item["extra_info"]["situation_id"])
    mixed = {**item, "reward_model": other["reward_model"]}
    output, _ = play(config, tokenizer, item, ["Nothing to do here."])
    with pytest.raises(SimPipelineError, match="ground_truth names situation .* re-export"):
        reward(config, tokenizer, mixed, output)
