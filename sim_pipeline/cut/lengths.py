"""How long the exported rows are, in tokens: what a trainer's `max_length` / `max_prompt_length` must cover.

TRL's default `max_length` of 1024 silently drops or truncates rows longer than that (an SFT run on these exports
once kept no row at all). The count is cl100k_base tokens (the BPE litellm bundles, so counting never downloads)
of each part rendered as compact JSON: the prompt with the tool schemas it is trained with, and each completion;
or, given the model's own tokenizer.json (`export --stats --tokenizer`), that tokenizer's count of the same text.
The chat template adds the model's markers, typically a few tokens per message; the percentiles are for sizing
the limits, with a margin, not for exact packing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

LENGTH_COLUMNS = ("dataset", "part", "rows", "p50", "p95", "max")
PARTS = {  # dataset -> the columns whose lengths size a trainer's limits (prompt first, tools counted with it)
    "sft": ("messages",), "dpo": ("prompt", "chosen", "rejected"), "reward": ("chosen", "rejected"),
    "reward_pointwise": ("prompt", "completion"), "grpo": ("prompt",),
    "verl_grpo": ("prompt", "episode"),  # verl's response holds the whole episode: turns, tool results, user replies
}
_WITH_TOOLS = ("messages", "prompt", "chosen")  # the part a trainer renders with the `tools` column


@lru_cache(maxsize=1)
def _encoding() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never fetch the price map from the internet
    from litellm.litellm_core_utils.default_encoding import encoding  # tiktoken, offline, from litellm's bundle

    return encoding


def count_tokens(text: str) -> int:
    """cl100k_base tokens of a text."""
    return len(_encoding().encode(text, disallowed_special=()))


def tokenizer_counter(path: str | os.PathLike[str]) -> Callable[[str], int]:
    """A token counter from a model's own Hugging Face tokenizer: its `tokenizer.json`, or a folder holding one
    (what `save_pretrained` writes). Read from disk with the `tokenizers` library; nothing is downloaded."""
    from tokenizers import Tokenizer

    from sim_pipeline.errors import ExportError

    file = Path(path) / "tokenizer.json" if Path(path).is_dir() else Path(path)
    try:
        tokenizer = Tokenizer.from_file(str(file))
    except Exception as exc:  # noqa: BLE001 -- the library raises plain Exception for a missing or bad file
        raise ExportError(f"--tokenizer {path}: {file} is not a readable tokenizer.json ({exc}). Fix: pass the "
                          "tokenizer.json of the model you train, or the folder save_pretrained wrote") from None
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def row_lengths(row: Mapping[str, Any], dataset: str, count: Callable[[str], int] = count_tokens) -> dict[str, int]:
    """Tokens of each sizing part of one exported TRL row (the `tools` schemas counted with the prompt part)."""
    tools = count(_text(row["tools"])) if row.get("tools") else 0
    first = True
    out = {}
    for part in PARTS.get(dataset, ()):
        if part in row and row[part] is not None:
            out[part] = count(_text(row[part])) + (tools if first and part in _WITH_TOOLS else 0)
            first = False
    return out


def length_table(rows: Iterable[Mapping[str, Any]], dataset: str,
                 count: Callable[[str], int] = count_tokens) -> pd.DataFrame:
    """p50 / p95 / max tokens per sizing part of one exported dataset."""
    lengths: dict[str, list[int]] = {}
    for row in rows:
        for part, n in row_lengths(row, dataset, count).items():
            lengths.setdefault(part, []).append(n)
    return _summary(dataset, lengths)


def _summary(dataset: str, lengths: Mapping[str, list[int]]) -> pd.DataFrame:
    """One row per part: how many values, their p50 / p95 / max."""
    records = [{"dataset": dataset, "part": part, "rows": len(values),
                "p50": int(np.percentile(values, 50)), "p95": int(np.percentile(values, 95)), "max": int(max(values))}
               for part, values in lengths.items() if values]
    return pd.DataFrame(records, columns=list(LENGTH_COLUMNS))


def file_lengths(path: str | os.PathLike[str], dataset: str, count: Callable[[str], int] = count_tokens) -> pd.DataFrame:
    """The length table of one exported TRL Parquet file (cl100k_base tokens, or `count`'s)."""
    import pyarrow.parquet as pq

    return length_table(pq.read_table(Path(path)).to_pylist(), dataset, count)


def verl_file_lengths(path: str | os.PathLike[str], tools: list[Mapping[str, Any]],
                      count: Callable[[str], int] = count_tokens) -> pd.DataFrame:
    """The length table of a verl GRPO file: the prompt with the tool config's `tools` (verl renders them into
    every prompt), each group's longest old episode, and its longest tool result in characters (verl's
    `max_tool_response_length` is in characters)."""
    import pyarrow.parquet as pq

    rows = pq.read_table(Path(path)).to_pylist()
    lengths: dict[str, list[int]] = {"prompt": [], "episode": [], "tool_chars": []}
    for r in rows:
        sized = row_lengths({"prompt": r["prompt"], "tools": tools,
                             "episode": json.loads(r["extra_info"]["longest_episode"])}, "verl_grpo", count)
        for part, n in [*sized.items(), ("tool_chars", int(r["extra_info"]["tool_result_chars"]))]:
            lengths[part].append(n)
    return _summary("verl_grpo", lengths)


def exported_lengths(format: str, path: str | os.PathLike[str], dataset: str, provenance_path: str | None,  # noqa: A002
                     count: Callable[[str], int] = count_tokens) -> pd.DataFrame:
    """The length table of one exported TRL or verl file (what `export --stats` prints and docs/training.md shows):
    a verl prompt is counted with its tool config's tools, which verl renders into every prompt."""
    if format == "verl":
        import yaml

        config = yaml.safe_load(Path(str(provenance_path)).read_text(encoding="utf-8"))
        return verl_file_lengths(path, [t["tool_schema"] for t in config["tools"]], count)
    return file_lengths(path, dataset, count)
