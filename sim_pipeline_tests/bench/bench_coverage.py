"""Coverage and null rejection of the paired delta's interval and verdict at n = 8, 16, 36 and 100 tasks.

Paired per-task data are simulated the way held-out grades arise: each task has a success probability p drawn
from Beta(BETA_A, BETA_B); baseline and candidate each take K samples per task; the candidate's probability
closes EFFECT of each task's gap to 1 (p + EFFECT * (1 - p)) for coverage, and equals p for the null. The true
delta (over the task population, which is what a bootstrap over tasks estimates) has a closed form from the Beta
moments. Every interval method of `bootstrap_ci` is measured on the same data sets, with the old percentile
interval as the baseline; the verdict figures run `compare_paired` itself. Seeded: the same run gives the same
figures.
"""

import math
import time

import numpy as np

from sim_pipeline.defaults import CI_LEVEL, DELTA_ALPHA, DELTA_CI_METHOD, MIN_BOOTSTRAP_N
from sim_pipeline.measure.stats import bootstrap_ci
from sim_pipeline.measure.verdict import FAIL, PASS, compare_paired

K = 4  # samples per task per side, as `make run` draws (README: pass^4)
BETA_A, BETA_B = 0.3, 0.7  # README's agent-v1: pass@1 0.27, pass^4 0.11; Beta(0.3, 0.7) gives 0.30 and 0.12
EFFECT = 0.45  # gap closed per task: true pass@1 +0.315, pass^4 +0.106 (README's v2 vs v1: +0.314, +0.086)
SIZES = (8, 16, 36, 100)  # task counts the issue names (n=36 is `make run`'s held-out set)
TRIALS = 600  # simulated data sets per n and side: coverage's Monte Carlo SD ~0.009; the study runs in ~35-45 s
RESAMPLES = 2_000  # REFERENCE 8's minimum; production uses BOOTSTRAP_RESAMPLES (10,000) to cut MC error further
SEED = 2024
METHODS = ("percentile", "bca", "studentized", "studentized_symmetric")
METRICS = ("pass@1", f"pass^{K}")
CHOSEN = DELTA_CI_METHOD


def beta_moment(j: int, a: float = BETA_A, b: float = BETA_B) -> float:
    """E[p^j] for p ~ Beta(a, b)."""
    return math.prod((a + r) / (a + b + r) for r in range(j))


def true_deltas(effect: float, *, k: int = K, a: float = BETA_A, b: float = BETA_B) -> dict[str, float]:
    """Population pass@1 and pass^k deltas when the candidate's p is p + effect * (1 - p), p ~ Beta(a, b)."""
    # (p + e(1 - p))^k = sum_j C(k, j) ((1 - e) p)^j e^(k - j), so its mean needs only the Beta moments.
    after_hat = sum(math.comb(k, j) * (1 - effect) ** j * effect ** (k - j) * beta_moment(j, a, b)
                    for j in range(k + 1))
    return {"pass@1": effect * b / (a + b), f"pass^{k}": after_hat - beta_moment(k, a, b)}


