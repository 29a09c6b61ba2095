"""Exports load with the Hugging Face loaders a trainer uses, in the shapes TRL, OpenAI and verl document.

The main inputs are real: one partition of `sim-pipeline run --domain retail` (agent-v1, seed 0; rollouts
reduced to the columns the cuts read) in `data/`, cut by `build_cut` as the cut assets do. Edge cases use
synthetic rows.
"""

import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local files only: the loaders must never reach the Hub
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import datasets
import jsonschema
import pandas as pd
import pytest
import yaml

from sim_pipeline.cut.chat_format import OPENAI_KEYS, with_decoded_arguments
from sim_pipeline.cut.cuts import CUTS, build_cut
from sim_pipeline.cut.export import FORMATS, export, export_openai, export_trl, export_verl
from sim_pipeline.cut.preference import build_preference_pairs
from sim_pipeline.cut.reward_model import reward_model_set
from sim_pipeline.cut.sft import select_for_sft
from sim_pipeline.domain import load_domain
from sim_pipeline.errors import ExportError
from sim_pipeline.protocol.environment_tools import MESSAGE_USER, MESSAGE_USER_TOOL
from sim_pipeline.situation import Situation
from sim_pipeline_tests.cut.partition import table as stored_table

TOOLS = load_domain("retail").tool_schemas
ROLES = {"system", "user", "assistant", "tool"}
datasets.disable_progress_bars()


@pytest.fixture(scope="module")
def cuts() -> dict[str, pd.DataFrame]:
    rollouts = stored_table("rollouts")
    grades = stored_table("grades")
    return {
        name: build_cut(name, rollouts, grades, tools=TOOLS, judge_trusted=True, opt_out=False).table
        for name in CUTS
    }


@pytest.fixture(scope="module")
def situations() -> list[Situation]:
    table = stored_table("situations")
    return [Situation.from_row(r) for r in table.to_dict("records")]


@pytest.fixture(scope="module")
def exported(cuts, situations, tmp_path_factory) -> dict[tuple[str, str], object]:
    out = tmp_path_factory.mktemp("exports")
    files = (
        export_trl(cuts, out / "trl", tools=TOOLS, situations=situations)
        + export_openai(cuts, out / "openai", tools=TOOLS)
        + export_verl(cuts, out / "verl", domain="retail", tools=TOOLS, situations=situations)
    )
    return {(f.format, f.dataset): f for f in files}


def load(path: str, tmp_path: Path) -> datasets.Dataset:
    """What a training script does: the packaged parquet/json loader on a local file (cache in tmp_path)."""
    builder = "json" if path.endswith(".jsonl") else "parquet"
    return datasets.load_dataset(builder, data_files=path, split="train", cache_dir=str(tmp_path / "hf"))


def decoded(ds: datasets.Dataset) -> list[dict]:
    """The rows a trainer sees after the README's one step: tool-call arguments decoded, row by row."""
    return list(with_decoded_arguments(ds))


def lines(path: str) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def assert_chat(messages: list[dict], *, first: str, last: str) -> None:
    """A chat-template conversation: role and content on every turn, calls answered by id, roles as asked."""
    assert messages[0]["role"] == first and messages[-1]["role"] == last
    open_calls: set[str] = set()
    for message in messages:
        assert message["role"] in ROLES and isinstance(message["content"], str)
        for call in message.get("tool_calls") or []:
            assert call["type"] == "function" and isinstance(call["function"]["arguments"], dict)
            open_calls.add(call["id"])
        if message["role"] == "tool":
            assert message["tool_call_id"] in open_calls


def test_a_grpo_export_needs_the_situations_its_rows_replay(cuts, tmp_path):
    with pytest.raises(ExportError, match="pass situations="):
        export_trl({"grpo_groups": cuts["grpo_groups"]}, tmp_path, tools=TOOLS)
    (grpo,) = export_trl({"grpo_groups": cuts["grpo_groups"]}, tmp_path, tools=TOOLS, situations=[])
    assert (grpo.rows, grpo.path, grpo.left_out) == (0, None, {"no_situation": cuts["grpo_groups"]["group_id"].nunique()})


