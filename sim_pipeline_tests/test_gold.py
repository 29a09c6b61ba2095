"""Human gold label files: the format, refusal of program-made labels by their declared kind, and precedence over
program labels."""

import json

import numpy as np
import pandas as pd
import pytest

from sim_pipeline.errors import DomainPackError
from sim_pipeline.gold import apply_gold, load_gold, transcript_digest

MESSAGES = [
    {"role": "system", "content": "You are an agent.", "tool_calls": None},
    {"role": "user", "content": "Cancel order 48213.", "tool_calls": None},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "cancel_order", "arguments": '{"order_id": "48213"}'}}]},
    {"role": "tool", "content": '{"status": "updated"}', "tool_call_id": "c1"},
    {"role": "assistant", "content": "Cancelled.", "tool_calls": None},
]


def pack(tmp_path, *lines, name="labels.jsonl"):
    (tmp_path / "gold").mkdir(exist_ok=True)
    (tmp_path / "gold" / name).write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return tmp_path


def label(**overrides):
    return {"situation_id": "s1", "messages": MESSAGES, "label": 1, "labeller": "ana.silva", "source": "human",
            **overrides}


def test_transcript_digest_ignores_system_prompt_and_call_ids():
    other = [dict(m) for m in MESSAGES]
    other[0] = {"role": "system", "content": "A different system prompt."}
    other[2] = {**other[2], "tool_calls": [{**other[2]["tool_calls"][0], "id": "zz"}]}
    assert transcript_digest(other) == transcript_digest(MESSAGES)
    changed = [*MESSAGES[:-1], {"role": "assistant", "content": "Cancelled!"}]
    assert transcript_digest(changed) != transcript_digest(MESSAGES)


def test_load_gold_reads_both_transcript_forms(tmp_path):
    sha = transcript_digest(MESSAGES)
    labels = load_gold(pack(tmp_path, label(note="clean"), "",
                            label(situation_id="s2", messages=None, transcript_sha256=sha, label=0,
                                  labeller="ben", rollout_id="r9")))
    assert list(labels["situation_id"]) == ["s1", "s2"] and list(labels["transcript_sha256"]) == [sha, sha]
    assert list(labels["label"]) == [1.0, 0.0] and list(labels["line"]) == [1, 3]
    assert labels.loc[0, "note"] == "clean"


def test_a_pack_without_gold_has_no_labels(tmp_path):
    assert len(load_gold(tmp_path)) == 0


@pytest.mark.parametrize(("line", "message"), [
    (label(source="program"), r"line 2: source 'program': the row declares a program-made label, and only a "
                              r"person's labels can be gold .*Fix: have a person label this rollout and set source to "
                              r"'human'"),
    (label(source="model"), r"line 2: field 'source' is 'model': each row declares who labelled it by kind, 'human' "
                            r"\(a person\) or 'program' \(a model, a judge, a script\)\. Fix: write \"source\": \"human\""),
    (label(source=None), r"line 2: field 'source' is missing: each row declares who labelled it by kind"),
    (label(source="Human"), r"line 2: field 'source' is 'Human'"),
    (label(label=0.5), r"line 2: label 0.5 is not 0 or 1"),
    (label(label=True), r"line 2: label True is not 0 or 1"),
    (label(messages=None), r"line 2: no transcript"),
    (label(situation_id=""), r"line 2: field 'situation_id' is missing"),
    (label(labeller=" "), r"line 2: field 'labeller' is missing"),
    (label(extra=1), r"line 2: unknown field\(s\) \['extra'\]"),
    ("{not json", r"line 2: not valid JSON"),
    ("[1, 2]", r"line 2: expected a JSON object"),
])
def test_bad_lines_are_refused_naming_file_and_line(tmp_path, line, message):
    with pytest.raises(DomainPackError, match=r"labels\.jsonl: " + message):
        load_gold(pack(tmp_path, label(), line))


def test_conflicting_human_labels_must_be_adjudicated(tmp_path):
    pack(tmp_path, label(), name="a.jsonl")
    pack(tmp_path, label(label=0, labeller="ben"), name="b.jsonl")
    with pytest.raises(DomainPackError, match=r"a\.jsonl:1, .*b\.jsonl:1: conflicting human labels.*adjudicate"):
        load_gold(tmp_path)
    pack(tmp_path, label(labeller="ben"), name="b.jsonl")  # agreeing duplicates are one label
    assert len(load_gold(tmp_path)) == 1


