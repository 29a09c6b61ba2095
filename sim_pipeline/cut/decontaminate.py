"""Held-out leak checks: no held-out situation may reach a training cut, by id or by opening text.

A row leaks when its situation id is held out, or when its opening message is a near-copy of a held-out
opening: at least DECONTAMINATION_OVERLAP_SHARE of its word n-grams (n = DECONTAMINATION_NGRAM) occur in
one held-out opening, the containment measure of Broder (1997) over the n-grams of PaLM's overlap test
(Chowdhery et al. 2022, section 8). Any single shared n-gram is not enough: openings written from one
template share their boilerplate ("I'd like to cancel my order. My order id is") while asking about
different records. Words are casefolded runs of letters and digits, so punctuation and case do not hide a
copy. A text shorter than n words counts as one gram of its own length, so a short held-out opening still
catches a verbatim copy.
"""

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim_pipeline import defaults
from sim_pipeline.errors import CutError

_WORD = re.compile(r"\w+")
# Cut frames keep the conversation in one of these; the first user message in it is the opening.
_CONVERSATION_COLUMNS = ("messages", "prompt")


@dataclass(frozen=True)
class Leaks:
    """Which rows of a frame leak held-out data, by situation id and by opening-text n-gram."""

    by_id: np.ndarray
    by_ngram: np.ndarray

    @property
    def mask(self) -> np.ndarray:
        """Rows that leak either way."""
        return self.by_id | self.by_ngram


def word_ngrams(text: str | None, *, n: int = defaults.DECONTAMINATION_NGRAM) -> set[tuple[str, ...]]:
    """The set of casefolded word n-grams of a text (the whole text when shorter than n words)."""
    if n < 1:
        raise CutError(f"n-gram length must be at least 1, got {n}: pass a positive n")
    words = _WORD.findall((text or "").casefold())
    if not words:
        return set()
    if len(words) < n:
        return {tuple(words)}
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def opening_texts(frame: pd.DataFrame) -> list[str]:
    """The opening user message of every row: `opening_message`, else the conversation's first user turn."""
    if "opening_message" in frame.columns:
        return ["" if text is None else str(text) for text in frame["opening_message"]]
    for column in _CONVERSATION_COLUMNS:
        if column in frame.columns:
            return [_first_user_content(messages) for messages in frame[column]]
    raise CutError(
        f"cannot find the opening message: the frame has none of the columns "
        f"{('opening_message', *_CONVERSATION_COLUMNS)}; keep one of them in the cut"
    )


def find_leaks(
    frame: pd.DataFrame,
    *,
    heldout_situation_ids: Iterable[str],
    heldout_openings: Iterable[str],
    n: int = defaults.DECONTAMINATION_NGRAM,
) -> Leaks:
    """Mark the rows whose situation is held out or whose opening overlaps a held-out opening."""
    if "situation_id" not in frame.columns:
        raise CutError("the frame has no situation_id column: every cut row must name its situation")
    heldout_ids = {str(situation_id) for situation_id in heldout_situation_ids}
    by_id = frame["situation_id"].astype(str).isin(heldout_ids).to_numpy(dtype=bool)
    index: dict[tuple[str, ...], set[int]] = {}  # n-gram -> the held-out openings containing it
    # Each distinct opening once (callers pass one per held-out rollout, so each repeats k times): a verdict reads
    # only the largest share any one opening holds, the same for every copy of it.
    for j, opening in enumerate(dict.fromkeys(heldout_openings)):
        for gram in word_ngrams(opening, n=n):
            index.setdefault(gram, set()).add(j)
    by_ngram = np.zeros(len(frame), dtype=bool)
    if index:
        # Texts repeat across samples of one phrasing: test each distinct opening once.
        texts = opening_texts(frame)
        verdicts = {text: _near_copy(word_ngrams(text, n=n), index) for text in set(texts)}
        by_ngram = np.fromiter((verdicts[text] for text in texts), dtype=bool, count=len(texts))
    return Leaks(by_id=by_id, by_ngram=by_ngram)


def decontaminate(
    frame: pd.DataFrame,
    *,
    heldout_situation_ids: Iterable[str],
    heldout_openings: Iterable[str],
    n: int = defaults.DECONTAMINATION_NGRAM,
) -> tuple[pd.DataFrame, int]:
    """Drop every row that leaks held-out data; return the kept rows and how many were removed."""
    mask = find_leaks(
        frame, heldout_situation_ids=heldout_situation_ids, heldout_openings=heldout_openings, n=n
    ).mask
    return frame.loc[~mask].reset_index(drop=True), int(mask.sum())


def _near_copy(grams: set[tuple[str, ...]], index: dict[tuple[str, ...], set[int]]) -> bool:
    """Whether one held-out opening contains at least the overlap share of these n-grams."""
    if not grams:
        return False
    shared: dict[int, int] = {}
    for gram in grams:
        for j in index.get(gram, ()):
            shared[j] = shared.get(j, 0) + 1
    return max(shared.values(), default=0) >= defaults.DECONTAMINATION_OVERLAP_SHARE * len(grams)


def _first_user_content(messages: Sequence[Mapping] | None) -> str:
    for message in [] if messages is None else messages:
        if message["role"] == "user":
            content = message["content"]
            return "" if content is None else str(content)
    return ""
