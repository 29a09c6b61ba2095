"""An external trainer (a registry version's `trainer:` command): run on a cut's export, it returns a model string.

The stub trainer here is what a team's TRL or verl script would be, minus the GPU: it reads the export it is
given, writes a new `python:` callable agent that learned one thing from it (the first tool the SFT rows call),
and prints the agent's model string; sim_pipeline can then call that agent like any other.
"""

import json
import os
import sys
import textwrap

import pytest

from sim_pipeline.models.callable_agent import load_agent
from sim_pipeline.registry import TrainerSpec
from sim_pipeline.train.external import TrainerError, run_trainer

STUB = textwrap.dedent('''
    import json, os, pathlib, sys
    import pyarrow.parquet as pq

    export_dir, method = pathlib.Path(sys.argv[1]), sys.argv[2]
    assert os.environ["SIM_PIPELINE_EXPORT_DIR"] == str(export_dir) and os.environ["SIM_PIPELINE_TRAIN_METHOD"] == method
    [data] = sorted(export_dir.rglob("*.parquet"))
    rows = pq.read_table(data).to_pylist()
    calls = [call["function"]["name"] for row in rows for message in row["messages"]
             for call in (message.get("tool_calls") or [])]
    print(f"trained on {len(rows)} rows")  # what a trainer logs; only the last line is the model
    out = pathlib.Path(os.environ["STUB_AGENTS_DIR"]) / f"stub_agent_{method}.py"
    out.write_text(
        "def respond(messages, tools, sampling):\\n"
        f"    return {{'role': 'assistant', 'content': None, 'tool_calls': [{{'id': 'c1', 'type': 'function', "
        f"'function': {{'name': {calls[0]!r}, 'arguments': '{{}}'}}}}]}}\\n")
    print(f"python:stub_agent_{method}:respond")
''')


@pytest.fixture
def export_dir(tmp_path):
    """A TRL SFT export with two rows, as `sim-pipeline export --format trl` writes it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    call = {"id": "c0", "type": "function", "function": {"name": "get_order", "arguments": json.dumps({"order_id": "1"})}}
    rows = [{"messages": [{"role": "user", "content": "where is order 1?", "tool_calls": None},
                          {"role": "assistant", "content": None, "tool_calls": [call]}]}] * 2
    (tmp_path / "export" / "trl").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "export" / "trl" / "sft.parquet")
    return tmp_path / "export"


def test_the_trainer_gets_the_export_and_its_model_string_is_a_working_agent(tmp_path, export_dir, monkeypatch):
    (tmp_path / "stub.py").write_text(STUB)
    agents = tmp_path / "agents"
    agents.mkdir()
    monkeypatch.setenv("STUB_AGENTS_DIR", str(agents))
    model = run_trainer(TrainerSpec(command=(sys.executable, str(tmp_path / "stub.py"))), export_dir=export_dir,
                        method="sft", source_model="openai/my-agent")
    assert model == "python:stub_agent_sft:respond"
    monkeypatch.syspath_prepend(str(agents))
    reply = load_agent(model)([{"role": "user", "content": "hi"}], [], {})
    assert reply["tool_calls"][0]["function"]["name"] == "get_order"  # what it learned from the export


def test_a_failing_trainer_names_its_status_and_output_and_keeps_keys_out(tmp_path, export_dir, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-key-0123456789")
    script = tmp_path / "fail.py"
    script.write_text("import os, sys\nprint('CUDA out of memory, key', os.environ['OPENAI_API_KEY'], file=sys.stderr)\n"
                      "sys.exit(3)\n")
    with pytest.raises(TrainerError, match="exited with status 3") as failed:
        run_trainer(TrainerSpec(command=(sys.executable, str(script))), export_dir=export_dir, method="sft",
                    source_model="openai/my-agent")
    assert "CUDA out of memory" in str(failed.value) and "sk-test-secret" not in str(failed.value)


@pytest.mark.parametrize("printed", ["", "done training", "x" * 400])
def test_a_trainer_that_prints_no_model_string_is_an_error(tmp_path, export_dir, printed):
    script = tmp_path / "quiet.py"
    script.write_text(f"print({printed!r})\n")
    with pytest.raises(TrainerError, match="printed no model string last"):
        run_trainer(TrainerSpec(command=(sys.executable, str(script))), export_dir=export_dir, method="sft",
                    source_model="openai/my-agent")


def test_a_missing_or_slow_trainer_says_what_to_do(tmp_path, export_dir):
    with pytest.raises(TrainerError, match="not found. Fix: give the trainer's full path"):
        run_trainer(TrainerSpec(command=(str(tmp_path / "no-such-trainer"),)), export_dir=export_dir, method="sft",
                    source_model="m/x")
    script = tmp_path / "slow.py"
    script.write_text("import time\ntime.sleep(30)\n")
    with pytest.raises(TrainerError, match="timeout"):
        run_trainer(TrainerSpec(command=(sys.executable, str(script)), timeout_s=0.5), export_dir=export_dir,
                    method="sft", source_model="m/x")
    assert os.path.isdir(export_dir)
