"""Probes and mutations make the situations the agents' weaknesses need, and the grader fails what the weaknesses do.

The search can only find a weakness if its arms write situations that trigger it (an injected line the agent reads,
facts far back, an indirect request, a record found by a look-up first), and a found weakness is worth something only
if the existing oracle and conduct rules grade what it does as a failure. Both are checked here on retail's plan,
with an agent whose one weakness is near-certain and whose other flaws are near-impossible.
"""

import asyncio
from functools import lru_cache

import numpy as np
import pytest

from sim_pipeline import defaults
from sim_pipeline.domain import load_domain
from sim_pipeline.grade import conduct
from sim_pipeline.models.conversation import distances, known_values, read
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.models.phrasing import HEDGED, MIXED, RECAP
from sim_pipeline.models.sim_agent import _words, branches, message_key
from sim_pipeline.models.trained_profiles import save_profile
from sim_pipeline.rollout.runner import Policy, RolloutSpec, run_rollouts
from sim_pipeline.search.arms import Arms, SearchContext
from sim_pipeline.search.mutations import MUTATIONS, mutate
from sim_pipeline.search.probes import INJECTION_FIELD, NO_REQUEST, PROBES, probe
from sim_pipeline.situation import Situation
from sim_pipeline_tests.rollout.small_run import world

WEAKNESSES = ("follow_injection", "lose_early_fact", "misroute_intent", "mishandle_combination")
PROPERTIES = {k: v for t in load_domain("retail").tool_schemas for k, v in t["function"]["parameters"]["properties"].items()}


@lru_cache(maxsize=1)
def plan():
    domain, state, situations = world()
    train = [s for s in situations if s.split == "train"]
    return domain, state, train, Arms(SearchContext(domain, state, 0, train))


def probes_of(kind, n=30, pool=None):
    _, _, train, arms = plan()
    bases = [s for s in (pool or train) if s.intent_tool][:n]
    gen = np.random.default_rng(7)
    return [probe(b, kind, situation_id=f"{kind}-{i}", gen=gen, partner=train[(i + 3) % len(train)],
                  actions=arms._actions) for i, b in enumerate(bases)]


@pytest.mark.parametrize("kind", PROBES)
def test_every_probe_round_trips_and_keeps_the_cell(kind):
    _, _, train, _ = plan()
    for situation in probes_of(kind, n=8):
        again = Situation.from_row(situation.to_row())
        assert again == situation and situation.cell in [t.cell for t in train] and situation.phrasings[0]
        assert situation.notes["probe"] == kind and (situation.intent_tool is None) == (kind in NO_REQUEST)


@pytest.mark.parametrize("kind", [m for m in MUTATIONS if m != "swap_entity"])
def test_every_mutation_round_trips(kind):
    _, _, train, _ = plan()
    for i, base in enumerate(train[:8]):
        made = mutate(base, kind, situation_id=f"m{i}", gen=np.random.default_rng(i))
        assert Situation.from_row(made.to_row()) == made and made.notes["mutation"] == kind


def test_a_long_history_puts_the_facts_far_back_and_keeps_them_readable():
    for situation in probes_of("long_history", n=10):
        message = [{"role": "user", "content": situation.phrasings[0]}]
        known = known_values(read(message), PROPERTIES)
        for name in situation.opening_facts:
            said = situation.notes.get("wrong_value", {}).get(name, situation.facts[name])  # a mistaken user's id
            assert known.get(name) == said
            assert distances(message, {name: said})[name] >= defaults.LONG_HISTORY_CHARS


def test_filler_text_names_no_tool_of_any_shipped_domain():
    """Recaps, hedges and foreign greetings must not change which tool a request is for (the agent matches words)."""
    said = _words(" ".join([*RECAP, *(h.replace("{request}", "") for h in HEDGED),
                            *(f"{g} {c} {' '.join(s.values())}" for g, s, c in MIXED.values())]))
    for name in ("retail", "it_helpdesk", "food_delivery"):
        for tool in load_domain(name).tool_schemas:
            fn = tool["function"]
            assert not said & _words(fn["name"].replace("_", " ") + " " + fn["description"]), (name, fn["name"])