# The labeller's kind is what the row declares: a name is never read for it (issue 29, item 5). The old name guess
# refused people whose names start like a model family and let through models it had no prefix for.
@pytest.mark.parametrize("name", ["Claudette Martin", "Qwen Li", "Phi-Long Tran", "Gemini Okafor", "Mistral Dupont"])
def test_a_person_declared_human_is_a_person_whatever_their_name(tmp_path, name):
    labels = load_gold(pack(tmp_path, label(labeller=name)))
    assert list(labels["labeller"]) == [name]
    grades = pd.DataFrame({"situation_id": ["s1"], "gold_reward": [0.0], "gold_source": "program",
                           "gold_reason": ["oracle"]})
    out = apply_gold(grades, pd.Series([transcript_digest(MESSAGES)]), labels)
    assert out.loc[0, "gold_source"] == "human" and out.loc[0, "gold_reason"] == f"human ({name})"


@pytest.mark.parametrize("name", ["ChatGPT", "\uff47\uff50\uff54-4o", "sonnet", "openai/gpt-4o-mini", "ana.silva"])
def test_a_program_declared_program_is_a_program_whatever_its_name(tmp_path, name):
    with pytest.raises(DomainPackError, match=r"labels\.jsonl: line 1: source 'program': the row declares a "
                                              r"program-made label, and only a person's labels can be gold"):
        load_gold(pack(tmp_path, label(labeller=name, source="program")))


def test_human_labels_override_program_labels_where_they_match():
    grades = pd.DataFrame({"situation_id": ["s1", "s1", "s2"], "gold_reward": [0.0, 0.0, 1.0],
                           "gold_source": "program", "gold_reason": ["oracle a", "oracle b", "oracle c"]})
    other = transcript_digest([*MESSAGES, {"role": "user", "content": "thanks"}])
    transcripts = pd.Series([transcript_digest(MESSAGES), other, transcript_digest(MESSAGES)])
    labels = pd.DataFrame([{"situation_id": "s1", "transcript_sha256": transcript_digest(MESSAGES), "label": 1.0,
                            "labeller": "ana", "note": "fine", "file": "f", "line": 1}])
    out = apply_gold(grades, transcripts, labels)
    assert list(out["gold_reward"]) == [1.0, 0.0, 1.0]
    assert list(out["gold_source"]) == ["human", "program", "program"]
    assert out.loc[0, "gold_reason"] == "human (ana): fine" and out.loc[1, "gold_reason"] == "oracle b"
    assert grades.loc[0, "gold_source"] == "program"  # the input is not modified
    np.testing.assert_array_equal(apply_gold(grades, transcripts, labels.iloc[:0]), grades)


@pytest.mark.parametrize(("line", "message"), [
    (label(messages=["Cancel order 48213."]), r"line 2: messages\[0\] is not a chat message"),
    (label(messages=[{"role": "assistant", "tool_calls": "cancel_order"}]), r"line 2: messages\[0\] is not a chat"),
    (label(messages=[{"role": "assistant", "tool_calls": [{"function": ["cancel_order"]}]}]),
     r"line 2: messages\[0\] is not a chat message"),
    ('{"situation_id": "s1", "situation_id": "s2"}', r"line 2: not valid JSON \(key\(s\) \['situation_id'\] appear twice"),
    ("[" * 5000 + "]" * 5000, r"line 2: not valid JSON \(nested too deeply to read\)"),
])
def test_malformed_lines_are_refused_not_crashed_on(tmp_path, line, message):
    with pytest.raises(DomainPackError, match=r"labels\.jsonl: " + message):
        load_gold(pack(tmp_path, label(), line))


def test_a_gold_file_that_is_not_utf8_names_the_line(tmp_path):
    path = pack(tmp_path, label(), label(situation_id="s2")) / "gold" / "labels.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"s2"', b'"s\xe92"'))
    with pytest.raises(DomainPackError, match=r"labels\.jsonl: line 2: byte 0xe9 is not UTF-8 text"):
        load_gold(tmp_path)
