"""The engine never imports Dagster, and loading the code location never imports litellm."""

import importlib.util
import pkgutil
import subprocess
import sys

import sim_pipeline

ENGINE = sorted(m.name for m in pkgutil.walk_packages(sim_pipeline.__path__, "sim_pipeline.")
                if not m.name.startswith(("sim_pipeline.defs", "sim_pipeline.definitions", "sim_pipeline.cli")))
OPTIONAL = {"sim_pipeline.rollout.verl_tools": "verl", "sim_pipeline.rollout.openenv_env": "openenv",
            "sim_pipeline.rollout.verifiers_env": "verifiers"}  # importable only with their extras (in own venvs)


def imported_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_engine_modules_do_not_import_dagster():
    assert len(ENGINE) > 20
    present = [m for m in ENGINE if not m.endswith("sim_provider")
               and (m not in OPTIONAL or importlib.util.find_spec(OPTIONAL[m]) is not None)]
    modules = imported_after("\n".join(f"import {m}" for m in present))
    assert "dagster" not in modules


def test_code_location_load_does_not_import_litellm():
    modules = imported_after("import sim_pipeline.definitions; sim_pipeline.definitions.defs")  # built, as the UI does
    assert "dagster" in modules and "litellm" not in modules


def _top_level_imports(path) -> set[str]:
    """The sim_pipeline modules a file imports at load time (not under TYPE_CHECKING, not inside functions)."""
    import ast

    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sim_pipeline"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("sim_pipeline")}
    return found


def test_step_packages_import_each_other_without_cycles():
    """The protocol is the leaf; models, world, situation and search no longer import each other in a circle."""
    import pathlib

    root = pathlib.Path(sim_pipeline.__file__).parent
    unit = {}  # module -> its step package (or top-level module)
    graph: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        unit[name] = ".".join(parts[:2]) if len(parts) > 2 else name
        if name == "sim_pipeline.definitions":
            unit[name] = "sim_pipeline.defs"  # the Dagster wiring is one layer: definitions.py and defs/
        graph.setdefault(unit[name], set())
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for target in _top_level_imports(path):
            if target in unit and unit[target] != unit[name] and target != "sim_pipeline":
                graph[unit[name]].add(unit[target])
    assert graph["sim_pipeline.protocol"] == set()  # the leaf: it imports nothing else of sim_pipeline

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n})) for n in graph.get(start, ()))

    cycles = sorted(u for u in graph if reaches(u, u, {u}))
    assert cycles == [], cycles
