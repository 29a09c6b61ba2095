"""row_errors: its fast check passes a row only where jsonschema does, so the messages are jsonschema's, row for row."""

import copy
import random

import numpy as np

from sim_pipeline.models.gateway import Gateway
from sim_pipeline.rollout.row import row_errors
from sim_pipeline_tests.rollout.small_run import run

ODD_VALUES = [None, -1, 0, 1, 1.0, 0.5, -0.5, 2.0, True, False, np.int64(3), np.float64(-0.5), np.float64(2.0),
              float("nan"), float("inf"), "", "x", "ok", "heldout", "function", "agent-v1!", "a" * 9, [], [{}], {},
              {"role": "user"}, ("a", "b"), 10 ** 20]


def _paths(value, prefix=()):
    """Every (path) to a value inside nested dicts and lists."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


def _jsonschema_errors(rows, limit=5):
    return row_errors(rows, limit=limit, fast=False)


def test_fast_check_agrees_with_jsonschema_on_mutated_rows():
    rows = run(Gateway(fast_path=True)).to_dict("records")
    assert row_errors(rows) == _jsonschema_errors(rows) == []
    rng = random.Random(0)
    flagged = 0
    for _ in range(1500):
        row = copy.deepcopy(rng.choice(rows))
        for _ in range(rng.randint(1, 2)):
            path = rng.choice([p for p in _paths(row) if p])
            parent = row
            for step in path[:-1]:
                parent = parent[step]
            if isinstance(parent, dict) and rng.random() < 0.2:
                del parent[path[-1]]
            else:
                parent[path[-1]] = copy.deepcopy(rng.choice(ODD_VALUES))
        expected = _jsonschema_errors([row], limit=50)
        assert row_errors([row], limit=50) == expected
        flagged += bool(expected)
    assert flagged > 300  # the mutations do break rows: the fast check was put to the test
