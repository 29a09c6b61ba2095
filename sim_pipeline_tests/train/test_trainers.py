"""The TRL exports train: SFTTrainer (assistant-only loss), DPOTrainer and RewardTrainer run on them for real.

No download: the model is a one-layer Llama built from a config, the tokenizer a word-level one trained here on the
exports' own text, and the chat template (written here) marks assistant turns with `{% generation %}`, as
`assistant_only_loss` needs. The exports are those of one real retail partition (the export tests' data), loaded the
README's way: `with_decoded_arguments(load_dataset("parquet", ...))`. Requires the [train] extra (`make test-train`,
what CI runs); without it these tests are skipped and the run says how to install it.
"""

import json
import math
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

if os.environ.get("SIM_PIPELINE_TRAIN_TESTS") == "required":  # CI: a missing extra is a failure, never a skip
    import torch  # noqa: F401
    import trl
else:
    trl = pytest.importorskip("trl", reason="the [train] extra is not installed: run `make test-train`")

import datasets

from sim_pipeline.cut.chat_format import with_decoded_arguments
from sim_pipeline.cut.cuts import CUTS
from sim_pipeline.cut.export import export_trl
from sim_pipeline_tests.cut import partition

TEMPLATE = """{%- for message in messages %}
{%- if message.role == "assistant" %}<|im_start|> assistant
{% generation %}{{ message.content or "" }}{%- for call in message.tool_calls or [] %}
<tool_call> {"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}} </tool_call>\
{%- endfor %} <|im_end|>{% endgeneration %}
{% else %}<|im_start|> {{ message.role }}
{{ message.content or "" }} <|im_end|>
{% endif %}{%- endfor %}
{%- if add_generation_prompt %}<|im_start|> assistant
{% endif %}"""
STEPS = 2
datasets.disable_progress_bars()


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("trl")
    return {f.dataset: Path(f.path) for f in export_trl(partition.cuts(*CUTS), out, tools=partition.TOOLS,
                                                        situations=partition.situations()) if f.path}


def load(path: Path):
    return with_decoded_arguments(datasets.load_dataset("parquet", data_files=str(path), split="train"))


@pytest.fixture(scope="module")
def tokenizer(exports):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = []
    for name in ("sft", "dpo", "reward"):
        for row in load(exports[name]):
            for column in ("messages", "prompt", "chosen", "rejected"):
                for m in row.get(column) or []:
                    texts.append((m["content"] or "") + " " + json.dumps([c["function"] for c in m["tool_calls"] or []]))
    words = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    words.train_from_iterator(texts, trainers.WordLevelTrainer(
        special_tokens=["[UNK]", "[PAD]", "<|im_start|>", "<|im_end|>"]))
    tok = PreTrainedTokenizerFast(tokenizer_object=words, unk_token="[UNK]", pad_token="[PAD]", eos_token="<|im_end|>")
    tok.chat_template = TEMPLATE
    return tok


def tiny(tokenizer, head="causal"):
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

    config = LlamaConfig(vocab_size=tokenizer.vocab_size, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=8192,
                         pad_token_id=tokenizer.pad_token_id, num_labels=1)
    return LlamaForSequenceClassification(config) if head == "score" else LlamaForCausalLM(config)


def settings(tmp_path, **extra) -> dict:
    # An iterable dataset has no length: max_steps bounds the run. max_length covers the longest conversation.
    return dict(output_dir=str(tmp_path), max_steps=STEPS, per_device_train_batch_size=2, report_to=[], use_cpu=True,
                save_strategy="no", logging_steps=1, max_length=8192, **extra)


def trained(trainer) -> float:
    result = trainer.train()
    assert trainer.state.global_step == STEPS and math.isfinite(result.training_loss)
    return result.training_loss


def test_sft_trains_on_the_agent_turns_only(exports, tokenizer, tmp_path):
    trainer = trl.SFTTrainer(model=tiny(tokenizer), processing_class=tokenizer, train_dataset=load(exports["sft"]),
                             args=trl.SFTConfig(**settings(tmp_path, assistant_only_loss=True)))
    first = next(iter(trainer.train_dataset))
    masked = sum(first["assistant_masks"]) if "assistant_masks" in first else None
    assert masked is None or 0 < masked < len(first["input_ids"])  # only the agent's tokens are targets
    trained(trainer)


def test_dpo_trains_on_the_answers_where_the_sides_part(exports, tokenizer, tmp_path):
    trainer = trl.DPOTrainer(model=tiny(tokenizer), ref_model=tiny(tokenizer), processing_class=tokenizer,
                             train_dataset=load(exports["dpo"]), args=trl.DPOConfig(**settings(tmp_path)))
    trained(trainer)


def test_reward_model_trains_on_the_pairs(exports, tokenizer, tmp_path):
    trainer = trl.RewardTrainer(model=tiny(tokenizer, "score"), processing_class=tokenizer,
                                train_dataset=load(exports["reward"]), args=trl.RewardConfig(**settings(tmp_path)))
    trained(trainer)
