"""Covering-array sizes and times on the standard suite, side by side with allpairspy (same run).

Every array (ours and allpairspy's) is checked to cover all pairs before it is reported. allpairspy runs
in a child process and is skipped where it needs more than ALLPAIRS_TIMEOUT seconds.
"""

import multiprocessing
import queue as queue_module
import time

import numpy as np
import pandas as pd

from sim_pipeline.cover import covering_array

ALLPAIRS_TIMEOUT = 20.0  # seconds; allpairspy is pure-Python greedy and slow on the largest suites
# (suite, best peer measured by the issue (PICT, allpairspy, covertable), best known size)
STANDARD = [
    ("3^4", 9, 9), ("3^13", 17, 15), ("5^1 3^8 2^2", 21, 15), ("4^15 3^17 2^29", 36, 29),
    ("4^1 3^39 2^35", 27, 21), ("2^100", 15, 10), ("10^20", 197, 155),
]
LARGE = ["3^100", "2^1000", "10^50"]
AGENT_GRID = "17^1 14^1 10^1 6^1 7^1 5^1"  # tool, rule, stance, world state, tool condition, history


def sizes_of(suite: str) -> list[int]:
    """'4^1 3^39' -> [4, 3, 3, ...]."""
    out = []
    for part in suite.split():
        v, n = part.split("^")
        out += [int(v)] * int(n)
    return out


def axes_of(sizes: list[int]) -> dict[str, list[str]]:
    return {f"x{i}": [str(j) for j in range(v)] for i, v in enumerate(sizes)}


def covers_all_pairs(array: np.ndarray, sizes: list[int]) -> bool:
    """Independent check: every two columns show every pair of their values."""
    k, top = len(sizes), max(sizes)
    for i in range(k - 1):
        codes = array[:, i, None] * top + array[:, i + 1:]
        seen = np.zeros((k - i - 1, top * top), dtype=bool)
        seen[np.arange(k - i - 1)[None, :].repeat(len(array), axis=0), codes] = True
        if (seen.sum(axis=1) != np.array(sizes[i]) * np.array(sizes[i + 1:])).any():
            return False
    return True


def ours(sizes: list[int]) -> tuple[int, float]:
    axes = axes_of(sizes)
    start = time.perf_counter()
    frame = covering_array(axes)
    seconds = time.perf_counter() - start
    array = frame.to_numpy(dtype=str).astype(np.int64)
    if not covers_all_pairs(array, sizes):
        raise AssertionError(f"covering_array missed a pair on {sizes}")
    return len(array), seconds


def _allpairs_child(sizes: list[int], queue: multiprocessing.Queue) -> None:
    from allpairspy import AllPairs

    start = time.perf_counter()
    rows = [list(r) for r in AllPairs([list(range(v)) for v in sizes])]
    queue.put((rows, time.perf_counter() - start))


def allpairs(sizes: list[int]) -> tuple[int, float] | None:
    """allpairspy's rows and seconds, or None when it exceeds the timeout."""
    queue: multiprocessing.Queue = multiprocessing.Queue()
    child = multiprocessing.Process(target=_allpairs_child, args=(sizes, queue))
    child.start()
    try:
        rows, seconds = queue.get(timeout=ALLPAIRS_TIMEOUT)
    except queue_module.Empty:  # too slow
        child.terminate()
        child.join()
        return None
    child.join()
    array = np.array(rows, dtype=np.int64)
    if not covers_all_pairs(array, sizes):
        raise AssertionError(f"allpairspy missed a pair on {sizes}")
    return len(array), seconds


def size_figures(suite: str, **extra: float) -> list[dict]:
    sizes = sizes_of(suite)
    rows, seconds = ours(sizes)
    peer = allpairs(sizes)
    size = {"name": f"cover rows {suite}", "value": rows, "unit": "rows", **extra}
    speed = {"name": f"cover seconds {suite}", "value": round(seconds, 3), "unit": "s"}
    if peer is None:
        size["note"] = speed["note"] = f"allpairspy skipped: over {ALLPAIRS_TIMEOUT:.0f} s"
    else:
        size.update(baseline_name="allpairspy", baseline_value=peer[0], ratio=rows / peer[0])
        speed.update(baseline_name="allpairspy", baseline_value=round(peer[1], 3),
                     ratio=seconds / max(peer[1], 1e-9))
    return [size, speed]


def stability_figures() -> list[dict]:
    """Share of an agent grid's rows kept verbatim when the rule axis gains one value."""
    axes = axes_of(sizes_of("12^1 9^1 10^1 6^1 7^1 5^1"))
    grown = dict(axes, x1=axes["x1"] + ["new_rule"])
    figures = []
    for seed in range(3):
        old = covering_array(axes, seed=seed)
        scratch = covering_array(grown, seed=seed)
        kept = covering_array(grown, seed=seed, previous=old)
        figures.append((share_kept(old, kept), len(kept), share_kept(old, scratch), len(scratch)))
    mean = np.mean(figures, axis=0)
    return [
        {"name": "cover rows kept adding a rule (previous=)", "value": round(float(mean[0]), 3),
         "unit": "share", "rows": float(mean[1])},
        {"name": "cover rows kept adding a rule (from scratch)", "value": round(float(mean[2]), 3),
         "unit": "share", "rows": float(mean[3])},
        {"name": "cover rows adding a rule (previous= vs scratch)", "value": float(mean[1]), "unit": "rows",
         "baseline_name": "from scratch", "baseline_value": float(mean[3]), "ratio": mean[1] / mean[3]},
    ]


def share_kept(old: pd.DataFrame, new: pd.DataFrame) -> float:
    """Share of the old plan's rows present verbatim in the new plan (its situation ids survive)."""
    return len(old.merge(new.drop_duplicates(), how="inner")) / len(old)


def figures() -> list[dict]:
    """Every figure of this benchmark."""
    out = []
    total = 0
    for suite, peer, best in STANDARD:
        size, speed = size_figures(suite, best_known=best, best_peer_published=peer)
        total += size["value"]
        out += [size, speed]
    best_total = sum(best for _, _, best in STANDARD)
    out.append({"name": "cover rows standard suite total", "value": total, "unit": "rows",
                "best_known": best_total, "over_best_known": total / best_total - 1})
    for suite in LARGE:
        out += size_figures(suite)
    out += size_figures(AGENT_GRID, lower_bound=17 * 14)
    out += stability_figures()
    return out
