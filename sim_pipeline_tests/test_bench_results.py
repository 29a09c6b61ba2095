"""`python -m sim_pipeline_tests.bench` writes .bench/results.jsonl: every row says which benchmark wrote it and when,
and a run of some benchmarks replaces their rows and keeps the others' (docs/scaling.md reads figures of three)."""

import json
import sys
import types

from sim_pipeline_tests.bench import __main__ as bench


def _module(monkeypatch, name: str, value: float) -> None:
    module = types.ModuleType(name)
    module.figures = lambda: [{"name": f"{name}_figure (a note)", "value": value, "unit": "u"}]
    monkeypatch.setitem(sys.modules, f"sim_pipeline_tests.bench.{name}", module)


def _rows(path) -> dict[str, dict]:
    return {r["module"]: r for r in map(json.loads, path.read_text().splitlines())}


def test_a_partial_run_replaces_its_own_rows_and_keeps_the_others(tmp_path, monkeypatch):
    for name in ("bench_a", "bench_b"):
        (tmp_path / f"{name}.py").touch()
        _module(monkeypatch, name, 1.0)
    monkeypatch.setattr(bench, "BENCH_DIR", tmp_path)
    monkeypatch.chdir(tmp_path)
    assert bench.main([]) == 0
    first = _rows(tmp_path / bench.RESULTS)
    assert sorted(first) == ["bench_a", "bench_b"]
    assert all(r["measured_at"].startswith("20") and r["value"] == 1.0 for r in first.values())
    _module(monkeypatch, "bench_a", 2.0)
    _module(monkeypatch, "bench_b", 3.0)
    assert bench.main(["a"]) == 0  # only bench_a runs
    second = _rows(tmp_path / bench.RESULTS)
    assert second["bench_a"]["value"] == 2.0
    assert second["bench_b"] == first["bench_b"]  # kept as written, with when it was measured
    assert bench.main([]) == 0  # a whole run writes only its own rows
    assert {m: r["value"] for m, r in _rows(tmp_path / bench.RESULTS).items()} == {"bench_a": 2.0, "bench_b": 3.0}


def test_a_failing_benchmark_costs_only_its_own_figures(tmp_path, monkeypatch, capsys):
    for name in ("bench_a", "bench_b", "bench_c"):
        (tmp_path / f"{name}.py").touch()
        _module(monkeypatch, name, 1.0)

    def timed_out() -> list[dict]:
        raise TimeoutError("the scale run took over its budget")

    sys.modules["sim_pipeline_tests.bench.bench_b"].figures = timed_out
    monkeypatch.setattr(bench, "BENCH_DIR", tmp_path)
    monkeypatch.chdir(tmp_path)
    assert bench.main([]) == 1
    assert sorted(_rows(tmp_path / bench.RESULTS)) == ["bench_a", "bench_c"]  # the modules after it still ran
    out = capsys.readouterr()
    assert "bench_b: FAILED" in out.out and "TimeoutError" in out.err and "bench_b" in out.err.splitlines()[-1]
