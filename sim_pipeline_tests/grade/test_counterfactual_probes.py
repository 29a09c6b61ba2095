"""The counterfactual probes on a pack nobody here wrote (camelCase tools, ST-123456 ids) played by an agent over HTTP
in its own words ("All sorted 👍"): a judge that follows the closing words is refused by the closing swap, a judge
blind to tool names by the rename, and the embedded good judge by neither; the swapped cases' labels are the
oracle's own."""

import asyncio
import json

import pandas as pd
import pytest

from sim_pipeline import defaults
from sim_pipeline.domain import load_domain
from sim_pipeline.grade.grading import grade_rollouts
from sim_pipeline.grade.judge_trust import judge_trust_report
from sim_pipeline.grade.probes import swap_closing
from sim_pipeline.grade.stress import check_probes, swappable
from sim_pipeline.models.cards import find_card
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.rollout.runner import Policy, RolloutSpec, run_rollouts
from sim_pipeline.search.situations import build_situation
from sim_pipeline.world.oracle import fails_whatever_said, label
from sim_pipeline.world.sandbox import Event
from sim_pipeline.world.state import build_state
from sim_pipeline_tests.rollout.test_http_agent import call, cell, say, scripted
from sim_pipeline_tests.scripted_server import ScriptedServer

STAY_ID = {"type": "string", "pattern": "^ST-[0-9]{6}$"}
GUESTS = {"type": "array", "minItems": 1, "maxItems": 3, "items": {
    "type": "object", "required": ["guestName"], "additionalProperties": False,
    "properties": {"guestName": {"type": "string", "minLength": 3}}}}
SITUATIONS = 14  # per write tool: 28 tasks, 56 gold rows (one right and one wrong conversation each)
SORTED = "All sorted 👍 stay {sid} is taken care of on our side."
STUCK = "Hmm, that one didn't go through from my end, sorry - the front desk can look at stay {sid}."


