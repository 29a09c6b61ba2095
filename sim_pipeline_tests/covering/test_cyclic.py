"""Cyclic covering arrays from a starter vector with fixed points."""

from itertools import permutations

import numpy as np

from sim_pipeline.covering.cyclic import develop, find_starter, fixed_point_options


def test_counting_rules_out_too_many_fixed_values():
    # 10 values on 20 axes: with 5 fixed values no split of positions meets every distance
    assert fixed_point_options(10, 20) == [4, 3, 2, 1]


def test_a_complete_starter_covers_every_pair_but_fixed_with_fixed():
    v, k, f = 10, 20, 2
    starter, missing = find_starter(v, k, f, np.random.default_rng(0), 400)
    assert missing == 0
    array = develop(starter, v, f)
    assert array.shape == (k * (v - f), k)
    m = v - f
    wanted = {(a, b) for a in range(v) for b in range(v) if a < m or b < m}
    for i, j in permutations(range(k), 2):
        assert wanted <= set(zip(array[:, i], array[:, j]))


def test_starter_search_is_deterministic_per_seed():
    one = find_starter(6, 12, 1, np.random.default_rng(5), 50)
    two = find_starter(6, 12, 1, np.random.default_rng(5), 50)
    assert (one[0] == two[0]).all() and one[1] == two[1]


def test_develop_moves_only_the_group_values():
    array = develop(np.array([0, 2, 1]), 3, 1)  # Z_2 on {0, 1}; 2 is fixed
    assert array.shape == (6, 3)
    assert sorted(map(tuple, array[:3])) == sorted([(0, 2, 1), (2, 1, 0), (1, 0, 2)])
    assert (array[3:] == np.where(array[:3] < 2, 1 - array[:3], 2)).all()
