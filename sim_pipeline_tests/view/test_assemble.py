"""The view's data: one row per rollout with its situation and grades, filter options, the delta's guarded rows,
stale marks, escaping, and a file that needs no network."""

import re

import pytest

from sim_pipeline import warehouse
from sim_pipeline.registry import PolicyVersion
from sim_pipeline.view.assemble import FAIL, PASS, assemble, counts
from sim_pipeline.view.page import render

VERSIONS = [PolicyVersion("agent-v1", "retail", "sim/agent-v1"),
            PolicyVersion("agent-v2", "retail", "sim/agent-v2", baseline="agent-v1")]


@pytest.fixture(scope="module")
def data(two_version_run):
    return assemble(str(two_version_run[0]), "retail", ["0"], VERSIONS)


def _table(base, asset, version):
    return warehouse.read_table(warehouse.partition_path(base, "retail", asset, policy_version=version, seed="0"))


def test_one_row_per_rollout_with_its_situation_grades_and_events(data, two_version_run):
    base = two_version_run[0]
    for v in ("agent-v1", "agent-v2"):
        rollouts, grades = _table(base, "rollouts", v), _table(base, "grades", v)
        rows = [r for r in data.transcripts if r["version"] == v]
        assert sorted(r["id"] for r in rows) == sorted(rollouts["rollout_id"])
        graded = grades.set_index("rollout_id")
        for r in rows:
            g = graded.loc[r["id"]]
            assert r["verdict"] == (PASS if g["reward"] >= 1.0 else FAIL)
            assert r["grade"]["judge_reason"] == g["judge_reason"]
            assert r["disagrees"] == ((g["judge_reward"] >= 1.0) != (r["oracle_reward"] >= 1.0))
        events = rollouts.set_index("rollout_id")["tool_events"]
        assert sum(len(r["tool_events"]) for r in rows) == int(events.map(len).sum())
    assert all(r["goal"] for r in data.transcripts)  # search situations too (they are not in `situations`)
    assert any(r["hidden_facts"] for r in data.transcripts)
    assert any(r["user_events"] for r in data.transcripts)


def test_filter_options_are_the_values_the_rows_hold(data):
    options = data.filter_options
    assert options["version"] == ["agent-v1", "agent-v2"] and options["seed"] == ["0"]
    assert set(options["split"]) == {"train", "heldout"} and set(options["verdict"]) <= {"pass", "fail", "not graded"}
    assert options["tool"] == sorted({r["tool"] for r in data.transcripts})
    assert sum(counts(data.transcripts, verdict=v) for v in options["verdict"]) == len(data.transcripts)


def test_delta_rows_carry_direction_and_guard_and_slices_are_paired(data, two_version_run):
    (delta,) = data.deltas
    table = warehouse.read_table(warehouse.partition_path(two_version_run[0], "retail", "delta",
                                                          policy_version="agent-v2"))
    assert list(delta.table["metric"]) == list(table["metric"])
    assert set(delta.table["direction"]) == {"higher_is_better", "lower_is_better"}
    assert list(delta.table["guarded"]) == list(table["reason"].str.startswith("must not regress"))
    assert dict(delta.verdict_rows()).keys() == set(table["verdict"])
    assert {"tool", "rule", "stance", "world_state", "tool_condition"} <= set(delta.slices)
    tools = delta.slices["tool"]
    assert int(tools["n_tasks"].sum()) == int(table.loc[table["metric"] == "pass@1", "n_tasks"].iloc[0])


def test_a_rewritten_input_marks_its_figures_stale(two_version_run, tmp_path):
    import shutil

    base = tmp_path / "warehouse"
    shutil.copytree(two_version_run[0], base)
    rollouts = warehouse.partition_path(base, "retail", "rollouts", policy_version="agent-v2", seed="0")
    frame = warehouse.read_table(rollouts)
    warehouse.write_table(rollouts, frame.iloc[:-1])  # a run cut short after rewriting the rollouts
    stale = assemble(str(base), "retail", ["0"], VERSIONS)
    v2 = next(v for v in stale.versions if v.slug == "agent-v2")
    v1 = next(v for v in stale.versions if v.slug == "agent-v1")
    assert v2.stale["grades"] and v2.stale["scores"] and not v1.stale["grades"]
    assert stale.deltas[0].stale and any("agent-v2" in line for line in stale.lineage)
    assert "[STALE]" in render(stale).split('id="decision"')[1]


