"""Each way a conversation ends is explained once (protocol/endings.py), for every finish reason and status the
runner writes, and docs/concepts.md holds that table word for word."""

import re
from pathlib import Path

from sim_pipeline.protocol import endings
from sim_pipeline.protocol.statuses import ROLLOUT_STATUSES
from sim_pipeline.protocol.user_events import FINISH_REASONS

CONCEPTS = Path(__file__).resolve().parents[2] / "docs" / "concepts.md"


def test_every_finish_reason_has_one_meaning_and_every_status_an_ending():
    assert [e.finish_reason for e in endings.ENDINGS] == list(FINISH_REASONS)
    assert {s for e in endings.ENDINGS for s in e.statuses} == set(ROLLOUT_STATUSES)
    assert all(len(e.meaning) > 40 for e in endings.ENDINGS)


def test_user_left_says_the_simulated_user_ended_it_and_why():
    text = endings.meaning("user_left")
    assert "simulated user ended the conversation" in text and "refusal" in text and "patience" in text


def test_an_unknown_finish_reason_is_named_not_an_error():
    assert "'gone_fishing'" in endings.meaning("gone_fishing")


def test_the_docs_show_the_protocols_table():
    shown = re.search(r"<!-- endings:start -->\n(.*?)\n<!-- endings:end -->", CONCEPTS.read_text(), re.S)
    assert shown is not None, "docs/concepts.md lost its endings table markers"
    assert shown.group(1) == endings.markdown_table(), "re-run python -m sim_pipeline.protocol.endings"
