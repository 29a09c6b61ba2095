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