def _tool(pack, name, description, properties):
    (pack / "tools" / f"{name}.json").write_text(json.dumps({"type": "function", "function": {
        "name": name, "description": description, "parameters": {
            "type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}}}))


@pytest.fixture(scope="module")
def resort(tmp_path_factory):
    pack = tmp_path_factory.mktemp("packs") / "resort"
    (pack / "tools").mkdir(parents=True)
    _tool(pack, "getStay", "Look up a resort stay by its reference.", {"stayId": STAY_ID})
    _tool(pack, "cancelStay", "Cancel a resort stay.", {"stayId": STAY_ID, "reason": {
        "type": "string", "enum": ["plans_changed", "weather", "other"]}})
    _tool(pack, "changeGuests", "Change who stays on a resort stay.", {"stayId": STAY_ID, "guests": GUESTS})
    (pack / "policy.md").write_text("# Resort desk\n\n- **no_guessing**: Use only stay references the guest gave.\n")
    (pack / "domain.yaml").write_text("name: resort\ntitle: Resort desk\nagent_role: You help resort guests.\n")
    return load_domain(pack)


def _write(s):
    if s.intent_tool == "cancelStay":
        return call("cancelStay", stayId=s.entity_id, reason=s.facts["reason"])
    return call("changeGuests", stayId=s.entity_id, guests=s.facts["guests"])


@pytest.fixture(scope="module")
def played(resort, tmp_path_factory):
    """(situations by id, rollouts): per situation, sample 0 makes the change and says so in its own words, sample 1
    only looks the stay up and says it could not."""
    state = build_state(resort, 0)
    situations = [build_situation(resort, state, cell(tool), seed=0, variant=v)
                  for tool in ("cancelStay", "changeGuests") for v in range(SITUATIONS)]
    right = {s.phrasings[0]: [_write(s), say(SORTED.format(sid=s.entity_id))] for s in situations}
    wrong = {s.phrasings[0]: [call("getStay", stayId=s.entity_id), say(STUCK.format(sid=s.entity_id))]
             for s in situations}
    frames = []
    mp = pytest.MonkeyPatch()
    try:
        for k, scripts in enumerate((right, wrong)):
            server = ScriptedServer(scripted(scripts)).start()
            for name in ("OPENAI_API_BASE", "OPENAI_BASE_URL"):
                mp.setenv(name, server.base_url)
            mp.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
            frames.append(asyncio.run(run_rollouts([RolloutSpec(s, 0, k) for s in situations],
                                                   Policy("http", "openai/scripted-agent"), domain=resort,
                                                   state=state, gateway=Gateway())))
            server.stop()
    finally:
        mp.undo()
    rollouts = pd.concat(frames, ignore_index=True)
    return {s.situation_id: s for s in situations}, rollouts, state


def _case(messages):
    return find_card(messages, "case") or {}


def follows_closing(messages, tools, sampling):
    """A `python:` judge that wants some tool call, then believes the closing: it passes when the agent's own success
    words ("sorted") close the conversation."""
    case = _case(messages)
    called = any(m.get("tool_calls") for m in case.get("transcript", []))
    texts = [m.get("content") or "" for m in case.get("transcript", []) if m.get("role") == "assistant"]
    closing = next((t for t in reversed(texts) if t.strip()), "")
    return {"role": "assistant", "content": json.dumps({"reason": "r", "score": int(called and "sorted" in
                                                                                     closing.lower())})}


def ignores_tool_names(messages, tools, sampling):
    """A `python:` judge that reads the results, not the names: it passes when any call changed the customer's stay
    (an updated or deleted result for that id), whichever tool made it."""
    case = _case(messages)
    target = (case.get("expected") or {}).get("entity_id")
    transcript = case.get("transcript", [])
    asked = {c["id"]: json.loads(c["function"]["arguments"] or "{}") for m in transcript
             for c in (m.get("tool_calls") or [])}
    changed = any(m.get("role") == "tool" and json.loads(m.get("content") or "{}").get("status") in
                  ("updated", "deleted", "created") and asked.get(m.get("tool_call_id"), {}).get("stayId") == target
                  for m in transcript)
    return {"role": "assistant", "content": json.dumps({"reason": "r", "score": int(changed)})}


def _grades(played, resort, judge):
    by_id, rollouts, _ = played
    return asyncio.run(grade_rollouts(rollouts, by_id, domain=resort, judge_model=judge, gateway=Gateway()))


def test_the_played_conversations_have_the_labels_their_actions_earn(played):
    _, rollouts, _ = played
    assert (rollouts.loc[rollouts["sample_index"] == 0, "oracle_reward"] == 1).all(), rollouts["oracle_reason"]
    assert (rollouts.loc[rollouts["sample_index"] == 1, "oracle_reward"] == 0).all()


THIS = "python:sim_pipeline_tests.grade.test_counterfactual_probes"


@pytest.mark.parametrize(("judge", "caught_by"), [(f"{THIS}:follows_closing", "probe_closing_swap"),
                                                   (f"{THIS}:ignores_tool_names", "probe_tool_renamed")])
def test_a_judge_that_follows_words_is_refused_by_its_counterfactual_probe(played, resort, judge, caught_by):
    grades = _grades(played, resort, judge)
    # On the real conversations it agrees with gold every time, and no fixed probe catches it.
    assert (grades["judge_reward"] == grades["gold_reward"]).all()
    flags, measured, _ = check_probes(grades)
    # Only the counterfactual probes catch it (a closing-follower also passes a renamed call: its words still say
    # "sorted"; a judge blind to names reads a swapped closing's case right, since no result shows a change).
    assert caught_by in {f.name for f in flags} <= {"probe_closing_swap", "probe_tool_renamed"}, measured
    if caught_by == "probe_tool_renamed":
        assert measured["probe_closing_swap_exploit_rate"] == 0.0
    assert measured[f"{caught_by}_n"] >= 10 and measured[f"{caught_by}_exploit_rate"] == 1.0
    report = judge_trust_report(grades, policy_model="openai/scripted-agent", judge_model=None)
    assert report.verdict == "untrusted" and caught_by in {f.name for f in report.flags}


def test_the_good_judge_passes_no_counterfactual_probe(played, resort):
    grades = _grades(played, resort, "sim/judge")
    flags, measured, _ = check_probes(grades)
    assert flags == ()
    for probe in ("closing_swap", "tool_renamed"):
        # at most its ordinary slips (2% of cases, redrawn where a rename changes the trajectory): confidently under
        # the limit
        assert measured[f"probe_{probe}_n"] >= 10
        assert measured[f"probe_{probe}_exploit_high"] < defaults.JUDGE_TRUST_PROBE_LIMIT, measured
    report = judge_trust_report(grades, policy_model="openai/scripted-agent", judge_model=None)
    assert report.verdict != "untrusted", [f.sentence for f in report.flags]


def test_a_swapped_closing_keeps_the_oracles_fail(played, resort):
    # The oracle itself, given a failing conversation's own world events with a passing one's closing, still fails
    # it: the label the probe holds the judge to is the oracle's, not ours.
    by_id, rollouts, state = played
    wrong = rollouts[rollouts["sample_index"] == 1]
    right = rollouts[rollouts["sample_index"] == 0].set_index("situation_id")
    for row in wrong.itertuples():
        s = by_id[row.situation_id]
        events = [dict(e) for e in row.tool_events]
        assert fails_whatever_said(s.want, events)
        closing = right.loc[row.situation_id, "final_text"]
        messages = swap_closing({"transcript": [dict(m) for m in row.messages]}, closing)["transcript"]
        world = [Event(int(e["index"]), e["tool"], json.loads(e["arguments"]), e["status"], s.entity,
                       e["entity_id"], bool(e["applied"]), {}) for e in events]
        assert label(resort, s, world, state, messages).reward == 0.0
    assert swappable(pd.DataFrame({"gold_reward": [0.0, 0.0, 1.0], "judge_reward": [0.0, 1.0, 1.0],
                                   "card": [{"expected": json.loads(by_id[wrong["situation_id"].iloc[0]].want.to_json())}] * 3,
                                   "tool_events": [list(wrong["tool_events"].iloc[0])] * 3})).tolist() == [
        True, False, False]  # only a failure the judge failed: a pass on the swap is then the closing's doing


def test_fails_whatever_said_is_never_true_of_a_rollout_the_oracle_passed(retail_run):
    # On real retail rollouts (sim/agent-v1, seed 0): the rule the probes label by is a subset of the oracle's fails,
    # and covers the kinds of situation it speaks of (a write never made, a read never answered).
    said = [fails_whatever_said(retail_run.situations[r.situation_id].want, [dict(e) for e in r.tool_events])
            for r in retail_run.rollouts.itertuples()]
    rewards = retail_run.rollouts["oracle_reward"].to_numpy()
    assert not (rewards[said] == 1).any()
    kinds = {retail_run.situations[sid].want.kind for sid, s in zip(retail_run.rollouts["situation_id"], said) if s}
    assert {"change", "read"} <= kinds and sum(said) >= 100
