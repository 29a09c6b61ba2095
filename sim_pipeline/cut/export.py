"""Exports: the cuts as files a trainer loads without a conversion script (TRL, OpenAI fine-tuning, verl).

Shapes follow each tool's documentation (the rows themselves are built in `export_rows.py`):
- TRL ("Dataset formats and types"): conversational language modeling (`messages` + `tools`) for
  SFTTrainer, preference with explicit prompt (`prompt`/`chosen`/`rejected`, cut where the agent's answers part) for
  DPOTrainer, preference with
  implicit prompt (`chosen`/`rejected` + `margin`) for RewardTrainer, unpaired preference
  (`prompt`/`completion`/`label`) for KTO/BCO, prompt-only (`prompt`) for GRPOTrainer, whose reward functions
  receive every other column. `tools` is a JSON string column, and so are tool-call arguments: one Parquet struct
  column cannot hold every tool's arguments without merging them (load with `chat_format.with_decoded_arguments`).
- OpenAI fine-tuning: chat lines `{"messages", "tools"}` with `weight` 0/1 on assistant turns; DPO lines
  `{"input": {"messages", "tools"}, "preferred_output", "non_preferred_output"}`. Lines hold documented keys
  only; provenance goes to a sidecar `<name>.provenance.jsonl`, line for line.
- verl ("Prepare Data for Post-Training", "Multi-turn Rollout Support"): Parquet rows with `data_source`, `prompt`,
  `ability`, `reward_model` {style, ground_truth}, `extra_info` (with `tools_kwargs` binding every tool to the row's
  situation), and `agent_name` for its tool agent loop; beside them `tool_config.yaml`, the domain's tools and
  message_user as `rollout/verl_tools.SandboxTool` (the sandbox world), for `multi_turn.tool_config_path`.
Provenance (situation_id, seed, policy_version, rollout ids, judge_version) rides along as extra TRL columns
and in verl's `extra_info`.
"""

import json
import os
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import yaml
from upath import UPath

from sim_pipeline import defaults
from sim_pipeline.cut import export_rows as build
from sim_pipeline.errors import ExportError
from sim_pipeline.protocol.environment_tools import MESSAGE_USER_TOOL
from sim_pipeline.seeding import canonical_json
from sim_pipeline.situation import Situation
from sim_pipeline.warehouse import write_table

FORMATS = ("trl", "openai", "verl")
# For each format: cut -> (dataset name, row builder); files are `<dataset>.parquet` or `<dataset>.jsonl`.
FORMAT_DATASETS: dict[str, dict[str, tuple[str, Callable[[pd.DataFrame, build.Context], build.Built]]]] = {
    "trl": {
        "sft": ("sft", build.trl_sft),
        "preference_pairs": ("dpo", build.trl_dpo),
        "reward_model_pairs": ("reward", build.trl_reward),
        "reward_model_set": ("reward_pointwise", build.trl_pointwise),
        "grpo_groups": ("grpo", build.trl_grpo),
    },
    "openai": {"sft": ("sft", build.openai_sft), "preference_pairs": ("dpo", build.openai_dpo)},
    "verl": {"grpo_groups": ("grpo", build.verl_grpo)},
}
_SUFFIX = {"trl": ".parquet", "openai": ".jsonl", "verl": ".parquet"}
VERL_TOOL_CLASS = "sim_pipeline.rollout.verl_tools.SandboxTool"
VERL_TOOL_CONFIG = "tool_config.yaml"


@dataclass(frozen=True)
class ExportedFile:
    """One exported dataset: its path (None when no row survived), rows, and what was left out or masked."""

    format: str
    dataset: str
    cut: str
    path: str | None
    rows: int
    provenance_path: str | None = None  # OpenAI: the provenance sidecar; verl: the tool config
    left_out: dict[str, int] = field(default_factory=dict)
    masked_turns: int = 0


def export_trl(
    cuts: Mapping[str, pd.DataFrame], out_dir: str | os.PathLike[str], *, tools: Sequence[Mapping[str, Any]],
    situations: Iterable[Situation] | None = None,
) -> list[ExportedFile]:
    """Write the TRL datasets of the given cuts (sft, dpo, reward, reward_pointwise, grpo) as Parquet."""
    return export("trl", cuts, out_dir, tools=tools, situations=situations)


def export_openai(
    cuts: Mapping[str, pd.DataFrame], out_dir: str | os.PathLike[str], *, tools: Sequence[Mapping[str, Any]]
) -> list[ExportedFile]:
    """Write OpenAI fine-tuning JSONL (sft, dpo) of the given cuts, each with a provenance sidecar."""
    return export("openai", cuts, out_dir, tools=tools)


def export_verl(
    cuts: Mapping[str, pd.DataFrame], out_dir: str | os.PathLike[str], *, domain: str,
    tools: Sequence[Mapping[str, Any]], situations: Iterable[Situation] | None = None,
) -> list[ExportedFile]:
    """Write verl's GRPO Parquet (one row per group) from the grpo_groups cut, and its tool config."""
    return export("verl", cuts, out_dir, tools=tools, domain=domain, situations=situations)


