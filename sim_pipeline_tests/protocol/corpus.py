"""The labelled corpus of agent replies (other models' wording) and precision/recall of a classifier on it.

replies.jsonl is the evaluation corpus; replies_dev.jsonl the development set the rules were first written against,
replies_dev2.jsonl a second one (104 replies written after the sealed split was measured, to extend the rules without
reading its misses);
replies_sealed.jsonl a sealed split written after the rules were frozen (issue 27), never tuned on: its precision and
recall are measured and reported (make bench), not fitted. A later session that changes the rules after reading its
misses must write a new sealed split.
Each line: {"text", "labels" (a subset of REPLY_LABELS), "style", "note"}.
"""

import json
import pathlib
from collections.abc import Callable, Iterable

from sim_pipeline.protocol.replies import REPLY_LABELS

HERE = pathlib.Path(__file__).parent
CORPUS = HERE / "replies.jsonl"
DEV = HERE / "replies_dev.jsonl"
SEALED = HERE / "replies_sealed.jsonl"


def load(path: pathlib.Path = CORPUS) -> list[dict]:
    """The labelled replies of one corpus file."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def precision_recall(rows: Iterable[dict], classify: Callable[[str], Iterable[str]],
                     labels: Iterable[str] = REPLY_LABELS) -> dict[str, tuple[float, float, int]]:
    """Per label: (precision, recall, positives in the corpus) of `classify` against the corpus labels."""
    rows = list(rows)
    predicted = [set(classify(r["text"])) for r in rows]
    out = {}
    for label in labels:
        tp = sum(label in p and label in r["labels"] for p, r in zip(predicted, rows))
        fp = sum(label in p and label not in r["labels"] for p, r in zip(predicted, rows))
        fn = sum(label not in p and label in r["labels"] for p, r in zip(predicted, rows))
        out[label] = (tp / (tp + fp) if tp + fp else 0.0, tp / (tp + fn) if tp + fn else 0.0, tp + fn)
    return out