def test_every_format_writes_each_of_its_cuts(exported):
    assert sorted(exported) == sorted(
        [("trl", d) for d in ("sft", "dpo", "reward", "reward_pointwise", "grpo")]
        + [("openai", "sft"), ("openai", "dpo"), ("verl", "grpo")]
    )
    # OpenAI's DPO takes text-only pairs; every pair of the retail agents parts after a tool turn or at a call.
    openai_dpo = exported.pop(("openai", "dpo"))
    assert (openai_dpo.rows, openai_dpo.path) == (0, None) and set(openai_dpo.left_out) <= {
        "not_text_only", "sides_part_outside_an_assistant_turn"} and openai_dpo.left_out["not_text_only"] > 0
    assert all(f.rows > 0 and Path(f.path).exists() for f in exported.values())


def test_trl_sft_is_conversational_language_modeling_with_tools(exported, cuts, tmp_path):
    ds = load(exported["trl", "sft"].path, tmp_path)
    assert {
        "messages",
        "tools",
        "situation_id",
        "seed",
        "policy_version",
        "rollout_id",
        "judge_version",
    } <= set(ds.column_names)
    assert ds.num_rows == len(cuts["sft"]) - sum(exported["trl", "sft"].left_out.values())
    for row in decoded(ds):
        assert_chat(row["messages"], first="system", last="assistant")
        assert json.loads(row["tools"]) == TOOLS  # TRL json-decodes a string tools column


def test_trl_dpo_is_preference_with_explicit_prompt(exported, tmp_path):
    ds = load(exported["trl", "dpo"].path, tmp_path)
    assert {
        "prompt",
        "chosen",
        "rejected",
        "tools",
        "chosen_rollout_id",
        "rejected_rollout_id",
        "margin",
    } <= set(ds.column_names)
    for row in decoded(ds):
        # The prompt is everything both sides share (it ends where the agent answers: after a user or tool turn);
        # each side is only the agent's answer there, never the simulated user's words or a tool's reply.
        assert row["prompt"][0]["role"] == "system" and row["prompt"][-1]["role"] in ("user", "tool")
        for side in ("chosen", "rejected"):
            assert {m["role"] for m in row[side]} == {"assistant"}
            assert_chat([*row["prompt"], *row[side]], first="system", last="assistant")
        assert row["chosen"] != row["rejected"] and row["chosen_rollout_id"] != row["rejected_rollout_id"]


def test_trl_reward_is_preference_with_implicit_prompt_and_margin(exported, tmp_path):
    ds = load(exported["trl", "reward"].path, tmp_path)
    assert {"chosen", "rejected", "margin", "tools"} <= set(
        ds.column_names
    ) and "prompt" not in ds.column_names
    for row in decoded(ds):
        chosen, rejected = row["chosen"], row["rejected"]
        assert_chat(chosen, first="system", last="assistant")
        assert chosen[:2] == rejected[:2]  # the shared prompt: system and the opening user turn
        assert (
            row["margin"] == pytest.approx(row["chosen_reward"] - row["rejected_reward"])
            and row["margin"] > 0
        )


def test_trl_pointwise_is_unpaired_preference(exported, cuts, tmp_path):
    ds = load(exported["trl", "reward_pointwise"].path, tmp_path)
    assert {"prompt", "completion", "label", "reward"} <= set(ds.column_names)
    assert ds.num_rows == len(cuts["reward_model_set"])
    assert ds["label"] == [r >= 1.0 for r in ds["reward"]]