def verl_tool_config(domain: str, tools: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """verl's tool config: each domain tool and message_user as a SandboxTool of the domain, with its schema."""
    schemas = [*tools, MESSAGE_USER_TOOL]
    return {"tools": [{"class_name": VERL_TOOL_CLASS, "config": {"type": "native", "domain": domain,
                                                                  "user_model": defaults.DEFAULT_USER_MODEL},
                       "tool_schema": dict(schema)} for schema in schemas]}


def export(
    fmt: str,
    cuts: Mapping[str, pd.DataFrame],
    out_dir: str | os.PathLike[str],
    *,
    tools: Sequence[Mapping[str, Any]] = (),
    domain: str = "",
    situations: Iterable[Situation] | None = None,
) -> list[ExportedFile]:
    """Write every dataset of one format whose cut is given, under out_dir; return what was written.

    The GRPO datasets need the situations their groups came from (the situations and search tables): each row
    carries its situation, which the RL environment (rollout/environment.py) replays in a fresh world.
    """
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r}: use one of {list(FORMATS)}")
    known = [cut for cut in FORMAT_DATASETS[fmt] if cut in cuts]
    if not known:
        raise ExportError(
            f"the {fmt} export reads the cuts {list(FORMAT_DATASETS[fmt])} and got {sorted(cuts)}: "
            f"pass at least one of them"
        )
    if fmt == "verl" and not domain:
        raise ExportError("the verl export names its data_source after the domain: pass domain='<name>'")
    if not tools:
        raise ExportError(
            f"the {fmt} export checks every tool call against the declared tools (verl: lists them in its tool "
            f"config): pass tools=load_domain(<name>).tool_schemas"
        )
    if "grpo_groups" in known and situations is None:
        raise ExportError(
            "the GRPO export binds each row to its situation so an RL environment can replay it: pass "
            "situations=<the Situation objects of the situations and search tables> (sim-pipeline export does)"
        )
    bound = {s.situation_id: canonical_json(s.to_row()) for s in situations or ()}
    context = build.Context([dict(t) for t in tools], domain, bound)
    written = []
    for cut in known:
        dataset, builder = FORMAT_DATASETS[fmt][cut]
        built = builder(cuts[cut], context)
        path = dataset_path(fmt, cut, out_dir)
        sidecar = None
        if built.rows:
            sidecar = _write(fmt, path, built.rows)
            if fmt == "verl":
                sidecar = str(path.with_name(VERL_TOOL_CONFIG))
                _write_text(Path(sidecar), yaml.safe_dump(verl_tool_config(domain, context.tools), sort_keys=False))
        else:
            remove_dataset(fmt, cut, out_dir)
        written.append(
            ExportedFile(
                fmt,
                dataset,
                cut,
                str(path) if built.rows else None,
                len(built.rows),
                sidecar,
                dict(sorted(built.left_out.items())),
                built.masked_turns,
            )
        )
    return written


def dataset_path(fmt: str, cut: str, out_dir: str | os.PathLike[str]) -> Path:
    """Where one cut's dataset of a format goes under out_dir."""
    return Path(out_dir) / f"{FORMAT_DATASETS[fmt][cut][0]}{_SUFFIX[fmt]}"


def remove_dataset(fmt: str, cut: str, out_dir: str | os.PathLike[str]) -> None:
    """Delete a cut's dataset (and sidecar) of an earlier export, so a refused or empty cut leaves none."""
    path = dataset_path(fmt, cut, out_dir)
    path.unlink(missing_ok=True)
    if fmt == "openai":
        _sidecar_path(path).unlink(missing_ok=True)
    if fmt == "verl":
        path.with_name(VERL_TOOL_CONFIG).unlink(missing_ok=True)


def _write(fmt: str, path: Path, rows: list) -> str | None:
    """Write one dataset atomically; return its provenance sidecar's path, if it has one."""
    if fmt != "openai":
        _write_parquet(path, rows)
        return None
    sidecar = _sidecar_path(path)
    _write_jsonl(path, (line for line, _ in rows))
    _write_jsonl(sidecar, ({"line": i, **provenance} for i, (_, provenance) in enumerate(rows)))
    return str(sidecar)


def _write_parquet(path: Path, rows: list[dict]) -> None:
    try:
        table = pa.Table.from_pylist(rows)
        write_table(UPath(path), table, checksum_file=False)  # a trainer's file, handed on: no warehouse sidecar
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise ExportError(
            f"{path}: the rows do not fit one Parquet schema ({exc}); a column takes different JSON types in "
            f"different rows: export --format openai, which keeps every row as its own JSON line, and report the "
            f"cut that produced it"
        ) from exc


def _write_jsonl(path: Path, records: Iterable[dict]) -> None:
    """Write JSON lines atomically."""
    _write_text(path, "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records))


def _write_text(path: Path, text: str) -> None:
    """Write a text file atomically: to a temporary file beside the target, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)  # readers see the old file or the new one, never half of one
    finally:
        tmp.unlink(missing_ok=True)


def _sidecar_path(path: Path) -> Path:
    return path.with_name(path.name.removesuffix(".jsonl") + ".provenance.jsonl")
