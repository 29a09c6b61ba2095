import hashlib
import json
from pathlib import Path

from sim_pipeline import seeding

VALUES = [
    (3, "purpose", "abc"),
    {"b": [1, 2.5, None, True], "a": {"é": "ünïcode", "z": -0.0}},
    ["order", Path("/x/y"), {"nested": (1, "two")}],  # a Path goes through default=str
    [],
]


def test_canonical_json_is_json_dumps_with_sorted_keys_and_no_spaces():
    # The seeds of every draw and the response cache's keys hash this text: its bytes must never change.
    for value in VALUES:
        expected = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
        assert seeding.canonical_json(value) == expected
        assert seeding.digest(value) == hashlib.sha256(json.dumps([value], sort_keys=True, separators=(",", ":"),
                                                                   ensure_ascii=False, default=str).encode()).hexdigest()
