"""What `sim-pipeline --help` and the Dagster code location import: heavy libraries only where they are used.

Each case runs in a fresh interpreter (this process has imported everything already) and reads its sys.modules.
"""

import json
import os
import subprocess
import sys

import pytest

# Libraries a help text never needs: litellm costs ~6 CPU-s to import, the rest one to several seconds each.
HEAVY = ("litellm", "matplotlib", "scipy", "dagster", "pandas", "pyarrow", "numpy", "jsonschema")
# What the code location (every asset, check and sensor defined) must not pay for at load: litellm is imported when
# an HTTP model is called, matplotlib when a plot is drawn, scipy.stats when a test statistic is computed.
NOT_AT_LOAD = ("litellm", "matplotlib", "scipy.stats", "scipy.optimize")

PROBE = """
import json, sys
{body}
print(json.dumps(sorted(sys.modules)))
"""


def _loaded(body: str) -> set[str]:
    """The modules a fresh interpreter holds after running `body`."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run([sys.executable, "-c", PROBE.format(body=body)], capture_output=True, text=True, env=env,
                          check=True)
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def _of(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(name for name in names if any(m == name or m.startswith(name + ".") for m in modules))


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["export", "--help"], ["report", "--help"]])
def test_help_imports_no_heavy_library(argv):
    body = ("import contextlib, io\nfrom sim_pipeline.cli import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()):\n    try:\n        main({argv!r})\n"
            "    except SystemExit:\n        pass")
    modules = _loaded(body)
    assert "sim_pipeline.cli" in modules  # the probe ran the CLI
    assert _of(modules, HEAVY) == []


def test_the_code_location_loads_without_litellm_matplotlib_or_scipy_stats():
    modules = _loaded("import sim_pipeline.definitions")
    assert "dagster" in modules  # the probe loaded the definitions
    assert _of(modules, NOT_AT_LOAD) == []
