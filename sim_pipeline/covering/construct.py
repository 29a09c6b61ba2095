"""Exact constructions for unconstrained strength-2 arrays: orthogonal arrays over GF(q) (Bush 1952) and
Kleitman & Spencer's binary arrays (1973, "Families of k-independent sets"), both of optimal size."""

from itertools import combinations, islice, product
from math import comb

import numpy as np


def prime_power(n: int) -> tuple[int, int] | None:
    """(p, m) with n = p**m for a prime p, or None."""
    for p in range(2, n + 1):
        if n % p == 0:
            m, rest = 0, n
            while rest % p == 0:
                rest //= p
                m += 1
            return (p, m) if rest == 1 else None
    return None


def field_tables(p: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Addition and multiplication tables of GF(p**m); elements are base-p digit vectors as integers."""
    q = p ** m
    digits = np.array([[(x // p ** i) % p for i in range(m)] for x in range(q)])
    weights = p ** np.arange(m)
    add = ((digits[:, None, :] + digits[None, :, :]) % p) @ weights
    modulus = _irreducible(p, m)
    mul = np.zeros((q, q), dtype=np.int64)
    for x, y in product(range(q), repeat=2):
        prod = np.zeros(2 * m - 1, dtype=np.int64)
        for i in range(m):
            prod[i:i + m] += digits[x, i] * digits[y]
        for d in range(2 * m - 2, m - 1, -1):  # reduce by the monic modulus, highest degree first
            coef = prod[d] % p
            prod[d - m:d + 1] -= coef * modulus
        mul[x, y] = int((prod[:m] % p) @ weights)
    return add.astype(np.int64), mul


def _irreducible(p: int, m: int) -> np.ndarray:
    """Coefficients (low to high, monic) of the first irreducible degree-m polynomial over GF(p)."""
    if m == 1:
        return np.array([0, 1])
    for low in product(range(p), repeat=m):
        poly = np.array(list(low) + [1])
        if not any(_divides(f, poly, p) for d in range(1, m // 2 + 1) for f in _monic(p, d)):
            return poly
    raise ValueError(f"no irreducible polynomial of degree {m} over GF({p})")


def _monic(p: int, d: int):
    for low in product(range(p), repeat=d):
        yield np.array(list(low) + [1])


def _divides(f: np.ndarray, g: np.ndarray, p: int) -> bool:
    rest = g.copy() % p
    for d in range(len(rest) - 1, len(f) - 2, -1):
        coef = rest[d] % p
        rest[d - len(f) + 1:d + 1] = (rest[d - len(f) + 1:d + 1] - coef * f) % p
    return not rest[:len(f) - 1].any()


def orthogonal_array(sizes: tuple[int, ...]) -> np.ndarray | None:
    """q*q rows covering all pairs when some prime power q >= every size has q + 1 >= the axis count."""
    k, top = len(sizes), max(sizes)
    q = next(n for n in range(max(top, 2), 4 * top + 4) if prime_power(n))
    if k > q + 1 or k < 2:
        return None
    add, mul = field_tables(*prime_power(q))
    a, b = np.divmod(np.arange(q * q), q)
    columns = [a] + [add[mul[a, x], b] for x in range(q)]  # row (a, b): column x holds a*x + b
    array = np.column_stack(columns[:k])
    return array % np.asarray(sizes)  # a symbol beyond an axis' size folds onto one of its values


def binary_array(sizes: tuple[int, ...]) -> np.ndarray | None:
    """The smallest binary array covering all pairs: distinct equal-weight columns plus a zero row."""
    k = len(sizes)
    if max(sizes) > 2 or k < 2:
        return None
    n = 2
    while comb(n - 1, (n + 1) // 2) < k:
        n += 1
    weight = (n + 1) // 2
    array = np.zeros((n, k), dtype=np.int64)
    for col, ones in enumerate(islice(combinations(range(1, n), weight), k)):
        array[list(ones), col] = 1
    return array % np.asarray(sizes)
