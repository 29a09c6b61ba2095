"""Algebraic constructions: finite fields, orthogonal arrays and Kleitman-Spencer binary arrays."""

from itertools import combinations

import numpy as np
import pytest

from sim_pipeline.covering.construct import binary_array, field_tables, orthogonal_array, prime_power


def covers_all_pairs(array: np.ndarray, sizes: tuple[int, ...]) -> bool:
    return all(len(set(zip(array[:, i], array[:, j]))) == sizes[i] * sizes[j]
               for i, j in combinations(range(len(sizes)), 2))


@pytest.mark.parametrize(("n", "expected"), [(2, (2, 1)), (7, (7, 1)), (8, (2, 3)), (9, (3, 2)),
                                             (25, (5, 2)), (1, None), (6, None), (12, None)])
def test_prime_power(n, expected):
    assert prime_power(n) == expected


@pytest.mark.parametrize("q", [4, 8, 9, 16, 25, 27])
def test_field_tables_form_a_field(q):
    add, mul = field_tables(*prime_power(q))
    nonzero = np.arange(1, q)
    assert (np.sort(add, axis=1) == np.arange(q)).all()  # addition: each row a permutation
    assert (np.sort(mul[np.ix_(nonzero, nonzero)], axis=1) == nonzero).all()  # no zero divisors, inverses
    a, b, c = np.meshgrid(np.arange(q), np.arange(q), np.arange(q), indexing="ij")
    assert (mul[a, add[b, c]] == add[mul[a, b], mul[a, c]]).all()  # distributive


@pytest.mark.parametrize("sizes", [(3,) * 4, (4,) * 5, (5,) * 6, (4, 3, 2, 2), (8,) * 9, (9, 9, 7)])
def test_orthogonal_array_has_q_squared_rows_and_covers(sizes):
    array = orthogonal_array(sizes)
    q = next(n for n in range(max(sizes), 30) if prime_power(n))
    assert array.shape == (q * q, len(sizes))
    assert covers_all_pairs(array, sizes)


def test_orthogonal_array_declines_more_than_q_plus_one_axes():
    assert orthogonal_array((3,) * 5) is None


@pytest.mark.parametrize(("k", "rows"), [(2, 4), (3, 4), (4, 5), (10, 6), (100, 10), (1000, 14)])
def test_binary_array_meets_the_kleitman_spencer_size(k, rows):
    array = binary_array((2,) * k)
    assert array.shape == (rows, k)
    if k <= 100:
        assert covers_all_pairs(array, (2,) * k)
