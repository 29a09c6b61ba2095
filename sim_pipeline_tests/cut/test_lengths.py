"""Token lengths of exported rows: the limits a trainer needs, counted offline with litellm's bundled BPE."""

import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from sim_pipeline.cut.lengths import count_tokens, file_lengths, length_table, row_lengths

TOOLS = json.dumps([{"type": "function", "function": {"name": "get_order", "description": "Look an order up.",
                                                      "parameters": {"type": "object", "properties": {}}}}])


def chat(words: int) -> list[dict]:
    return [{"role": "user", "content": " ".join(["order"] * words)}, {"role": "assistant", "content": "done"}]


def test_counting_is_offline_bpe():
    assert count_tokens("hello world") == 2 and count_tokens("") == 0


def test_the_tools_count_with_the_prompt_only():
    row = {"prompt": chat(5), "chosen": chat(1), "rejected": chat(2), "tools": TOOLS}
    bare = row_lengths({**row, "tools": None}, "dpo")
    lengths = row_lengths(row, "dpo")
    assert lengths["prompt"] - bare["prompt"] == count_tokens(TOOLS)
    assert lengths["chosen"] == bare["chosen"] and lengths["rejected"] == bare["rejected"]


def test_percentiles_of_a_file(tmp_path):
    rows = [{"messages": chat(n), "tools": TOOLS} for n in range(1, 101)]
    path = tmp_path / "sft.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    table = file_lengths(path, "sft")
    assert list(table["part"]) == ["messages"] and table["rows"].iloc[0] == 100
    r = table.iloc[0]
    assert r.p50 < r.p95 < r["max"] == row_lengths(rows[-1], "sft")["messages"]
    assert length_table([], "sft").equals(pd.DataFrame(columns=list(table.columns)))


def _character_tokenizer(folder):
    """A model's own tokenizer, trained here (no download): a tiny BPE over a few words."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(["order done get_order"] * 10, trainers.BpeTrainer(vocab_size=30,
                                                                                    special_tokens=["[UNK]"]))
    folder.mkdir()
    tokenizer.save(str(folder / "tokenizer.json"))
    return tokenizer


def test_a_models_own_tokenizer_counts_the_same_parts(tmp_path):
    from sim_pipeline.cut.lengths import tokenizer_counter

    own = _character_tokenizer(tmp_path / "model")
    count = tokenizer_counter(tmp_path / "model")  # the folder save_pretrained writes, or the file itself
    row = {"prompt": chat(5), "chosen": chat(1), "rejected": chat(2), "tools": TOOLS}
    text = json.dumps(chat(1), ensure_ascii=False, separators=(",", ":"))
    assert row_lengths(row, "dpo", count)["chosen"] == len(own.encode(text, add_special_tokens=False).ids)
    assert row_lengths(row, "dpo", count) != row_lengths(row, "dpo")  # not cl100k's counts
    assert tokenizer_counter(tmp_path / "model" / "tokenizer.json")(text) == count(text)


def test_a_tokenizer_that_does_not_load_is_a_clear_error(tmp_path):
    import pytest

    from sim_pipeline.cut.lengths import tokenizer_counter
    from sim_pipeline.errors import ExportError

    with pytest.raises(ExportError, match="--tokenizer .*is not a readable tokenizer.json.*Fix: pass"):
        tokenizer_counter(tmp_path / "nowhere")


def test_a_verl_file_is_sized_with_the_tool_configs_tools_its_episodes_and_tool_results(tmp_path):
    from sim_pipeline.cut.lengths import verl_file_lengths

    episode = [{"role": "assistant", "content": "looking"}, {"role": "tool", "content": "x" * 700},
               {"role": "assistant", "content": "done"}]
    rows = [{"prompt": chat(n), "extra_info": {"longest_episode": json.dumps(episode[:1 + n % 3]),
                                               "tool_result_chars": 700 if n % 3 else 0}} for n in range(1, 31)]
    path = tmp_path / "grpo.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    tools = json.loads(TOOLS)
    table = verl_file_lengths(path, tools).set_index("part")
    assert list(table.index) == ["prompt", "episode", "tool_chars"] and set(table["rows"]) == {30}
    assert table.loc["prompt", "max"] == count_tokens(json.dumps(chat(30), separators=(",", ":"))) + count_tokens(
        json.dumps(tools, separators=(",", ":")))  # verl renders the tools into every prompt
    assert table.loc["episode", "max"] == count_tokens(json.dumps(episode, separators=(",", ":")))
    assert table.loc["tool_chars", "max"] == 700 and table.loc["tool_chars", "p50"] == 700
