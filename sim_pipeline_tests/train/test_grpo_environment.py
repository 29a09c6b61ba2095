"""GRPO on live episodes: TRL's GRPOTrainer runs the retail environment on the GRPO export and learns from its rewards.

The model is a one-layer Llama from a config with a byte-level BPE tokenizer trained here; its chat template is TRL's
bundled Qwen3 one, so TRL parses tool calls out of the generations itself. Before GRPO, a few hundred Adam steps
teach it two openings for one export row (a situation where the order does not exist): look the order up and say
it cannot be done (the grader gives 1.0), or claim success at once (0.0). TRL then samples both, runs each episode
in a fresh sandbox through the environment's tools, scores it with `sandbox_reward`, and the mixed group gives a
non-zero GRPO gradient. No download; seconds on a CPU. Requires the [train] extra (`make test-train`).
"""

import inspect
import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is marked experimental in TRL 1.16

if os.environ.get("SIM_PIPELINE_TRAIN_TESTS") == "required":  # CI: a missing extra is a failure, never a skip
    import torch
    import trl
else:
    trl = pytest.importorskip("trl", reason="the [train] extra is not installed: run `make test-train`")
    import torch

import datasets

from sim_pipeline.cut.export import export_trl
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.rollout.environment import MESSAGE_USER, environment_class, sandbox_reward
from sim_pipeline.world.reference import CANNOT_REPLY, DONE_REPLY
from sim_pipeline_tests.cut import partition

SPECIAL = ["[PAD]", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>",
           "</tool_response>", "<think>", "</think>"]
STEPS = 2
datasets.disable_progress_bars()


@pytest.fixture(scope="module")
def grpo_rows(tmp_path_factory) -> datasets.Dataset:
    """The TRL GRPO export of the real retail partition, loaded as a training script loads it."""
    (grpo,) = export_trl(partition.cuts("grpo_groups"), tmp_path_factory.mktemp("trl"), tools=partition.TOOLS,
                         situations=partition.situations())
    return datasets.load_dataset("parquet", data_files=grpo.path, split="train")


@pytest.fixture(scope="module")
def environment():
    return environment_class("retail", gateway=Gateway(fast_path=True))


def test_the_environment_tools_render_as_the_domain_declares_them(environment):
    from transformers.utils import get_json_schema

    for tool in environment.domain.tool_schemas:
        declared = tool["function"]
        rendered = get_json_schema(getattr(environment, declared["name"]))["function"]
        assert rendered["name"] == declared["name"] and rendered["description"] == declared["description"]
        params, props = rendered["parameters"], declared["parameters"]["properties"]
        assert set(params["properties"]) == set(props)
        assert set(params["required"]) == set(declared["parameters"].get("required", []))
        for name, spec in props.items():
            got = params["properties"][name]
            assert got["type"] == spec["type"] and got.get("enum") == spec.get("enum")
            if "pattern" in spec:  # what a type hint cannot carry is in the description, for the model to read
                assert json.dumps(spec["pattern"]) in got["description"]
    assert get_json_schema(environment.message_user)["function"]["parameters"]["required"] == ["message"]


def _tokenizer(texts: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen3_chat_template

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()  # byte-level: generations decode to the exact text TRL parses
    bpe.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=2000, special_tokens=SPECIAL,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token="[PAD]", eos_token="<|im_end|>")
    tok.chat_template = qwen3_chat_template  # a template TRL knows how to parse tool calls from
    return tok


def _taught(tok, tools: list, episodes: list[list[dict]]):
    """A one-layer Llama taught the assistant turns of the given episodes (teacher forcing on those tokens only)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=8192, pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id))
    batches = []
    for messages in episodes:
        ids, labels = [], []
        for end in range(len(messages)):  # every assistant turn's tokens are targets, the rest context
            if messages[end]["role"] != "assistant":
                continue
            context = tok.apply_chat_template(messages[:end], tools=tools, add_generation_prompt=True, tokenize=False)
            turn = tok.apply_chat_template(messages[:end + 1], tools=tools, tokenize=False)[len(context):]
            context_ids = tok(context)["input_ids"][len(ids):]
            turn_ids = tok(turn.rstrip("\n"))["input_ids"]
            ids, labels = ids + context_ids + turn_ids, labels + [-100] * len(context_ids) + turn_ids
        batches.append((torch.tensor([ids]), torch.tensor([labels])))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(150):
        ids, labels = batches[step % len(batches)]
        loss = model(input_ids=ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model


def test_grpo_trains_on_live_episodes_in_the_sandbox(grpo_rows, environment, tmp_path):
    from transformers.utils import get_json_schema

    # A row whose order does not exist: looking it up and saying so passes; claiming success does not.
    row = next(r for r in grpo_rows if "not_found" in _looked_up(environment, r))
    order_id = json.loads(row["situation"])["entity_id"]
    # The tools as TRL renders them into the prompt: every public method but reset, in name order.
    tools = [get_json_schema(method) for name, method in inspect.getmembers(environment, inspect.isfunction)
             if name != "reset" and not name.startswith("_")]
    call = {"type": "function", "function": {"name": "get_order", "arguments": {"order_id": order_id}}}
    careful = row["prompt"] + [{"role": "assistant", "content": "", "tool_calls": [call]},
                               {"role": "tool", "name": "get_order", "content": _looked_up(environment, row)},
                               {"role": "assistant", "content": CANNOT_REPLY}]
    hasty = row["prompt"] + [{"role": "assistant", "content": DONE_REPLY}]
    texts = [json.dumps(tools)] + [str(m.get("content")) for m in careful] + [json.dumps(call)] * 20
    tok = _tokenizer(texts)
    model = _taught(tok, tools, [careful, hasty])
    before = [p.detach().clone() for p in model.parameters()]

    played = []  # every episode TRL plays: it reuses an environment across steps, resetting it per episode

    class Recorded(environment):
        def reset(self, **row) -> None:
            super().reset(**row)
            played.append(self.episode)

    args = trl.GRPOConfig(output_dir=str(tmp_path), max_steps=STEPS, per_device_train_batch_size=6,
                          num_generations=6, max_completion_length=256, max_tool_calling_iterations=2,
                          learning_rate=1e-3, beta=0.0, use_cpu=True, report_to=[], logging_steps=1,
                          save_strategy="no", seed=0)
    trainer = trl.GRPOTrainer(model=model, reward_funcs=[sandbox_reward], environment_factory=Recorded,
                              train_dataset=datasets.Dataset.from_list([row] * 12), processing_class=tok,
                              args=args)
    trainer.train()

    logs = [entry for entry in trainer.state.log_history if "rewards/sandbox_reward/mean" in entry]
    assert trainer.state.global_step == STEPS and len(logs) == STEPS
    assert len(played) == STEPS * args.num_generations
    assert all(e.situation.situation_id == row["situation_id"] for e in played)
    # Live: the model's own calls reached the sandbox, and the rewards came from those episodes.
    looked = [e for e in played if any(ev.tool == "get_order" for ev in e.sandbox.events)]
    assert looked and any(entry["tools/call_frequency"] > 0 for entry in logs)
    assert any(entry["reward_std"] > 0 and entry["grad_norm"] > 0 for entry in logs)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert MESSAGE_USER in tok.apply_chat_template(row["prompt"], tools=tools, tokenize=False)


def _looked_up(environment, row: dict) -> str:
    """What get_order answers for the row's order in a fresh episode."""
    env = environment()
    env.reset(**row)
    order_id = json.loads(row["situation"])["entity_id"]
    return env.get_order(order_id=order_id) if order_id else ""
