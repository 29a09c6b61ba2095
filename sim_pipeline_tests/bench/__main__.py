"""Run every benchmark module (bench_*.py) and write one JSON object per figure to .bench/results.jsonl.

Each module exposes `figures() -> list[dict]`, and may add functions named `figures_<what>()` that run after it, in
name order (two figures of one module are then added without touching each other's code); a figure has `name`,
`value`, `unit` and, where it is compared with a baseline measured in the same run, `baseline_name`,
`baseline_value` and `ratio` (value / baseline); a figure with an `interval` and a `verdict` (bench_search's goal
figures) is printed with them, one with a `spread` (bench_search's `_over_streams` figures) with it. Each row
written also has `module` (bench_<what>) and `measured_at` (UTC, when its module ran).
Benchmarks named on the command line replace their own modules' rows and keep the other modules' rows of an earlier
run, so `python -m sim_pipeline_tests.bench sizes` after `make bench` leaves the rest in place.
A module that raises (a timeout, a missing service) is reported with its traceback and records no figures; the other
modules still run and are written, and the command exits 1 naming the failed modules.
"""

import datetime
import importlib
import json
import pathlib
import sys
import traceback

BENCH_DIR = pathlib.Path(__file__).parent
RESULTS = pathlib.Path(".bench") / "results.jsonl"


def main(argv: list[str]) -> int:
    """Run the benchmarks named on the command line (all when none), print and record their figures."""
    wanted = set(argv)
    modules = sorted(p.stem for p in BENCH_DIR.glob("bench_*.py"))
    RESULTS.parent.mkdir(exist_ok=True)
    rows: list[dict] = []
    ran: set[str] = set()
    failed: list[str] = []
    for name in modules:
        if wanted and name not in wanted and name.removeprefix("bench_") not in wanted:
            continue
        ran.add(name)
        measured_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        try:
            module = importlib.import_module(f"sim_pipeline_tests.bench.{name}")
            functions = ["figures", *sorted(n for n in dir(module) if n.startswith("figures_"))]
            figures = [f for function in functions for f in getattr(module, function)()]
        except Exception:  # noqa: BLE001 - one broken benchmark must not cost the figures of the others (they take minutes each)
            traceback.print_exc()
            print(f"{name}: FAILED, no figures recorded (traceback above)", flush=True)
            failed.append(name)
            continue
        for figure in figures:
            figure = {**figure, "module": name, "measured_at": measured_at}
            rows.append(figure)
            ratio = f"  ratio {figure['ratio']:.3g} vs {figure['baseline_name']}" if "ratio" in figure else ""
            interval = (f"  {figure.get('interval_level', 0.9):.0%} interval [{figure['interval'][0]:.4g}, "
                        f"{figure['interval'][1]:.4g}]: {figure['verdict']}" if "interval" in figure else "")
            spread = (f"  spread over {figure['pairs']} stream pairs [{figure['spread'][0]:.4g}, {figure['spread'][1]:.4g}]"
                      if "spread" in figure else "")
            print(f"{figure['name']:<55} {figure['value']:>12.4g} {figure['unit']}{ratio}{interval}{spread}", flush=True)
    if wanted and RESULTS.exists():  # a partial run keeps the other modules' rows (rows without a module: dropped)
        kept = [json.loads(line) for line in RESULTS.read_text().splitlines() if line.strip()]
        rows = [r for r in kept if r.get("module") and r["module"] not in ran] + rows
    tmp = RESULTS.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    tmp.replace(RESULTS)
    print(f"wrote {len(rows)} figures to {RESULTS}")
    if failed:
        print(f"benchmarks that failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