def test_trl_grpo_is_prompt_only_with_the_reward_columns(exported, cuts, tmp_path):
    ds = load(exported["trl", "grpo"].path, tmp_path)
    assert {
        "prompt",
        "rewards",
        "rollout_ids",
        "group_size",
        "group_pass_rate",
        "situation_id",
        "seed",
        "situation",
        "phrasing_index",
    } <= set(ds.column_names)
    assert ds.num_rows == cuts["grpo_groups"]["group_id"].nunique()
    for row in decoded(ds):
        assert_chat(row["prompt"], first="system", last="user")
        # The situation an RL environment replays: the one the group's prompt opened.
        situation = Situation.from_row(json.loads(row["situation"]))
        assert situation.situation_id == row["situation_id"] and situation.seed == row["seed"]
        assert situation.phrasings[row["phrasing_index"]] == row["prompt"][-1]["content"]
        passes = sum(r == 1.0 for r in row["rewards"])
        assert (
            len(row["rewards"]) == len(row["rollout_ids"]) == row["group_size"]
            and 0 < passes < row["group_size"]
        )
    # Groups come round-robin over fault kinds: the first round shows every kind once.
    kinds = ds["tool_condition"]
    assert len(set(kinds[: len(set(kinds))])) == len(set(kinds))


def test_openai_sft_lines_carry_weights_and_only_documented_keys(exported, tmp_path):
    sft = exported["openai", "sft"]
    rows, provenance = lines(sft.path), lines(sft.provenance_path)
    assert len(rows) == len(provenance) == sft.rows and [p["line"] for p in provenance] == list(
        range(sft.rows)
    )
    for row, prov in zip(rows, provenance, strict=True):
        assert set(row) == {"messages", "tools"} and row["tools"] == TOOLS
        for message in row["messages"]:
            assert set(message) <= set(OPENAI_KEYS[message["role"]]) and None not in message.values()
            assert ("weight" in message) == (message["role"] == "assistant")
            for call in message.get("tool_calls", []):
                assert isinstance(json.loads(call["function"]["arguments"]), dict)
        assert (
            any(m.get("weight") == 1 for m in row["messages"]) and row["messages"][-1]["role"] == "assistant"
        )
        assert {"situation_id", "seed", "policy_version", "rollout_id", "judge_version"} <= set(prov)
    assert load(sft.path, tmp_path).column_names == ["messages", "tools"]


def test_openai_dpo_lines_hold_one_assistant_turn_per_side(make, to_frames, tools, tmp_path):
    # Two answers to the opening that part at the first reply, a text turn: what OpenAI's text-only DPO takes.
    pairs = []
    for sid, worse in (("s1", "I can't help with orders."), ("s2", "Please call us instead.")):
        chosen, rejected = make(sid, reward=1.0, extra_turns=1), make(sid, sample_index=1, reward=0.0, extra_turns=1)
        rejected[0]["messages"][2]["content"] = worse
        pairs += [chosen, rejected]
    (dpo,) = export("openai", {"preference_pairs": build_preference_pairs(*to_frames(pairs))[0]}, tmp_path,
                    tools=tools)
    rows, provenance = lines(dpo.path), lines(dpo.provenance_path)
    assert len(rows) == len(provenance) == dpo.rows == 2
    for row, prov in zip(rows, provenance, strict=True):
        assert set(row) == {"input", "preferred_output", "non_preferred_output"}
        assert (
            set(row["input"]) == {"messages", "tools"} and row["input"]["messages"][-1]["role"] != "assistant"
        )
        for side in ("preferred_output", "non_preferred_output"):
            assert [m["role"] for m in row[side]] == ["assistant"] and "weight" not in row[side][0]
            assert "tool_calls" not in row[side][0]  # OpenAI documents DPO for text inputs and outputs only
        assert not any(m["role"] == "tool" or m.get("tool_calls") for m in row["input"]["messages"])
        assert row["preferred_output"][0]["content"].startswith("Which order")
        assert row["non_preferred_output"] != row["preferred_output"]
        assert {"chosen_rollout_id", "rejected_rollout_id", "judge_version", "turn_index"} <= set(prov)
    assert set(load(dpo.path, tmp_path).column_names) == {"input", "preferred_output", "non_preferred_output"}