def test_model_output_is_shown_as_text_not_markup(data):
    row = dict(data.transcripts[0])
    hostile = '<script>window.pwned = 1</script><img src=x onerror="window.pwned=2">'
    row["messages"] = [*row["messages"], {"role": "assistant", "content": hostile, "tool_calls": [], "name": None,
                                          "tool_call_id": None}]
    row["oracle_reason"] = hostile
    data.transcripts[0] = row
    try:
        html = render(data)
    finally:
        data.transcripts[0] = dict(row, messages=row["messages"][:-1])
    assert hostile not in html and "<img src=x" not in html
    assert html.count("&lt;script&gt;window.pwned = 1&lt;/script&gt;") == 2


def test_the_file_loads_nothing_from_the_network(view_file):
    html = view_file[0].read_text(encoding="utf-8")
    tags = re.findall(r"<(?:script|link|img|iframe)\b[^>]*>", html, flags=re.IGNORECASE)
    assert tags and not [t for t in tags if re.search(r"(?:src|href)\s*=\s*[\"']?(?:https?:)?//", t)]
    assert "Plotly" in html and 'data-slot="ship-line"' in html


def test_same_warehouse_gives_the_same_bytes(data):
    assert render(data) == render(data)


def test_view_of_a_domain_with_nothing_materialized_says_so(tmp_path):
    empty = assemble(str(tmp_path / "nothing"), "retail", ["0"], VERSIONS)
    assert empty.transcripts == [] and empty.deltas[0].table is None
    html = render(empty)
    assert "not computed" in html and empty.versions[0].summary.pass_at_1 is None


def test_the_page_leads_each_delta_with_the_summarys_ship_line(view_file, data):
    """The decision the text summary leads with, word for word (measure/ship.py), heads each delta in the page."""
    import html as html_lib

    from sim_pipeline.registry import REGISTRY_PATH, load_registry, versions_for
    from sim_pipeline.report import ship_decisions

    page = view_file[0].read_text(encoding="utf-8")
    assert [d.ship for d in data.deltas] == ship_decisions(str(view_file[1]), "retail", data.seeds[0], VERSIONS)
    registered = versions_for(load_registry(REGISTRY_PATH), "retail")  # what `view` shows: the registry's guards
    decisions = ship_decisions(str(view_file[1]), "retail", "0", registered)
    assert decisions
    for d in decisions:
        assert f'data-candidate="{d.candidate}" data-decision="{d.decision}"' in page
        assert html_lib.escape(d.reason, quote=False) in page


def test_each_system_prompt_is_kept_once_and_named_by_its_transcripts(data, two_version_run):
    from sim_pipeline.view.assemble import prompt_key, prompt_uses

    rollouts = _table(two_version_run[0], "rollouts", "agent-v1")
    texts = {m[0]["content"] for m in rollouts["messages"]}
    assert texts <= set(data.system_prompts.values()) and data.system_prompts
    for row in data.transcripts:
        system = [m for m in row["messages"] if m["role"] == "system"]
        assert len(system) == 1 and system[0]["content"] is None
        assert system[0]["chars"] == len(data.system_prompts[system[0]["prompt"]])
    assert sum(prompt_uses(data.transcripts).values()) == len(data.transcripts)
    assert {prompt_key(t) for t in data.system_prompts.values()} == set(data.system_prompts)
    html = render(data)
    assert html.count('id="prompt-') == len(data.system_prompts) < len(data.transcripts)


def test_the_endings_legend_counts_each_finish_reason_and_explains_it(data, two_version_run, view_file):
    import html as html_lib

    from sim_pipeline.protocol.endings import ENDINGS, meaning
    from sim_pipeline.view.assemble import ending_rows

    rows = ending_rows(data.transcripts, ["agent-v1", "agent-v2"])
    assert [r["finish_reason"] for r in rows][:len(ENDINGS)] == [e.finish_reason for e in ENDINGS]
    for i, version in enumerate(["agent-v1", "agent-v2"]):
        written = _table(two_version_run[0], "rollouts", version)["finish_reason"].value_counts().to_dict()
        assert {r["finish_reason"]: r["counts"][i] for r in rows if r["counts"][i]} == written
    page = view_file[0].read_text(encoding="utf-8")
    legend = re.search(r'<tr id="ending-user_left".*?</tr>', page, re.S).group(0)
    assert html_lib.escape(meaning("user_left").split("`")[0]) in legend and "<code>leave</code>" in legend
    assert page.count('href="#ending-') == len(data.transcripts)
