"""Held-out leak checks: by situation id and by word 8-gram containment of the opening, across every cut."""

from hypothesis import given, settings
from hypothesis import strategies as st

from sim_pipeline.cut.decontaminate import decontaminate, find_leaks, word_ngrams
from sim_pipeline.cut.groups import select_for_rl
from sim_pipeline.cut.preference import build_preference_pairs
from sim_pipeline.cut.reward_model import reward_model_set
from sim_pipeline.cut.sft import select_for_sft

HELDOUT = "I want to cancel my order because it arrived broken and late today"


def test_word_ngrams_ignore_case_and_punctuation():
    assert word_ngrams("A b, C!", n=2) == {("a", "b"), ("b", "c")}
    assert word_ngrams("Short text", n=8) == {("short", "text")}  # short texts are one gram of their own
    assert word_ngrams(None) == set() and word_ngrams("  ...  ") == set()


def test_removes_by_id_and_by_8_gram_but_not_by_7_gram(make, to_frames):
    rows = [
        make("heldout_sit", split="heldout"),
        make("by_id", opening="anything at all"),
        make("by_gram", opening="hey, I WANT to cancel my order because it arrived broken!"),  # 10-word run
        make("seven", opening="so I want to cancel my order because we moved"),  # 7-word run only
    ]
    rollouts, _ = to_frames(rows)
    train = rollouts[rollouts["split"] == "train"]
    leaks = find_leaks(train, heldout_situation_ids={"by_id"}, heldout_openings=[HELDOUT])
    assert leaks.by_id.tolist() == [True, False, False] and leaks.by_ngram.tolist() == [False, True, False]
    kept, removed = decontaminate(train, heldout_situation_ids={"by_id"}, heldout_openings=[HELDOUT])
    assert kept["situation_id"].tolist() == ["seven"] and removed == 2


def shares_8_gram(a: str, b: str) -> bool:
    """Independent reference: at least half of a's 8-word windows (or a itself when shorter) occur in b."""
    def grams(words: list[str]) -> set[tuple[str, ...]]:
        return {tuple(words[i:i + 8]) for i in range(len(words) - 7)} if len(words) >= 8 else {tuple(words)}

    mine = grams(a.lower().split())
    return bool(mine) and len(mine & grams(b.lower().split())) >= 0.5 * len(mine)


def test_template_boilerplate_alone_is_not_a_leak(make, to_frames):
    # Regression: one template, different records. A single shared 8-gram of boilerplate removed every train row.
    held = "Hi, I'd like to cancel my order. My order id is 62535. My email is ana.berg92@fastmail.com."
    train = "Hi, I'd like to cancel my order. My order id is 17354. My email is chen.okafor75@mailbox.org."
    rows = [make("held", split="heldout", opening=held), make("other", opening=train),
            make("copy", opening="Hello! " + held)]
    rollouts, _ = to_frames(rows)
    leaks = find_leaks(rollouts[rollouts["split"] == "train"], heldout_situation_ids={"held"}, heldout_openings=[held])
    assert leaks.by_ngram.tolist() == [False, True]


WORDS = ["cancel", "my", "order", "please", "now", "refund", "the", "item"]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.booleans(),
                          st.lists(st.sampled_from(WORDS), min_size=3, max_size=12)),
                min_size=2, max_size=10),
       st.integers(0, 2**16))
def test_no_heldout_row_reaches_any_cut(make, to_frames, tools, situations, salt):
    rows, openings = [], []
    for i, (heldout, copies_previous, words) in enumerate(situations):
        # Some situations reword the previous one's opening, so n-gram leaks do occur.
        opening = f"hey {openings[-1]}" if copies_previous and openings else " ".join(words)
        openings.append(opening)
        for k in range(3):
            reward = float((salt >> (i + k)) & 1)
            rows.append(make(f"s{i}", sample_index=k, reward=reward, opening=opening,
                             split="heldout" if heldout else "train", final_text="x" * (k + 1)))
    rollouts, grades = to_frames(rows)
    heldout_ids = {f"s{i}" for i, (heldout, _, _) in enumerate(situations) if heldout}
    heldout_openings = [openings[i] for i, (heldout, _, _) in enumerate(situations) if heldout]
    clean = {
        f"s{i}" for i, opening in enumerate(openings)
        if f"s{i}" not in heldout_ids and not any(shares_8_gram(opening, held) for held in heldout_openings)
    }
    pairs, _ = build_preference_pairs(rollouts, grades, margin=0.5)
    groups, _ = select_for_rl(rollouts, grades)
    pointwise, pairwise = reward_model_set(rollouts, grades)
    assert set(pointwise["situation_id"]) == clean  # nothing clean is lost either
    for cut in [select_for_sft(rollouts, grades, tools=tools), pairs, groups, pointwise, pairwise]:
        assert set(cut["situation_id"]) <= clean
        for messages in cut["messages" if "messages" in cut.columns else "prompt"]:
            assert not any(shares_8_gram(messages[1]["content"], held) for held in heldout_openings)