def test_verl_rows_have_the_documented_fields(exported, cuts, tmp_path):
    ds = load(exported["verl", "grpo"].path, tmp_path)
    assert ds.column_names == ["data_source", "agent_name", "prompt", "ability", "reward_model", "extra_info"]
    assert ds.num_rows == cuts["grpo_groups"]["group_id"].nunique()
    for index, row in enumerate(ds):
        assert row["data_source"] == "sim_pipeline/retail" and row["agent_name"] == "tool_agent"
        assert [m["role"] for m in row["prompt"]] == ["system", "user"]
        assert row["reward_model"]["style"] == "rule"
        truth = json.loads(row["reward_model"]["ground_truth"])
        info = row["extra_info"]
        assert truth == {"domain": "retail", "seed": info["seed"], "situation_id": info["situation_id"]}
        assert (
            info["index"] == index and len(info["rollout_ids"]) == len(info["rewards"]) == info["group_size"]
        )
        assert {"policy_version", "group_id", "judge_version"} <= set(info)
        assert Situation.from_row(json.loads(info["situation"])).situation_id == info["situation_id"]
        # verl's tool agent loop hands each tool its row's create_kwargs: every tool is bound to this situation
        assert info["need_tools_kwargs"] is True
        assert set(info["tools_kwargs"]) == {t["function"]["name"] for t in TOOLS} | {MESSAGE_USER}
        for bound in info["tools_kwargs"].values():
            assert bound["create_kwargs"] == {"situation": info["situation"], "phrasing_index": info["phrasing_index"]}


def test_verl_tool_config_binds_every_declared_tool_to_the_sandbox(exported):
    config = yaml.safe_load(Path(exported["verl", "grpo"].provenance_path).read_text())
    assert Path(exported["verl", "grpo"].provenance_path).name == "tool_config.yaml"
    assert [t["tool_schema"] for t in config["tools"]] == [*TOOLS, MESSAGE_USER_TOOL]
    for tool in config["tools"]:
        assert tool["class_name"] == "sim_pipeline.rollout.verl_tools.SandboxTool"
        assert tool["config"] == {"type": "native", "domain": "retail", "user_model": "sim/user"}


def source_calls(cuts: dict[str, pd.DataFrame]) -> dict[str, dict]:
    """Every tool call of the cuts by id: its name and decoded arguments."""
    calls = {}
    for table in cuts.values():
        for column in ("messages", "prompt", "completion", "chosen", "rejected"):
            for messages in table.get(column, []):
                for message in messages:
                    for call in message["tool_calls"] or []:
                        calls[call["id"]] = {
                            "name": call["function"]["name"],
                            "arguments": json.loads(call["function"]["arguments"]),
                        }
    return calls


