"""classify_reply on the labelled corpus of other models' replies: precision and recall per label, and speed.

Baseline: the phrase regexes main read agent text with before the protocol module (kept here verbatim as the
comparison): a success-claim regex, a confirmation-question regex, the signature's refusal regex, and "ends with ?"
for a request for information.
"""

import re
import time

from sim_pipeline.protocol import replies
from sim_pipeline.protocol.replies import (
    ASKS_CONFIRMATION,
    ASKS_FOR_INFORMATION,
    CLAIMS_SUCCESS,
    REFUSES,
    classify_reply,
)
from sim_pipeline_tests.protocol.corpus import CORPUS, SEALED, load, precision_recall

_OLD_CONFIRM = re.compile(r"\b(shall i|should i|do you want me to|may i|can i go ahead|confirm)\b.*\?", re.I | re.S)
_OLD_CLAIM = re.compile(r"\b(done|completed|success(fully)?|has been (cancelled|refunded|processed|updated|changed|reset|"
                        r"opened|granted|created))\b", re.I)
_OLD_REFUSAL = re.compile(r"\b(sorry|can't|cannot|unable|not able|only help|not permitted|escalated)\b", re.I)


def phrase_baseline(text: str) -> set[str]:
    """What main's phrase regexes said of a reply."""
    out = set()
    if _OLD_CONFIRM.search(text):
        out.add(ASKS_CONFIRMATION)
    if _OLD_CLAIM.search(text):
        out.add(CLAIMS_SUCCESS)
    if _OLD_REFUSAL.search(text):
        out.add(REFUSES)
    if text.strip().endswith("?") and ASKS_CONFIRMATION not in out:
        out.add(ASKS_FOR_INFORMATION)
    return out


def figures() -> list[dict]:
    """Precision and recall per label (ours vs the phrase baseline) and replies classified per second."""
    rows = load()
    out = []
    for split, path in (("", CORPUS), ("sealed.", SEALED)):  # the sealed split is never tuned on (corpus.py)
        split_rows = load(path)
        ours = precision_recall(split_rows, classify_reply)
        base = precision_recall(split_rows, phrase_baseline)
        for label, (precision, recall, positives) in ours.items():
            for name, value, baseline in (("precision", precision, base[label][0]), ("recall", recall, base[label][1])):
                out.append({"name": f"protocol.{split}{label}.{name} (n={len(split_rows)}, {positives} positive)",
                            "value": value, "unit": "fraction", "baseline_name": f"main phrase regex {name}",
                            "baseline_value": baseline, "ratio": value / baseline if baseline else float("inf")})
    texts = [r["text"] for r in rows] * 5
    replies._classify.cache_clear()
    start = time.perf_counter()
    for text in texts:
        replies._classify.__wrapped__(text)
    ours_s = time.perf_counter() - start
    start = time.perf_counter()
    for text in texts:
        phrase_baseline(text)
    base_s = time.perf_counter() - start
    out.append({"name": "protocol.classify_reply throughput", "value": len(texts) / ours_s, "unit": "replies/s",
                "baseline_name": "main phrase regexes", "baseline_value": len(texts) / base_s,
                "ratio": base_s / ours_s})
    return out