def simulate(
    rng: np.random.Generator, trials: int, n: int, effect: float, *, k: int = K
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per-task (before, after) values of pass@1 and pass^k, shape (trials, n), from k samples a side."""
    p = rng.beta(BETA_A, BETA_B, size=(trials, n))
    before = rng.binomial(k, p)
    after = rng.binomial(k, p + effect * (1.0 - p))
    return {"pass@1": (before / k, after / k),
            f"pass^{k}": ((before == k).astype(float), (after == k).astype(float))}


def _figure(name: str, value: float, unit: str, baseline_name: str | None = None,
            baseline_value: float | None = None) -> dict:
    out = {"name": name, "value": value, "unit": unit}
    if baseline_name is not None and baseline_value is not None:
        out |= {"baseline_name": baseline_name, "baseline_value": baseline_value,
                "ratio": value / baseline_value if baseline_value else float("nan")}
    return out


def _cell(n: int) -> dict[str, dict[str, float]]:
    """Coverage and null rejection per metric and method (and of the verdict and guard) at n tasks."""
    rng = np.random.default_rng([SEED, n])
    truth = true_deltas(EFFECT)
    shifted, null = simulate(rng, TRIALS, n, EFFECT), simulate(rng, TRIALS, n, 0.0)
    out: dict[str, dict[str, float]] = {}
    for metric in METRICS:
        counts = {key: 0 for key in ("verdict", "guard", "old_verdict", "old_guard", "degenerate", "covered_wide")}
        covered = dict.fromkeys(METHODS, 0)
        rejected = dict.fromkeys(METHODS, 0)
        for trial in range(TRIALS):
            before, after = shifted[metric][0][trial], shifted[metric][1][trial]
            for method in METHODS:
                interval = bootstrap_ci(after - before, method=method, n_resamples=RESAMPLES, bounds=(-1.0, 1.0),
                                        seed=trial)
                hit = interval.low <= truth[metric] <= interval.high
                covered[method] += hit
                if method == CHOSEN:
                    counts["degenerate"] += interval.low == interval.high
                    counts["covered_wide"] += hit and interval.low < interval.high
            before, after = null[metric][0][trial], null[metric][1][trial]
            row = compare_paired(before, after, min_tasks=MIN_BOOTSTRAP_N, seed=trial, n_resamples=RESAMPLES)
            counts["verdict"] += row["verdict"] in (PASS, FAIL)
            counts["guard"] += row["verdict"] == FAIL  # higher is better: FAIL is the must-not-regress alarm
            for method in METHODS:
                if method == CHOSEN:  # compare_paired's interval: this method, bounds (-1, 1), the same seed
                    low, high = row["ci_low"], row["ci_high"]
                else:
                    interval = bootstrap_ci(after - before, method=method, n_resamples=RESAMPLES,
                                            bounds=(-1.0, 1.0), seed=trial)
                    low, high = interval.low, interval.high
                excludes = low > 0 or high < 0
                rejected[method] += excludes
                if method == "percentile":
                    # The old rules: verdict = percentile interval and sign-flip test; guard = interval alone.
                    counts["old_verdict"] += excludes and row["p_value"] < DELTA_ALPHA
                    counts["old_guard"] += high < 0
        out[metric] = {f"coverage {m}": covered[m] / TRIALS for m in METHODS}
        out[metric] |= {f"null rejection {m}": rejected[m] / TRIALS for m in METHODS}
        out[metric] |= {key: value / TRIALS for key, value in counts.items() if key != "covered_wide"}
        wide = TRIALS - counts["degenerate"]
        out[metric]["coverage of non-zero-width"] = counts["covered_wide"] / wide if wide else float("nan")
    return out


def figures() -> list[dict]:
    """Coverage of each interval method and the verdict's null rejection, per n and metric."""
    out = []
    start = time.perf_counter()
    trials = f"{TRIALS} trials x {RESAMPLES} resamples"
    for n in SIZES:
        for metric, cell in _cell(n).items():
            tag = f"{metric} n={n}"
            base_cov, base_rej = cell["coverage percentile"], cell["null rejection percentile"]
            for method in METHODS[1:]:
                out.append(_figure(f"coverage {tag} {method}", cell[f"coverage {method}"],
                                   f"share of {CI_LEVEL:.0%} intervals covering the true delta, {trials}",
                                   "percentile (old)", base_cov))
            for method in METHODS[1:]:
                out.append(_figure(f"null rejection {tag} {method}", cell[f"null rejection {method}"],
                                   f"share of intervals excluding 0 when the true delta is 0, {trials}",
                                   "percentile (old)", base_rej))
            out.append(_figure(f"null PASS/FAIL verdicts {tag}", cell["verdict"],
                               f"share of verdicts PASS or FAIL when the true delta is 0, {trials}",
                               "old verdict (percentile + sign-flip)", cell["old_verdict"]))
            out.append(_figure(f"null guard alarms {tag}", cell["guard"],
                               f"share of must-not-regress alarms (FAIL) when the true delta is 0, {trials}",
                               "old guard (percentile interval alone)", cell["old_guard"]))
            out.append(_figure(f"zero-width intervals {tag}", cell["degenerate"],
                               f"share of effect data sets whose tasks all moved alike (INCONCLUSIVE), {trials}"))
            # Zero-width intervals always miss a non-zero delta but never decide a verdict; this is the
            # coverage of the intervals a verdict can rest on.
            out.append(_figure(f"coverage {tag} {CHOSEN} non-zero-width", cell["coverage of non-zero-width"],
                               f"share of non-zero-width {CI_LEVEL:.0%} intervals covering the true delta, {trials}"))
    out.append(_figure("coverage study wall time", time.perf_counter() - start, "s"))
    return out