def test_tool_calls_round_trip_and_imitation_targets_fit_the_declared_schema(exported, cuts, tmp_path):
    source, schemas = source_calls(cuts), {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    seen = 0
    for (fmt, dataset), f in exported.items():
        rows = lines(f.path) if fmt == "openai" else decoded(load(f.path, tmp_path))
        for row in rows:
            for key, messages in _conversations(row):
                for message in messages:
                    target = _is_target(fmt, dataset, key, message)
                    for call in message.get("tool_calls") or []:
                        arguments = call["function"]["arguments"]
                        arguments = json.loads(arguments) if fmt == "openai" else arguments
                        assert {"name": call["function"]["name"], "arguments": arguments} == source[
                            call["id"]
                        ]
                        if target:
                            jsonschema.validate(arguments, schemas[call["function"]["name"]])
                        seen += 1
    assert seen > 100


def _conversations(row: dict):
    for key in (
        "messages",
        "prompt",
        "chosen",
        "rejected",
        "completion",
        "preferred_output",
        "non_preferred_output",
    ):
        if key in row:
            yield key, row[key]
    if "input" in row:
        yield "input", row["input"]["messages"]


def _is_target(fmt: str, dataset: str, key: str, message: dict) -> bool:
    """Turns a trainer imitates: assistant turns of TRL SFT, weight 1 in OpenAI SFT, OpenAI's preferred."""
    if fmt == "trl":
        return dataset == "sft" and message["role"] == "assistant"
    return (dataset == "sft" and message.get("weight") == 1) or key == "preferred_output"


# --- What the exports leave out or mask (synthetic cut rows) -----------------------------------------------


def bad_call_rollout(make, situation_id, *, reward, sample_index=0, shared=False, arguments=None):
    """A rollout with one more tool call, which the schema rejects (no order_id by default), then an error."""
    row, grade = make(
        situation_id, reward=reward, sample_index=sample_index, final_text=f"done {sample_index}"
    )
    bad = {
        "id": f"call_bad_{sample_index}",
        "type": "function",
        "function": {"name": "cancel_order", "arguments": json.dumps(arguments or {})},
    }
    reply = {
        "role": "tool",
        "content": '{"status": "rejected"}',
        "tool_calls": None,
        "tool_call_id": bad["id"],
        "name": "cancel_order",
    }
    first = {"role": "assistant", "content": None, "tool_calls": [bad], "tool_call_id": None, "name": None}
    position = 2 if shared else len(row["messages"]) - 1
    row["messages"] = [*row["messages"][:position], first, reply, *row["messages"][position:]]
    return row, grade


def test_a_schema_breaking_call_is_masked_for_openai_and_dropped_for_trl(make, to_frames, tools, tmp_path):
    rollouts, grades = to_frames([bad_call_rollout(make, "s1", reward=1.0), make("s2", reward=1.0)])
    sft = select_for_sft(rollouts, grades, tools=tools)
    (trl,) = export("trl", {"sft": sft}, tmp_path / "trl", tools=tools)
    (openai,) = export("openai", {"sft": sft}, tmp_path / "openai", tools=tools)
    assert (trl.rows, trl.left_out) == (1, {"invalid_tool_call": 1})
    assert (openai.rows, openai.masked_turns) == (2, 1)
    weights = [
        [m.get("weight") for m in line["messages"] if m["role"] == "assistant"] for line in lines(openai.path)
    ]
    assert weights == [
        [1, 0, 1],
        [1, 1],
    ]  # the rejected call stays as context; the recovery is still imitated
    assert [p["masked_turns"] for p in lines(openai.provenance_path)] == [1, 0]


def test_a_pair_is_dropped_when_chosen_breaks_the_schema_after_the_sides_part(
    make, to_frames, tools, tmp_path
):
    after = [
        bad_call_rollout(make, "s1", reward=1.0),
        make("s1", sample_index=1, reward=0.0, final_text="no"),
    ]
    shared = [
        bad_call_rollout(make, "s2", reward=1.0, shared=True),
        bad_call_rollout(make, "s2", reward=0.0, sample_index=1, shared=True),
    ]
    pairs, _ = build_preference_pairs(*to_frames(after + shared))
    (trl,) = export("trl", {"preference_pairs": pairs}, tmp_path / "trl", tools=tools)
    (openai,) = export("openai", {"preference_pairs": pairs}, tmp_path / "openai", tools=tools)
    assert (trl.rows, trl.left_out) == (1, {"chosen_invalid_tool_call": 1})
    # OpenAI: the first pair's chosen answer breaks the schema; the second's input holds a tool turn, which OpenAI's
    # text-only DPO cannot take.
    assert (openai.rows, openai.left_out, openai.path) == (0, {"chosen_invalid_tool_call": 1, "not_text_only": 1},
                                                           None)


def test_identical_sides_carry_no_preference(make, to_frames, tools, tmp_path):
    pairs, _ = build_preference_pairs(
        *to_frames([make("s1", reward=1.0), make("s1", sample_index=1, reward=0.0)])
    )
    assert len(pairs) == 1  # the same conversation graded 1 and 0: judge noise, not a preference
    for fmt in ("trl", "openai"):
        (f,) = export(fmt, {"preference_pairs": pairs}, tmp_path / fmt, tools=tools)
        assert (f.rows, f.path, f.left_out) == (0, None, {"identical_sides": 1})


def test_openai_dpo_needs_the_sides_to_part_at_an_assistant_turn(make, to_frames, tools, tmp_path):
    chosen, rejected = make("s1", reward=1.0), make("s1", sample_index=1, reward=0.0)
    rejected[0]["messages"][3]["content"] = (
        '{"status": "timeout"}'  # same call, the world answered differently
    )
    pairs, _ = build_preference_pairs(*to_frames([chosen, rejected]))
    (f,) = export("openai", {"preference_pairs": pairs}, tmp_path, tools=tools)
    assert f.left_out == {"sides_part_outside_an_assistant_turn": 1}


def test_an_empty_dataset_removes_the_earlier_file(make, to_frames, tools, tmp_path):
    rollouts, grades = to_frames([make("s1", reward=1.0)])
    (f,) = export("openai", {"sft": select_for_sft(rollouts, grades, tools=tools)}, tmp_path, tools=tools)
    assert Path(f.path).exists() and Path(f.provenance_path).exists()
    (f,) = export(
        "openai",
        {"sft": select_for_sft(rollouts, grades.assign(reward=0.0), tools=tools)},
        tmp_path,
        tools=tools,
    )
    assert (f.rows, f.path) == (0, None) and not list(tmp_path.iterdir())


def test_arguments_of_conflicting_types_round_trip_in_parquet(make, to_frames, tools, tmp_path):
    rows = [make("s1", reward=1.0), bad_call_rollout(make, "s2", reward=0.0, arguments={"order_id": 1001})]
    pointwise, _ = reward_model_set(*to_frames(rows))
    (f,) = export("trl", {"reward_model_set": pointwise}, tmp_path, tools=tools)
    rows = decoded(load(f.path, tmp_path))
    ids = [c["function"]["arguments"]["order_id"] for row in rows for m in row["completion"] for c in m["tool_calls"] or []]
    assert sorted(ids, key=str) == [1001, "A1001", "A1001"]  # each call keeps its own types


@pytest.mark.parametrize(
    ("fmt", "cuts", "message"),
    [
        ("csv", {"sft": pd.DataFrame()}, "unknown export format 'csv'"),
        ("verl", {"sft": pd.DataFrame()}, "reads the cuts \\['grpo_groups'\\]"),
    ],
)
def test_bad_requests_name_the_fix(fmt, cuts, message, tmp_path):
    with pytest.raises(ExportError, match=message):
        export(fmt, cuts, tmp_path)


def test_the_cli_offers_every_format_and_no_other():
    from sim_pipeline.cli import parser

    for fmt in FORMATS:
        assert parser().parse_args(["export", "--format", fmt]).format == fmt
    with pytest.raises(SystemExit):
        parser().parse_args(["export", "--format", "csv"])


# --- Nested arguments through Parquet and two real chat templates -------------------------------------------
QWEN_STYLE = """{%- for message in messages %}
{%- if message.role == "assistant" %}<|im_start|>assistant
{% generation %}{{ message.content or "" }}{%- for call in message.tool_calls or [] %}
<tool_call>
{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}
</tool_call>{%- endfor %}<|im_end|>{% endgeneration %}
{% else %}<|im_start|>{{ message.role }}
{{ message.content or "" }}<|im_end|>
{% endif %}{%- endfor %}"""
LLAMA3_STYLE = """{%- for message in messages %}<|start_header_id|>{{ message.role }}<|end_header_id|>

{% if message.tool_calls %}{%- for call in message.tool_calls %}{"name": "{{ call.function.name }}", \
"parameters": {{ call.function.arguments | tojson }}}{%- endfor %}{%- else %}{{ message.content or "" }}\
{%- endif %}<|eot_id|>{%- endfor %}"""


def _template(source: str):
    import jinja2
    from jinja2.ext import Extension

    class Generation(Extension):
        """`{% generation %}...{% endgeneration %}`: the assistant-mask markers of training templates; renders its body."""

        tags = {"generation"}

        def parse(self, parser):
            next(parser.stream)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    return jinja2.Environment(extensions=[Generation]).from_string(source)


def _rendered_calls(text: str) -> list[dict]:
    """Every {"name": ..., "arguments"|"parameters": {...}} object a rendered conversation holds."""
    decoder, calls, at = json.JSONDecoder(), [], 0
    while (at := text.find('{"name": ', at)) >= 0:
        value, end = decoder.raw_decode(text, at)
        calls.append({"name": value["name"], "arguments": value.get("arguments", value.get("parameters"))})
        at = end
    return calls


def nested_rollouts(make, to_frames):
    """Rollouts of two tools with differently shaped arguments: a flat look-up, then an order of dish objects."""
    food = load_domain("food_delivery")
    pairs = []
    for i, (items, street) in enumerate([([{"dish": "pad thai", "quantity": 2}], "12 Harbor Lane"),
                                         ([{"dish": "lemonade", "quantity": 1}, {"dish": "cheeseburger",
                                                                                  "quantity": 3}], "9 Elm Street")]):
        row, grade = make(f"n{i}", reward=1.0, sample_index=i)
        look = {"id": f"look_{i}", "type": "function", "function": {"name": "get_customer", "arguments": json.dumps(
            {"customer_id": "C1234"})}}
        place = {"id": f"place_{i}", "type": "function", "function": {"name": "place_order", "arguments": json.dumps(
            {"customer_id": "C1234", "restaurant_id": "R101", "items": items,
             "delivery_address": {"street": street, "city": "Portland", "zip": "97201"}})}}
        system, user = row["messages"][:2]
        row["messages"] = [system, user,
                           {**user, "role": "assistant", "content": None, "tool_calls": [look]},
                           {**user, "role": "tool", "content": '{"status": "ok"}', "tool_call_id": look["id"]},
                           {**user, "role": "assistant", "content": None, "tool_calls": [place]},
                           {**user, "role": "tool", "content": '{"status": "created"}', "tool_call_id": place["id"]},
                           {**user, "role": "assistant", "content": "Your order is placed."}]
        pairs.append((row, grade))
    return food.tool_schemas, to_frames(pairs)


def test_nested_arguments_survive_parquet_and_render_schema_valid_in_two_templates(make, to_frames, tmp_path):
    tools, (rollouts, grades) = nested_rollouts(make, to_frames)
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    sft = select_for_sft(rollouts, grades, tools=tools)
    pointwise, _ = reward_model_set(rollouts, grades)
    files = export("trl", {"sft": sft, "reward_model_set": pointwise}, tmp_path / "trl", tools=tools)
    assert {f.dataset: f.rows for f in files} == {"sft": 2, "reward_pointwise": 2}
    rendered = 0
    for f in files:
        raw = datasets.load_dataset("parquet", data_files=f.path, split="train", cache_dir=str(tmp_path / "hf"))
        column = "messages" if f.dataset == "sft" else "completion"
        call_type = raw.features[column].feature["tool_calls"].feature["function"]["arguments"]
        assert call_type.dtype == "string"  # JSON text: never one struct merged from every tool's arguments
        for row in with_decoded_arguments(raw):
            for template in (QWEN_STYLE, LLAMA3_STYLE):
                calls = _rendered_calls(_template(template).render(messages=row[column]))
                assert [c["name"] for c in calls] == ["get_customer", "place_order"]
                for call in calls:
                    assert None not in call["arguments"].values()
                    jsonschema.validate(call["arguments"], schemas[call["name"]])
                    rendered += 1
    assert rendered == 16  # 2 files x 2 rows x 2 templates x 2 calls
