"""A pack whose tools the embedded agent cannot tell apart gets a warning naming the confusable pair."""

import json
import shutil

import pytest

import sim_pipeline.domain
from sim_pipeline import defaults
from sim_pipeline.domain import load_domain
from sim_pipeline.models.confusable import confusable_pairs


def twin_pack(tmp_path, name, description, tools_yaml=""):
    """retail copied as `twin`, plus one tool cloned from get_order under a new name and description."""
    path = tmp_path / "twin"
    shutil.copytree(sim_pipeline.domain.DOMAINS_DIR / "retail", path)
    spec = path / "domain.yaml"
    text = spec.read_text()
    assert "name: retail\n" in text
    spec.write_text(text.replace("name: retail\n", "name: twin\n", 1) + tools_yaml)
    schema = json.loads((path / "tools" / "get_order.json").read_text())
    schema["function"].update(name=name, description=description)
    (path / "tools" / f"{name}.json").write_text(json.dumps(schema))
    return load_domain(path)


@pytest.mark.parametrize("domain", ["retail", "it_helpdesk", "hotel"])
def test_shipped_packs_have_no_confusable_tools(domain):
    assert confusable_pairs(load_domain(domain)) == []


def test_near_duplicate_tool_is_warned_about_with_both_names(tmp_path):
    domain = twin_pack(tmp_path, "fetch_order", "Look up an order by id and show its status, item and total.")
    pairs = confusable_pairs(domain)
    assert [(p.tool, p.taken_for) for p in pairs] == [("fetch_order", "get_order"), ("get_order", "fetch_order")]
    for pair in pairs:
        assert pair.probability < defaults.INTENT_CLEAR_PROBABILITY
        assert f"tools {pair.tool} and {pair.taken_for} are hard for the embedded agent to tell apart" in pair.sentence
        assert "'look up my order'" in pair.sentence and "phrase:" in pair.sentence
        assert "\n" not in pair.sentence
    assert confusable_pairs(domain) == pairs  # deterministic


def test_distinct_new_tool_is_not_warned_about(tmp_path):
    domain = twin_pack(tmp_path, "print_invoice", "Print the invoice of an order as a PDF for the customer's records.")
    assert domain.tool("print_invoice") is not None
    assert confusable_pairs(domain) == []


def test_declared_phrase_clears_only_the_tool_it_names(tmp_path):
    """A distinctive phrase makes fetch_order's request clear; get_order's own request still ties with it."""
    domain = twin_pack(tmp_path, "fetch_order", "Look up an order by id and show its status, item and total.",
                       "tools:\n  fetch_order: {phrase: fetch my order}\n")
    pairs = confusable_pairs(domain)
    assert [(p.tool, p.taken_for) for p in pairs] == [("get_order", "fetch_order")]


def test_later_turns_are_checked_in_the_users_own_words(tmp_path):
    """The user's restatements (sim_user.restatements, what it says when asked what it wants or when it pushes on)
    are checked as well as its opening: each alone shows the near-duplicate pair."""
    from sim_pipeline.models.confusable import _confused, _turns
    from sim_pipeline.models.sim_user import restatements

    domain = twin_pack(tmp_path, "fetch_order", "Look up an order by id and show its status, item and total.")
    conversations = _turns(domain.tool("fetch_order"))
    request = conversations[0][0]
    assert [m[-1]["content"] for _, m in conversations[1:]] == list(restatements(request))
    for _, messages in conversations[1:]:
        pair = _confused(domain, domain.tool("fetch_order"), request, messages)
        assert pair is not None and pair.taken_for == "get_order"
