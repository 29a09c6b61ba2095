"""The one seed syntax: every way of writing a set of seeds reads as that set, and a bad value is one short line."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim_pipeline import defaults
from sim_pipeline.errors import SimPipelineError
from sim_pipeline.seed_spec import parse_seeds

NUMBERS = [int(seed) for seed in defaults.SEEDS]
ERROR_CHARS = 300  # a seed error fits on one terminal-friendly line, however large the value


def _runs(numbers):
    """Sorted numbers split into runs of consecutive ones: [0, 1, 2, 5] -> [[0, 1, 2], [5]]."""
    runs = []
    for n in numbers:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return runs


@st.composite
def spellings(draw):
    """A set of seed partitions and one of the ways to write it: ranges or members, repeats, any order, split over
    several words (`--seeds 0-2 5`), spaces around the commas."""
    chosen = draw(st.sets(st.sampled_from(NUMBERS), min_size=1))
    items = []
    for run in _runs(sorted(chosen)):
        if len(run) > 1 and draw(st.booleans()):
            cut = draw(st.integers(1, len(run) - 1))  # a range may also be written as two touching ones
            parts = [run[:cut], run[cut:]] if draw(st.booleans()) else [run]
            items += [f"{p[0]}-{p[-1]}" if len(p) > 1 else str(p[0]) for p in parts]
        else:
            items += [str(n) for n in run]
    items += draw(st.lists(st.sampled_from(items), max_size=3))
    items = draw(st.permutations(items))
    words, word = [], []
    for item in items:
        word.append(item)
        if draw(st.booleans()):
            words.append(draw(st.sampled_from([",", ", ", " ,"])).join(word))
            word = []
    if word:
        words.append(",".join(word))
    return chosen, words


@given(spellings())
def test_every_spelling_of_a_seed_set_reads_as_that_set_sorted(case):
    chosen, words = case
    expected = [str(n) for n in sorted(chosen)]
    assert parse_seeds(words) == expected
    assert parse_seeds(",".join(words)) == expected  # one word or several: the same


@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)).map(sorted), min_size=1, max_size=5))
def test_ranges_read_as_their_members_or_name_the_first_seeds_that_are_not_partitions(ranges):
    text = ",".join(f"{a}-{b}" if a != b else str(a) for a, b in ranges)
    named = sorted({n for a, b in ranges for n in range(a, b + 1)})
    outside = [n for n in named if n not in NUMBERS]
    if not outside:
        assert parse_seeds(text) == [str(n) for n in named]
        return
    with pytest.raises(SimPipelineError) as caught:
        parse_seeds(text)
    message = str(caught.value)
    assert "\n" not in message and len(message) < ERROR_CHARS
    assert message.startswith(f"--seeds '{text[:defaults.SEEDS_TEXT_SHOWN]}")
    assert f": {outside[0]}" in message  # the first bad seed, by its number
    assert f"within {defaults.SEEDS[0]}-{defaults.SEEDS[-1]}" in message  # and the valid range


@given(st.integers(0, 10**30), st.integers(1, 10**30))
def test_a_huge_range_is_refused_in_one_short_line(low, span):
    with pytest.raises(SimPipelineError) as caught:
        parse_seeds(f"{low}-{low + span + len(NUMBERS)}")
    message = str(caught.value)
    assert "\n" not in message and len(message) < ERROR_CHARS + 60  # the count of bad seeds may be 40 digits long


@pytest.mark.parametrize("value, says", [
    ("0-99999", "--seeds '0-99999': 8, 9, 10 and 99,989 more are not seed partitions. Fix: use seeds within 0-7"),
    ("5-2", "--seeds '5-2': the range '5-2' runs backwards. Fix: write 2-5"),
    ("9", "--seeds '9': 9 is not a seed partition."),
    ("0-9", "--seeds '0-9': 8, 9 are not seed partitions."),
    ("a-b", "'a-b' is neither a seed nor a range"),
    ("-1", "'-1' is neither a seed nor a range"),
    ("1-2-3", "'1-2-3' is neither a seed nor a range"),
    ("²", "'²' is neither a seed nor a range"),  # str.isdigit() says yes; int() would raise
    ("", "--seeds '' names no seed"),
    (" , ", "names no seed"),
])
def test_a_bad_value_says_what_is_wrong_and_the_fix(value, says):
    with pytest.raises(SimPipelineError) as caught:
        parse_seeds(value)
    assert says in str(caught.value) and "Fix:" in str(caught.value)


def test_a_long_bad_value_is_quoted_cut_short():
    with pytest.raises(SimPipelineError) as caught:
        parse_seeds(",".join(["0"] * 500 + ["x"]))
    assert len(str(caught.value)) < ERROR_CHARS and "..." in str(caught.value)