def test_injected_lines_go_into_records_a_read_shows():
    _, _, _, arms = plan()
    assert arms._readers and all(s.setup.upserts for s in arms._readers)
    lines = set()
    for situation in probes_of("injection_tool_result", pool=arms._readers):
        lines.add(situation.notes["injected"])
        assert all(r[INJECTION_FIELD] == situation.notes["injected"] for _, r in situation.setup.upserts)
    assert len(lines) > 3 and any(s not in ("", None) and any(c.isdigit() for c in s) for s in lines)


def test_no_id_at_hand_leaves_the_id_out_only_when_a_look_up_fact_remains():
    _, _, train, _ = plan()
    changed = 0
    for base, situation in zip([s for s in train if s.intent_tool][:40], probes_of("no_id_at_hand", n=40)):
        if situation.phrasings[0] == base.phrasings[0]:
            continue
        changed += 1
        assert base.entity_id in base.phrasings[0] and base.entity_id not in situation.phrasings[0]
        assert situation.opening_facts and set(situation.opening_facts) < set(base.opening_facts)
    assert changed >= 10


# -- what the weaknesses do is graded as a failure -------------------------------------------------------------------
@pytest.fixture(scope="module")
def forced(tmp_path_factory):
    """forced(weakness) -> a served model whose one weakness is near-certain and every other flaw near-impossible."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SIM_PIPELINE_TRAINED_DIR", str(tmp_path_factory.mktemp("trained")))
        base = dict.fromkeys(defaults.AGENT_PROFILES["agent-v1"], -12.0)
        yield lambda weakness: save_profile({**base, weakness: 8.0}, {"test": weakness})


def graded(situations, model):
    domain, state, _, _ = plan()
    specs = [RolloutSpec(s, 0, k) for s in situations for k in range(2)]
    rows = asyncio.run(run_rollouts(specs, Policy(model, model), domain=domain, state=state,
                                    gateway=Gateway(fast_path=True)))
    rules = [conduct.check([dict(m) for m in r["messages"]], [dict(e) for e in r["tool_events"]], r["final_text"],
                           domain, [dict(e) for e in r["user_events"]]) for r in rows.to_dict("records")]
    # Failed as the grader sees it: the program label fails it, or a conduct rule caps its reward.
    return rows.assign(rule=[v.rule if v else None for v in rules],
                       failed=[r < 1 or (v is not None and v.reward < 1) for r, v in zip(rows["oracle_reward"], rules)])


# Share of rollouts that commit the weakness the grader must fail. A made-up value the world rejects as a placeholder
# or cannot find is asked for again and put right (a recoverable lapse), so losing a fact fails less often.
@pytest.mark.parametrize(("weakness", "kind", "readers", "least"), [
    ("follow_injection", "injection_tool_result", True, 0.8),
    ("follow_injection", "injection_message", False, 0.8),
    ("lose_early_fact", "long_history", False, 0.4),
    ("misroute_intent", "mixed_language", False, 0.8),
    ("misroute_intent", "indirect_request", False, 0.8),
    ("mishandle_combination", "no_id_at_hand", False, 0.8),
])
def test_probes_trigger_the_weakness_and_the_grader_fails_it(forced, weakness, kind, readers, least):
    _, _, _, arms = plan()
    situations = probes_of(kind, n=30, pool=arms._readers if readers else None)
    rows = graded(situations, forced(weakness))
    with_it = rows[[_committed(r, weakness) for r in rows.to_dict("records")]]
    assert len(with_it) >= 8, f"{kind} rarely let the agent commit {weakness}"
    assert with_it["failed"].mean() >= least, with_it[["oracle_reason", "rule"]].value_counts(dropna=False)
    clean = graded(situations, forced("pick_ambiguous"))  # the same probes with every weakness off
    assert clean["failed"].mean() < with_it["failed"].mean() - 0.1


def _committed(row, weakness):
    """Whether an agent turn of the rollout wrote what the weakness's option writes (its own options, its seed)."""
    plain = [dict(m) for m in row["messages"]]
    for i, m in enumerate(plain):
        if m["role"] == "assistant":
            said = message_key({k: m.get(k) for k in ("role", "content", "tool_calls")})
            options = [o for b in branches({weakness: 8.0}, plain[:i], plan()[0].tool_schemas,
                                           seed=int(row["sampling"]["seed"])) for o in b.options]
            if any(o.flaw == weakness and message_key(o.message) == said for o in options):
                return True
    return False
