"""The peer benchmark's contract (sim_pipeline_tests/bench/bench_peer_inspect.py): the conversation both sides hold,
the call count that refuses a side holding another, the skip without inspect's venv, and the pin the docs name."""

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from sim_pipeline_tests.bench import bench_peer_inspect as bench

REPO = Path(__file__).resolve().parents[1]


def _request(tool_results: int) -> dict:
    messages = [{"role": "system", "content": "You are a shop assistant."},
                {"role": "user", "content": "Where is order 48213? It is late."}]
    messages += [{"role": "tool", "content": "{}"}] * tool_results
    return {"messages": messages}


def test_the_scripted_agent_looks_up_tracks_then_replies():
    agent = bench._agent(0.0)
    first, second, third = (agent(_request(n)) for n in range(3))
    assert first["tool_calls"] == [{"name": "get_order", "arguments": {"order_id": "48213"}}]
    assert second["tool_calls"] == [{"name": "track_shipment", "arguments": {"order_id": "48213"}}]
    assert "tool_calls" not in third and bench.TARGET in third["content"]


def test_the_scripted_user_answers_once_satisfied_through_its_tool():
    [call] = bench._user(0.0)(_request(2))["tool_calls"]
    assert call["name"] == "user_action" and call["arguments"]["decision"] == "satisfied"


def test_a_side_holding_other_conversations_is_refused():
    def server(n: int) -> SimpleNamespace:
        return SimpleNamespace(requests=[{}] * n, misses=[])

    bench._expect_calls("ok side", server(30), server(10), 10)
    with pytest.raises(RuntimeError, match=r"other side: \(31, 10\) agent/user requests for 10 conversations"):
        bench._expect_calls("other side", server(31), server(10), 10)


def test_without_the_inspect_venv_it_records_nothing_and_says_why(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench, "INSPECT_VENV", tmp_path / "no-venv")
    assert bench.figures() == []
    assert f"no inspect_ai venv at {tmp_path / 'no-venv'}" in capsys.readouterr().out


def test_the_docs_name_the_inspect_version_the_makefile_pins():
    pin = re.search(r"^INSPECT_AI_VERSION := (\S+)$", (REPO / "Makefile").read_text(), flags=re.M).group(1)
    assert f"inspect_ai {pin}" in (REPO / "docs" / "testing.md").read_text()
    assert re.search(r"^bench: .*\$\(INSPECT_VENV\)/\.inspect", (REPO / "Makefile").read_text(), flags=re.M)
    assert not re.search(r"^test: .*INSPECT", (REPO / "Makefile").read_text(), flags=re.M)
